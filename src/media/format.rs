//! The output formats a job can ask for, what each needs from ffmpeg, and which this ffmpeg has.
use std::collections::BTreeMap;
use std::io::Read;
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

use super::process::{BoundedChild, ProcessPriority, ProcessSpec};
use super::{MediaError, MediaTools};

/// `h264` is the default; the others are for editing (`prores`), archiving (`ffv1`), 10-bit delivery
/// (`h265`), frame-by-frame work (`png`) and pipelines that stay in tensors (`safetensors`, VAE
/// decodes only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum OutputFormat {
    /// 8-bit 4:2:0 H.264 in MP4 (`output_crf`, `output_preset`). Stored jobs said `mp4`.
    #[serde(alias = "mp4")]
    H264,
    /// 10-bit 4:2:0 H.265 in MP4 (`output_crf`, `output_preset`).
    H265,
    /// ProRes 422 HQ, 10-bit, in MOV.
    Prores,
    /// Lossless FFV1 of the 16-bit RGB frames, in Matroska.
    Ffv1,
    /// 8-bit PNG: one `.png` for a still, else a zip of frames `frame_000000.png` onwards. A video's
    /// `png` is taken as `png16` (its documented meaning before stills).
    Png,
    /// 16-bit PNG made from the model's float output: one `.png` for a still, else a zip of frames.
    Png16,
    /// `vae_decode` only: the float frames as a `[1, 3, T, H, W]` safetensors `sample`. Stored jobs said `tensor`.
    #[serde(alias = "tensor")]
    Safetensors,
}

/// Bits per sample of the RGB frames handed to the encoder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SampleDepth {
    Eight,
    Sixteen,
}

impl SampleDepth {
    pub fn bytes(self) -> usize {
        match self {
            SampleDepth::Eight => 1,
            SampleDepth::Sixteen => 2,
        }
    }

    /// ffmpeg's name for packed RGB of this depth (little-endian, as the host writes it).
    pub fn rgb_pix_fmt(self) -> &'static str {
        match self {
            SampleDepth::Eight => "rgb24",
            SampleDepth::Sixteen => "rgb48le",
        }
    }
}

impl OutputFormat {
    pub const ALL: [OutputFormat; 7] = [
        OutputFormat::H264,
        OutputFormat::H265,
        OutputFormat::Prores,
        OutputFormat::Ffv1,
        OutputFormat::Png,
        OutputFormat::Png16,
        OutputFormat::Safetensors,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            OutputFormat::H264 => "h264",
            OutputFormat::H265 => "h265",
            OutputFormat::Prores => "prores",
            OutputFormat::Ffv1 => "ffv1",
            OutputFormat::Png => "png",
            OutputFormat::Png16 => "png16",
            OutputFormat::Safetensors => "safetensors",
        }
    }

    pub fn parse(text: &str) -> Option<OutputFormat> {
        let text = text.trim().to_ascii_lowercase();
        OutputFormat::ALL.into_iter().find(|f| f.as_str() == text)
    }

    /// The result file's extension (a still's PNG is `.png`: `still_extension`).
    pub fn extension(self) -> &'static str {
        match self {
            OutputFormat::H264 | OutputFormat::H265 => "mp4",
            OutputFormat::Prores => "mov",
            OutputFormat::Ffv1 => "mkv",
            OutputFormat::Png | OutputFormat::Png16 => "zip",
            OutputFormat::Safetensors => "safetensors",
        }
    }

    /// The extension of the result of a job whose input is a still (`MediaInfo::still`).
    pub fn extension_for(self, still: bool) -> &'static str {
        if still && self.is_png() {
            "png"
        } else {
            self.extension()
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            OutputFormat::H264 | OutputFormat::H265 => "video/mp4",
            OutputFormat::Prores => "video/quicktime",
            OutputFormat::Ffv1 => "video/x-matroska",
            OutputFormat::Png | OutputFormat::Png16 => "application/zip",
            OutputFormat::Safetensors => "application/octet-stream",
        }
    }

    /// The formats written by x264/x265, whose quality (`crf`) and speed (`encoder_preset`) a job may set.
    pub fn takes_crf(self) -> bool {
        match self {
            OutputFormat::H264 | OutputFormat::H265 => true,
            OutputFormat::Prores | OutputFormat::Ffv1 | OutputFormat::Png | OutputFormat::Png16 | OutputFormat::Safetensors => false,
        }
    }

    /// The formats a still can be written in (one PNG file).
    pub fn is_png(self) -> bool {
        matches!(self, OutputFormat::Png | OutputFormat::Png16)
    }

    /// The ffmpeg encoder it needs (`None`: written by vaebox itself).
    pub fn encoder(self) -> Option<&'static str> {
        match self {
            OutputFormat::H264 => Some("libx264"),
            OutputFormat::H265 => Some("libx265"),
            OutputFormat::Prores => Some("prores_ks"),
            OutputFormat::Ffv1 => Some("ffv1"),
            OutputFormat::Png | OutputFormat::Png16 => Some("png"),
            OutputFormat::Safetensors => None,
        }
    }

    /// Everything but H.264 and 8-bit PNG is fed 16-bit RGB from the float frames: no 8-bit stage before
    /// a 10-bit, 16-bit or lossless encoder.
    pub fn depth(self) -> SampleDepth {
        match self {
            OutputFormat::H264 | OutputFormat::Png => SampleDepth::Eight,
            OutputFormat::H265 | OutputFormat::Prores | OutputFormat::Ffv1 | OutputFormat::Png16 | OutputFormat::Safetensors => SampleDepth::Sixteen,
        }
    }

    /// Encoded as RGB (no YUV matrix): lossless FFV1 and PNG.
    pub fn is_rgb(self) -> bool {
        matches!(self, OutputFormat::Ffv1 | OutputFormat::Png | OutputFormat::Png16)
    }

    /// A video file ffmpeg and browsers' players can read (a PNG zip and a tensor file are not).
    pub fn is_video(self) -> bool {
        !matches!(self, OutputFormat::Png | OutputFormat::Png16 | OutputFormat::Safetensors)
    }

    /// Float frames in a tensor file: only an op whose spec says it writes a pixel tensor can (`OpSpec::writes`).
    pub fn is_pixel_tensor(self) -> bool {
        self == OutputFormat::Safetensors
    }
}

