//! How a restoration batch fits the working memory (see `tiling::dit_memory`).
use super::batches::BatchShape;
use super::settings::RestoreSettings;
use crate::executor::{Executor, JobSpec};
use crate::models::registry::Family;
use crate::models::restore::prepare::FrameGeometry;
use crate::models::restore::restorer::Restorer;
use crate::tiling::dit_memory::{batch_memory, longest_fitting_batch, BatchMemory, DitShape};
use crate::tiling::memory::MemoryModel;

/// How the batch fits the working memory: the batch (shortened to fit when the job did not name one)
/// and the estimates behind it, for the plan.
pub struct MemoryPlan {
    pub batch: BatchShape,
    pub budget_bytes: Option<u64>,
    pub estimate: BatchMemory,
    pub fits: Option<bool>,
    pub dit_weight_bytes: u64,
}

pub fn memory_plan(exec: &Executor, job: &JobSpec, restorer: &Restorer, settings: &RestoreSettings, geometry: &FrameGeometry) -> MemoryPlan {
    let kind = restorer.dit.kind();
    let vae_memory = MemoryModel::lookup(exec.device, Family::Seedvr2, kind, restorer.vae.config().block_out_channels[0]);
    let dit = restorer.dit.config();
    let shape = DitShape {
        dim: dit.dim,
        inner: dit.heads * dit.head_dim,
        mlp_hidden: dit.mlp_hidden,
        text_len: restorer.text.size()[0],
        element_bytes: kind.elt_size_in_bytes() as i64,
    };
    let estimate = |frames| batch_memory(vae_memory.as_ref(), &shape, frames, geometry.crop_h, geometry.crop_w);
    let budget_mib = exec.working_budget_mib(job);
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
