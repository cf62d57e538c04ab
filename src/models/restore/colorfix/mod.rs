//! Frames out: the colour fix that gives the restored frames the colours of the input, one file per
//! method, and the conversion to bytes. Frames are `[T,3,H,W]` in [-1,1].
mod adain;
mod bytes;
mod histogram;
mod hsv;
mod lab;
mod wavelet;

use tch::{Kind, Tensor};

use crate::models::ModelError;

pub use adain::{adain, adain_with, AdainVariance};
pub use bytes::to_u8_thwc;
pub use hsv::hsv_saturation_match;
pub use lab::lab_color_transfer;
pub use wavelet::{wavelet_adaptive, wavelet_reconstruction, wavelet_reconstruction_capped};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ColorFix {
    /// High frequencies of the restored frames plus low frequencies of the input (the original's choice).
    #[default]
    Wavelet,
    /// Per frame and channel, the restored frames' mean and std moved to the input's.
    Adain,
    /// The ComfyUI front-end's: the wavelet fix, then a and b histogram-matched to the input in Lab and
    /// L matched one fifth of the way.
    Lab,
    /// The ComfyUI front-end's: the saturation histogram-matched to the input within each of 12 hue bins.
    Hsv,
    /// The ComfyUI front-end's: the wavelet fix, blended towards the HSV fix where it leaves the frames
    /// more saturated than the input.
    WaveletAdaptive,
    /// The restored frames as they are.
    None,
}

impl ColorFix {
    pub const ALL: [ColorFix; 6] = [ColorFix::Wavelet, ColorFix::Adain, ColorFix::Lab, ColorFix::Hsv, ColorFix::WaveletAdaptive, ColorFix::None];

    pub fn parse(s: &str) -> Option<ColorFix> {
        ColorFix::ALL.into_iter().find(|fix| fix.as_str() == s)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ColorFix::Wavelet => "wavelet",
            ColorFix::Adain => "adain",
            ColorFix::Lab => "lab",
            ColorFix::Hsv => "hsv",
            ColorFix::WaveletAdaptive => "wavelet_adaptive",
            ColorFix::None => "none",
        }
    }

    /// `sample` (restored) and `reference` (the prepared input, before frame padding), both `[T,3,H,W]`.
    /// Lab, HSV and the adaptive wavelet pool their histograms over all T frames, so `sample` should be a
    /// whole batch.
    pub fn apply(self, sample: &Tensor, reference: &Tensor) -> Result<Tensor, ModelError> {
        match self {
            ColorFix::Wavelet => wavelet_reconstruction(sample, reference),
            ColorFix::Adain => adain(sample, reference),
            ColorFix::Lab => lab_color_transfer(sample, reference),
            ColorFix::Hsv => hsv_saturation_match(sample, reference),
            ColorFix::WaveletAdaptive => wavelet_adaptive(sample, reference),
            ColorFix::None => Ok(sample.f_to_kind(Kind::Float)?),
        }
    }
}

fn check_pair(sample: &Tensor, reference: &Tensor) -> Result<(), ModelError> {
    let (a, b) = (sample.size(), reference.size());
    if a.len() != 4 || a != b || a[1] != 3 {
        let what = format!("a colour fix of frames {a:?} against reference frames {b:?} (expected equal [T,3,H,W])");
        return Err(ModelError::Unsupported { model: "seedvr2".into(), what });
    }
    Ok(())
}

/// Both frames as float32 in [0,1] (`(x + 1) / 2`, clipped), the range the Lab and HSV fixes work in.
fn unit_range(x: &Tensor) -> Result<Tensor, ModelError> {
    Ok(x.f_to_kind(Kind::Float)?.f_add_scalar(1.0)?.f_mul_scalar(0.5)?.f_clamp(0.0, 1.0)?)
}

/// [0,1] back to [-1,1] after clipping to [0,1].
fn signed_range(unit: &Tensor) -> Result<Tensor, ModelError> {
    Ok(unit.f_clamp(0.0, 1.0)?.f_mul_scalar(2.0)?.f_sub_scalar(1.0)?)
}

/// What the modes' unit tests share.
#[cfg(test)]
pub(super) mod test_frames {
    use tch::{Device, Kind, Tensor};

    /// Two random `[3, 40, 56]` frames, from `seed`.
    pub fn random_frames(seed: i64) -> Tensor {
        tch::manual_seed(seed);
        Tensor::randn([2, 3, 40, 56], (Kind::Float, Device::Cpu))
    }

    pub fn max_abs(a: &Tensor, b: &Tensor) -> f64 {
        (a - b).abs().max().double_value(&[])
    }
}

#[cfg(test)]
mod tests {
    use super::test_frames::random_frames;
    use super::*;

    #[test]
    fn names_round_trip() {
        for fix in ColorFix::ALL {
            assert_eq!(ColorFix::parse(fix.as_str()), Some(fix));
            let json = serde_json::to_value(fix).unwrap();
            assert_eq!(json.as_str(), Some(fix.as_str()), "serde spells it as the query string does");
        }
        assert_eq!(ColorFix::parse("sepia"), None);
        assert_eq!(ColorFix::parse("Lab"), None);
    }

    #[test]
    fn mismatched_frames_are_refused() {
        let (a, b) = (random_frames(6), random_frames(7).narrow(2, 0, 32));
        for fix in ColorFix::ALL.into_iter().filter(|fix| *fix != ColorFix::None) {
            assert!(fix.apply(&a, &b).is_err(), "{}", fix.as_str());
        }
    }

    /// Every method keeps the shape, and a frame fixed against itself stays close to itself (the histogram
    /// methods exactly up to the colour-space round trip).
    #[test]
    fn every_method_keeps_a_frame_fixed_against_itself() {
        let x = (random_frames(8) * 0.4).clamp(-1.0, 1.0);
        for fix in ColorFix::ALL {
            let out = fix.apply(&x, &x).unwrap();
            assert_eq!(out.size(), x.size(), "{}", fix.as_str());
            let error = (&out - &x).abs().max().double_value(&[]);
            assert!(error <= 1e-3, "{}: {error}", fix.as_str());
        }
    }
}
