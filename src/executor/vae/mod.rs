//! The VAE pipelines: video → latent file (`vae_encode`), latent file → video (`vae_decode`), and
//! video → latent → video with PSNR/SSIM (`vae_reconstruct`). All stream: frames go through the
//! model's causal cache chunk by chunk, so memory does not grow with the clip's length.
mod decode;
mod encode;
mod host_bound;
mod job;
mod reconstruct;

use std::time::Instant;

use tch::Kind;

use super::context::{Executor, JobHooks, JobSpec};
use super::error::ExecError;
use super::media_io::input_media;
use super::replan::{JobPlanning, PlanLimits};
use crate::jobs::plan::JobPlan;
use crate::jobs::{JobOutcome, Timings};
use crate::media::{self, latent};
use crate::models::registry;
use crate::models::vae::VideoVae;
use crate::models::VaeOp;
use crate::tiling::memory::{MemoryModel, TiledOp};
use job::VaeJob;

pub(super) fn run(exec: &mut Executor, job: &JobSpec, hooks: &JobHooks, timings: &mut Timings) -> Result<JobOutcome, ExecError> {
    let vae_op = job.op.spec().vae.ok_or_else(|| ExecError::Invalid(format!("{} is not a VAE op", job.op.as_str())))?;
    let entry = registry::find(&exec.config.models_dir, &job.model)
        .filter(|e| e.family.is_vae())
        .ok_or_else(|| ExecError::Invalid(format!("{} is not a VAE on this box", job.model)))?;
    let kind = exec.resolve_kind(job, timings);
    let load_started = Instant::now();
    let (vae, _) = exec.models.vae(&entry, exec.device, kind)?;
    timings.load_model = Some(load_started.elapsed().as_secs_f64());
    let (mut planning, host_note) = host_bound::bound_by_host(exec, job_planning(exec, job, vae_op, &vae, kind, timings)?)?;
    if let Some(note) = &host_note {
        tracing::info!(job = %job.id, "{note}");
    }
    let element_bytes = kind.elt_size_in_bytes() as i64;
    let mut replans = Vec::new();
    loop {
        let tile_plan = planning.plan();
        let chunk_frames = (tile_plan.latent_frames_per_chunk * vae.temporal_factor()) as usize;
        let ctx = VaeJob {
            exec,
            job,
            hooks,
            vae_op,
            entry: entry.clone(),
            vae: &vae,
            chunk_frames,
            tiles: tile_plan.spatial,
            tile_plan: tile_plan.clone(),
            budget_mib: planning.budget_mib,
            kind,
            element_bytes,
        };
        // Out-of-memory anywhere in the run (also outside a retried push: joining halves, blending)
        // comes back here as an error, so the job can be re-planned.
        let result = super::attempt::attempt(|| {
            tch::no_grad(|| match vae_op {
                VaeOp::Encode => encode::run(&ctx, timings),
                VaeOp::Decode => decode::run(&ctx, timings),
                VaeOp::Reconstruct => reconstruct::run(&ctx, timings),
            })
        });
        match result {
            Ok(outcome) => return Ok(with_replans(outcome, host_note.iter().chain(&replans))),
            Err(error) if error.is_out_of_memory() => {
                let Some((smaller, note)) = planning.replan(&tile_plan, replans.len()) else { return Err(error) };
                tracing::warn!(job = %job.id, "{note}");
                crate::device::release_cached_memory(exec.device);
                replans.push(note);
                planning = smaller;
            }
            Err(error) => return Err(error),
        }
    }
}

/// The re-plans come first in the finished plan's fallbacks (they happened before its own).
fn with_replans<'a>(mut outcome: JobOutcome, replans: impl Iterator<Item = &'a String>) -> JobOutcome {
    if let Some(JobPlan::Vae(plan)) = &mut outcome.plan {
        plan.prepend_fallbacks(&replans.cloned().collect::<Vec<_>>());
    }
    outcome
}

/// The job's size in latent cells, from whatever its input is: a latent file, a pixel tensor or a video.
fn latent_dims(exec: &Executor, job: &JobSpec, vae: &VideoVae, timings: &mut Timings) -> Result<[i64; 3], ExecError> {
    let (t, f) = (vae.temporal_factor(), vae.spatial_factor());
    let from_pixels = |frames: i64, height: i64, width: i64| [1 + (frames - 1 + t - 1) / t, (height + f - 1) / f, (width + f - 1) / f];
    if job.op.reads_latent() {
        // The shape is in the header; the values were checked at upload and are checked again when read.
        let shape = latent::latent_header(&job.input_path)?.shape;
        return Ok([shape[2], shape[3], shape[4]]);
    }
    if job.input_path.extension().is_some_and(|e| e == "safetensors") {
        let header = media::safetensors::read_header(&job.input_path)
            .map_err(|e| ExecError::Invalid(format!("cannot read the input tensor: {e}")))?;
        let shape = header.tensors.values().next().map(|e| e.shape.clone()).unwrap_or_default();
        let [_, _, frames, height, width] = shape[..] else { return Err(ExecError::Invalid(format!("input shape {shape:?}"))) };
        return Ok(from_pixels(frames, height, width));
    }
    let info = input_media(exec, job, timings)?;
    Ok(from_pixels(info.frames.max(1) as i64, info.height as i64, info.width as i64))
}

/// What the job is planned from: temporal chunk first (exact), spatial tiles only when one chunk of
/// whole frames exceeds the budget. Without a budget, or without a memory model for this family,
/// whole frames at the configured chunk.
fn job_planning(exec: &Executor, job: &JobSpec, vae_op: VaeOp, vae: &VideoVae, kind: Kind, timings: &mut Timings) -> Result<JobPlanning, ExecError> {
    let budget_mib = exec.working_budget_mib(job);
    let Some(memory) = MemoryModel::for_vae(vae, kind, exec.device) else {
        // Nothing to plan with: the configured pushes, whatever the device.
        let max_latent_frames = (exec.config.chunk_frames as i64 / vae.temporal_factor()).max(1);
        return Ok(JobPlanning { request: None, budget_mib, max_latent_frames });
    };
    let latent = latent_dims(exec, job, vae, timings)?;
    let max_latent_frames = exec.max_push_latent_frames(vae.temporal_factor()).min(latent[0]);
    let op = match vae_op {
        VaeOp::Encode => TiledOp::Encode,
        VaeOp::Decode => TiledOp::Decode,
        VaeOp::Reconstruct => TiledOp::Reconstruct,
    };
    let limits = PlanLimits { budget_mib, max_latent_frames };
    Ok(JobPlanning::for_vae(vae, op, latent, limits, Some(memory)))
}
