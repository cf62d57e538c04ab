//! The VAE pipelines: video → latent file (`vae_encode`), latent file → video (`vae_decode`), and
//! video → latent → video with PSNR/SSIM (`vae_reconstruct`). All stream: frames go through the
//! model's causal cache chunk by chunk, so memory does not grow with the clip's length.
mod decode;
mod encode;
mod reconstruct;

use std::time::Instant;

use tch::{Kind, Tensor};

use super::{ExecError, Executor, JobHooks, JobSpec};
use crate::jobs::plan::{JobPlan, VaeOpPlan, VaePlan};
use crate::jobs::{JobOutcome, Progress, QualityMetrics, Timings};
use crate::models::VaeOp;
use crate::media::latent;
use crate::executor::media_io::{input_media, read_frames};
use crate::media::{self, FrameReader, MediaInfo};
use crate::models::registry::{self, ModelEntry};
use crate::models::vae::VideoVae;
use crate::tiling::grid::SpatialTiles;
use crate::tiling::memory::{MemoryModel, TiledOp};
use crate::tiling::planner::Plan;
use crate::executor::replan::{JobPlanning, PlanLimits};
use crate::executor::resilient;
use crate::executor::resume::Checkpoints;
use crate::executor::tiled::streams::{TiledDecoder, TiledEncoder};

/// Wan and SeedVR2 are trained on 16 fps clips; a latent without an fps decodes at that rate.
const DEFAULT_LATENT_FPS: &str = "16/1";

/// What every VAE pipeline needs from the executor for one job.
struct VaeJob<'a> {
    exec: &'a Executor,
    job: &'a JobSpec,
    hooks: &'a JobHooks,
    vae_op: VaeOp,
    entry: ModelEntry,
    vae: &'a VideoVae,
    /// Pixel frames per push: whole latent groups, as the plan chose.
    chunk_frames: usize,
    /// Spatial tiles when a whole frame does not fit the budget.
    tiles: Option<SpatialTiles>,
    tile_plan: Plan,
    /// The budget the plan was made for, in MiB (0 = none).
    budget_mib: u64,
    /// The compute dtype, and its bytes per element.
    kind: Kind,
    element_bytes: i64,
}

