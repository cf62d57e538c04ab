//! Where a FlashVSR job's frames are cut or padded: the model works on sides that are multiples of 128
//! (its DiT's attention windows over the 8× latent); the output is 4× the input.
use tch::{Kind, Tensor};

use crate::executor::error::ExecError;
use crate::models::restore::prepare::Fit;

pub use crate::tiling::flashvsr_tiles::SIDE_MULTIPLE;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlashVsrGeometry {
    /// The output's size: 4× the input's (`pad`), or the centre window kept (`crop`).
    pub out_h: i64,
    pub out_w: i64,
    model_h: i64,
    model_w: i64,
    /// Where the kept window starts in the 4× frame (`crop`; 0 for `pad`).
    top: i64,
    left: i64,
    fit: Fit,
}

impl FlashVsrGeometry {
    pub fn new(height: i64, width: i64, fit: Fit) -> FlashVsrGeometry {
        let (up_h, up_w) = (4 * height, 4 * width);
        match fit {
            Fit::Pad => {
                let up_to_multiple = |side: i64| (side + SIDE_MULTIPLE - 1) / SIDE_MULTIPLE * SIDE_MULTIPLE;
                let (model_h, model_w) = (up_to_multiple(up_h), up_to_multiple(up_w));
                FlashVsrGeometry { out_h: up_h, out_w: up_w, model_h, model_w, top: 0, left: 0, fit }
            }
            // The original's: the largest 128-multiples, the window centred (left (sW − tW) // 2).
            Fit::Crop => {
                let (model_h, model_w) = (up_h / SIDE_MULTIPLE * SIDE_MULTIPLE, up_w / SIDE_MULTIPLE * SIDE_MULTIPLE);
                FlashVsrGeometry { out_h: model_h, out_w: model_w, model_h, model_w, top: (up_h - model_h) / 2, left: (up_w - model_w) / 2, fit }
            }
        }
    }

    /// `[H, W]` of the frames the model sees.
    pub fn model_size(&self) -> [i64; 2] {
        [self.model_h, self.model_w]
    }

    /// A 4× frame `[4h, 4w, 3]` u8 → `[3, H, W]` f32 in [-1, 1] at the model's size: the centre window, or
    /// the frame with its last row and column repeated down to the padded size.
    pub fn fit(&self, upscaled: &Tensor) -> Result<Tensor, ExecError> {
        if self.model_h == 0 || self.model_w == 0 {
            return Err(ExecError::Invalid(format!("a frame 4× upscaled to {}×{} has no {SIDE_MULTIPLE}×{SIDE_MULTIPLE} window to crop; use fit=pad", upscaled.size()[1], upscaled.size()[0])));
        }
        let chw = upscaled.f_permute([2, 0, 1])?.f_to_kind(Kind::Float)?.f_div_scalar(255.0)?.f_mul_scalar(2.0)?.f_sub_scalar(1.0)?;
        if self.fit == Fit::Crop {
            return Ok(chw.f_narrow(1, self.top, self.model_h)?.f_narrow(2, self.left, self.model_w)?.f_contiguous()?);
        }
        let (pad_bottom, pad_right) = (self.model_h - self.out_h, self.model_w - self.out_w);
        if pad_bottom == 0 && pad_right == 0 {
            return Ok(chw);
        }
        Ok(chw.f_unsqueeze(0)?.f_replication_pad2d([0, pad_right, 0, pad_bottom])?.f_squeeze_dim(0)?)
    }

    /// The model's frames `[T, 3, H, W]` cut back to the output's size (the padding dropped).
    pub fn cut_back(&self, frames: &Tensor) -> Result<Tensor, ExecError> {
        Ok(frames.f_narrow(2, 0, self.out_h)?.f_narrow(3, 0, self.out_w)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pad_keeps_the_whole_picture_and_crop_is_the_originals_window() {
        // The reference's e2e case: 40×64 → 160×256, cropped by the original to 128×256 from row 16.
        let crop = FlashVsrGeometry::new(40, 64, Fit::Crop);
        assert_eq!((crop.out_h, crop.out_w, crop.model_size(), crop.top, crop.left), (128, 256, [128, 256], 16, 0));
        let pad = FlashVsrGeometry::new(40, 64, Fit::Pad);
        assert_eq!((pad.out_h, pad.out_w, pad.model_size()), (160, 256, [256, 256]));
        let frame = Tensor::arange(160 * 256 * 3, (Kind::Int64, tch::Device::Cpu)).remainder(256).to_kind(Kind::Uint8).view([160, 256, 3]);
        let padded = pad.fit(&frame).unwrap();
        assert_eq!(padded.size(), vec![3, 256, 256]);
        // The padding repeats the last row.
        assert_eq!(f64::try_from((padded.narrow(1, 255, 1) - padded.narrow(1, 159, 1)).abs().max()).unwrap(), 0.0);
        assert_eq!(pad.cut_back(&padded.unsqueeze(0)).unwrap().size(), vec![1, 3, 160, 256]);
        let cropped = crop.fit(&frame).unwrap();
        let expected = frame.narrow(0, 16, 128).permute([2, 0, 1]).to_kind(Kind::Float) / 255.0 * 2.0 - 1.0;
        assert_eq!(f64::try_from((cropped - expected).abs().max()).unwrap(), 0.0);
    }
}
