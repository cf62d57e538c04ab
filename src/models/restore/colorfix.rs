//! Frames out: the colour fix that gives the restored frames the low frequencies (colours, large-scale
//! tones) of the input, and the conversion to bytes. Frames are `[T,3,H,W]` in [-1,1].
use tch::{Device, Kind, Tensor};

use crate::models::ModelError;

/// The wavelet's level count; level i blurs with dilation 2^i, so the low band keeps structures larger
/// than about 2^5 = 32 pixels.
const WAVELET_LEVELS: u32 = 5;
/// AdaIN's variance floor, added before the square root.
const ADAIN_EPS: f64 = 1e-5;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ColorFix {
    /// High frequencies of the restored frames plus low frequencies of the input (the original's choice).
    #[default]
    Wavelet,
    /// Per frame and channel, the restored frames' mean and std moved to the input's.
    Adain,
    /// The restored frames as they are.
    None,
}

impl ColorFix {
    pub fn parse(s: &str) -> Option<ColorFix> {
        match s {
            "wavelet" => Some(ColorFix::Wavelet),
            "adain" => Some(ColorFix::Adain),
            "none" => Some(ColorFix::None),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ColorFix::Wavelet => "wavelet",
            ColorFix::Adain => "adain",
            ColorFix::None => "none",
        }
    }

    /// `sample` (restored) and `reference` (the prepared input, before frame padding), both `[T,3,H,W]`.
    pub fn apply(self, sample: &Tensor, reference: &Tensor) -> Result<Tensor, ModelError> {
        match self {
            ColorFix::Wavelet => wavelet_reconstruction(sample, reference),
            ColorFix::Adain => adain(sample, reference),
            ColorFix::None => Ok(sample.f_to_kind(Kind::Float)?),
        }
    }
}

/// high(sample) + low(reference); not clamped (values beyond [-1,1] are clipped only when written out).
pub fn wavelet_reconstruction(sample: &Tensor, reference: &Tensor) -> Result<Tensor, ModelError> {
    check_pair(sample, reference)?;
    let (high, _) = wavelet_decomposition(&sample.f_to_kind(Kind::Float)?)?;
    let (_, low) = wavelet_decomposition(&reference.f_to_kind(Kind::Float)?)?;
    Ok(high.f_add(&low)?)
}

/// (high, low) with high + low = x: each level blurs the previous level's output, the differences add up
/// to the high band, and the last blur is the low band.
fn wavelet_decomposition(x: &Tensor) -> Result<(Tensor, Tensor), ModelError> {
    let kernel = blur_kernel(x.size()[1], x.device())?;
    let mut high = x.f_zeros_like()?;
    let mut low = x.shallow_clone();
    for level in 0..WAVELET_LEVELS {
        let blurred = dilated_blur(&low, &kernel, 1 << level)?;
        high = high.f_add(&low.f_sub(&blurred)?)?;
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

/// (x - mean_x) / std_x * std_ref + mean_ref per frame and channel, std = sqrt(unbiased var + 1e-5).
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

fn check_pair(sample: &Tensor, reference: &Tensor) -> Result<(), ModelError> {
    let (a, b) = (sample.size(), reference.size());
    if a.len() != 4 || a != b {
        let what = format!("a colour fix of frames {a:?} against reference frames {b:?} (expected equal [T,C,H,W])");
        return Err(ModelError::Unsupported { model: "seedvr2".into(), what });
    }
    Ok(())
}

/// `[T,3,H,W]` in [-1,1] to `[T,H,W,3]` bytes: round(255 * (clip(x,-1,1) * 0.5 + 0.5)), halves to even as
/// torch's `round` does.
pub fn to_u8_thwc(frames: &Tensor) -> Result<Tensor, ModelError> {
    let unit = frames.f_to_kind(Kind::Float)?.f_clamp(-1.0, 1.0)?.f_mul_scalar(0.5)?.f_add_scalar(0.5)?;
    let bytes = unit.f_mul_scalar(255.0)?.f_round()?.f_to_kind(Kind::Uint8)?;
    Ok(bytes.f_permute([0, 2, 3, 1])?.f_contiguous()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn random_frames(seed: i64) -> Tensor {
        tch::manual_seed(seed);
        Tensor::randn([2, 3, 40, 56], (Kind::Float, Device::Cpu))
    }

    fn max_abs(a: &Tensor, b: &Tensor) -> f64 {
        (a - b).abs().max().double_value(&[])
    }

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
        let (_, low) = wavelet_decomposition(&impulse).unwrap();
        let at = |y: i64, x: i64| low.double_value(&[0, 1, y, x]);
        assert_eq!(at(centre, centre), 1.0 / 1024.0);
        assert_eq!(at(centre + 31, centre - 31), 1.0 / 1_048_576.0);
        let nonzero = low.get(0).get(0).ne(0.0).nonzero();
        let (lo, hi) = (nonzero.min().int64_value(&[]), nonzero.max().int64_value(&[]));
        assert_eq!((lo, hi), (centre - 31, centre + 31));
    }

    #[test]
    fn wavelet_takes_the_low_band_from_the_reference() {
        let (sample, reference) = (random_frames(2), random_frames(3));
        let fixed = wavelet_reconstruction(&sample, &reference).unwrap();
        let (high, _) = wavelet_decomposition(&sample).unwrap();
        // The low band of the result is the reference's: a constant reference gives high(sample) + constant,
        // since the normalised kernel keeps a constant image as it is.
        let constant = Tensor::full([2, 3, 40, 56], 0.25, (Kind::Float, Device::Cpu));
        let on_constant = wavelet_reconstruction(&sample, &constant).unwrap();
        assert!(max_abs(&on_constant, &(&high + 0.25)) <= 1e-6);
        assert!(max_abs(&fixed, &sample) > 0.1, "the reference's colours must show");
    }

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

    #[test]
    fn names_round_trip() {
        for fix in [ColorFix::Wavelet, ColorFix::Adain, ColorFix::None] {
            assert_eq!(ColorFix::parse(fix.as_str()), Some(fix));
        }
        assert_eq!(ColorFix::parse("lab"), None);
    }

    #[test]
    fn mismatched_frames_are_refused() {
        let (a, b) = (random_frames(6), random_frames(7).narrow(2, 0, 32));
        assert!(wavelet_reconstruction(&a, &b).is_err());
        assert!(adain(&a, &b).is_err());
    }
}
