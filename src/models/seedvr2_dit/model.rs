//! The whole DiT: patch/text/time embeddings, the blocks and the output head. One sample per call, as
//! the original inference does (its 3B mixes up text rows across samples of a batch, README §1.10.2).
use std::path::Path;

use serde_json::Value;
use tch::{Device, Kind, Tensor};

use super::attention::SampleLayout;
use super::block::{BlockEmbedding, Tokens};
use super::config::{DitConfig, DitVariant, PATCH};
use super::embed::{unpatchify, PatchIn, TimeEmbedding};
use super::layers::{AdaVectors, EmbeddingSlice, Linear, RmsNorm};
use super::swap::{BlockPlacement, Blocks};
use super::trace::Trace;
use super::window::GridPart;
use crate::models::nn::weights::{WeightPath, Weights};
use crate::models::stop::StopFlag;
use crate::models::ModelError;

#[derive(Debug, Clone, Copy)]
pub struct DitLoadOptions {
    pub device: Device,
    /// Compute dtype; fp8 checkpoints keep their linear weights in fp8 and up-cast per layer.
    pub kind: Kind,
    /// Round q, k and v through bf16 before attention, as the shipped original does.
    pub qkv_bf16: bool,
    pub placement: BlockPlacement,
}

impl Default for DitLoadOptions {
    fn default() -> Self {
        Self { device: Device::Cpu, kind: Kind::Float, qkv_bf16: false, placement: BlockPlacement::Resident }
    }
}

/// One sample: its latent grid's tokens and the text it is conditioned on.
pub struct DitInput<'a> {
    /// `[T·H·W, vid_in_channels]` in `(t, h, w)` order: noise, condition latent, mask.
    pub vid: &'a Tensor,
    /// `(T, H, W)` of the latent grid (H and W even).
    pub grid: [i64; 3],
    /// `[L, txt_in_dim]` text embeddings.
    pub txt: &'a Tensor,
    pub timestep: f64,
}

/// Where a sample sits when it is a spatial tile of a larger latent grid, in latent cells (even).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TileOf {
    /// `(T, H, W)` of the whole latent grid.
    pub whole: [i64; 3],
    /// `[row, column]` of the tile's top left in it.
    pub offset: [i64; 2],
}

enum OutputHead {
    /// RMS norm, then a modulation that reuses the blocks' ATTENTION shift and scale of the embedding:
    /// the original caches the embedding per (layer index, stream) and its output ada's only layer has
    /// index 0 on stream "vid", the blocks' attention key. Kept, since it changes every output.
    ThreeB { norm: RmsNorm, ada: AdaVectors, proj: Linear },
    SevenB { proj: Linear },
}

pub struct SeedVr2Dit {
    config: DitConfig,
    vid_in: PatchIn,
    txt_in: Linear,
    emb_in: TimeEmbedding,
    blocks: Blocks,
    head: OutputHead,
    device: Device,
    kind: Kind,
    weight_bytes: u64,
}

impl SeedVr2Dit {
    pub fn load(path: &Path, opts: &DitLoadOptions) -> Result<Self, ModelError> {
        std::fs::metadata(path).map_err(|source| ModelError::Io { path: path.to_path_buf(), source })?;
        let metadata = crate::models::formats::checkpoint::config_metadata(path);
        Self::from_weights(Weights::open(path, opts.device, opts.kind)?, metadata.as_ref(), opts)
    }

    pub fn from_tensors(source: &Path, tensors: Vec<(String, Tensor)>, metadata_config: Option<&Value>, opts: &DitLoadOptions) -> Result<Self, ModelError> {
        Self::from_weights(Weights::new(source, tensors.into_iter().collect(), opts.device, opts.kind), metadata_config, opts)
    }

