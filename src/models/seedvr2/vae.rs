//! The whole SeedVR2 VAE: loading, whole-clip encode/decode, latent scaling and the entry points of
//! the streams.
use std::path::{Path, PathBuf};

use tch::{Device, Kind, Tensor};

use super::config::SeedVr2Config;
use super::conv::{Conv3d, ConvSpec};
use super::decoder::Decoder;
use super::encoder::Encoder;
use super::weights::{self, Weights};
use crate::models::nn::causal_cache::FeatureCache;
use crate::models::nn::weights::HeldBytes;
use crate::models::nn::posterior::Posterior;
use crate::models::ModelError;

/// SeedVR2's latent scale (`configs_*/main.yaml` `vae.scaling_factor`; the model's own diffusers
/// config says 0.18215 but is never used). The shift is 0.
pub const SEEDVR2_SCALING_FACTOR: f64 = 0.9152;
pub const SEEDVR2_SHIFTING_FACTOR: f64 = 0.0;

/// Encoder side of the pipeline: `latent = (z − shift) · scale`.
pub fn scale_latent(z: &Tensor) -> Result<Tensor, ModelError> {
    Ok(z.f_sub_scalar(SEEDVR2_SHIFTING_FACTOR)?.f_mul_scalar(SEEDVR2_SCALING_FACTOR)?)
}

/// Decoder side of the pipeline: `z = latent / scale + shift`.
pub fn unscale_latent(latent: &Tensor) -> Result<Tensor, ModelError> {
    Ok(latent.f_div_scalar(SEEDVR2_SCALING_FACTOR)?.f_add_scalar(SEEDVR2_SHIFTING_FACTOR)?)
}

#[derive(Debug, Clone, Copy)]
pub struct SeedVr2LoadOptions {
    pub device: Device,
    /// Compute kind; the checkpoint (fp16 as released, or fp32/bf16) is cast to it.
    pub kind: Kind,
}

impl Default for SeedVr2LoadOptions {
    fn default() -> Self {
        Self { device: Device::Cpu, kind: Kind::Float }
    }
}

#[derive(Debug)]
pub struct SeedVr2Vae {
    config: SeedVr2Config,
    pub(super) encoder: Encoder,
    pub(super) decoder: Decoder,
    /// Absent in the released model (`use_quant_conv: False`); applied to the moments when present.
    pub(super) quant_conv: Option<Conv3d>,
    pub(super) post_quant_conv: Option<Conv3d>,
    pub(super) device: Device,
    pub(super) kind: Kind,
    /// Bytes of the tensors the modules hold, and of what they made from them at load.
    held: HeldBytes,
}

impl SeedVr2Vae {
    /// Loads a safetensors checkpoint (`ema_vae_fp16.safetensors` or any config of the same family).
    pub fn load(path: &Path, opts: &SeedVr2LoadOptions) -> Result<Self, ModelError> {
        Self::from_weights(&weights::read(path, opts.device, opts.kind)?)
    }

    /// Builds from tensors already in memory; `source` only labels errors.
    pub fn from_tensors(source: &str, tensors: Vec<(String, Tensor)>, opts: &SeedVr2LoadOptions) -> Result<Self, ModelError> {
        Self::from_weights(&weights::from_tensors(&PathBuf::from(source), tensors, opts.device, opts.kind)?)
    }

    pub fn from_weights(weights: &Weights) -> Result<Self, ModelError> {
        let _guard = tch::no_grad_guard();
        let config = SeedVr2Config::detect(weights)?;
        let root = weights.root();
        let latent = config.latent_channels;
        let optional_conv = |name: &str, channels: i64| -> Result<Option<Conv3d>, ModelError> {
            config.use_quant_conv.then(|| Conv3d::new(&root.pp(name), &ConvSpec::pointwise(channels, channels))).transpose()
        };
        let mut vae = Self {
            encoder: Encoder::new(&root.pp("encoder"), &config)?,
            decoder: Decoder::new(&root.pp("decoder"), &config)?,
            quant_conv: optional_conv("quant_conv", 2 * latent)?,
            post_quant_conv: optional_conv("post_quant_conv", latent)?,
            device: weights.device(),
            kind: weights.kind(),
            config,
            held: HeldBytes::default(),
        };
        weights.ensure_all_used()?;
        vae.held = weights.held_bytes();
        Ok(vae)
    }

