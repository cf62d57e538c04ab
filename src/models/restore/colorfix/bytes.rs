//! The colour-fixed frames to bytes.
use tch::{Kind, Tensor};

use crate::models::ModelError;

/// `[T,3,H,W]` in [-1,1] to `[T,H,W,3]` bytes: round(255 * (clip(x,-1,1) * 0.5 + 0.5)), halves to even as
/// torch's `round` does.
pub fn to_u8_thwc(frames: &Tensor) -> Result<Tensor, ModelError> {
    let unit = frames.f_to_kind(Kind::Float)?.f_clamp(-1.0, 1.0)?.f_mul_scalar(0.5)?.f_add_scalar(0.5)?;
    let bytes = unit.f_mul_scalar(255.0)?.f_round()?.f_to_kind(Kind::Uint8)?;
    Ok(bytes.f_permute([0, 2, 3, 1])?.f_contiguous()?)
}
