//! Frames in: the original pipeline's resize to a target AREA (aspect kept), or the ComfyUI front-end's to
//! a short side; clamp; centre crop to multiples of 16, or padding up to them (the front-end's `pad`);
//! normalise to [-1,1]; and the frame padding to 4k+1 that the causal VAE needs.
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
    /// The ComfyUI front-end's `resolution`: the short side, the long side following the aspect ratio
    /// and, with `max_long` (its `max_resolution`), capped, the short side then shrinking with it.
    ShortSide { resolution: u32, max_long: Option<u32> },
}

impl TargetSize {
    /// `(height, width)` an `in_h x in_w` frame is resized to.
    pub fn resized(self, in_h: i64, in_w: i64) -> (i64, i64) {
        let area = |area: u64| area_resize(in_h, in_w, area);
        match self {
            TargetSize::Area(pixels) => area(pixels),
            TargetSize::Size { height, width } => area(u64::from(height) * u64::from(width)),
            TargetSize::Scale(scale) => area((in_h as u64 * u64::from(scale)) * (in_w as u64 * u64::from(scale))),
            TargetSize::ShortSide { resolution, max_long } => short_side_resize(in_h, in_w, resolution, max_long),
        }
    }
}

/// What happens to sides that are not multiples of [`CROP_MULTIPLE`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Fit {
    /// The original's: the centred window of the largest multiples of 16 is kept, the rest cut off.
    #[default]
    Crop,
    /// The front-end's: the frames are padded up to the next multiples of 16 for the model, and the
    /// padding is cut off its output, so the output is exactly the resized size.
    Pad,
}

impl Fit {
    pub const ALL: [Fit; 2] = [Fit::Crop, Fit::Pad];

    pub fn parse(s: &str) -> Option<Fit> {
        Fit::ALL.into_iter().find(|fit| fit.as_str() == s)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Fit::Crop => "crop",
            Fit::Pad => "pad",
        }
    }
}

/// Where a frame goes: resized to `resize_h x resize_w`, then the window `crop_h x crop_w` at
/// (`crop_top`, `crop_left`) is kept: that is the output. The model sees the window with `pad_bottom`
/// rows and `pad_right` columns more (with `Fit::Pad`; 0 with `Fit::Crop`), cut off its output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameGeometry {
    pub resize_h: i64,
    pub resize_w: i64,
    pub crop_top: i64,
    pub crop_left: i64,
    pub crop_h: i64,
    pub crop_w: i64,
    pub pad_bottom: i64,
    pub pad_right: i64,
}

impl FrameGeometry {
    /// The rows of the frames the VAE and the DiT see (a multiple of 16).
    pub fn model_h(&self) -> i64 {
        self.crop_h + self.pad_bottom
    }

    /// The columns of the frames the VAE and the DiT see (a multiple of 16).
    pub fn model_w(&self) -> i64 {
        self.crop_w + self.pad_right
    }
}

/// Python's `round`, which the original uses for the resized size and torchvision for the crop offset:
/// halves go to the even neighbour (Rust's `f64::round` would send 3.5 and 4.5 both up, and so move the
/// crop by a pixel, or the size by one, on exactly the inputs where the original does not).
pub fn round_half_even(x: f64) -> i64 {
    x.round_ties_even() as i64
}

/// The resize and the crop or padding of an `in_h x in_w` frame for `target`.
pub fn target_size(in_h: i64, in_w: i64, target: TargetSize, fit: Fit) -> FrameGeometry {
    let (resize_h, resize_w) = target.resized(in_h, in_w);
    match fit {
        Fit::Crop => {
            let (crop_top, crop_h) = centre_crop(resize_h);
            let (crop_left, crop_w) = centre_crop(resize_w);
            FrameGeometry { resize_h, resize_w, crop_top, crop_left, crop_h, crop_w, pad_bottom: 0, pad_right: 0 }
        }
        Fit::Pad => FrameGeometry {
            resize_h,
            resize_w,
            crop_top: 0,
            crop_left: 0,
            crop_h: resize_h,
            crop_w: resize_w,
            pad_bottom: padding_to_multiple(resize_h),
            pad_right: padding_to_multiple(resize_w),
        },
    }
}

