//! How a restoration batch fits the working memory (see `tiling::dit_memory`).
use super::batches::BatchShape;
use super::settings::RestoreSettings;
use super::vae::StreamedVae;
use crate::models::restore::prepare::FrameGeometry;
use crate::config::BlockSwap;
use crate::executor::Executor;
use crate::models::restore::restorer::{Restorer, RestorerFiles};
use crate::models::seedvr2_dit::BlockPlacement;
use crate::tiling::dit_memory::{batch_memory, longest_fitting_batch, BatchMemory, DitShape, VaeStageBytes};
use crate::tiling::memory::TiledOp;

/// How the batch fits the working memory: the batch (shortened to fit when the job did not name one)
/// and the estimates behind it, for the plan.
pub struct MemoryPlan {
    pub batch: BatchShape,
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
}

pub fn memory_plan(inputs: &MemoryInputs) -> MemoryPlan {
    let MemoryInputs { restorer, vae, settings, geometry, budget_mib } = *inputs;
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
    if budget_mib == 0 {
        return MemoryPlan { batch: settings.batch, budget_bytes: None, estimate: estimate(settings.batch.frames), fits: None, dit_weight_bytes };
    }
    let budget_bytes = budget_mib << 20;
    let batch = if settings.batch_given {
        settings.batch
    } else {
        settings.with_batch_frames(longest_fitting_batch(settings.batch.frames, budget_bytes, estimate).0)
    };
    let estimate = estimate(batch.frames);
    MemoryPlan { batch, budget_bytes: Some(budget_bytes), fits: Some(estimate.peak_bytes() <= budget_bytes as f64), estimate, dit_weight_bytes }
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
            let Some((free, _)) = crate::device::cuda::memory_info(exec.device) else { return BlockPlacement::Resident };
            let weights = std::fs::metadata(&files.dit).map(|m| m.len()).unwrap_or(0);
            if weights + (exec.config.device_memory_margin_mib << 20) > free {
                BlockPlacement::Swapped
            } else {
                BlockPlacement::Resident
            }
        }
    }
}
