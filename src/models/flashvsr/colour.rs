//! FlashVSR's frames out, as its pipeline ends: the AdaIN colour fix against the LR frames (the biased
//! variance, then a clamp to [-1, 1]; the statistics are per frame, so any chunking gives the same) and
//! `tensor2video`'s conversion to bytes, which truncates where the restore pipeline's rounds.
use tch::{Kind, Tensor};

use crate::models::restore::colorfix::{adain_with, AdainVariance};
use crate::models::ModelError;

/// Decoded frames `[T, 3, H, W]` in [-1, 1] given each frame's per-channel mean and std (std = √(biased
/// var + 1e-5)) of the matching LR frame `[T, 3, H, W]` in [-1, 1], clamped to [-1, 1]; f32.
pub fn colour_fix(frames: &Tensor, lq: &Tensor) -> Result<Tensor, ModelError> {
    Ok(adain_with(frames, lq, AdainVariance::Biased)?.f_clamp(-1.0, 1.0)?)
}

/// `[T, 3, H, W]` in [-1, 1] → `[T, H, W, 3]` bytes `uint8(clip((x + 1)·127.5, 0, 255))`: truncated, not
/// rounded (0 maps to 127), computed in f32.
pub fn to_u8_thwc(frames: &Tensor) -> Result<Tensor, ModelError> {
    if frames.dim() != 4 || frames.size()[1] != 3 {
        return Err(ModelError::Unsupported { model: "flashvsr".into(), what: format!("frames of shape {:?} to bytes (expected [T, 3, H, W])", frames.size()) });
    }
    let scaled = frames.f_to_kind(Kind::Float)?.f_add_scalar(1.0)?.f_mul_scalar(127.5)?.f_clamp(0.0, 255.0)?;
    Ok(scaled.f_to_kind(Kind::Uint8)?.f_permute([0, 2, 3, 1])?.f_contiguous()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(values: [f32; 2]) -> Tensor {
        Tensor::from_slice(&[values[0], values[1], values[0], values[1], values[0], values[1]]).view([1, 3, 1, 2])
    }

    /// Sample [0, 2] (mean 1, biased var 1) to reference [0.1, 0.3] (mean 0.2, biased var 0.01): pixel 0 is
    /// 0.2 - √(0.01001 / 1.00001) = 0.2 - 0.100049... ; reference [-2, 4] (mean 1, biased var 9) sends the
    /// sample to 1 ∓ √(9.00001 / 1.00001) ≈ -2.0, 4.0, clamped to -1 and 1.
    #[test]
    fn the_colour_fix_uses_the_biased_variance_and_clamps() {
        let fixed = colour_fix(&frame([0.0, 2.0]), &frame([0.1, 0.3])).unwrap();
        let expected = 0.2 - (0.01001f64 / 1.00001).sqrt();
        assert!((fixed.double_value(&[0, 0, 0, 0]) - expected).abs() < 1e-7, "{}", fixed.double_value(&[0, 0, 0, 0]));
        assert!((fixed.double_value(&[0, 2, 0, 1]) - (0.4 - expected)).abs() < 1e-7);
        let clamped = colour_fix(&frame([0.0, 2.0]), &frame([-2.0, 4.0])).unwrap();
        assert_eq!(Vec::<f32>::try_from(clamped.flatten(0, -1)).unwrap(), vec![-1.0, 1.0, -1.0, 1.0, -1.0, 1.0]);
        assert_eq!(fixed.kind(), Kind::Float);
    }

    /// (x + 1)·127.5: -1 → 0, 1 → 255, 0 → 127.5 → 127 (rounding would give 128), 0.999 → 254.87 → 254,
    /// -0.996 → 0.51 → 0; out of range → clipped.
    #[test]
    fn bytes_are_truncated() {
        let values = [-1.0f32, 1.0, 0.0, 0.999, -0.996, 2.0, -3.0, 0.5];
        let frames = Tensor::from_slice(&values).view([1, 1, 2, 4]).repeat([1, 3, 1, 1]);
        let bytes = to_u8_thwc(&frames).unwrap();
        assert_eq!(bytes.size(), vec![1, 2, 4, 3]);
        assert_eq!(bytes.kind(), Kind::Uint8);
        let channel0: Vec<u8> = Vec::try_from(bytes.select(3, 0).flatten(0, -1)).unwrap();
        assert_eq!(channel0, vec![0, 255, 127, 254, 0, 255, 0, 191]);
        assert!(to_u8_thwc(&Tensor::zeros([2, 4, 4], (Kind::Float, tch::Device::Cpu))).is_err());
    }
}
