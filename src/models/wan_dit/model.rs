//! The whole DiT as FlashVSR runs it: loading (configuration from the weights), the text and timestep
//! conditioning computed once per job ([`WanDit::condition`], the original's `init_cross_kv`), and one
//! streaming step through the blocks and the head. The streaming state lives in
//! [`super::stream::WanDitStream`]; the model itself is never changed by a call, so nothing (a cached
//! local mask, as in v1.0) can carry over from one job to the next.
use std::path::Path;

use serde_json::Value;
use tch::{Device, Kind, TchError, Tensor};

use super::block::{Block, BlockStep};
use super::config::{WanDitConfig, FLASHVSR_TIMESTEP};
use super::cross_attention::TextKv;
use super::embed::{unpatchify, PatchEmbedding, TextEmbedding, TimeEmbedding};
use super::layers::{chunk, modulate, LayerNorm};
use super::self_attention::{KvWindows, StepLayout};
use super::trace::{records_intermediates, Trace};
use crate::models::formats::checkpoint::config_metadata;
use crate::models::nn::linear::Linear;
use crate::models::nn::weights::Weights;
use crate::models::stop::StopFlag;
use crate::models::ModelError;

#[derive(Debug, Clone, Copy)]
pub struct WanDitLoadOptions {
    pub device: Device,
    /// Compute dtype; the file's tensors (fp32, fp16, bf16) are cast to it as they are read.
    pub kind: Kind,
}

impl Default for WanDitLoadOptions {
    fn default() -> Self {
        Self { device: Device::Cpu, kind: Kind::Float }
    }
}

/// The job's fixed conditioning: the timestep's (`t`, `t_mod`) and each block's text keys and values.
pub struct Conditioning {
    pub(super) t: Tensor,
    pub(super) t_mod: Tensor,
    pub(super) text: Vec<TextKv>,
}

impl Conditioning {
    /// `t` `[1, dim]`: the timestep embedding (the head's modulation).
    pub fn t(&self) -> &Tensor {
        &self.t
    }

    /// `t_mod` `[1, 6, dim]`: the blocks' modulation.
    pub fn t_mod(&self) -> &Tensor {
        &self.t_mod
    }
}

pub struct WanDit {
    config: WanDitConfig,
    patch_embedding: PatchEmbedding,
    text_embedding: TextEmbedding,
    time_embedding: TimeEmbedding,
    blocks: Vec<Block>,
    head_norm: LayerNorm,
    head: Linear,
    head_modulation: Tensor,
    device: Device,
    kind: Kind,
    weight_bytes: u64,
}

/// One step's input as the blocks take it.
pub(super) struct StepInput<'a> {
    pub latent: &'a Tensor,
    pub lq_tokens: &'a Tensor,
    pub token_grid: [i64; 3],
    pub layout: &'a StepLayout,
}

impl WanDit {
    pub fn load(path: &Path, opts: &WanDitLoadOptions) -> Result<Self, ModelError> {
        std::fs::metadata(path).map_err(|source| ModelError::Io { path: path.to_path_buf(), source })?;
        let metadata = config_metadata(path);
        Self::from_weights(Weights::open(path, opts.device, opts.kind)?, metadata.as_ref(), opts)
    }

    /// Named tensors already in memory; `metadata_config` stands for a file's `config` metadata.
    pub fn from_tensors(source: &Path, tensors: Vec<(String, Tensor)>, metadata_config: Option<&Value>, opts: &WanDitLoadOptions) -> Result<Self, ModelError> {
        Self::from_weights(Weights::new(source, tensors.into_iter().collect(), opts.device, opts.kind), metadata_config, opts)
    }

