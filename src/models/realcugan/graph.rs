//! The walk of a whole Real-CUGAN ncnn graph: Input, UNet1, UNet2, and in the 4x model a closing 3×3
//! convolution to 12 channels, a 1 px crop and a 2x pixel shuffle — bilibili's `UpCunet2x`, `UpCunet3x` and
//! `UpCunet4x` without what realcugan-ncnn-vulkan does outside the graph (the padding, the crop and the 4x
//! model's nearest-upsampled input: `frame.rs`). The scale is read from the graph.
use std::path::Path;

use tch::Tensor;

use crate::models::formats::ncnn::{GraphCursor, NcnnLayer};
use crate::models::stop::StopFlag;
use crate::models::ModelError;
use super::layers::{Conv, EdgeCrop, CONV_3X3};
use super::unet::{UNet1, UNet2};
use crate::models::nn::placement::Placement2d;

/// The 4x model's UNets work at 2x with 64 channels; this makes 3 × 2² channels of them and shuffles.
struct ShuffleHead {
    conv: Conv,
    crop: EdgeCrop,
}

const SHUFFLE_FACTOR: i64 = 2;
/// The closing 3×3 convolution's border, cropped before the shuffle (bilibili's `F.pad(x, (-1,) * 4)`).
const SHUFFLE_HEAD_CROP: i64 = 1;

pub(super) struct CuganGraph {
    unet1: UNet1,
    unet2: UNet2,
    head: Option<ShuffleHead>,
}

impl CuganGraph {
    pub(super) fn walk(param: &Path, layers: &[NcnnLayer], opts: &Placement2d) -> Result<Self, ModelError> {
        let mut cursor = GraphCursor::new(param, layers)?;
        let input_layer = cursor.take("Input")?;
        let input = cursor.output(input_layer)?;
        let (unet1, x) = UNet1::take(&mut cursor, input, opts)?;
        let channels = unet1.out_channels();
        let (unet2, x) = UNet2::take(&mut cursor, x, channels, opts)?;
        let head = match (channels, unet1.scale()) {
            (3, _) => None,
            (64, 2) => {
                let (conv, x) = Conv::take(&mut cursor, x, CONV_3X3, (64, 3 * SHUFFLE_FACTOR * SHUFFLE_FACTOR), opts)?;
                let (crop, x) = EdgeCrop::take(&mut cursor, x, SHUFFLE_HEAD_CROP)?;
                let shuffle = cursor.take("PixelShuffle")?;
                cursor.check_inputs(shuffle, &[x])?;
                if shuffle.params.int(0, 1) as i64 != SHUFFLE_FACTOR || shuffle.params.int(1, 0) != 0 {
                    return Err(cursor.error(shuffle, "expected a PyTorch-order pixel shuffle (1=0) by 2"));
                }
                Some(ShuffleHead { conv, crop })
            }
            (channels, scale) => {
                return Err(ModelError::Format {
                    path: param.to_path_buf(),
                    reason: format!("UNet1 makes {channels} channels at x{scale}: neither Real-CUGAN's 2x/3x (3 channels) nor its 4x (64 channels at x2)"),
                });
            }
        };
        cursor.finish()?;
        Ok(Self { unet1, unet2, head })
    }

    pub(super) fn scale(&self) -> i64 {
        self.unet1.scale() * if self.head.is_some() { SHUFFLE_FACTOR } else { 1 }
    }

    /// The padded frame (in the model's dtype and layout) → `scale` × its size less the padding's share.
    pub(super) fn forward(&self, padded: &Tensor, stop: &StopFlag) -> Result<Tensor, ModelError> {
        let x = self.unet1.forward(padded, stop)?;
        let x = self.unet2.forward(&x, stop)?;
        stop.check()?;
        Ok(match &self.head {
            None => x,
            Some(head) => head.crop.forward(&head.conv.forward(&x)).pixel_shuffle(SHUFFLE_FACTOR),
        })
    }
}
