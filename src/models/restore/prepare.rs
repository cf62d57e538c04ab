//! Frames in: the original pipeline's resize to a target AREA (aspect kept), clamp, centre crop to
//! multiples of 16, normalise to [-1,1], and the frame padding to 4k+1 that the causal VAE needs.
use tch::{Kind, Tensor};

use crate::models::ModelError;

/// The crop keeps the largest multiple of this on each axis (the VAE's 8x down-sampling times the DiT's 2x2 patch).
pub const CROP_MULTIPLE: i64 = 16;

/// How large the restored frames should be. The original takes an area, not a size: the aspect ratio
/// always follows the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetSize {
    /// A pixel count, as the original's `res_h * res_w`.
    Area(u64),
    /// The area of `height x width` (the original's `res_h`, `res_w` arguments).
    Size { height: u32, width: u32 },
    /// Each side times `scale`, i.e. the area `(H*scale) * (W*scale)`.
    Scale(u32),
}

impl TargetSize {
    /// The target area in pixels for an `in_h x in_w` input.
    pub fn area(self, in_h: i64, in_w: i64) -> u64 {
        match self {
            TargetSize::Area(area) => area,
            TargetSize::Size { height, width } => u64::from(height) * u64::from(width),
            TargetSize::Scale(scale) => (in_h as u64 * u64::from(scale)) * (in_w as u64 * u64::from(scale)),
        }
    }
}

/// Where a frame goes: resized to `resize_h x resize_w`, then the window `crop_h x crop_w` at
/// (`crop_top`, `crop_left`) is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameGeometry {
    pub resize_h: i64,
    pub resize_w: i64,
    pub crop_top: i64,
    pub crop_left: i64,
    pub crop_h: i64,
    pub crop_w: i64,
}

/// Python's `round`, which the original uses for the resized size and torchvision for the crop offset:
/// halves go to the even neighbour (Rust's `f64::round` would send 3.5 and 4.5 both up, and so move the
/// crop by a pixel, or the size by one, on exactly the inputs where the original does not).
pub fn round_half_even(x: f64) -> i64 {
    x.round_ties_even() as i64
}

/// The resize and crop of an `in_h x in_w` frame for `target`.
pub fn target_size(in_h: i64, in_w: i64, target: TargetSize) -> FrameGeometry {
    let (resize_h, resize_w) = area_resize(in_h, in_w, target.area(in_h, in_w));
    let (crop_top, crop_h) = centre_crop(resize_h);
    let (crop_left, crop_w) = centre_crop(resize_w);
    FrameGeometry { resize_h, resize_w, crop_top, crop_left, crop_h, crop_w }
}

/// The original hands its resizer the RESOLUTION sqrt(area), which squares it again; the round trip is
/// not exact in f64 (sqrt(7200)^2 = 7200.000000000001) and is kept so a size on a rounding edge comes
/// out as the original's.
fn area_resize(in_h: i64, in_w: i64, area: u64) -> (i64, i64) {
    let resolution = (area as f64).sqrt();
    let scale = (resolution * resolution / (in_h as f64 * in_w as f64)).sqrt();
    (round_half_even(in_h as f64 * scale), round_half_even(in_w as f64 * scale))
}

/// (offset, length) of the centred window whose length is the largest multiple of [`CROP_MULTIPLE`].
fn centre_crop(extent: i64) -> (i64, i64) {
    let kept = extent / CROP_MULTIPLE * CROP_MULTIPLE;
    (round_half_even((extent - kept) as f64 / 2.0), kept)
}