    pub fn config(&self) -> &SeedVr2Config {
        &self.config
    }

    pub fn device(&self) -> Device {
        self.device
    }

    /// Bytes of the weights as held (at the compute dtype, on the device), and of what the modules made
    /// from them at load and keep (Winograd kernels on CPU f32).
    pub fn held_bytes(&self) -> HeldBytes {
        self.held
    }

    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// `[B, 3, T, H, W]` in [-1, 1] → raw posterior `[B, 16, 1 + ⌊(T−1)/4⌋, ⌊H/8⌋, ⌊W/8⌋]` (not scaled;
    /// see [`scale_latent`]). One pass over the whole clip, like the original's unsliced path: memory
    /// grows with T, so long clips should go through [`SeedVr2Vae::encoder_stream`]. Frames beyond
    /// `1 + 4k` are dropped, as in the original.
    pub fn encode(&self, video: &Tensor) -> Result<Posterior, ModelError> {
        let _guard = tch::no_grad_guard();
        let video = self.checked_input(video, self.config.in_channels, "video")?;
        let used = self.config.pixel_frames(self.config.latent_frames(video.size()[2]));
        let mut cache = self.encoder.new_cache();
        self.encode_chunk(&video.f_narrow(2, 0, used)?, &mut cache)
    }

    /// Raw latent `[B, 16, t, h, w]` (unscale first if it came from a pipeline, see [`unscale_latent`])
    /// → video `[B, 3, 4t − 3, 8h, 8w]`, **not** clamped (the original VAE has no clamp; SeedVR2's
    /// pipeline clamps at the very end). One pass; see [`SeedVr2Vae::decoder_stream`] for long clips.
    pub fn decode(&self, latent: &Tensor) -> Result<Tensor, ModelError> {
        let _guard = tch::no_grad_guard();
        let latent = self.checked_input(latent, self.config.latent_channels, "latent")?;
        let mut cache = self.decoder.new_cache();
        self.decode_chunk(&latent, &mut cache)
    }

    pub(super) fn encode_chunk(&self, frames: &Tensor, cache: &mut FeatureCache) -> Result<Posterior, ModelError> {
        let mut moments = self.encoder.forward(frames, cache)?;
        if let Some(conv) = &self.quant_conv {
            moments = conv.forward(&moments)?;
        }
        Posterior::from_moments(&moments, self.config.latent_channels)
    }

    pub(super) fn decode_chunk(&self, latent: &Tensor, cache: &mut FeatureCache) -> Result<Tensor, ModelError> {
        let latent = match &self.post_quant_conv {
            Some(conv) => conv.forward(latent)?,
            None => latent.shallow_clone(),
        };
        self.decoder.forward(&latent, cache)
    }

    /// Checks `[B, channels, t ≥ 1, H, W]` and moves it to the model's device and kind.
    pub(super) fn checked_input(&self, x: &Tensor, channels: i64, what: &str) -> Result<Tensor, ModelError> {
        let size = x.size();
        if size.len() != 5 || size[1] != channels || size[2] < 1 {
            return Err(self.bad_input(format!("a {what} of shape {size:?} (expected [B, {channels}, T≥1, H, W])")));
        }
        Ok(x.f_to_device(self.device)?.f_to_kind(self.kind)?)
    }

    pub(super) fn bad_input(&self, what: String) -> ModelError {
        ModelError::Unsupported { model: "seedvr2".into(), what }
    }
}