/// Which output formats this ffmpeg can write, asked once per process (`ffmpeg -encoders`).
pub fn available_formats(tools: &MediaTools) -> &'static BTreeMap<OutputFormat, bool> {
    static AVAILABLE: OnceLock<BTreeMap<OutputFormat, bool>> = OnceLock::new();
    AVAILABLE.get_or_init(|| {
        let encoders = list_encoders(tools).unwrap_or_else(|error| {
            tracing::warn!(%error, "cannot list ffmpeg's encoders; only the tensor output is offered");
            String::new()
        });
        let has = |name: &str| encoders.lines().any(|line| line.split_whitespace().nth(1) == Some(name));
        OutputFormat::ALL.into_iter().map(|format| (format, format.encoder().is_none_or(has))).collect()
    })
}

fn list_encoders(tools: &MediaTools) -> Result<String, MediaError> {
    let mut child = BoundedChild::spawn(ProcessSpec {
        program: &tools.ffmpeg,
        args: ["-hide_banner", "-nostdin", "-encoders"].iter().map(Into::into).collect(),
        timeout: tools.probe_timeout,
        pipe_stdin: false,
        pipe_stdout: true,
        priority: ProcessPriority::Normal,
    })?;
    let mut listing = String::new();
    let read = child.stdout.take().expect("stdout is piped").take(1 << 20).read_to_string(&mut listing);
    child.finish()?;
    read.map_err(|e| MediaError::io("reading ffmpeg's encoder list", e))?;
    Ok(listing)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_names_of_the_old_two_formats_still_read() {
        assert_eq!(serde_json::from_str::<OutputFormat>("\"mp4\"").unwrap(), OutputFormat::H264);
        assert_eq!(serde_json::from_str::<OutputFormat>("\"tensor\"").unwrap(), OutputFormat::Safetensors);
        assert_eq!(serde_json::to_string(&OutputFormat::Prores).unwrap(), "\"prores\"");
        assert_eq!(OutputFormat::parse(" FFV1 "), Some(OutputFormat::Ffv1));
        assert_eq!(OutputFormat::parse("mkv"), None);
    }
}

/// x264's and x265's presets, fastest first (both encoders take the same names).
pub const ENCODER_PRESETS: [&str; 10] = ["ultrafast", "superfast", "veryfast", "faster", "fast", "medium", "slow", "slower", "veryslow", "placebo"];