/// Frames `[T,3,H,W]` (uint8, or float already in [0,1]) to the VAE's input `[3,T,crop_h,crop_w]`, float32
/// in [-1,1], on the frames' device.
pub fn prepare_frames(frames: &Tensor, geometry: &FrameGeometry) -> Result<Tensor, ModelError> {
    check_frames(frames, geometry)?;
    let unit = match frames.kind() {
        Kind::Uint8 => frames.f_to_kind(Kind::Float)?.f_div_scalar(255.0)?,
        _ => frames.f_to_kind(Kind::Float)?,
    };
    let resized = resize_bicubic(&unit, geometry)?.f_clamp(0.0, 1.0)?;
    let cropped = resized.f_narrow(2, geometry.crop_top, geometry.crop_h)?.f_narrow(3, geometry.crop_left, geometry.crop_w)?;
    // torchvision's Normalize(0.5, 0.5): (x - 0.5) / 0.5.
    let normalised = cropped.f_sub_scalar(0.5)?.f_div_scalar(0.5)?;
    Ok(normalised.f_permute([1, 0, 2, 3])?.f_contiguous()?)
}

/// torchvision's bicubic `resize` of a float tensor is `interpolate(bicubic, align_corners=False,
/// antialias=True)` with no clamp; it returns the input untouched when the size already matches.
fn resize_bicubic(unit: &Tensor, geometry: &FrameGeometry) -> Result<Tensor, ModelError> {
    let size = unit.size();
    if size[2] == geometry.resize_h && size[3] == geometry.resize_w {
        return Ok(unit.shallow_clone());
    }
    Ok(unit.f_internal_upsample_bicubic2d_aa([geometry.resize_h, geometry.resize_w], false, None::<f64>, None::<f64>)?)
}

fn check_frames(frames: &Tensor, geometry: &FrameGeometry) -> Result<(), ModelError> {
    let size = frames.size();
    if size.len() != 4 || size[1] != 3 || size[0] == 0 {
        return Err(unsupported(format!("frames of shape {size:?} (expected [T>0,3,H,W])")));
    }
    if geometry.crop_h == 0 || geometry.crop_w == 0 {
        let (h, w) = (geometry.resize_h, geometry.resize_w);
        return Err(unsupported(format!("a target of {h}x{w}: both sides must be at least {CROP_MULTIPLE} pixels")));
    }
    Ok(())
}

fn unsupported(what: String) -> ModelError {
    ModelError::Unsupported { model: "seedvr2".into(), what }
}

/// The causal VAE folds 4 frames into one latent after the first, so it takes 1 or 4k+1 frames:
/// 1 stays 1, 2..=5 become 5, 6..=9 become 9, and so on.
pub fn padded_frame_count(frames: i64) -> i64 {
    (frames - 1 + 3) / 4 * 4 + 1
}

/// `[C,T,H,W]` padded along T to [`padded_frame_count`] with copies of the last frame; also returns the
/// original T, to which the decoded video is trimmed.
pub fn pad_frames_4n1(cthw: &Tensor) -> Result<(Tensor, i64), ModelError> {
    let size = cthw.size();
    if size.len() != 4 || size[1] == 0 {
        return Err(unsupported(format!("a video of shape {size:?} (expected [C,T>0,H,W])")));
    }
    let frames = size[1];
    let missing = padded_frame_count(frames) - frames;
    if missing == 0 {
        return Ok((cthw.shallow_clone(), frames));
    }
    let last = cthw.f_narrow(1, frames - 1, 1)?.f_expand([size[0], missing, size[2], size[3]], false)?;
    Ok((Tensor::f_cat(&[cthw, &last], 1)?, frames))
}

