use std::path::PathBuf;
use std::time::Duration;

/// Where ffmpeg lives and how long its processes may run.
#[derive(Debug, Clone, PartialEq)]
pub struct MediaTools {
    pub ffmpeg: PathBuf,
    pub ffprobe: PathBuf,
    pub probe_timeout: Duration,
    /// Bounds a whole decode or encode process, which lives as long as the job's compute.
    pub stream_timeout: Duration,
}

impl Default for MediaTools {
    fn default() -> Self {
        MediaTools {
            ffmpeg: "ffmpeg".into(),
            ffprobe: "ffprobe".into(),
            probe_timeout: Duration::from_secs(30),
            stream_timeout: Duration::from_secs(6 * 3600),
        }
    }
}

/// What an input may be at most; `probe` rejects anything larger with `media-too-large`.
#[derive(Debug, Clone, PartialEq)]
pub struct MediaLimits {
    pub max_bytes: u64,
    pub max_width: u32,
    pub max_height: u32,
    pub max_frames: u64,
    pub max_duration_s: f64,
}

impl Default for MediaLimits {
    fn default() -> Self {
        MediaLimits {
            max_bytes: 2 << 30,
            max_width: 3840,
            max_height: 2160,
            max_frames: 100_000,
            max_duration_s: 3600.0,
        }
    }
}

impl MediaLimits {
    /// For reading back our own outputs, whose size we chose.
    pub fn unlimited() -> Self {
        MediaLimits {
            max_bytes: u64::MAX,
            max_width: u32::MAX,
            max_height: u32::MAX,
            max_frames: u64::MAX,
            max_duration_s: f64::MAX,
        }
    }
}
