//! How a restoration batch fits the working memory (see `tiling::dit_memory`).
use super::batches::BatchShape;
use super::settings::RestoreSettings;
use super::vae::StreamedVae;
use crate::models::restore::prepare::FrameGeometry;
use crate::config::BlockSwap;
use crate::executor::context::Executor;
use crate::models::restore::restorer::{Restorer, RestorerFiles};
use crate::models::seedvr2_dit::BlockPlacement;
use crate::tiling::dit_memory::{batch_memory, longest_fitting_batch, BatchMemory, DitShape, VaeStageBytes};
use crate::tiling::dit_tiles::{plan_dit_tiles, DitTiles};
use crate::tiling::memory::TiledOp;

/// How the batch fits the working memory: the batch (shortened to fit when the job did not name one),
/// the DiT's spatial tiles when even that batch's latent does not fit it in one piece, and the estimates
/// behind them (the DiT's for one tile when tiled), for the plan.
pub struct MemoryPlan {
    pub batch: BatchShape,
    pub dit_tiles: Option<DitTiles>,
    pub budget_bytes: Option<u64>,
    pub estimate: BatchMemory,
    pub fits: Option<bool>,
    pub dit_weight_bytes: u64,
}

/// What the plan is made from.
pub struct MemoryInputs<'a> {
    pub restorer: &'a Restorer,
    /// The VAE streams as the job will run them: their plans give the VAE stages' memory.
    pub vae: &'a StreamedVae<'a>,
    pub settings: &'a RestoreSettings,
    pub geometry: &'a FrameGeometry,
    /// Working memory in MiB (0 = none).
    pub budget_mib: u64,
    /// The DiT's own cap in MiB when lower (0 = `budget_mib`).
    pub dit_budget_mib: u64,
}

pub fn memory_plan(inputs: &MemoryInputs) -> MemoryPlan {
    let MemoryInputs { restorer, vae, settings, geometry, budget_mib, dit_budget_mib } = *inputs;
    let kind = restorer.dit.kind();
    let dit = restorer.dit.config();
    let shape = DitShape {
        dim: dit.dim,
        inner: dit.heads * dit.head_dim,
        mlp_hidden: dit.mlp_hidden,
        text_len: restorer.text.size()[0],
        element_bytes: kind.elt_size_in_bytes() as i64,
    };
    // The VAE stages stream and tile to their budget, so what they need is what their plan estimates.
    let factor = restorer.vae.spatial_factor();
    let vae_bytes = |frames: i64| {
        let latent = [(frames - 1) / restorer.vae.temporal_factor() + 1, geometry.model_h() / factor, geometry.model_w() / factor];
        let planned = |op| vae.plan_for(op, latent).0.estimated_peak_bytes as f64;
        VaeStageBytes { encode: planned(TiledOp::Encode), decode: planned(TiledOp::Decode) }
    };
    let estimate = |frames| batch_memory(vae_bytes(frames), &shape, frames, geometry.model_h(), geometry.model_w());
    let dit_weight_bytes = restorer.dit.weight_bytes();
    let (batch, budget_bytes) = if budget_mib == 0 {
        (settings.batch, None)
    } else if settings.batch_given {
        (settings.batch, Some(budget_mib << 20))
    } else {
        (settings.with_batch_frames(longest_fitting_batch(settings.batch.frames, budget_mib << 20, estimate).0), Some(budget_mib << 20))
    };
    let mut estimate = estimate(batch.frames);
    // The batch is as short as it goes (or the job's own): a DiT that still does not fit runs on tiles.
    let dit_budget_bytes = match (budget_mib, dit_budget_mib) {
        (0, 0) => None,
        (0, cap) | (cap, 0) => Some(cap << 20),
        (budget, cap) => Some(budget.min(cap) << 20),
    };
    let dit_bytes = |[rows, cols]: [i64; 2]| batch_memory(VaeStageBytes::default(), &shape, batch.frames, rows * factor, cols * factor).dit_bytes;
    let (latent_h, latent_w) = (geometry.model_h() / factor, geometry.model_w() / factor);
    let dit_tiles = dit_budget_bytes.and_then(|cap| plan_dit_tiles(latent_h, latent_w, |tile| dit_bytes(tile) <= cap as f64));
    if let Some(tiles) = &dit_tiles {
        estimate.dit_bytes = dit_bytes(tiles.tile);
    }
    let fits = budget_bytes.map(|budget| estimate.peak_bytes() <= budget as f64);
    MemoryPlan { batch, dit_tiles, budget_bytes, fits, estimate, dit_weight_bytes }
}

/// Where the DiT's blocks live: as configured, and under `auto` on the host only on CUDA when the
/// weights (the file's size stands for them: fp8 stays fp8, fp16 loads as bf16) and the margin left for
/// a batch do not fit the free memory. A restorer already loaded keeps its placement under `auto`, since
/// its own weights are what makes the free memory look short.
pub fn block_placement(exec: &Executor, dit: &str, files: &RestorerFiles, kind: tch::Kind) -> BlockPlacement {
    match exec.config.dit_block_swap {
        BlockSwap::Always => BlockPlacement::Swapped,
        BlockSwap::Never => BlockPlacement::Resident,
        BlockSwap::Auto => {
            if let Some(loaded) = exec.models.restorer_if_loaded(dit, files, kind) {
                return loaded.dit.placement();
            }
            let Some((free, _)) = crate::device::cuda::memory_for_this_process(exec.device) else { return BlockPlacement::Resident };
            let weights = std::fs::metadata(&files.dit).map(|m| m.len()).unwrap_or(0);
            if weights + (exec.config.device_memory_margin_mib << 20) > free {
                BlockPlacement::Swapped
            } else {
                BlockPlacement::Resident
            }
        }
    }
}
