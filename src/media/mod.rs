//! ffprobe/ffmpeg processes (bounded: timeouts, kill on drop) and raw RGB frame streams:
//! `probe` validates an input, `FrameReader` decodes it in chunks, `FrameWriter` encodes the output format,
//! `preview` makes stills and browser-playable proxies; `still` reads a picture's alpha and writes a still's PNG;
//! `sequence` reads a zip of PNG frames as a clip; `segments` writes an output that a stopped job can go on with.
pub mod colour;
mod error;
pub mod format;
mod frames;
mod info;
pub mod latent;
mod picture;
pub mod preview;
pub mod safetensors;
mod probe;
mod process;
mod range;
pub mod segments;
pub mod sequence;
mod settings;
pub mod still;
mod writer;

pub use colour::Colour;
pub use error::MediaError;
pub use format::{available_formats, OutputFormat, SampleDepth};
pub use frames::{FrameReader, ReadConfig, RgbFrames};
pub use process::ProcessPriority;
pub use range::{probe_part, FrameSpan, InputRange};
pub use probe::{probe, MediaInfo};
pub(crate) use probe::parse_rate;
pub use settings::{MediaLimits, MediaTools};
pub use still::StillWriter;
pub use writer::{FrameWriter, WriteConfig};
