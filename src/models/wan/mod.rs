//! Wan 2.1 / 2.2 video VAE (causal 3-D conv encoder/decoder) with exact chunked streaming.
//! Built from diffusers weight names; original/ComfyUI checkpoints are renamed once at load (`keymap`).
mod blocks;
// The causal cache, convolutions and activation layout are shared with SeedVR2's VAE; Wan's modules
// reach them as `super::cache`, `super::conv` and `super::layout`.
use crate::models::nn::causal_cache as cache;
use crate::models::nn::{conv3d as conv, layout};
pub mod config;
mod decoder;
mod patch;
mod encoder;
pub mod keymap;
mod resample;
mod residual;
mod stream;
mod upsample;
mod vae;
mod video_vae;
pub mod weights;

pub use cache::FeatureCache;
pub use config::{published_latent_stats, WanConfig, WAN21_LATENTS_MEAN, WAN21_LATENTS_STD, WAN22_LATENTS_MEAN, WAN22_LATENTS_STD};
pub use decoder::Decoder;
pub use encoder::Encoder;
pub use stream::{DecodeStream, EncodeStream};
pub use vae::{WanLoadOptions, WanTuning, WanVae};
pub use video_vae::WanVideoVae;
