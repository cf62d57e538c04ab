//! FlashVSR's TCDecoder: the TAEHV base decoder (`decoder.N`) whose input is the LR video, folded
//! `t_upscale × 8 × 8` per latent cell, in front of the latent, with a bias-free 3×3 conv + ReLU after its
//! first and its last ReLU, and no clamp on its output. Its memory carries across calls, so a video
//! decoded in pieces equals the whole (the first call drops the frames before the first input frame).
use std::path::Path;

use tch::{Device, Kind, Tensor};

use super::blocks::{Conv2d, ConvSpec, MemBlock, TGrow};
use super::chain::{Chain, Layer, Memory, Pace, Run};
use super::tc_config::{TcDecoderConfig, TC_FIRST_CONV, TC_GROWS, TC_IDENTITY_CONVS, TC_OUT, TC_SPATIAL_FACTOR, TC_STAGE_CONVS, TC_STAGE_MEMBLOCKS};
use super::weights::{self, WeightPath, Weights};
use crate::models::nn::weights::HeldBytes;
use crate::models::stop::StopFlag;
use crate::models::ModelError;

const MEM_BLOCKS_PER_STAGE: usize = 3;

#[derive(Debug, Clone, Copy)]
pub struct TcDecoderLoadOptions {
    pub device: Device,
    /// Compute kind; the checkpoint (fp32, fp16 or bf16) is cast to it.
    pub kind: Kind,
}

impl Default for TcDecoderLoadOptions {
    fn default() -> Self {
        Self { device: Device::Cpu, kind: Kind::Float }
    }
}

#[derive(Debug)]
pub struct TcDecoder {
    pub(super) config: TcDecoderConfig,
    pub(super) chain: Chain,
    device: Device,
    kind: Kind,
    held: HeldBytes,
    parameters: i64,
}

impl TcDecoder {
    /// `TCDecoder.ckpt` (a torch pickle) or a safetensors conversion of it.
    pub fn load(path: &Path, opts: &TcDecoderLoadOptions) -> Result<Self, ModelError> {
        std::fs::metadata(path).map_err(|source| ModelError::Io { path: path.to_path_buf(), source })?;
        Self::from_weights(&weights::read(path, opts.device, opts.kind)?)
    }

    /// Tensors already in memory; `source` names them in errors.
    pub fn from_tensors(source: &Path, tensors: Vec<(String, Tensor)>, opts: &TcDecoderLoadOptions) -> Result<Self, ModelError> {
        Self::from_weights(&weights::from_tensors(source, tensors, opts.device, opts.kind)?)
    }

    fn from_weights(weights: &Weights) -> Result<Self, ModelError> {
        let _guard = tch::no_grad_guard();
        let config = TcDecoderConfig::detect(weights)?;
        let chain = Chain::new("decoder", layers(&weights.root().pp("decoder"), &config)?)?;
        weights.ensure_all_used()?;
        let parameters = weights.keys().map(|key| weights.shape(key).map_or(0, |shape| shape.iter().product::<i64>())).sum();
        Ok(Self { config, chain, device: weights.device(), kind: weights.kind(), held: weights.held_bytes(), parameters })
    }

