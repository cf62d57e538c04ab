//! The 3-D rotary embedding (`precompute_freqs_cis_3d`, `rope_apply`): each head's channels split into
//! `[f | h | w]` parts, adjacent channel pairs rotated as complex numbers by `position · θ_i`, all in
//! float64 and cast back. The frame position is the ABSOLUTE latent frame index of the stream, so a key
//! kept in the KV cache keeps the rotation of the step that made it.
use tch::{Device, Kind, TchError, Tensor};

const THETA: f64 = 10000.0;

/// The rotation of every token of one step: cos and sin `[L, 1, head_dim/2]`, float64.
pub struct Rotation {
    cos: Tensor,
    sin: Tensor,
}

impl Rotation {
    /// Tokens of a `(f, h, w)` grid in row-major order, the frames numbered from `first_frame`.
    pub fn for_grid(split: [i64; 3], grid: [i64; 3], first_frame: i64, device: Device) -> Result<Self, TchError> {
        let [f, h, w] = grid;
        let part = |channels: i64, start: i64, count: i64, view: [i64; 3]| -> Result<Tensor, TchError> {
            let positions = Tensor::f_arange_start(start, start + count, (Kind::Double, device))?;
            positions.f_outer(&frequencies(channels, device)?)?.f_view([view[0], view[1], view[2], -1])?.f_expand([f, h, w, channels / 2], false)
        };
        let angles = Tensor::f_cat(&[part(split[0], first_frame, f, [f, 1, 1])?, part(split[1], 0, h, [1, h, 1])?, part(split[2], 0, w, [1, 1, w])?], -1)?
            .f_reshape([f * h * w, 1, -1])?;
        Ok(Self { cos: angles.f_cos()?, sin: angles.f_sin()? })
    }

    /// `x`: `[1, L, heads·head_dim]` → the same, each head's pairs `(2i, 2i+1)` rotated.
    pub fn apply(&self, x: &Tensor, heads: i64) -> Result<Tensor, TchError> {
        let size = x.size();
        let pairs = x.f_to_kind(Kind::Double)?.f_view([size[1], heads, -1, 2])?;
        let (real, imaginary) = (pairs.f_select(-1, 0)?, pairs.f_select(-1, 1)?);
        let rotated_real = real.f_mul(&self.cos)?.f_sub(&imaginary.f_mul(&self.sin)?)?;
        let rotated_imaginary = real.f_mul(&self.sin)?.f_add(&imaginary.f_mul(&self.cos)?)?;
        Tensor::f_stack(&[rotated_real, rotated_imaginary], -1)?.f_view(size.as_slice())?.f_to_kind(x.kind())
    }
}

/// `θ_i = 1 / 10000^(2i/d)` for the `d/2` pairs of a part of `d` channels, float64 as the original.
fn frequencies(channels: i64, device: Device) -> Result<Tensor, TchError> {
    let exponents = Tensor::f_arange_start_step(0, channels, 2, (Kind::Double, device))?.f_narrow(0, 0, channels / 2)?.f_div_scalar(channels as f64)?;
    Tensor::f_pow_scalar(THETA, &exponents)?.f_reciprocal()
}
