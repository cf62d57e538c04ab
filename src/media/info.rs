//! What a probed input is (`MediaInfo`, with the `FrameSpan` of a part of it) and the checks `probe` and
//! `sequence` both hold it to. Apart from both (and from `range`, which picks spans) so that none of them
//! imports another that imports it back; `probe`, `range` and `media` re-export these where they were.
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::colour::Colour;
use super::{MediaError, MediaLimits};

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq, utoipa::ToSchema)]
pub struct MediaInfo {
    /// `mp4`, `mov`, `matroska`, … (the demuxer's name, with the ISO family split by brand).
    pub container: String,
    pub codec: String,
    /// Display size: a 90°-rotated phone video reports its upright size, as ffmpeg decodes it.
    pub width: u32,
    pub height: u32,
    /// Exact count of video frames (the container's sample count, else packets counted by ffprobe).
    pub frames: u64,
    pub fps: f64,
    /// The frame rate as ffmpeg writes it (`30000/1001`), for an encoder that must match exactly.
    pub fps_rational: String,
    pub duration_s: f64,
    pub has_audio: bool,
    pub bytes: u64,
    /// As flagged in the file, else the defaults for its height (written explicitly into outputs).
    /// Jobs stored before colour was probed read as BT.601 limited range.
    #[serde(default = "unprobed_colour")]
    pub colour: Colour,
    /// The pixels' shape (`128:117`) when they are not square, as displayed (a quarter turn swaps it);
    /// written into every output and preview so the picture keeps its shape. Null for square pixels.
    #[serde(default)]
    pub sample_aspect_ratio: Option<String>,
    /// For a job over part of the input (`start`, `frames`, …): which frames, of how many. `frames` and
    /// `duration_s` above are then the part's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub span: Option<FrameSpan>,
    /// A PNG, JPEG or WebP picture (one frame, an image demuxer): upscale and restore write it as a PNG.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub still: bool,
    /// The picture has an alpha channel (RGBA PNG, WebP with alpha), kept beside the colour in a still's PNG.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub alpha: bool,
}

fn unprobed_colour() -> Colour {
    Colour::default_for_height(0)
}

/// The frames of the input a job reads: `frames` of them from index `start_frame`, of `source_frames`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct FrameSpan {
    pub start_frame: u64,
    pub frames: u64,
    /// The input's whole length, in frames.
    pub source_frames: u64,
    /// Where the span starts in the input's time (seconds from its first frame) and how long it lasts:
    /// the window of audio and subtitles kept.
    pub start_s: f64,
    pub duration_s: f64,
}

impl FrameSpan {
    /// The whole input.
    pub fn is_whole(&self) -> bool {
        self.start_frame == 0 && self.frames == self.source_frames
    }
}

/// Bytes of one decoded pixel: every input is decoded to 8-bit RGB.
const DECODED_PIXEL_BYTES: u64 = 3;

/// Pictures sized by their PNG headers (a still, or the frames of a zip), checked before anything is
/// decoded: each side against `max_width` and `max_height`, and all they decode to against `max_bytes`.
///
/// Why the upload limit bounds the decoded pixels: PNG is lossless, yet its deflate packs a plain 4096×4096
/// frame into a few hundred bytes, so neither the upload's size nor a zip's unpacked bytes bound what
/// decoding makes (a 74 KB zip of 200 such frames was taken for `vae_encode`: 10 GB of pixels). Held to the
/// upload limit, frames sent as PNGs make no more than the same frames sent raw may (a `/v1/encode` tensor is
/// held to it too); a longer clip belongs in a video. Videos are not held to this: their codecs pack real
/// footage a hundredfold, and the same rule would refuse ordinary films; the sides bound each of their frames.
pub(crate) fn check_declared_pictures(frames: u64, width: u32, height: u32, limits: &MediaLimits) -> Result<(), MediaError> {
    if width > limits.max_width {
        return Err(MediaError::too_large("width", width, limits.max_width));
    }
    if height > limits.max_height {
        return Err(MediaError::too_large("height", height, limits.max_height));
    }
    let decoded = frames.saturating_mul(u64::from(width) * u64::from(height)).saturating_mul(DECODED_PIXEL_BYTES);
    if decoded > limits.max_bytes {
        let frames = if frames == 1 { "1 picture".to_string() } else { format!("{frames} frames") };
        return Err(MediaError::too_large(
            "decoded size",
            format!("{decoded} bytes ({frames} of {width}×{height}, {DECODED_PIXEL_BYTES} bytes a pixel)"),
            format!("{} bytes (max_upload_bytes: PNGs may decode to no more than the box takes as an upload; send a long clip as a video)", limits.max_bytes),
        ));
    }
    Ok(())
}

/// `30000/1001` → (`30000/1001`, 29.97); `0/0` (unknown) → None.
pub(crate) fn parse_rate(rate: &str) -> Option<(String, f64)> {
    let (num, den) = rate.trim().split_once('/').unwrap_or((rate.trim(), "1"));
    let (num, den) = (num.parse::<u64>().ok()?, den.parse::<u64>().ok()?);
    (num > 0 && den > 0).then(|| (format!("{num}/{den}"), num as f64 / den as f64))
}
