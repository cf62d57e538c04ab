//! FlashVSR (OpenImagingLab, 2025): one-step streaming diffusion video super-resolution on a Wan 2.1 1.3B DiT
//! (`models::wan_dit`), with its LQ projection, and TCDecoder (a TAEHV decoder with an LR condition,
//! `models::taehv`) or the Wan 2.1 VAE (`models::wan`) to decode. Above the families and the SeedVR2
//! restore pipeline, whose colour fix it shares.
pub mod frames;
pub mod resize;
pub mod schedule;
pub mod version;

pub use version::FlashVsrVersion;
