//! ffprobe/ffmpeg processes (bounded: timeouts, kill on drop) and raw RGB frame streams:
//! `probe` validates an input, `FrameReader` decodes it in chunks, `FrameWriter` encodes an MP4,
//! `preview` makes stills and browser-playable proxies.
mod error;
mod frames;
pub mod latent;
pub mod preview;
pub mod safetensors;
mod probe;
mod process;
mod settings;
mod writer;

pub use error::MediaError;
pub use frames::{FrameReader, ReadConfig, RgbFrames};
pub use probe::{probe, MediaInfo};
pub use settings::{MediaLimits, MediaTools};
pub use writer::{FrameWriter, WriteConfig};
