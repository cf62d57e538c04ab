//! AdaIN: each frame's channel statistics moved to the reference's.
use tch::{Kind, Tensor};

use super::check_pair;
use crate::models::ModelError;

/// AdaIN's variance floor, added before the square root.
const ADAIN_EPS: f64 = 1e-5;

/// (x - mean_x) / std_x * std_ref + mean_ref per frame and channel, std = sqrt(unbiased var + 1e-5).
/// Not clamped.
pub fn adain(sample: &Tensor, reference: &Tensor) -> Result<Tensor, ModelError> {
    check_pair(sample, reference)?;
    let sample = sample.f_to_kind(Kind::Float)?;
    let (mean, std) = channel_mean_std(&sample)?;
    let (ref_mean, ref_std) = channel_mean_std(&reference.f_to_kind(Kind::Float)?)?;
    Ok(sample.f_sub(&mean)?.f_div(&std)?.f_mul(&ref_std)?.f_add(&ref_mean)?)
}

/// Mean and std over the pixels of each frame and channel, shaped `[T,C,1,1]` for broadcasting.
fn channel_mean_std(x: &Tensor) -> Result<(Tensor, Tensor), ModelError> {
    let size = x.size();
    let pixels = x.f_reshape([size[0], size[1], size[2] * size[3]])?;
    let mean = pixels.f_mean_dim(2, false, Kind::Float)?.f_view([size[0], size[1], 1, 1])?;
    let var = pixels.f_var_dim(2, true, false)?;
    let std = var.f_add_scalar(ADAIN_EPS)?.f_sqrt()?.f_view([size[0], size[1], 1, 1])?;
    Ok((mean, std))
}

#[cfg(test)]
mod tests {
    use crate::models::restore::colorfix::test_frames::{max_abs, random_frames};
    use super::*;

    #[test]
    fn adain_moves_mean_and_std_to_the_reference() {
        let sample = random_frames(4) * 0.3 + 0.2;
        let reference = random_frames(5) * 0.5 - 0.1;
        let fixed = adain(&sample, &reference).unwrap();
        let (mean, std) = channel_mean_std(&fixed).unwrap();
        let (ref_mean, ref_std) = channel_mean_std(&reference).unwrap();
        assert!(max_abs(&mean, &ref_mean) <= 1e-5);
        assert!(max_abs(&std, &ref_std) <= 1e-4);
    }
}
