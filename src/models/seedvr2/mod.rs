//! SeedVR2 video VAE (`ema_vae_fp16.safetensors`): causal 3-D conv encoder/decoder with per-frame
//! GroupNorm and MAGViT-style up-samplers, with exact temporal slicing (carried causal state).
mod blocks;
pub mod config;
mod conv;
mod decoder;
mod encoder;
mod resample;
mod stream;
mod vae;
mod video_vae;
pub mod weights;

pub use config::SeedVr2Config;
pub use stream::{DecodeStream, EncodeStream};
pub use vae::{scale_latent, unscale_latent, SeedVr2LoadOptions, SeedVr2Vae, SEEDVR2_SCALING_FACTOR};
