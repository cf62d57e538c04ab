//! IFNet_HDv3.py's `IFBlock`: at 1/scale of the frame, two stride-2 convolutions, four residual pairs of 3×3
//! convolutions (each with a PReLU), then two heads of transposed convolutions back up ×4: a flow (4 channels,
//! frame 0's then frame 1's) and a mask logit (1 channel), resized back to the frame and the flow rescaled.
use tch::{Kind, TchError, Tensor};

use crate::models::nn::weights::WeightPath;
use crate::models::ModelError;

/// Channels inside every block of this checkpoint (`IFBlock(7+4, c=90)`).
pub const CHANNELS: i64 = 90;
/// A block's input: two frames (3 each), the mask (1) and the flow (4).
pub const IN_CHANNELS: i64 = 7 + 4;

/// `conv()`: a 3×3 convolution with bias, then a PReLU with one slope per channel.
struct ConvPrelu {
    weight: Tensor,
    bias: Tensor,
    slopes: Tensor,
    stride: i64,
}

impl ConvPrelu {
    fn new(at: &WeightPath, in_channels: i64, out_channels: i64, stride: i64, channels_last: bool) -> Result<Self, ModelError> {
        Ok(Self {
            weight: layout(at.pp(0).get("weight", &[out_channels, in_channels, 3, 3])?, channels_last)?,
            bias: at.pp(0).get("bias", &[out_channels])?,
            slopes: at.pp(1).get("weight", &[out_channels])?,
            stride,
        })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor, TchError> {
        x.f_conv2d(&self.weight, Some(&self.bias), [self.stride, self.stride], [1, 1], [1, 1], 1)?.f_prelu(&self.slopes)
    }
}

/// `nn.ConvTranspose2d(c_in, c_out, 4, 2, 1)`: doubles the sides.
struct Deconv {
    weight: Tensor,
    bias: Tensor,
}

impl Deconv {
    fn new(at: &WeightPath, in_channels: i64, out_channels: i64, channels_last: bool) -> Result<Self, ModelError> {
        Ok(Self { weight: layout(at.get("weight", &[in_channels, out_channels, 4, 4])?, channels_last)?, bias: at.get("bias", &[out_channels])? })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor, TchError> {
        x.f_conv_transpose2d(&self.weight, Some(&self.bias), [2, 2], [1, 1], [0, 0], 1, [1, 1])
    }
}

/// `conv1` / `conv2`: transposed convolution, PReLU, transposed convolution.
struct Head {
    up: Deconv,
    slopes: Tensor,
    out: Deconv,
}

impl Head {
    fn new(at: &WeightPath, out_channels: i64, channels_last: bool) -> Result<Self, ModelError> {
        Ok(Self {
            up: Deconv::new(&at.pp(0), CHANNELS, CHANNELS / 2, channels_last)?,
            slopes: at.pp(1).get("weight", &[CHANNELS / 2])?,
            out: Deconv::new(&at.pp(2), CHANNELS / 2, out_channels, channels_last)?,
        })
    }

    fn forward(&self, feat: &Tensor) -> Result<Tensor, TchError> {
        self.out.forward(&self.up.forward(feat)?.f_prelu(&self.slopes)?)
    }
}

pub struct IfBlock {
    down: [ConvPrelu; 2],
    residual: Vec<[ConvPrelu; 2]>,
    flow: Head,
    mask: Head,
    /// The kind the convolutions run in (the weights' kind).
    kind: Kind,
    /// Weights and features in NHWC strides (see `Rife`).
    channels_last: bool,
}

impl IfBlock {
    /// `at` is the block's weights (`block0`, ...).
    pub fn new(at: &WeightPath, channels_last: bool) -> Result<Self, ModelError> {
        let conv0 = at.pp("conv0");
        let down = [
            ConvPrelu::new(&conv0.pp(0), IN_CHANNELS, CHANNELS / 2, 2, channels_last)?,
            ConvPrelu::new(&conv0.pp(1), CHANNELS / 2, CHANNELS, 2, channels_last)?,
        ];
        let residual = (0..4)
            .map(|i| {
                let pair = at.pp(format!("convblock{i}"));
                Ok([ConvPrelu::new(&pair.pp(0), CHANNELS, CHANNELS, 1, channels_last)?, ConvPrelu::new(&pair.pp(1), CHANNELS, CHANNELS, 1, channels_last)?])
            })
            .collect::<Result<Vec<_>, ModelError>>()?;
        Ok(Self {
            down,
            residual,
            flow: Head::new(&at.pp("conv1"), 4, channels_last)?,
            mask: Head::new(&at.pp("conv2"), 1, channels_last)?,
            kind: at.weights().kind(),
            channels_last,
        })
    }

    /// `x` `[N,7,H,W]` (two frames and the mask) and `flow` `[N,4,H,W]`, Float → (flow `[N,4,H,W]`, mask logit
    /// `[N,1,H,W]`), Float, NCHW-contiguous. The resizes run in Float, the convolutions in the weights' kind.
    pub fn forward(&self, x: &Tensor, flow: &Tensor, scale: f64) -> Result<(Tensor, Tensor), TchError> {
        let x = resize(x, 1.0 / scale)?;
        // `F.interpolate(flow, ...) * 1. / scale`: ×1 is exact, then ÷ scale.
        let flow = resize(flow, 1.0 / scale)?.f_div_scalar(scale)?;
        let mut feat = layout(Tensor::f_cat(&[x, flow], 1)?.f_to_kind(self.kind)?, self.channels_last)?;
        for conv in &self.down {
            feat = conv.forward(&feat)?;
        }
        for [first, second] in &self.residual {
            feat = second.forward(&first.forward(&feat)?)?.f_add(&feat)?;
        }
        let head = |head: &Head| head.forward(&feat)?.f_to_kind(Kind::Float)?.f_contiguous();
        let flow = resize(&head(&self.flow)?, scale)?.f_mul_scalar(scale)?;
        let mask = resize(&head(&self.mask)?, scale)?;
        Ok((flow, mask))
    }
}

/// NHWC strides when `channels_last` (an NHWC-contiguous tensor viewed as NCHW is what `torch.channels_last`
/// is; libtorch picks the format up from the strides and keeps it through the convolutions).
fn layout(x: Tensor, channels_last: bool) -> Result<Tensor, TchError> {
    if channels_last {
        x.f_permute([0, 2, 3, 1])?.f_contiguous()?.f_permute([0, 3, 1, 2])
    } else {
        Ok(x)
    }
}

/// `F.interpolate(x, scale_factor=factor, mode="bilinear", align_corners=False, recompute_scale_factor=False)`:
/// sides floor(side × factor), source coordinates from the factor itself. At factor 1 that is the identity.
fn resize(x: &Tensor, factor: f64) -> Result<Tensor, TchError> {
    if factor == 1.0 {
        return Ok(x.shallow_clone());
    }
    let size = x.size();
    let side = |len: i64| (len as f64 * factor).floor() as i64;
    x.f_upsample_bilinear2d([side(size[2]), side(size[3])], false, factor, factor)
}
