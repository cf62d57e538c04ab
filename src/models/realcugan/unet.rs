//! Real-CUGAN's two UNets (bilibili's `UNet1`, `UNet1x3` and `UNet2` in upcunet_v3.py), taken layer by layer
//! from the ncnn graph in file order. Every convolution is unpadded, so each level's path comes back smaller
//! than the skip it joins, which is cropped to match: by 4 px after a level at half resolution (two 3×3
//! convolutions there), by 16 px around UNet2's two levels.
use tch::Tensor;

use crate::models::formats::ncnn::GraphCursor;
use crate::models::stop::StopFlag;
use crate::models::ModelError;
use super::layers::{take_add, Conv, Deconv, EdgeCrop, KernelShape, SqueezeExcite, CONV_3X3, DOWN_2X2, UP_2X2};
use crate::models::nn::placement::Placement2d;

/// UNet1's closing transposed convolution by model scale: the x2 UNet (also the 4x model's, which has 64
/// output channels and a pixel shuffle after) and the x3 one (`UNet1x3`).
const UNET1_UP_X2: KernelShape = KernelShape { size: 4, stride: 2, pad: 3 };
const UNET1_UP_X3: KernelShape = KernelShape { size: 5, stride: 3, pad: 2 };
/// What a skip loses per side to the path it joins, in pixels of the skip's level. One level: two 3×3
/// convolutions a level down (2 px there, 4 here). UNet2's outer skip: at the middle level two 3×3
/// convolutions, the inner level's 4 and two more 3×3 convolutions, (2 + 4 + 2) × 2.
const ONE_LEVEL_CROP: i64 = 4;
const TWO_LEVEL_CROP: i64 = 16;
/// UNet2's output is this much smaller per side than its input, so its residual is cropped by as much:
/// 2 (the first two 3×3 convolutions) + 16 (the two levels) + 2 (the last two).
const UNET2_CROP: i64 = 20;

/// Two 3×3 convolutions in a row (`UNetConv`'s body).
struct ConvPair(Conv, Conv);

impl ConvPair {
    fn take<'a>(cursor: &mut GraphCursor<'a>, input: &'a str, channels: [i64; 3], opts: &Placement2d) -> Result<(Self, &'a str), ModelError> {
        let (first, x) = Conv::take(cursor, input, CONV_3X3, (channels[0], channels[1]), opts)?;
        let (second, x) = Conv::take(cursor, x, CONV_3X3, (channels[1], channels[2]), opts)?;
        Ok((Self(first, second), x))
    }

    fn forward(&self, x: &Tensor) -> Tensor {
        self.1.forward(&self.0.forward(x))
    }
}

/// `UNetConv` with squeeze-and-excitation: two 3×3 convolutions, then SE on their output.
struct SeConvPair(ConvPair, SqueezeExcite);

impl SeConvPair {
    fn take<'a>(cursor: &mut GraphCursor<'a>, input: &'a str, channels: [i64; 3], opts: &Placement2d) -> Result<(Self, &'a str), ModelError> {
        let (pair, x) = ConvPair::take(cursor, input, channels, opts)?;
        let (se, x) = SqueezeExcite::take(cursor, x, channels[2], opts)?;
        Ok((Self(pair, se), x))
    }

    fn forward(&self, x: &Tensor) -> Tensor {
        self.1.forward(&self.0.forward(x))
    }
}

/// One level down and back: the 2×2 stride-2 convolution, the level's convolutions, the 2×2 transposed
/// convolution up, and the skip cropped and added. `inner` runs at the lower level.
struct Level<Inner> {
    down: Conv,
    inner: Inner,
    skip_crop: EdgeCrop,
    up: Deconv,
}

impl<Inner> Level<Inner> {
    fn forward(&self, skip: &Tensor, inner: impl Fn(&Inner, &Tensor) -> Tensor) -> Tensor {
        let below = inner(&self.inner, &self.down.forward(skip));
        self.skip_crop.forward(skip) + self.up.forward(&below)
    }
}

/// UNet1: 3 → 64 channels at full resolution, one level down (SE at the bottom), a 3×3 convolution, and the
/// transposed convolution up to the model's scale (×2, or ×3 for the 3x model), to 3 channels (or 64 for
/// the 4x model, which UNet2 and a pixel shuffle then finish).
pub(super) struct UNet1 {
    top: ConvPair,
    level: Level<SeConvPair>,
    merge: Conv,
    up: Deconv,
}