/// The front-end's side resize: the short side becomes `resolution`, the long one follows the aspect
/// ratio; a long side past `max_long` is brought down to it and the short side follows. Halves round to
/// even, as the area resize's do.
fn short_side_resize(in_h: i64, in_w: i64, resolution: u32, max_long: Option<u32>) -> (i64, i64) {
    let (in_short, in_long) = (in_h.min(in_w) as f64, in_h.max(in_w) as f64);
    let mut short = i64::from(resolution);
    let mut long = round_half_even(in_long * f64::from(resolution) / in_short);
    if let Some(max_long) = max_long.map(i64::from).filter(|max| long > *max) {
        short = round_half_even(in_short * max_long as f64 / in_long);
        long = max_long;
    }
    if in_h <= in_w {
        (short, long)
    } else {
        (long, short)
    }
}

/// Rows (or columns) that bring `extent` up to the next multiple of [`CROP_MULTIPLE`].
fn padding_to_multiple(extent: i64) -> i64 {
    (CROP_MULTIPLE - extent % CROP_MULTIPLE) % CROP_MULTIPLE
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
    let padded = pad_edges(&cropped, geometry)?;
    // torchvision's Normalize(0.5, 0.5): (x - 0.5) / 0.5.
    let normalised = padded.f_sub_scalar(0.5)?.f_div_scalar(0.5)?;
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

/// `Fit::Pad`'s rows and columns, at the bottom and the right, as copies of the last row and column. The
/// reference notes do not say how the front-end fills them; edge copies continue the picture without the
/// hard border zeros would make, and what the model makes of them is cut off again.
fn pad_edges(frames: &Tensor, geometry: &FrameGeometry) -> Result<Tensor, ModelError> {
    if geometry.pad_bottom == 0 && geometry.pad_right == 0 {
        return Ok(frames.shallow_clone());
    }
    Ok(frames.f_replication_pad2d([0, geometry.pad_right, 0, geometry.pad_bottom])?)
}

fn check_frames(frames: &Tensor, geometry: &FrameGeometry) -> Result<(), ModelError> {
    let size = frames.size();
    if size.len() != 4 || size[1] != 3 || size[0] == 0 {
        return Err(unsupported(format!("frames of shape {size:?} (expected [T>0,3,H,W])")));
    }
    if geometry.model_h() == 0 || geometry.model_w() == 0 {
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
    pad_frames_to(cthw, 1)
}

/// As [`pad_frames_4n1`], to at least `frames` (itself `4n + 1`): a shorter batch padded to the length of
/// the others (`uniform_batches`).
pub fn pad_frames_to(cthw: &Tensor, at_least: i64) -> Result<(Tensor, i64), ModelError> {
    let size = cthw.size();
    if size.len() != 4 || size[1] == 0 {
        return Err(unsupported(format!("a video of shape {size:?} (expected [C,T>0,H,W])")));
    }
    let frames = size[1];
    let missing = padded_frame_count(frames.max(at_least)) - frames;
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
        let g = target_size(36, 52, TargetSize::Size { height: 72, width: 100 }, Fit::Crop);
        assert_eq!(g, FrameGeometry { resize_h: 71, resize_w: 102, crop_top: 4, crop_left: 3, crop_h: 64, crop_w: 96, pad_bottom: 0, pad_right: 0 });
        assert_eq!(target_size(36, 52, TargetSize::Area(7200), Fit::Crop), g);
        // 1080p to the default 720x1280 area is exactly 720p; portrait keeps its orientation.
        let g = target_size(1080, 1920, TargetSize::Size { height: 720, width: 1280 }, Fit::Crop);
        assert_eq!((g.resize_h, g.resize_w, g.crop_h, g.crop_w), (720, 1280, 720, 1280));
        let g = target_size(1920, 1080, TargetSize::Size { height: 720, width: 1280 }, Fit::Crop);
        assert_eq!((g.resize_h, g.resize_w), (1280, 720));
    }

    #[test]
    fn scale_target_multiplies_each_side() {
        let g = target_size(36, 52, TargetSize::Scale(2), Fit::Crop);
        assert_eq!(g, FrameGeometry { resize_h: 72, resize_w: 104, crop_top: 4, crop_left: 4, crop_h: 64, crop_w: 96, pad_bottom: 0, pad_right: 0 });
        for scale in 1..=4u32 {
            let g = target_size(270, 481, TargetSize::Scale(scale), Fit::Crop);
            assert_eq!((g.resize_h, g.resize_w), (270 * i64::from(scale), 481 * i64::from(scale)), "scale {scale}");
        }
    }

    #[test]
    fn short_side_target_follows_the_aspect_ratio_under_the_long_side_cap() {
        let resized = |h, w, resolution, max_long| TargetSize::ShortSide { resolution, max_long }.resized(h, w);
        // 1080p to a 720 short side is 720p; portrait keeps its orientation; a square stays square.
        assert_eq!(resized(1080, 1920, 720, None), (720, 1280));
        assert_eq!(resized(1920, 1080, 720, None), (1280, 720));
        assert_eq!(resized(500, 500, 64, None), (64, 64));
        // 144 × 176 to 100: 176 · 100 / 144 = 122.2 → 122. Halves go to even: 4.5 → 4, 7.5 → 8.
        assert_eq!(resized(144, 176, 100, None), (100, 122));
        assert_eq!((resized(4, 6, 3, None), resized(4, 10, 3, None)), ((3, 4), (3, 8)));
        // 1:3 at 720 would be 2160 long: capped at 1280, the short side is 1280/3 = 426.7 → 427.
        assert_eq!(resized(100, 300, 720, Some(1280)), (427, 1280));
        assert_eq!(resized(300, 100, 720, Some(1280)), (1280, 427));
        // A cap the long side does not reach changes nothing; at exactly the cap neither.
        assert_eq!(resized(1080, 1920, 720, Some(1280)), (720, 1280));
        assert_eq!(resized(1080, 1920, 720, Some(4000)), (720, 1280));
    }

    #[test]
    fn pad_keeps_the_whole_resized_frame_and_pads_to_multiples_of_16() {
        let target = TargetSize::ShortSide { resolution: 100, max_long: None };
        let g = target_size(144, 176, target, Fit::Pad);
        assert_eq!(g, FrameGeometry { resize_h: 100, resize_w: 122, crop_top: 0, crop_left: 0, crop_h: 100, crop_w: 122, pad_bottom: 12, pad_right: 6 });
        assert_eq!((g.model_h(), g.model_w()), (112, 128));
        // The same target cropped: the centred 96 × 112.
        let g = target_size(144, 176, target, Fit::Crop);
        assert_eq!((g.crop_top, g.crop_left, g.crop_h, g.crop_w, g.model_h(), g.model_w()), (2, 5, 96, 112, 96, 112));
        // Sides already multiples of 16 get no padding; any target can be padded.
        let g = target_size(36, 52, TargetSize::Scale(2), Fit::Pad);
        assert_eq!((g.crop_h, g.crop_w, g.pad_bottom, g.pad_right), (72, 104, 8, 8));
        let g = target_size(1080, 1920, TargetSize::Size { height: 720, width: 1280 }, Fit::Pad);
        assert_eq!((g.pad_bottom, g.pad_right), (0, 0));
        assert_eq!(padding_to_multiple(1), 15);
    }

    #[test]
    fn padded_frames_repeat_the_last_row_and_column() {
        let frames = Tensor::arange(2 * 3 * 10 * 13, (Kind::Float, tch::Device::Cpu)).view([2, 3, 10, 13]) / 780.0;
        let g = target_size(10, 13, TargetSize::Scale(1), Fit::Pad);
        let prepared = prepare_frames(&frames, &g).unwrap();
        assert_eq!(prepared.size(), vec![3, 2, 16, 16]);
        let expected = frames.permute([1, 0, 2, 3]) * 2.0 - 1.0;
        assert!(prepared.narrow(2, 0, 10).narrow(3, 0, 13).allclose(&expected, 1e-6, 1e-6, false));
        for row in 10..16 {
            assert_eq!(prepared.narrow(2, row, 1), prepared.narrow(2, 9, 1), "row {row}");
        }
        for column in 13..16 {
            assert_eq!(prepared.narrow(3, column, 1), prepared.narrow(3, 12, 1), "column {column}");
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
        let g = target_size(8, 8, TargetSize::Area(100), Fit::Crop);
        assert!(matches!(prepare_frames(&frames, &g), Err(ModelError::Unsupported { .. })));
    }
}
