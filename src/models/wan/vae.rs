//! The whole Wan VAE: loading, whole-clip encode/decode, and the entry points of the streams.
use std::path::{Path, PathBuf};

use tch::{Device, Kind, Tensor};

use super::config::WanConfig;
use super::conv::{Conv3d, ConvSpec};
use super::decoder::Decoder;
use super::encoder::Encoder;
use super::layout;
use super::stream::{DecodeStream, EncodeStream};
use super::weights::{self, Weights};
use crate::models::ModelError;

#[derive(Debug, Clone, Copy)]
pub struct WanLoadOptions {
    pub device: Device,
    /// Compute kind; the checkpoint (fp32, fp16 or bf16) is cast to it.
    pub kind: Kind,
}

impl Default for WanLoadOptions {
    fn default() -> Self {
        Self { device: Device::Cpu, kind: Kind::Float }
    }
}

/// Full-resolution pixels (frames × H × W) per network call of whole-clip [`WanVae::encode`] and
/// [`WanVae::decode`]. Each live activation holds about C × 4 bytes per such pixel (C up to 96 at full
/// resolution in Wan 2.1), so this bounds memory near 0.4 GB per tensor, while a short or small clip
/// still goes through in one call: bigger convolutions run measurably faster on CPU than one frame at a time.
pub const WHOLE_CLIP_CHUNK_PIXELS: i64 = 1 << 20;

/// Speed switches that change the result only by rounding. Each one is measured side by side by
/// `vaebox bench vae`; the default is what paid on the CPU we measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WanTuning {
    /// Channels-last-3d strides for conv weights and activations: oneDNN's own layout, so convs skip
    /// the reorders of NCDHW tensors in and out.
    pub channels_last: bool,
}

impl Default for WanTuning {
    fn default() -> Self {
        Self { channels_last: true }
    }
}

#[derive(Debug)]
pub struct WanVae {
    config: WanConfig,
    pub(super) encoder: Encoder,
    pub(super) decoder: Decoder,
    /// Original name `conv1`: 1×1×1 on the encoder output, whose first `z_dim` channels are `mu`.
    pub(super) quant_conv: Conv3d,
    /// Original name `conv2`: 1×1×1 before the decoder.
    pub(super) post_quant_conv: Conv3d,
    pub(super) device: Device,
    pub(super) kind: Kind,
    pub(super) tuning: WanTuning,
    /// Bytes of the tensors the modules hold.
    weight_bytes: u64,
}

impl WanVae {
    /// Loads a safetensors checkpoint in original/ComfyUI or diffusers naming.
    pub fn load(path: &Path, opts: &WanLoadOptions) -> Result<Self, ModelError> {
        Self::load_tuned(path, opts, &WanTuning::default())
    }

    /// [`WanVae::load`] with explicit speed switches (for benchmarks).
    pub fn load_tuned(path: &Path, opts: &WanLoadOptions, tuning: &WanTuning) -> Result<Self, ModelError> {
        let mut weights = weights::read(path, opts.device, opts.kind)?;
        weights.set_conv_channels_last(tuning.channels_last);
        Self::from_weights(&weights)
    }

    /// Builds from tensors already in memory (either naming); `source` only labels errors.
    pub fn from_tensors(source: &str, tensors: Vec<(String, Tensor)>, opts: &WanLoadOptions) -> Result<Self, ModelError> {
        let mut weights = weights::from_tensors(&PathBuf::from(source), tensors, opts.device, opts.kind)?;
        weights.set_conv_channels_last(WanTuning::default().channels_last);
        Self::from_weights(&weights)
    }

    pub fn from_weights(weights: &Weights) -> Result<Self, ModelError> {
        let _guard = tch::no_grad_guard();
        let config = WanConfig::detect(weights)?;
        let root = weights.root();
        let z = config.z_dim;
        let mut vae = Self {
            encoder: Encoder::new(&root.pp("encoder"), &config)?,
            decoder: Decoder::new(&root.pp("decoder"), &config)?,
            quant_conv: Conv3d::new(&root.pp("quant_conv"), &ConvSpec::pointwise(2 * z, 2 * z))?,
            post_quant_conv: Conv3d::new(&root.pp("post_quant_conv"), &ConvSpec::pointwise(z, z))?,
            device: weights.device(),
            kind: weights.kind(),
            tuning: WanTuning { channels_last: weights.conv_channels_last() },
            config,
            weight_bytes: 0,
        };
        weights.ensure_all_used()?;
        vae.weight_bytes = weights.handed_bytes();
        Ok(vae)
    }