/// The first `count` frames of a `[C,T,H,W]` video as `[count,C,H,W]`: the decoded video trimmed to the
/// input's length, or the colour fix's reference taken from the VAE input.
pub fn first_frames_tchw(cthw: &Tensor, count: i64) -> Result<Tensor, ModelError> {
    Ok(cthw.f_narrow(1, 0, count)?.f_permute([1, 0, 2, 3])?.f_contiguous()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn halves_round_to_even_as_in_python() {
        assert_eq!(round_half_even(4.5), 4);
        assert_eq!(round_half_even(3.5), 4);
        assert_eq!(round_half_even(2.5), 2);
        assert_eq!(round_half_even(2.5000001), 3);
        assert_eq!(round_half_even(0.5), 0);
        assert_eq!(round_half_even(1.5), 2);
    }

    #[test]
    fn crop_offset_rounds_half_to_even() {
        // 71 rows keep 64, 7 spare: top = round(3.5) = 4; 73 rows keep 64, 9 spare: round(4.5) = 4.
        assert_eq!(centre_crop(71), (4, 64));
        assert_eq!(centre_crop(73), (4, 64));
        assert_eq!(centre_crop(102), (3, 96));
        assert_eq!(centre_crop(720), (0, 720));
        assert_eq!(centre_crop(15), (8, 0));
    }

    #[test]
    fn area_target_keeps_the_aspect_ratio() {
        // The recorded call of the reference pipeline: 36x52 with res_h=72, res_w=100 went to 71x102, crop (4,3) 64x96.
        let g = target_size(36, 52, TargetSize::Size { height: 72, width: 100 });
        assert_eq!(g, FrameGeometry { resize_h: 71, resize_w: 102, crop_top: 4, crop_left: 3, crop_h: 64, crop_w: 96 });
        assert_eq!(target_size(36, 52, TargetSize::Area(7200)), g);
        // 1080p to the default 720x1280 area is exactly 720p; portrait keeps its orientation.
        let g = target_size(1080, 1920, TargetSize::Size { height: 720, width: 1280 });
        assert_eq!((g.resize_h, g.resize_w, g.crop_h, g.crop_w), (720, 1280, 720, 1280));
        let g = target_size(1920, 1080, TargetSize::Size { height: 720, width: 1280 });
        assert_eq!((g.resize_h, g.resize_w), (1280, 720));
    }

    #[test]
    fn scale_target_multiplies_each_side() {
        let g = target_size(36, 52, TargetSize::Scale(2));
        assert_eq!(g, FrameGeometry { resize_h: 72, resize_w: 104, crop_top: 4, crop_left: 4, crop_h: 64, crop_w: 96 });
        for scale in 1..=4u32 {
            let g = target_size(270, 481, TargetSize::Scale(scale));
            assert_eq!((g.resize_h, g.resize_w), (270 * i64::from(scale), 481 * i64::from(scale)), "scale {scale}");
        }
    }

    #[test]
    fn frame_counts_pad_to_4k_plus_1() {
        let expected = [(1, 1), (2, 5), (3, 5), (4, 5), (5, 5), (6, 9), (9, 9), (10, 13), (81, 81), (82, 85)];
        for (frames, padded) in expected {
            assert_eq!(padded_frame_count(frames), padded, "{frames} frames");
        }
    }

    #[test]
    fn padding_repeats_the_last_frame() {
        let video = Tensor::arange(2 * 6 * 2 * 3, (Kind::Float, tch::Device::Cpu)).view([2, 6, 2, 3]);
        let (padded, frames) = pad_frames_4n1(&video).unwrap();
        assert_eq!((padded.size(), frames), (vec![2, 9, 2, 3], 6));
        assert_eq!(padded.narrow(1, 0, 6), video);
        for t in 6..9 {
            assert_eq!(padded.narrow(1, t, 1), video.narrow(1, 5, 1), "frame {t}");
        }
        let single = video.narrow(1, 0, 1);
        assert_eq!(pad_frames_4n1(&single).unwrap().0.size(), vec![2, 1, 2, 3]);
        assert!(pad_frames_4n1(&video.narrow(1, 0, 0)).is_err());
    }

    #[test]
    fn too_small_a_target_is_refused() {
        let frames = Tensor::zeros([1, 3, 8, 8], (Kind::Uint8, tch::Device::Cpu));
        let g = target_size(8, 8, TargetSize::Area(100));
        assert!(matches!(prepare_frames(&frames, &g), Err(ModelError::Unsupported { .. })));
    }
}
