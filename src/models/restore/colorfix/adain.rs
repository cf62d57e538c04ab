//! AdaIN: each frame's channel statistics moved to the reference's.
use tch::{Kind, Tensor};

use super::check_pair;
use crate::models::ModelError;

/// AdaIN's variance floor, added before the square root.
const ADAIN_EPS: f64 = 1e-5;

/// Which variance AdAIN's std is built from: SeedVR2's `torch.var` (unbiased, over n − 1) or FlashVSR's
/// (biased, over n).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdainVariance {
    Unbiased,
    Biased,
}

/// (x - mean_x) / std_x * std_ref + mean_ref per frame and channel, std = sqrt(unbiased var + 1e-5).
/// Not clamped.
pub fn adain(sample: &Tensor, reference: &Tensor) -> Result<Tensor, ModelError> {
    adain_with(sample, reference, AdainVariance::Unbiased)
}

/// [`adain`] with std = sqrt(`variance` + 1e-5). Not clamped.
pub fn adain_with(sample: &Tensor, reference: &Tensor, variance: AdainVariance) -> Result<Tensor, ModelError> {
    check_pair(sample, reference)?;
    let sample = sample.f_to_kind(Kind::Float)?;
    let (mean, std) = channel_mean_std(&sample, variance)?;
    let (ref_mean, ref_std) = channel_mean_std(&reference.f_to_kind(Kind::Float)?, variance)?;
    Ok(sample.f_sub(&mean)?.f_div(&std)?.f_mul(&ref_std)?.f_add(&ref_mean)?)
}

/// Mean and std over the pixels of each frame and channel, shaped `[T,C,1,1]` for broadcasting.
fn channel_mean_std(x: &Tensor, variance: AdainVariance) -> Result<(Tensor, Tensor), ModelError> {
    let size = x.size();
    let pixels = x.f_reshape([size[0], size[1], size[2] * size[3]])?;
    let mean = pixels.f_mean_dim(2, false, Kind::Float)?.f_view([size[0], size[1], 1, 1])?;
    let var = pixels.f_var_dim(2, variance == AdainVariance::Unbiased, false)?;
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
        let (mean, std) = channel_mean_std(&fixed, AdainVariance::Unbiased).unwrap();
        let (ref_mean, ref_std) = channel_mean_std(&reference, AdainVariance::Unbiased).unwrap();
        assert!(max_abs(&mean, &ref_mean) <= 1e-5);
        assert!(max_abs(&std, &ref_std) <= 1e-4);
    }

    /// One frame of 1×2 pixels per channel, variances small enough for the 1e-5 floor to matter (otherwise
    /// the n / (n − 1) factor cancels between sample and reference): sample [0, 0.002] (mean 0.001, biased
    /// var 1e-6, unbiased 2e-6) against reference [-0.01, 0.01] (mean 0, biased var 1e-4, unbiased 2e-4).
    /// Pixel 0: -0.001 / √(1e-6 + 1e-5) · √(1e-4 + 1e-5) = -0.001·√10 biased, -0.001·√(2.1e-4 / 1.2e-5) =
    /// -0.001·√17.5 unbiased.
    #[test]
    fn the_variance_is_chosen() {
        let frame = |a: f32, b: f32| Tensor::from_slice(&[a, b, a, b, a, b]).view([1, 3, 1, 2]);
        let (sample, reference) = (frame(0.0, 0.002), frame(-0.01, 0.01));
        let first = |variance| adain_with(&sample, &reference, variance).unwrap().double_value(&[0, 0, 0, 0]);
        let (biased, unbiased) = (-0.001 * 10f64.sqrt(), -0.001 * 17.5f64.sqrt());
        assert!((first(AdainVariance::Biased) - biased).abs() < 1e-7, "{} vs {biased}", first(AdainVariance::Biased));
        assert!((first(AdainVariance::Unbiased) - unbiased).abs() < 1e-7, "{} vs {unbiased}", first(AdainVariance::Unbiased));
        assert_eq!(adain(&sample, &reference).unwrap().double_value(&[0, 0, 0, 0]), first(AdainVariance::Unbiased));
    }
}