    fn from_weights(weights: Weights, metadata_config: Option<&Value>, opts: &WanDitLoadOptions) -> Result<Self, ModelError> {
        let config = WanDitConfig::detect(&weights, metadata_config)?;
        let _guard = tch::no_grad_guard();
        let root = weights.root();
        let blocks = (0..config.num_layers).map(|i| Block::new(&root.pp("blocks").pp(i), &config)).collect::<Result<_, _>>()?;
        let out_features = config.out_channels * config.patch_volume();
        let model = Self {
            patch_embedding: PatchEmbedding::new(&root.pp("patch_embedding"), &config)?,
            text_embedding: TextEmbedding::new(&root.pp("text_embedding"), &config)?,
            time_embedding: TimeEmbedding::new(&root, &config)?,
            blocks,
            head_norm: LayerNorm::plain(config.dim),
            head: Linear::new(&root.pp("head").pp("head"), config.dim, out_features, true)?,
            head_modulation: root.pp("head").get("modulation", &[1, 2, config.dim])?,
            device: opts.device,
            kind: opts.kind,
            weight_bytes: weights.handed_bytes(),
            config,
        };
        weights.ensure_all_used()?;
        Ok(model)
    }

    pub fn config(&self) -> &WanDitConfig {
        &self.config
    }

    pub fn device(&self) -> Device {
        self.device
    }

    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// Bytes the weights take on the device.
    pub fn weight_bytes(&self) -> u64 {
        self.weight_bytes
    }

    /// `init_cross_kv`: the text context `[1, tokens, text_dim]` (or `[tokens, text_dim]`) embedded and
    /// turned into every block's keys and values, and the timestep 1000's modulations. Once per job.
    pub fn condition(&self, context: &Tensor) -> Result<Conditioning, ModelError> {
        let _guard = tch::no_grad_guard();
        let context = if context.dim() == 2 { context.f_unsqueeze(0)? } else { context.shallow_clone() };
        let size = context.size();
        if size.len() != 3 || size[0] != 1 || size[1] < 1 || size[2] != self.config.text_dim {
            return Err(self.unsupported(format!("a text context of shape {size:?} (expected [1, tokens, {}])", self.config.text_dim)));
        }
        let text = self.text_embedding.forward(&context.f_to_device(self.device)?.f_to_kind(self.kind)?)?;
        let time = self.time_embedding.forward(FLASHVSR_TIMESTEP, self.kind, self.device)?;
        let text = self.blocks.iter().map(|block| block.text_kv(&text)).collect::<Result<_, _>>()?;
        Ok(Conditioning { t: time.t, t_mod: time.t_mod, text })
    }

    /// The blocks and the head for one step; returns `noise_pred` `[1, out, f, H, W]` and each block's
    /// next cache. `stop` is asked before every block.
    pub(super) fn step(&self, input: &StepInput, cond: &Conditioning, caches: &[Option<KvWindows>], stop: &StopFlag, mut trace: Option<&mut Trace>) -> Result<(Tensor, Vec<KvWindows>), ModelError> {
        let latent = input.latent.f_to_device(self.device)?.f_to_kind(self.kind)?;
        let lq = input.lq_tokens.f_to_device(self.device)?.f_to_kind(self.kind)?;
        let mut x = self.patch_embedding.forward(&latent)?.f_add(&lq)?;
        let mut next = Vec::with_capacity(self.blocks.len());
        for (index, block) in self.blocks.iter().enumerate() {
            stop.check()?;
            let step = BlockStep { layout: input.layout, t_mod: &cond.t_mod, text: &cond.text[index], cache: caches[index].as_ref() };
            let (out, cache) = block.forward(&x, &step, index, &mut trace)?;
            if let (Some(trace), true) = (trace.as_deref_mut(), records_intermediates(index)) {
                trace.record(format!("block{index}.out"), &out);
            }
            x = out;
            next.push(cache);
        }
        Ok((self.head(&x, cond, input.token_grid)?, next))
    }

    /// `head`: `(shift, scale)` = `head.modulation` + `t`, then Linear(LN(x)·(1+scale)+shift), unpatchified.
    fn head(&self, x: &Tensor, cond: &Conditioning, token_grid: [i64; 3]) -> Result<Tensor, TchError> {
        let modulation = self.head_modulation.f_add(&cond.t.f_unsqueeze(1)?)?;
        let normed = modulate(&self.head_norm.forward(x)?, &chunk(&modulation, 0)?, &chunk(&modulation, 1)?)?;
        unpatchify(&self.head.try_forward(&normed)?, token_grid, self.config.patch, self.config.out_channels)
    }

    pub(super) fn unsupported(&self, what: String) -> ModelError {
        ModelError::Unsupported { model: "Wan 2.1 DiT (FlashVSR)".into(), what }
    }
}
