//! The whole Wan VAE: loading, whole-clip encode/decode, and the entry points of the streams.
use std::path::{Path, PathBuf};

use tch::{Device, Kind, Tensor};

use super::config::WanConfig;
use super::conv::{Conv3d, ConvSpec};
use super::decoder::Decoder;
use super::encoder::Encoder;
use super::layout;
use super::weights::{self, Weights};
use crate::models::nn::weights::HeldBytes;
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
    pub(super) config: WanConfig,
    pub(super) encoder: Encoder,
    pub(super) decoder: Decoder,
    /// Original name `conv1`: 1×1×1 on the encoder output, whose first `z_dim` channels are `mu`.
    pub(super) quant_conv: Conv3d,
    /// Original name `conv2`: 1×1×1 before the decoder.
    pub(super) post_quant_conv: Conv3d,
    pub(super) device: Device,
    pub(super) kind: Kind,
    pub(super) tuning: WanTuning,
    /// Bytes of the tensors the modules hold, and of what they made from them at load.
    held: HeldBytes,
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
            held: HeldBytes::default(),
        };
        weights.ensure_all_used()?;
        vae.held = weights.held_bytes();
        Ok(vae)
    }

    pub fn config(&self) -> &WanConfig {
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

    pub(super) fn bad_input(&self, what: String) -> ModelError {
        ModelError::Unsupported { model: "wan".into(), what }
    }
}
