//! The wavelet fix: the restored frames' high frequencies plus the input's low frequencies (colours,
//! large-scale tones), as the original SeedVR2 does it and as the ComfyUI front-end does it (radius
//! capped, output clamped), and the front-end's adaptive blend of it with the HSV fix.
use tch::{Device, Kind, Tensor};

use super::{check_pair, hsv};
use crate::models::ModelError;

/// The wavelet's level count; level i blurs with dilation 2^i, so the low band keeps structures larger
/// than about 2^5 = 32 pixels.
const WAVELET_LEVELS: u32 = 5;
/// The adaptive blend: how much more saturated than the input the restored frames may be before the
/// HSV fix takes over, and how sharply it does (a sigmoid's slope).
const OVERSATURATION: f64 = 0.15;
const BLEND_SHARPNESS: f64 = 5.0;

/// Whose wavelet: they differ in how far the taps reach and in the order the high band is summed.
#[derive(Debug, Clone, Copy)]
enum Flavour {
    /// The original SeedVR2's: level i reaches 2^i; high += low − blurred.
    Original,
    /// The ComfyUI front-end's: 2^i, but at most max(1, min(H,W) / 8), so small frames blur less at the
    /// top levels; high += low, then high −= blurred (another float32 rounding, kept for bit-equal results).
    FrontEnd,
}

impl Flavour {
    fn radius(self, level: u32, height: i64, width: i64) -> i64 {
        let doubling = 1i64 << level;
        match self {
            Flavour::Original => doubling,
            Flavour::FrontEnd => doubling.min((height.min(width) / 8).max(1)),
        }
    }

    /// The high band after one more level.
    fn accumulate(self, high: &Tensor, low: &Tensor, blurred: &Tensor) -> Result<Tensor, ModelError> {
        Ok(match self {
            Flavour::Original => high.f_add(&low.f_sub(blurred)?)?,
            Flavour::FrontEnd => high.f_add(low)?.f_sub(blurred)?,
        })
    }
}

/// high(sample) + low(reference); not clamped (values beyond [-1,1] are clipped only when written out).
/// The original SeedVR2's, which `ColorFix::Wavelet` runs.
pub fn wavelet_reconstruction(sample: &Tensor, reference: &Tensor) -> Result<Tensor, ModelError> {
    reconstruct(sample, reference, Flavour::Original)
}

/// The ComfyUI front-end's `wavelet_reconstruction`: radii capped by the frame size, output clamped to
/// [-1,1]. The base of its Lab fix and of its adaptive wavelet. Where min(H,W) ≥ 128 nothing is capped and
/// it is [`wavelet_reconstruction`] clamped, up to float32 rounding.
pub fn wavelet_reconstruction_capped(sample: &Tensor, reference: &Tensor) -> Result<Tensor, ModelError> {
    Ok(reconstruct(sample, reference, Flavour::FrontEnd)?.f_clamp(-1.0, 1.0)?)
}

fn reconstruct(sample: &Tensor, reference: &Tensor, flavour: Flavour) -> Result<Tensor, ModelError> {
    check_pair(sample, reference)?;
    let (high, _) = wavelet_decomposition(&sample.f_to_kind(Kind::Float)?, flavour)?;
    let (_, low) = wavelet_decomposition(&reference.f_to_kind(Kind::Float)?, flavour)?;
    Ok(high.f_add(&low)?)
}

/// The front-end's `wavelet_adaptive`: the capped wavelet fix W, and the HSV fix where the restored frames
/// are more saturated than the input. Per pixel, w = sigmoid(5 (sat(sample) − sat(ref) − 0.15)), kept
/// only where sat(W) − sat(ref) > 0.075; out = W (1 − w) + HSV w. Not clamped.
pub fn wavelet_adaptive(sample: &Tensor, reference: &Tensor) -> Result<Tensor, ModelError> {
    let wavelet = wavelet_reconstruction_capped(sample, reference)?;
    let hsv = hsv::hsv_saturation_match(sample, reference)?;
    let ref_saturation = hsv::saturation(&super::unit_range(reference)?)?;
    let excess = hsv::saturation(&super::unit_range(sample)?)?.f_sub(&ref_saturation)?;
    let weight = excess.f_sub_scalar(OVERSATURATION)?.f_mul_scalar(BLEND_SHARPNESS)?.f_sigmoid()?;
    // The front-end's threshold on W is half the one inside the sigmoid.
    let wavelet_excess = hsv::saturation(&super::unit_range(&wavelet)?)?.f_sub(&ref_saturation)?;
    let still_oversaturated = wavelet_excess.f_gt(OVERSATURATION * 0.5)?.f_to_kind(Kind::Float)?;
    let weight = weight.f_mul(&still_oversaturated)?.f_clamp(0.0, 1.0)?;
    Ok(wavelet.f_mul(&weight.f_neg()?.f_add_scalar(1.0)?)?.f_add(&hsv.f_mul(&weight)?)?)
}

