//! A whole TAEHV model: loading, and the original's `encode_video` / `decode_video` on whole clips
//! (`[N, T, C, H, W]`, pixels in [0, 1]), in its parallel or frame-by-frame mode.
use std::path::Path;

use tch::{Device, Kind, Tensor};

use super::chain::{Chain, Memory, Pace, Run};
use super::config::{DecoderReduction, TaehvConfig};
use super::naming::{self, LatentSpace};
use super::weights::{self, Weights};
use super::{decoder, encoder};
use crate::models::nn::weights::HeldBytes;
use crate::models::stop::StopFlag;
use crate::models::ModelError;

#[derive(Debug, Clone, Copy)]
pub struct TaehvLoadOptions {
    pub device: Device,
    /// Compute kind; the checkpoint (fp32, fp16 or bf16) is cast to it.
    pub kind: Kind,
    /// A preview build with fewer decoder upscales; the default keeps the checkpoint's.
    pub reduction: DecoderReduction,
    /// Convs in NHWC (torch's `channels_last`): on this box's CPU 1.6× faster in f32 and 5× in bf16 at
    /// TAEHV's full-resolution widths (docs/benchmarks.md); the values differ only by rounding.
    pub channels_last: bool,
}

impl Default for TaehvLoadOptions {
    fn default() -> Self {
        Self { device: Device::Cpu, kind: Kind::Float, reduction: DecoderReduction::default(), channels_last: true }
    }
}

#[derive(Debug)]
pub struct Taehv {
    pub(super) config: TaehvConfig,
    pub(super) encoder: Chain,
    pub(super) decoder: Chain,
    device: Device,
    kind: Kind,
    held: HeldBytes,
    parameters: i64,
}

/// Named tensors of one traced run: `<chain>.<index>.<Class>.{in_x,in_past,out}`, each `[N, T, C, H, W]`.
pub type Trace = Vec<(String, Tensor)>;

impl Taehv {
    /// A `.pth` or safetensors checkpoint; its file name picks the latent space (and is checked
    /// against the shapes where the authors' loader knows it).
    pub fn load(path: &Path, opts: &TaehvLoadOptions) -> Result<Self, ModelError> {
        std::fs::metadata(path).map_err(|source| ModelError::Io { path: path.to_path_buf(), source })?;
        let mut weights = weights::read(path, opts.device, opts.kind)?;
        weights.set_conv_channels_last(opts.channels_last);
        Self::from_weights(&weights, &naming::file_name(path), &opts.reduction)
    }

    /// Tensors already in memory; `source`'s file name is read as the checkpoint's name.
    pub fn from_tensors(source: &Path, tensors: Vec<(String, Tensor)>, opts: &TaehvLoadOptions) -> Result<Self, ModelError> {
        let mut weights = weights::from_tensors(source, tensors, opts.device, opts.kind)?;
        weights.set_conv_channels_last(opts.channels_last);
        Self::from_weights(&weights, &naming::file_name(source), &opts.reduction)
    }

    fn from_weights(weights: &Weights, file_name: &str, reduction: &DecoderReduction) -> Result<Self, ModelError> {
        let _guard = tch::no_grad_guard();
        let config = TaehvConfig::detect(weights, file_name, reduction)?;
        let root = weights.root();
        let encoder = encoder::build(&root.pp("encoder"), &config)?;
        let decoder = decoder::build(&root.pp("decoder"), &config)?;
        weights.ensure_all_used()?;
        let parameters = weights.keys().map(|key| weights.shape(key).map_or(0, |shape| shape.iter().product::<i64>())).sum();
        Ok(Self { config, encoder, decoder, device: weights.device(), kind: weights.kind(), held: weights.held_bytes(), parameters })
    }

    pub fn config(&self) -> &TaehvConfig {
        &self.config
    }

    pub fn latent_space(&self) -> LatentSpace {
        self.config.latent_space
    }

    pub fn device(&self) -> Device {
        self.device
    }

    pub fn kind(&self) -> Kind {
        self.kind
    }

    pub fn held_bytes(&self) -> HeldBytes {
        self.held
    }

    /// Elements in the checkpoint's tensors (all of which the model uses).
    pub fn parameter_count(&self) -> i64 {
        self.parameters
    }

    /// Latents `[N, T, C, h, w]` → frames `[N, t_upscale·T − frames_to_trim, 3, H, W]` in [0, 1].
    pub fn decode_video(&self, latent: &Tensor, parallel: bool) -> Result<Tensor, ModelError> {
        self.decode_run(latent, pace(parallel), None)
    }

    /// Frames `[N, F, 3, H, W]` in [0, 1] (H, W multiples of the patch size) → latents
    /// `[N, ceil(F / t_downscale), C, H/8p, W/8p]`; the end is padded with copies of the last frame.
    pub fn encode_video(&self, frames: &Tensor, parallel: bool) -> Result<Tensor, ModelError> {
        self.encode_run(frames, pace(parallel), None)
    }

    /// [`Taehv::decode_video`] in parallel mode, with every traced layer's inputs and output.
    pub fn decode_video_traced(&self, latent: &Tensor) -> Result<(Tensor, Trace), ModelError> {
        let mut trace = Trace::new();
        let out = self.decode_run(latent, Pace::Chunk, Some(&mut trace))?;
        Ok((out, trace))
    }

