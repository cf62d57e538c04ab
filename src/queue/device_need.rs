//! The least device memory a job can run in, written with the job so that a worker claims only what its
//! device can hold (`device_memory_mib`): the weights that stay on the device — the model's checkpoint
//! files, or for a restoration its VAE's, since the DiT's blocks can stream from host memory (its own files
//! too when `dit_block_swap = "never"`) — plus the working memory the job asked for (`memory_budget_mib`;
//! without one the plan adapts to what is free).
use std::path::Path;

use crate::config::BlockSwap;
use crate::jobs::JobParams;
use crate::models::{DeviceNeed, Op};
use crate::models::registry::{self, ModelEntry};

/// What the need is worked out from.
pub struct NeedOf<'a> {
    pub models_dir: &'a Path,
    pub entry: &'a ModelEntry,
    pub op: Op,
    pub params: &'a JobParams,
    pub block_swap: BlockSwap,
}

pub fn device_bytes_needed(job: NeedOf<'_>) -> u64 {
    let NeedOf { models_dir, entry, op, params, block_swap } = job;
    let resident = match op.spec().device_need {
        DeviceNeed::PairedVae if block_swap == BlockSwap::Never => files_bytes(entry) + paired_vae_bytes(models_dir, entry, params),
        DeviceNeed::PairedVae => paired_vae_bytes(models_dir, entry, params),
        DeviceNeed::ModelFiles => files_bytes(entry),
    };
    resident + params.memory_budget_mib.unwrap_or(0).saturating_mul(1 << 20)
}

fn paired_vae_bytes(models_dir: &Path, entry: &ModelEntry, params: &JobParams) -> u64 {
    params
        .restore
        .as_ref()
        .and_then(|restore| restore.vae.as_deref().or(entry.pairs_with.as_deref()))
        .and_then(|vae| registry::find(models_dir, vae))
        .map_or(0, |vae| files_bytes(&vae))
}

fn files_bytes(entry: &ModelEntry) -> u64 {
    entry.files.iter().filter_map(|file| std::fs::metadata(file).ok()).map(|meta| meta.len()).sum()
}