pub(super) fn run(exec: &mut Executor, job: &JobSpec, hooks: &JobHooks, timings: &mut Timings) -> Result<JobOutcome, ExecError> {
    let vae_op = job.op.spec().vae.ok_or_else(|| ExecError::Invalid(format!("{} is not a VAE op", job.op.as_str())))?;
    let entry = registry::find(&exec.config.models_dir, &job.model)
        .filter(|e| e.family.is_vae())
        .ok_or_else(|| ExecError::Invalid(format!("{} is not a VAE on this box", job.model)))?;
    let kind = exec.resolve_kind(job, timings);
    let load_started = Instant::now();
    let (vae, _) = exec.models.vae(&entry, exec.device, kind)?;
    timings.load_model = Some(load_started.elapsed().as_secs_f64());
    let mut planning = job_planning(exec, job, vae_op, &vae, kind, timings)?;
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
            Ok(outcome) => return Ok(with_replans(outcome, &replans)),
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
fn with_replans(mut outcome: JobOutcome, replans: &[String]) -> JobOutcome {
    if let Some(JobPlan::Vae(plan)) = &mut outcome.plan {
        plan.prepend_fallbacks(replans);
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

impl VaeJob<'_> {
    /// The job's encoder; a cancel stops it inside a push (between tiles and layers).
    fn encoder(&self) -> TiledEncoder<'_> {
        let mut encoder = TiledEncoder::new(self.vae, self.tiles);
        encoder.set_stop(self.hooks.stop_flag());
        encoder
    }

    /// The job's decoder; a cancel stops it inside a push (between tiles and layers).
    fn decoder(&self) -> TiledDecoder<'_> {
        let mut decoder = TiledDecoder::new(self.vae, self.tiles);
        decoder.set_stop(self.hooks.stop_flag());
        decoder
    }

    /// Sizes the first row split of an out-of-memory retry of a push of `pixel_frames` frames of
    /// `height × width` pixels (one tile's worth when tiled).
    fn push_size(&self, pixel_frames: i64, height: i64, width: i64) -> resilient::PushSize {
        resilient::PushSize::of(self.vae, self.tiles.as_ref(), self.element_bytes, [pixel_frames, height, width])
    }

    fn input_media(&self, timings: &mut Timings) -> Result<MediaInfo, ExecError> {
        input_media(self.exec, self.job, timings)
    }

    /// The op's checkpoints (`rate`: the output's frames per second). What decides the output besides the
    /// job: the precision and the spatial tiles (their seams are blended); not the push length (the causal
    /// cache is exact), so a job re-planned to shorter pushes still goes on from its checkpoint. The tile
    /// order, since a tile-major checkpoint records another place than a time-major one.
    fn checkpoints(&self, rate: f64, resumable: bool) -> Checkpoints {
        let settings = serde_json::json!({ "kind": format!("{:?}", self.kind), "tiles": self.tiles, "tile_major": self.tile_plan.tile_major });
        Checkpoints::open(self.exec, self.job, settings, rate, resumable)
    }

    fn reader(&self, info: &MediaInfo) -> Result<FrameReader, ExecError> {
        read_frames(self.exec, self.job, info, self.chunk_frames)
    }

    /// Frames in [0, 1] `[n, 3, H, W]` → the model's input `[1, 3, n, H', W']` in [-1, 1].
    fn to_model_input(&self, pixels: &Tensor) -> Tensor {
        self.pad_to_factor(&(pixels * 2.0 - 1.0).permute([1, 0, 2, 3]).unsqueeze(0))
    }

    /// Pads `[1, 3, n, H, W]` by repeating the last row/column up to a multiple of the spatial factor;
    /// decoding crops back to the recorded size.
    fn pad_to_factor(&self, video: &Tensor) -> Tensor {
        let factor = self.vae.spatial_factor();
        let (_, _, _, h, w) = video.size5().expect("[1, 3, n, H, W]");
        let (pad_h, pad_w) = ((factor - h % factor) % factor, (factor - w % factor) % factor);
        if pad_h + pad_w > 0 {
            video.pad([0, pad_w, 0, pad_h, 0, 0], "replicate", None)
        } else {
            video.shallow_clone()
        }
    }

    /// The model's output `[1, 3, n, H', W']` → `[n, 3, height, width]`, still in [-1, 1].
    fn crop_output(decoded: &Tensor, height: i64, width: i64) -> Tensor {
        decoded.squeeze_dim(0).permute([1, 0, 2, 3]).narrow(2, 0, height).narrow(3, 0, width).to_kind(Kind::Float)
    }

    fn to_unit_range(frames: &Tensor) -> Tensor {
        ((frames + 1.0) / 2.0).clamp(0.0, 1.0)
    }

    fn progress(&self, done: u64, total: u64, since: Instant) {
        let stage = self.vae_op.stage();
        self.hooks.progress.send_replace(Progress::frames(done, total.max(done), since.elapsed().as_secs_f64()).at(stage));
    }

    fn frames_needed(&self, frames: i64) -> i64 {
        let t = self.vae.temporal_factor();
        1 + (frames - 1 + t - 1) / t * t
    }

    fn outcome(&self, output_media: Option<MediaInfo>, timings: &Timings, plan: VaePlan, metrics: Option<QualityMetrics>) -> JobOutcome {
        let path = &self.job.output_path;
        JobOutcome {
            output_name: path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
            output_path: path.clone(),
            output_bytes: std::fs::metadata(path).map(|m| m.len()).unwrap_or(0),
            output_media,
            timings: timings.clone(),
            plan: Some(JobPlan::Vae(plan)),
            metrics,
        }
    }

    /// The job's plan: what the planner chose, with what the op itself ran with and had to give.
    fn plan(&self, fallbacks: Vec<String>, op: VaeOpPlan) -> VaePlan {
        let plan = &self.tile_plan;
        let held = self.vae.held_bytes();
        VaePlan {
            chunk_frames: self.chunk_frames,
            latent_frames_per_chunk: plan.latent_frames_per_chunk,
            temporal_chunking: "exact (causal cache)".into(),
            spatial_tiles: self.tiles,
            blending: self.tiles.map(|_| "raised cosine over the overlap".into()),
            estimated_peak_bytes: (plan.estimated_peak_bytes > 0).then_some(plan.estimated_peak_bytes),
            fits_budget: plan.fits,
            memory_budget_mib: (self.budget_mib > 0).then_some(self.budget_mib),
            tile_major: plan.tile_major,
            spatial_factor: self.vae.spatial_factor(),
            temporal_factor: self.vae.temporal_factor(),
            model_weight_bytes: held.weights,
            model_derived_bytes: held.derived,
            fallbacks,
            op,
        }
    }
}
