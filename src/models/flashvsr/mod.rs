//! FlashVSR (OpenImagingLab, 2025): one-step streaming diffusion video super-resolution on a Wan 2.1 1.3B DiT
//! (`models::wan_dit`), with its LQ projection, and TCDecoder (a TAEHV decoder with an LR condition,
//! `models::taehv`) or the Wan 2.1 VAE (`models::wan`) to decode. Above the families and the SeedVR2
//! restore pipeline, whose colour fix it shares.
pub mod colour;
pub mod frames;
pub mod loaded;
pub mod lq_proj;
pub mod pipeline;
mod lq_stream;
pub mod resize;
pub mod schedule;

pub use crate::models::registry::flashvsr_folder::{self as folder, SCALE};
pub use crate::models::registry::flashvsr_version::{self as version};

pub use colour::{colour_fix, to_u8_thwc};
pub use lq_proj::{LqProjConfig, LqProjLoadOptions, LqProjection};
pub use lq_stream::LqProjStream;
pub use version::FlashVsrVersion;
