//! One VAE job as its pipelines (encode, decode, reconstruct) see it: the model, the plan it runs with,
//! the job and its hooks, and the steps they share (model input and output, progress, checkpoints, plan).
use std::time::Instant;

use tch::{Kind, Tensor};

use crate::executor::context::{Executor, JobHooks, JobSpec};
use crate::executor::error::ExecError;
use crate::executor::media_io::{input_media, read_frames};
use crate::executor::resilient;
use crate::executor::resume::Checkpoints;
use crate::executor::tiled::streams::{TiledDecoder, TiledEncoder};
use crate::jobs::plan::{JobPlan, VaeOpPlan, VaePlan};
use crate::jobs::{JobOutcome, Progress, QualityMetrics, Timings};
use crate::media::{FrameReader, MediaInfo};
use crate::models::family::vae::StreamPace;
use crate::models::registry::ModelEntry;
use crate::models::vae::VideoVae;
use crate::models::VaeOp;
use crate::tiling::grid::SpatialTiles;
use crate::tiling::planner::Plan;

/// Wan and SeedVR2 are trained on 16 fps clips; a latent without an fps decodes at that rate.
pub(super) const DEFAULT_LATENT_FPS: &str = "16/1";

/// What every VAE pipeline needs from the executor for one job.
pub(super) struct VaeJob<'a> {
    pub(super) exec: &'a Executor,
    pub(super) job: &'a JobSpec,
    pub(super) hooks: &'a JobHooks,
    pub(super) vae_op: VaeOp,
    pub(super) entry: ModelEntry,
    pub(super) vae: &'a VideoVae,
    /// Pixel frames per push: whole latent groups, as the plan chose.
    pub(super) chunk_frames: usize,
    /// Spatial tiles when a whole frame does not fit the budget.
    pub(super) tiles: Option<SpatialTiles>,
    pub(super) tile_plan: Plan,
    /// The budget the plan was made for, in MiB (0 = none).
    pub(super) budget_mib: u64,
    /// The compute dtype, and its bytes per element.
    pub(super) kind: Kind,
    pub(super) element_bytes: i64,
}

impl VaeJob<'_> {
    /// The job's encoder; a cancel stops it inside a push (between tiles and layers).
    pub(super) fn encoder(&self) -> TiledEncoder<'_> {
        let mut encoder = TiledEncoder::new(self.vae, self.tiles).with_pace(self.pace());
        encoder.set_stop(self.hooks.stop_flag());
        encoder
    }

    /// The job's decoder; a cancel stops it inside a push (between tiles and layers).
    pub(super) fn decoder(&self) -> TiledDecoder<'_> {
        let mut decoder = TiledDecoder::new(self.vae, self.tiles).with_pace(self.pace());
        decoder.set_stop(self.hooks.stop_flag());
        decoder
    }

    /// Frame by frame when the plan chose it (whole pushes did not fit the budget), else a push at once.
    fn pace(&self) -> StreamPace {
        if self.tile_plan.frame_by_frame {
            StreamPace::FrameByFrame
        } else {
            StreamPace::Chunk
        }
    }

    /// Sizes the first row split of an out-of-memory retry of a push of `pixel_frames` frames of
    /// `height × width` pixels (one tile's worth when tiled).
    pub(super) fn push_size(&self, pixel_frames: i64, height: i64, width: i64) -> resilient::PushSize {
        resilient::PushSize::of(self.vae, self.tiles.as_ref(), self.element_bytes, [pixel_frames, height, width])
    }

    pub(super) fn input_media(&self, timings: &mut Timings) -> Result<MediaInfo, ExecError> {
        input_media(self.exec, self.job, timings)
    }

    /// The op's checkpoints (`rate`: the output's frames per second). What decides the output besides the
    /// job: the precision and the spatial tiles (their seams are blended); not the push length (the causal
    /// cache is exact), so a job re-planned to shorter pushes still goes on from its checkpoint. The tile
    /// order, since a tile-major checkpoint records another place than a time-major one.
    pub(super) fn checkpoints(&self, rate: f64, resumable: bool) -> Checkpoints {
        let settings = serde_json::json!({ "kind": format!("{:?}", self.kind), "tiles": self.tiles, "tile_major": self.tile_plan.tile_major });
        Checkpoints::open(self.exec, self.job, self.hooks, settings, rate, resumable)
    }

    pub(super) fn reader(&self, info: &MediaInfo) -> Result<FrameReader, ExecError> {
        read_frames(self.exec, self.job, info, self.chunk_frames)
    }

    /// Frames in [0, 1] `[n, 3, H, W]` → the model's input `[1, 3, n, H', W']` in [-1, 1].
    pub(super) fn to_model_input(&self, pixels: &Tensor) -> Tensor {
        self.pad_to_factor(&(pixels * 2.0 - 1.0).permute([1, 0, 2, 3]).unsqueeze(0))
    }

    /// Pads `[1, 3, n, H, W]` by repeating the last row/column up to a multiple of the spatial factor;
    /// decoding crops back to the recorded size.
    pub(super) fn pad_to_factor(&self, video: &Tensor) -> Tensor {
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
    pub(super) fn crop_output(decoded: &Tensor, height: i64, width: i64) -> Tensor {
        decoded.squeeze_dim(0).permute([1, 0, 2, 3]).narrow(2, 0, height).narrow(3, 0, width).to_kind(Kind::Float)
    }

    pub(super) fn to_unit_range(frames: &Tensor) -> Tensor {
        ((frames + 1.0) / 2.0).clamp(0.0, 1.0)
    }

    pub(super) fn progress(&self, done: u64, total: u64, since: Instant) {
        let stage = self.vae_op.stage();
        self.hooks.progress.send_replace(Progress::frames(done, total.max(done), since.elapsed().as_secs_f64()).at(stage));
    }

    pub(super) fn frames_needed(&self, frames: i64) -> i64 {
        let t = self.vae.temporal_factor();
        1 + (frames - 1 + t - 1) / t * t
    }

    pub(super) fn outcome(&self, output_media: Option<MediaInfo>, timings: &Timings, plan: VaePlan, metrics: Option<QualityMetrics>) -> JobOutcome {
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
    pub(super) fn plan(&self, fallbacks: Vec<String>, op: VaeOpPlan) -> VaePlan {
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
            frame_by_frame: plan.frame_by_frame,
            spatial_factor: self.vae.spatial_factor(),
            temporal_factor: self.vae.temporal_factor(),
            model_weight_bytes: held.weights,
            model_derived_bytes: held.derived,
            fallbacks,
            op,
        }
    }
}