impl UNet1 {
    /// Returns the net and its output blob.
    pub(super) fn take<'a>(cursor: &mut GraphCursor<'a>, input: &'a str, opts: &Placement2d) -> Result<(Self, &'a str), ModelError> {
        let (top, x1) = ConvPair::take(cursor, input, [3, 32, 64], opts)?;
        let (down, x) = Conv::take(cursor, x1, DOWN_2X2, (64, 64), opts)?;
        let (inner, x2) = SeConvPair::take(cursor, x, [64, 128, 64], opts)?;
        let (skip_crop, skip) = EdgeCrop::take(cursor, x1, ONE_LEVEL_CROP)?;
        let (level_up, x2) = Deconv::take(cursor, x2, &[UP_2X2], (64, Some(64)), opts)?;
        let joined = take_add(cursor, [skip, x2])?;
        let (merge, x3) = Conv::take(cursor, joined, CONV_3X3, (64, 64), opts)?;
        // Its output channels (3, or 64 in the 4x model) are checked by the graph walk, which knows the rest.
        let (up, output) = Deconv::take(cursor, x3, &[UNET1_UP_X2, UNET1_UP_X3], (64, None), opts)?;
        let level = Level { down, inner, skip_crop, up: level_up };
        Ok((Self { top, level, merge, up }, output))
    }

    /// The factor its closing transposed convolution scales by (2 or 3).
    pub(super) fn scale(&self) -> i64 {
        self.up.shape().stride
    }

    pub(super) fn out_channels(&self) -> i64 {
        self.up.out_channels()
    }

    pub(super) fn forward(&self, x: &Tensor, stop: &StopFlag) -> Result<Tensor, ModelError> {
        stop.check()?;
        let x1 = self.top.forward(x);
        stop.check()?;
        let x2 = self.level.forward(&x1, SeConvPair::forward);
        stop.check()?;
        Ok(self.up.forward(&self.merge.forward(&x2)))
    }
}

/// UNet2: a refinement at the output resolution, two levels deep with SE at each, whose result is added to
/// its own input cropped by 20 px (bilibili's `x0 + F.pad(x, (-20,) * 4)` in `UpCunet*.forward`; the ncnn
/// export places that crop among UNet2's layers, so it is taken here). `channels` is 3, or 64 in the 4x
/// model.
pub(super) struct UNet2 {
    top: ConvPair,
    level: Level<(SeConvPair, Level<SeConvPair>, SeConvPair)>,
    merge: Conv,
    out: Conv,
    residual_crop: EdgeCrop,
}

impl UNet2 {
    /// Returns the net and its output blob (the sum with the residual).
    pub(super) fn take<'a>(cursor: &mut GraphCursor<'a>, input: &'a str, channels: i64, opts: &Placement2d) -> Result<(Self, &'a str), ModelError> {
        let (top, x1) = ConvPair::take(cursor, input, [channels, 32, 64], opts)?;
        let (down1, x) = Conv::take(cursor, x1, DOWN_2X2, (64, 64), opts)?;
        let (middle_in, x2) = SeConvPair::take(cursor, x, [64, 64, 128], opts)?;
        let (down2, x) = Conv::take(cursor, x2, DOWN_2X2, (128, 128), opts)?;
        let (bottom, x3) = SeConvPair::take(cursor, x, [128, 256, 128], opts)?;
        let (middle_crop, middle_skip) = EdgeCrop::take(cursor, x2, ONE_LEVEL_CROP)?;
        let (up2, x3) = Deconv::take(cursor, x3, &[UP_2X2], (128, Some(128)), opts)?;
        let joined = take_add(cursor, [middle_skip, x3])?;
        let (middle_out, x4) = SeConvPair::take(cursor, joined, [128, 64, 64], opts)?;
        let (top_crop, top_skip) = EdgeCrop::take(cursor, x1, TWO_LEVEL_CROP)?;
        let (up1, x4) = Deconv::take(cursor, x4, &[UP_2X2], (64, Some(64)), opts)?;
        let joined = take_add(cursor, [top_skip, x4])?;
        let (residual_crop, residual) = EdgeCrop::take(cursor, input, UNET2_CROP)?;
        let (merge, x5) = Conv::take(cursor, joined, CONV_3X3, (64, 64), opts)?;
        let (out, x6) = Conv::take(cursor, x5, CONV_3X3, (64, channels), opts)?;
        let output = take_add(cursor, [x6, residual])?;
        let inner_level = Level { down: down2, inner: bottom, skip_crop: middle_crop, up: up2 };
        let level = Level { down: down1, inner: (middle_in, inner_level, middle_out), skip_crop: top_crop, up: up1 };
        Ok((Self { top, level, merge, out, residual_crop }, output))
    }

    /// `stop` is asked between the levels (not inside `Level`'s closure, which returns a plain tensor).
    pub(super) fn forward(&self, x: &Tensor, stop: &StopFlag) -> Result<Tensor, ModelError> {
        stop.check()?;
        let x1 = self.top.forward(x);
        stop.check()?;
        let joined = self.level.forward(&x1, |(middle_in, inner_level, middle_out), x| {
            let x2 = middle_in.forward(x);
            middle_out.forward(&inner_level.forward(&x2, SeConvPair::forward))
        });
        stop.check()?;
        let merged = self.merge.forward(&joined);
        stop.check()?;
        Ok(self.out.forward(&merged) + self.residual_crop.forward(x))
    }
}