    fn from_weights(weights: Weights, metadata_config: Option<&Value>, opts: &DitLoadOptions) -> Result<Self, ModelError> {
        let config = DitConfig::detect(&weights, metadata_config)?;
        let _guard = tch::no_grad_guard();
        let blocks = Blocks::build(&weights, &config, opts.placement, opts.qkv_bf16.then_some(Kind::BFloat16))?;
        let mut model = Self::build(&weights.root(), config, blocks, opts)?;
        weights.ensure_all_used()?;
        // Swapped blocks visit the device one at a time.
        model.weight_bytes = weights.handed_bytes() + model.blocks.largest_swapped_bytes();
        Ok(model)
    }

    fn build(root: &WeightPath, config: DitConfig, blocks: Blocks, opts: &DitLoadOptions) -> Result<Self, ModelError> {
        let head_proj = Linear::new(&root.pp("vid_out").pp("proj"), config.dim, config.patch_channels_out(), true)?;
        let head = match config.variant {
            DitVariant::ThreeB => OutputHead::ThreeB {
                norm: RmsNorm::new(&root.pp("vid_out_norm"), config.dim)?,
                ada: AdaVectors::new(&root.pp("vid_out_ada"), "out", config.dim, false)?,
                proj: head_proj,
            },
            DitVariant::SevenB => OutputHead::SevenB { proj: head_proj },
        };
        Ok(Self {
            vid_in: PatchIn::new(&root.pp("vid_in"), &config)?,
            txt_in: Linear::new(&root.pp("txt_in"), config.txt_in_dim, config.dim, true)?,
            emb_in: TimeEmbedding::new(&root.pp("emb_in"), &config)?,
            blocks,
            head,
            device: opts.device,
            kind: opts.kind,
            weight_bytes: 0,
            config,
        })
    }

    pub fn config(&self) -> &DitConfig {
        &self.config
    }

    pub fn device(&self) -> Device {
        self.device
    }

    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// Bytes the weights take on the device at most (fp8 checkpoints: their linear weights at one byte
    /// each; swapped blocks: the largest one).
    pub fn weight_bytes(&self) -> u64 {
        self.weight_bytes
    }

    pub fn placement(&self) -> BlockPlacement {
        self.blocks.placement()
    }

    /// Bytes of the blocks kept on the host (0 when resident).
    pub fn host_block_bytes(&self) -> u64 {
        self.blocks.host_bytes()
    }

    /// The velocity prediction `[T·H·W, vid_out_channels]`, in the input's token order.
    pub fn forward(&self, input: &DitInput) -> Result<Tensor, ModelError> {
        self.forward_traced(input, None)
    }

    /// [`Self::forward`], asking `stop` before each block: a cancel ends the call within one block
    /// (`ModelError::Stopped`), not after all of them (a 720p batch's DiT call is minutes of CPU).
    pub fn forward_until(&self, input: &DitInput, stop: &StopFlag) -> Result<Tensor, ModelError> {
        self.run(input, None, None, stop)
    }

    pub fn forward_traced(&self, input: &DitInput, trace: Option<&mut Trace>) -> Result<Tensor, ModelError> {
        self.run(input, None, trace, &StopFlag::never())
    }

    /// [`Self::forward`] on a spatial tile of a larger grid: the attention windows are the whole grid's
    /// cut to the tile, so the tile differs from the untiled run only where a window or the text's mean
    /// over windows reaches past its edges.
    pub fn forward_tile(&self, input: &DitInput, tile_of: &TileOf) -> Result<Tensor, ModelError> {
        self.forward_tile_until(input, tile_of, &StopFlag::never())
    }