    pub fn config(&self) -> &WanConfig {
        &self.config
    }

    pub fn device(&self) -> Device {
        self.device
    }

    /// Bytes of the weights as held (at the compute dtype, on the device).
    pub fn weight_bytes(&self) -> u64 {
        self.weight_bytes
    }

    pub fn kind(&self) -> Kind {
        self.kind
    }

    pub fn tuning(&self) -> WanTuning {
        self.tuning
    }

    /// Gives network input the activation layout of the tuning; everything downstream keeps it.
    pub(super) fn to_activation_layout(&self, x: &Tensor) -> Result<Tensor, ModelError> {
        if self.tuning.channels_last {
            layout::to_channels_last(x)
        } else {
            Ok(x.shallow_clone())
        }
    }

    /// `[B, 3, T, H, W]` in [-1, 1] → raw `mu` `[B, z, 1 + (T−1)/4, H/s, W/s]` (not normalised), s = 8 (2.1) or 16 (2.2).
    /// Runs as a stream (first frame, then groups of 4 frames, as many per call as
    /// [`WHOLE_CLIP_CHUNK_PIXELS`] allows), so memory does not grow with T; frames beyond `1 + 4k`
    /// are dropped, as in the original.
    pub fn encode(&self, video: &Tensor) -> Result<Tensor, ModelError> {
        let size = video.size();
        let frames = size.get(2).copied().unwrap_or(0);
        if frames < 1 || size.len() != 5 {
            return Err(self.bad_input(format!("a video of shape {size:?} (expected [B, {}, T≥1, H, W])", self.config.image_channels)));
        }
        let step = self.config.temporal_factor();
        let used = self.config.pixel_frames(self.config.latent_frames(frames));
        let groups_per_call = (WHOLE_CLIP_CHUNK_PIXELS / (step * size[3] * size[4]).max(1)).max(1);
        let mut stream = self.encoder_stream();
        let mut latents = Vec::new();
        let mut start = 0;
        while start < used {
            let len = if start == 0 { 1 } else { (groups_per_call * step).min(used - start) };
            latents.extend(stream.push(&video.f_narrow(2, start, len)?)?);
            start += len;
        }
        Ok(Tensor::f_cat(&latents, 2)?)
    }

    /// Whole latent `[B, z, T', h, w]` → video `[B, 3, 1 + 4(T'−1), s·h, s·w]` clamped to [-1, 1],
    /// decoded as a stream: the first latent frame, then as many per call as [`WHOLE_CLIP_CHUNK_PIXELS`] allows.
    pub fn decode(&self, latent: &Tensor) -> Result<Tensor, ModelError> {
        let _guard = tch::no_grad_guard();
        Ok(self.decode_unclamped(latent)?.f_clamp(-1.0, 1.0)?)
    }

    /// [`WanVae::decode`] without the final clamp.
    pub fn decode_unclamped(&self, latent: &Tensor) -> Result<Tensor, ModelError> {
        let size = latent.size();
        let frames = size.get(2).copied().unwrap_or(0);
        if frames < 1 || size.len() != 5 {
            return Err(self.bad_input(format!("a latent of shape {size:?} (expected [B, {}, T≥1, h, w])", self.config.z_dim)));
        }
        let (step, spatial) = (self.config.temporal_factor(), self.config.spatial_factor());
        let latents_per_call = (WHOLE_CLIP_CHUNK_PIXELS / (step * size[3] * spatial * size[4] * spatial).max(1)).max(1);
        let mut stream = self.decoder_stream().unclamped();
        let mut chunks = Vec::new();
        let mut start = 0;
        while start < frames {
            let len = if start == 0 { 1 } else { latents_per_call.min(frames - start) };
            chunks.push(stream.push(&latent.f_narrow(2, start, len)?)?);
            start += len;
        }
        Ok(Tensor::f_cat(&chunks, 2)?)
    }

    pub fn encoder_stream(&self) -> EncodeStream<'_> {
        EncodeStream::new(self)
    }

    pub fn decoder_stream(&self) -> DecodeStream<'_> {
        DecodeStream::new(self)
    }

    pub(super) fn bad_input(&self, what: String) -> ModelError {
        ModelError::Unsupported { model: "wan".into(), what }
    }
}