/// (high, low) with high + low = x: each level blurs the previous level's output, the differences add up
/// to the high band, and the last blur is the low band.
fn wavelet_decomposition(x: &Tensor, flavour: Flavour) -> Result<(Tensor, Tensor), ModelError> {
    let size = x.size();
    let kernel = blur_kernel(size[1], x.device())?;
    let mut high = x.f_zeros_like()?;
    let mut low = x.shallow_clone();
    for level in 0..WAVELET_LEVELS {
        let blurred = dilated_blur(&low, &kernel, flavour.radius(level, size[2], size[3]))?;
        high = flavour.accumulate(&high, &low, &blurred)?;
        low = blurred;
    }
    Ok((high, low))
}

/// The 3x3 binomial kernel [[1,2,1],[2,4,2],[1,2,1]]/16 for each channel (depthwise); exact in float32.
fn blur_kernel(channels: i64, device: Device) -> Result<Tensor, ModelError> {
    let taps = Tensor::from_slice(&[1f32, 2., 1., 2., 4., 2., 1., 2., 1.]).f_div_scalar(16.0)?;
    Ok(taps.f_view([1, 1, 3, 3])?.f_repeat([channels, 1, 1, 1])?.f_to_device(device)?)
}

/// The edge pixels are repeated by the radius so the dilated taps never leave the frame; replicate
/// padding, unlike reflection, has no limit on the radius versus the frame size.
fn dilated_blur(x: &Tensor, kernel: &Tensor, radius: i64) -> Result<Tensor, ModelError> {
    let padded = x.f_pad([radius, radius, radius, radius], "replicate", None::<f64>)?;
    Ok(padded.f_conv2d(kernel, None::<Tensor>, [1, 1], [0, 0], [radius, radius], kernel.size()[0])?)
}

#[cfg(test)]
mod tests {
    use crate::models::restore::colorfix::test_frames::{max_abs, random_frames};
    use super::*;

    #[test]
    fn wavelet_bands_add_up_to_the_input() {
        let x = random_frames(1);
        let back = wavelet_reconstruction(&x, &x).unwrap();
        assert!(max_abs(&back, &x) <= 1e-5, "{}", max_abs(&back, &x));
    }

    /// The low band of a single bright pixel is the product of the five dilated binomial blurs: along each
    /// axis, offsets are sums of ±0/±2^i, each reachable one way only, so the centre weighs (1/2)^5, the
    /// far corner (1/4)^5 per axis, and nothing lies beyond 1+2+4+8+16 = 31 pixels.
    #[test]
    fn low_band_of_a_pixel_spans_the_five_dilations() {
        let (size, centre) = (96, 48);
        let impulse = Tensor::zeros([1, 3, size, size], (Kind::Float, Device::Cpu));
        let _ = impulse.narrow(2, centre, 1).narrow(3, centre, 1).fill_(1.0);
        let (_, low) = wavelet_decomposition(&impulse, Flavour::Original).unwrap();
        let at = |y: i64, x: i64| low.double_value(&[0, 1, y, x]);
        assert_eq!(at(centre, centre), 1.0 / 1024.0);
        assert_eq!(at(centre + 31, centre - 31), 1.0 / 1_048_576.0);
        let nonzero = low.get(0).get(0).ne(0.0).nonzero();
        let (lo, hi) = (nonzero.min().int64_value(&[]), nonzero.max().int64_value(&[]));
        assert_eq!((lo, hi), (centre - 31, centre + 31));
    }

    /// On a 96-pixel frame the front-end caps the radii at 96/8 = 12: 1+2+4+8+12 = 27 pixels of reach.
    #[test]
    fn capped_radii_shorten_the_reach_on_small_frames() {
        let (size, centre) = (96, 48);
        let impulse = Tensor::zeros([1, 3, size, size], (Kind::Float, Device::Cpu));
        let _ = impulse.narrow(2, centre, 1).narrow(3, centre, 1).fill_(1.0);
        let (_, low) = wavelet_decomposition(&impulse, Flavour::FrontEnd).unwrap();
        let nonzero = low.get(0).get(0).ne(0.0).nonzero();
        let (lo, hi) = (nonzero.min().int64_value(&[]), nonzero.max().int64_value(&[]));
        assert_eq!((lo, hi), (centre - 27, centre + 27));
        assert_eq!(Flavour::FrontEnd.radius(4, 128, 300), 16, "no cap from 128 pixels up");
        assert_eq!(Flavour::FrontEnd.radius(0, 4, 4), 1, "never below 1");
    }

    #[test]
    fn wavelet_takes_the_low_band_from_the_reference() {
        let (sample, reference) = (random_frames(2), random_frames(3));
        let fixed = wavelet_reconstruction(&sample, &reference).unwrap();
        let (high, _) = wavelet_decomposition(&sample, Flavour::Original).unwrap();
        // The low band of the result is the reference's: a constant reference gives high(sample) + constant,
        // since the normalised kernel keeps a constant image as it is.
        let constant = Tensor::full([2, 3, 40, 56], 0.25, (Kind::Float, Device::Cpu));
        let on_constant = wavelet_reconstruction(&sample, &constant).unwrap();
        assert!(max_abs(&on_constant, &(&high + 0.25)) <= 1e-6);
        assert!(max_abs(&fixed, &sample) > 0.1, "the reference's colours must show");
    }
}