    pub fn config(&self) -> &TcDecoderConfig {
        &self.config
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

    /// Latents `[N, t, C, h, w]` and their condition `[N, 3, T', 8h, 8w]` through the decoder with `memory`:
    /// the raw frames `[N, t_upscale·t, 3, 8h, 8w]`, nothing trimmed, nothing clamped.
    pub(super) fn decoder_pass(&self, latents: &Tensor, cond: &Tensor, memory: &mut Memory, pace: Pace, stop: &StopFlag) -> Result<Tensor, ModelError> {
        let latents = self.checked_latents(latents)?;
        let folded = self.folded_condition(cond, &latents)?;
        let x = Tensor::f_cat(&[folded, latents], 2)?;
        let raw = self.chain.run(&x, &mut Run { memory, pace, stop, trace: None })?;
        raw.ok_or_else(|| self.bad_input("latents that decode to no frame".into()))
    }

    /// `[N, t ≥ 1, C, h, w]` on the model's device and kind.
    fn checked_latents(&self, latents: &Tensor) -> Result<Tensor, ModelError> {
        let c = self.config.latent_channels;
        match latents.size().as_slice() {
            &[n, t, channels, h, w] if n > 0 && t > 0 && channels == c && h > 0 && w > 0 => Ok(latents.f_to_device(self.device)?.f_to_kind(self.kind)?),
            other => Err(self.bad_input(format!("latents of shape {other:?} (expected [N, T, {c}, h, w], NTCHW)"))),
        }
    }

    /// The condition `[N, 3, T', 8h, 8w]` (BCTHW, as the original takes it) → `[N, t, condition_channels,
    /// h, w]`: when T' is not a whole number of groups, copies of its first frame go in front (as the
    /// original pads each call), then each group of `t_upscale` frames is folded into channels,
    /// `c·(t_up·64) + frame·64 + dy·8 + dx`.
    fn folded_condition(&self, cond: &Tensor, latents: &Tensor) -> Result<Tensor, ModelError> {
        let [n, t, _, h, w] = five(latents)?;
        let (group, s) = (self.config.t_upscale(), TC_SPATIAL_FACTOR);
        let frames = match cond.size().as_slice() {
            &[cn, 3, frames, ch, cw] if cn == n && ch == h * s && cw == w * s && frames > 0 => frames,
            other => {
                return Err(self.bad_input(format!(
                    "a condition of shape {other:?} for latents {:?} (expected [{n}, 3, T', {}, {}], BCTHW)",
                    latents.size(),
                    h * s,
                    w * s
                )))
            }
        };
        let cond = cond.f_to_device(self.device)?.f_to_kind(self.kind)?;
        let missing = (group - frames % group) % group;
        let cond = match missing {
            0 => cond,
            _ => Tensor::f_cat(&[cond.f_narrow(2, 0, 1)?.f_repeat([1, 1, missing, 1, 1])?, cond], 2)?,
        };
        if (frames + missing) / group != t {
            return Err(self.bad_input(format!("{frames} condition frames for {t} latent frames (expected {} or fewer by up to {})", t * group, group - 1)));
        }
        let grouped = cond.f_reshape([n, 3, t, group, h, s, w, s])?.f_permute([0, 2, 1, 3, 5, 7, 4, 6])?;
        Ok(grouped.f_reshape([n, t, self.config.condition_channels, h, w])?)
    }

    pub(super) fn bad_input(&self, what: String) -> ModelError {
        ModelError::Unsupported { model: "tcdecoder".into(), what }
    }
}

fn layers(path: &WeightPath, config: &TcDecoderConfig) -> Result<Vec<Layer>, ModelError> {
    let n = config.widths;
    let first = ConvSpec::conv3(config.latent_channels + config.condition_channels, n[0]);
    let mut layers = vec![Layer::Clamp, Layer::Conv(Conv2d::new(&path.pp(TC_FIRST_CONV), first)?), Layer::Relu];
    layers.push(identity_conv(path, TC_IDENTITY_CONVS[0], n[0])?);
    layers.push(Layer::Relu);
    for stage in 0..3 {
        debug_assert_eq!(layers.len(), TC_STAGE_MEMBLOCKS[stage]);
        for _ in 0..MEM_BLOCKS_PER_STAGE {
            layers.push(Layer::Mem(MemBlock::new(&path.pp(layers.len()), n[stage])?));
        }
        layers.push(Layer::Upsample(2));
        let stride = if config.time_upscale[stage] { 2 } else { 1 };
        layers.push(Layer::Grow(TGrow::new(&path.pp(TC_GROWS[stage]), n[stage], stride, stride)?));
        layers.push(Layer::Conv(Conv2d::new(&path.pp(TC_STAGE_CONVS[stage]), ConvSpec::conv3(n[stage], n[stage + 1]).without_bias())?));
    }
    layers.push(Layer::Relu);
    layers.push(identity_conv(path, TC_IDENTITY_CONVS[1], n[3])?);
    layers.push(Layer::Relu);
    debug_assert_eq!(layers.len(), TC_OUT);
    layers.push(Layer::Conv(Conv2d::new(&path.pp(TC_OUT), ConvSpec::conv3(n[3], 3))?));
    Ok(layers)
}

/// The original's `IdentityConv2d`: 3×3, width kept, no bias.
fn identity_conv(path: &WeightPath, index: usize, n: i64) -> Result<Layer, ModelError> {
    Ok(Layer::Conv(Conv2d::new(&path.pp(index), ConvSpec::conv3(n, n).without_bias())?))
}

fn five(x: &Tensor) -> Result<[i64; 5], ModelError> {
    match x.size().as_slice() {
        &[n, t, c, h, w] => Ok([n, t, c, h, w]),
        other => Err(ModelError::Unsupported { model: "tcdecoder".into(), what: format!("a tensor of shape {other:?} (expected 5-D)") }),
    }
}