    /// [`Taehv::encode_video`] in parallel mode, with every traced layer's inputs and output.
    pub fn encode_video_traced(&self, frames: &Tensor) -> Result<(Tensor, Trace), ModelError> {
        let mut trace = Trace::new();
        let out = self.encode_run(frames, Pace::Chunk, Some(&mut trace))?;
        Ok((out, trace))
    }

    fn decode_run(&self, latent: &Tensor, pace: Pace, trace: Option<&mut Trace>) -> Result<Tensor, ModelError> {
        let _guard = tch::no_grad_guard();
        let latent = self.checked_latent(latent)?;
        let mut memory = self.decoder.new_memory();
        let raw = self.decoder_pass(&latent, &mut memory, pace, &StopFlag::never(), trace)?;
        let trim = self.config.frames_to_trim().min(raw.size()[1]);
        Ok(raw.f_narrow(1, trim, raw.size()[1] - trim)?)
    }

    fn encode_run(&self, frames: &Tensor, pace: Pace, trace: Option<&mut Trace>) -> Result<Tensor, ModelError> {
        let _guard = tch::no_grad_guard();
        let x = self.patches(&self.checked_frames(frames)?)?;
        let count = x.size()[1];
        let padding = self.config.latent_frames(count) * self.config.t_downscale() - count;
        let x = if padding > 0 { Tensor::f_cat(&[&x, &x.f_narrow(1, count - 1, 1)?.f_repeat([1, padding, 1, 1, 1])?], 1)? } else { x };
        let mut memory = self.encoder.new_memory();
        let latent = self.encoder.run(&x, &mut Run { memory: &mut memory, pace, stop: &StopFlag::never(), trace })?;
        latent.ok_or_else(|| self.bad_input("a clip that completes no latent frame".into()))
    }

    /// Latents through the decoder with `memory`: the raw frames (nothing trimmed), clamped to [0, 1]
    /// and unfolded from their patches.
    pub(super) fn decoder_pass(&self, latent: &Tensor, memory: &mut Memory, pace: Pace, stop: &StopFlag, trace: Option<&mut Trace>) -> Result<Tensor, ModelError> {
        let raw = self.decoder.run(latent, &mut Run { memory, pace, stop, trace })?;
        let raw = raw.ok_or_else(|| self.bad_input("latents that decode to no frame".into()))?.f_clamp(0.0, 1.0)?;
        let p = self.config.patch_size;
        if p == 1 {
            return Ok(raw);
        }
        let [n, t, c, h, w] = five(&raw)?;
        Ok(raw.f_reshape([n * t, c, h, w])?.f_pixel_shuffle(p)?.f_reshape([n, t, 3, h * p, w * p])?)
    }

    /// Frames `[N, T, 3, H, W]` → `[N, T, 3p², H/p, W/p]` (the original's `pixel_unshuffle`).
    pub(super) fn patches(&self, frames: &Tensor) -> Result<Tensor, ModelError> {
        let p = self.config.patch_size;
        if p == 1 {
            return Ok(frames.shallow_clone());
        }
        let [n, t, c, h, w] = five(frames)?;
        Ok(frames.f_reshape([n * t, c, h, w])?.f_pixel_unshuffle(p)?.f_reshape([n, t, c * p * p, h / p, w / p])?)
    }

    /// `[N, T ≥ 1, C, h, w]` on the model's device and kind.
    pub(super) fn checked_latent(&self, latent: &Tensor) -> Result<Tensor, ModelError> {
        let c = self.config.latent_channels;
        match latent.size().as_slice() {
            &[n, t, channels, h, w] if n > 0 && t > 0 && channels == c && h > 0 && w > 0 => Ok(latent.f_to_device(self.device)?.f_to_kind(self.kind)?),
            other => Err(self.bad_input(format!("latents of shape {other:?} (expected [N, T, {c}, h, w], NTCHW)"))),
        }
    }

    /// `[N, T ≥ 1, 3, H, W]`, H and W multiples of the patch size, on the model's device and kind.
    pub(super) fn checked_frames(&self, frames: &Tensor) -> Result<Tensor, ModelError> {
        let p = self.config.patch_size;
        match frames.size().as_slice() {
            &[n, t, 3, h, w] if n > 0 && t > 0 && h > 0 && w > 0 && h % p == 0 && w % p == 0 => Ok(frames.f_to_device(self.device)?.f_to_kind(self.kind)?),
            other => Err(self.bad_input(format!("frames of shape {other:?} (expected [N, T, 3, H, W], NTCHW, H and W multiples of {p})"))),
        }
    }

    pub(super) fn bad_input(&self, what: String) -> ModelError {
        ModelError::Unsupported { model: "taehv".into(), what }
    }
}

pub(super) fn pace(parallel: bool) -> Pace {
    if parallel { Pace::Chunk } else { Pace::FrameByFrame }
}

fn five(x: &Tensor) -> Result<[i64; 5], ModelError> {
    match x.size().as_slice() {
        &[n, t, c, h, w] => Ok([n, t, c, h, w]),
        other => Err(ModelError::Unsupported { model: "taehv".into(), what: format!("a tensor of shape {other:?} (expected 5-D)") }),
    }
}