    /// [`Self::forward_tile`], asking `stop` before each block as [`Self::forward_until`].
    pub fn forward_tile_until(&self, input: &DitInput, tile_of: &TileOf, stop: &StopFlag) -> Result<Tensor, ModelError> {
        let (whole, [row, col]) = (tile_of.whole, tile_of.offset);
        let [t, h, w] = input.grid;
        let fits = whole[0] == t && row >= 0 && col >= 0 && row + h <= whole[1] && col + w <= whole[2];
        if !fits || row % PATCH[1] != 0 || col % PATCH[2] != 0 || whole[1] % PATCH[1] != 0 || whole[2] % PATCH[2] != 0 {
            let model = format!("seedvr2 {} DiT", self.config.variant.as_str());
            return Err(ModelError::Unsupported { model, what: format!("a {t}×{h}×{w} tile at {row},{col} of a {whole:?} grid") });
        }
        let part = GridPart {
            whole: [whole[0] / PATCH[0], whole[1] / PATCH[1], whole[2] / PATCH[2]],
            offset: [0, row / PATCH[1], col / PATCH[2]],
        };
        self.run(input, Some(part), None, stop)
    }

    fn run(&self, input: &DitInput, part_of: Option<GridPart>, mut trace: Option<&mut Trace>, stop: &StopFlag) -> Result<Tensor, ModelError> {
        self.check(input)?;
        let _guard = tch::no_grad_guard();
        let [t, h, w] = input.grid;
        let patched = [t / PATCH[0], h / PATCH[1], w / PATCH[2]];
        let vid = self.vid_in.forward(&input.vid.to_device(self.device).to_kind(self.kind), input.grid);
        let txt = self.txt_in.forward(&input.txt.to_device(self.device).to_kind(self.kind));
        let emb = self.emb_in.forward(input.timestep, self.kind, self.device);
        if let Some(trace) = trace.as_deref_mut() {
            trace.record("vid_in".into(), &vid);
            trace.record("txt_in".into(), &txt);
            trace.record("emb_in".into(), &emb);
        }
        let layout = SampleLayout { grid: patched, text_len: txt.size()[0], part_of };
        let block_emb = BlockEmbedding::of(&emb, self.config.dim);
        let mut tokens = Tokens { vid, txt };
        match &self.blocks {
            Blocks::Resident(blocks) => {
                for block in blocks {
                    stop.check()?;
                    tokens = block.forward(tokens, &block_emb, &layout, &self.config, &mut trace);
                }
            }
            Blocks::Swapped(swapped) => {
                for index in 0..self.config.num_blocks {
                    stop.check()?;
                    let block = swapped.on_device(index, &self.config, self.device, self.kind)?;
                    tokens = block.forward(tokens, &block_emb, &layout, &self.config, &mut trace);
                }
            }
        }
        let out = match &self.head {
            OutputHead::ThreeB { norm, ada, proj } => {
                let normed = norm.forward(&tokens.vid);
                let modulated = ada.with(&EmbeddingSlice::of(&emb, self.config.dim, 0)).modulate(&normed);
                if let Some(trace) = trace.as_deref_mut() {
                    trace.record("vid_out_norm".into(), &normed);
                    trace.record("vid_out_ada".into(), &modulated);
                }
                proj.forward(&modulated)
            }
            OutputHead::SevenB { proj } => proj.forward(&tokens.vid),
        };
        Ok(unpatchify(&out, patched, self.config.vid_out_channels))
    }

    fn check(&self, input: &DitInput) -> Result<(), ModelError> {
        let [t, h, w] = input.grid;
        let cfg = &self.config;
        let unsupported = |what: String| ModelError::Unsupported { model: format!("seedvr2 {} DiT", cfg.variant.as_str()), what };
        if t < 1 || h < 2 || w < 2 || h % PATCH[1] != 0 || w % PATCH[2] != 0 {
            return Err(unsupported(format!("a latent grid of {t}×{h}×{w} (height and width must be even)")));
        }
        if input.vid.size() != [t * h * w, cfg.vid_in_channels] {
            return Err(unsupported(format!("video tokens {:?} for a {t}×{h}×{w} grid of {} channels", input.vid.size(), cfg.vid_in_channels)));
        }
        if input.txt.dim() != 2 || input.txt.size()[1] != cfg.txt_in_dim || input.txt.size()[0] < 1 {
            return Err(unsupported(format!("text embeddings {:?} (expected [L, {}])", input.txt.size(), cfg.txt_in_dim)));
        }
        Ok(())
    }
}
