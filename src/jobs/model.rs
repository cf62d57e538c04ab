//! What a job is: its parameters, state, progress and timings, as stored and as served.
use crate::models::Op;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use super::plan::JobPlan;
use crate::device::DtypeChoice;
use crate::media::{InputRange, MediaInfo};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum JobStatus {
    Queued,
    /// Queued, but held back by its owner (`POST /v1/jobs/{id}/pause`) until `…/resume`; holds no executor.
    Paused,
    Running,
    Succeeded,
    Failed,
    Cancelled,
}

impl JobStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            JobStatus::Queued => "queued",
            JobStatus::Paused => "paused",
            JobStatus::Running => "running",
            JobStatus::Succeeded => "succeeded",
            JobStatus::Failed => "failed",
            JobStatus::Cancelled => "cancelled",
        }
    }

    pub fn parse(s: &str) -> Option<JobStatus> {
        [JobStatus::Queued, JobStatus::Paused, JobStatus::Running, JobStatus::Succeeded, JobStatus::Failed, JobStatus::Cancelled]
            .into_iter()
            .find(|status| status.as_str() == s)
    }

    pub fn is_terminal(self) -> bool {
        matches!(self, JobStatus::Succeeded | JobStatus::Failed | JobStatus::Cancelled)
    }
}

/// What the client asked for, beyond op and model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct JobParams {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale: Option<i64>,
    #[serde(default = "default_dtype")]
    pub dtype: DtypeChoice,
    /// Overrides the configured tile side for this job (input pixels).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tile: Option<i64>,
    /// `vae_encode`: apply the published latent mean/std (or scaling factor) before saving.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub normalize: Option<bool>,
    /// diffusers' remote-VAE convention: decode `z / scaling + shift`, encode `(z - shift) * scaling`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latent_scaling: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latent_shift: Option<f64>,
    /// Working-memory budget for this job in MiB (0 = none); overrides `memory_budget_mib`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_budget_mib: Option<u64>,
    /// The result's format (default: the box's `output_format`, filled in at submission); `safetensors`
    /// is for `vae_decode` only. Stored jobs called this `output`.
    #[serde(default, alias = "output", skip_serializing_if = "Option::is_none")]
    pub output_format: Option<OutputFormat>,
    /// x264/x265 quality of an h264 or h265 result, 0–51 (default: the box's `output_crf`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crf: Option<i64>,
    /// x264/x265 preset of an h264 or h265 result (default: the box's `output_preset`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encoder_preset: Option<String>,
    /// Copy the input's audio, subtitles and chapters into the result (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_audio: Option<bool>,
    /// `upscale`: PSNR/SSIM of the output scaled back down to the input's size against the input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<bool>,
    /// `restore`: how the DiT's output is run, beside `scale` (or `height` × `width`) and `dtype`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore: Option<RestoreParams>,
    /// `interpolate`: the output's rate and the scene-cut threshold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interpolate: Option<InterpolateParams>,
    /// Part of the input instead of all of it (every op that reads a video).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub range: Option<InputRange>,
    /// `upscale`, `restore` of a zip of PNG frames: the sequence's frame rate as `N/D` (default 24/1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequence_fps: Option<String>,
    /// `parts`: `auto` or a count (`jobs::parts::PartsChoice`), checked at submission.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parts: Option<String>,
}

/// `interpolate` jobs only; filled in at submission (`factor` 2 when neither it nor `fps` is given).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct InterpolateParams {
    /// Output frames per input frame, 2 to 4.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub factor: Option<i64>,
    /// The output's frame rate instead of a factor, as `N/D` (`60/1`, `60000/1001`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fps: Option<String>,
    /// Mean luma change (0–1) between two frames above which they are taken for a scene cut and get no
    /// blended frames between them; 0 turns the detection off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scene_threshold: Option<f64>,
}

/// `restore` jobs only; every field has a default.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RestoreParams {
    /// The SeedVR2 VAE (default: the DiT's `pairs_with`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vae: Option<String>,
    /// Target size (its area; the aspect ratio follows the input) instead of `scale`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub height: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub width: Option<u32>,
    /// The output's short side (the ComfyUI front-end's), instead of `scale` or `height` × `width`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolution: Option<u32>,
    /// With `resolution`: the most the long side may be (0: no cap).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_resolution: Option<u32>,
    /// Sides not multiples of 16: `crop` them to the multiples (default) or `pad` up to them and cut the
    /// padding off after, so the output is exactly the resized size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fit: Option<crate::models::restore::prepare::Fit>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub color_fix: Option<crate::models::restore::colorfix::ColorFix>,
    /// Frames per DiT call, `4n + 1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_frames: Option<i64>,
    /// Frames shared (and cross-faded) by consecutive batches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_overlap: Option<i64>,
    /// 0–1: Gaussian noise added to the input frames before the VAE encode (the front-end's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_noise_scale: Option<f64>,
    /// 0–1: noise mixed into the DiT's condition latent (the front-end's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latent_noise_scale: Option<f64>,
    /// Frames N..1 put before the clip and dropped from the output, so the first batch starts warm.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prepend_frames: Option<i64>,
    /// A scene's last, shorter batch padded to `batch_frames` (its last frame repeated), so every DiT call
    /// has one shape.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uniform_batches: Option<bool>,
    /// Mean luma change (0–1) between two frames taken for a scene cut, which starts a new batch (no batch
    /// or cross-fade spans two scenes); 0 turns the detection off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scene_threshold: Option<f64>,
}

impl InterpolateParams {
    /// An upscale's `interpolate=N`: that factor, every other setting its default.
    pub fn upscale_factor(factor: i64) -> InterpolateParams {
        InterpolateParams { factor: Some(factor), ..InterpolateParams::default() }
    }
}

pub use crate::media::OutputFormat;

impl JobParams {
    pub fn new(dtype: DtypeChoice) -> JobParams {
        JobParams {
            scale: None,
            dtype,
            tile: None,
            normalize: None,
            latent_scaling: None,
            latent_shift: None,
            output_format: None,
            crf: None,
            encoder_preset: None,
            keep_audio: None,
            metrics: None,
            memory_budget_mib: None,
            restore: None,
            interpolate: None,
            range: None,
            sequence_fps: None,
            parts: None,
        }
    }
}

fn default_dtype() -> DtypeChoice {
    DtypeChoice::Auto
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Progress {
    /// Units (frames) finished and written.
    pub done: u64,
    /// Units in all; 0 while not known (a latent before it is read).
    pub total: u64,
    pub unit: String,
    /// Share of the job's work done, 0 to 1: it moves within each stage and is 1 when the job succeeded.
    pub fraction: f64,
    /// Seconds left at the rate so far (the same rate as `fraction`); null until there is a rate.
    pub eta_s: Option<f64>,
    /// What the job does now: `load`, `decode`, `encode`, `upscale`, `encode batch 2/5`, `dit batch 2/5`,
    /// `decode batch 2/5`, `write`, then `done`.
    #[serde(default)]
    pub stage: Option<String>,
}

impl Progress {
    /// `done` of `total` frames, the fraction theirs, the ETA from the rate so far.
    pub fn frames(done: u64, total: u64, elapsed_s: f64) -> Progress {
        let fraction = if total == 0 { 0.0 } else { (done as f64 / total as f64).min(1.0) };
        Progress { done, total, unit: "frames".into(), fraction, eta_s: None, stage: None }.with_eta(elapsed_s)
    }

    /// The job has started: its model loads (`total` frames when the input's length is known, else 0).
    pub fn starting(total: u64) -> Progress {
        Progress { done: 0, total, unit: "frames".into(), fraction: 0.0, eta_s: None, stage: Some("load".into()) }
    }

    pub fn at(mut self, stage: impl Into<String>) -> Progress {
        self.stage = Some(stage.into());
        self
    }

    /// Replaces the fraction (a pipeline whose work is not counted in frames, such as restore's stages).
    pub fn with_fraction(mut self, fraction: f64, elapsed_s: f64) -> Progress {
        self.fraction = fraction.clamp(0.0, 1.0);
        self.with_eta(elapsed_s)
    }

    /// The ETA that agrees with the fraction: the time so far, scaled by what is left.
    fn with_eta(mut self, elapsed_s: f64) -> Progress {
        self.eta_s = (self.fraction > 0.0).then(|| elapsed_s / self.fraction * (1.0 - self.fraction));
        self
    }

    /// The job succeeded: everything is done.
    pub fn finished(&mut self) {
        self.total = self.total.max(self.done);
        self.done = self.total;
        self.fraction = 1.0;
        self.eta_s = Some(0.0);
        self.stage = Some("done".into());
    }
}

/// Honest wall-clock seconds per stage, plus throughput and memory, as measured by the executor. Every key
/// but the `restore` ones is present, null when it does not apply or is not known yet.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Timings {
    /// Seconds between creation and start.
    pub queued: Option<f64>,
    /// Seconds spent checking the upload.
    pub probe: Option<f64>,
    /// Seconds loading the model (near 0 when it was already resident).
    pub load_model: Option<f64>,
    /// Time the pipeline waited for decoded frames or latents (decode itself runs in ffmpeg, overlapped).
    pub read: Option<f64>,
    /// Seconds in the model.
    pub compute: Option<f64>,
    /// Time the pipeline waited to hand frames to the encoder, plus the final flush.
    pub write: Option<f64>,
    /// Seconds from start to finish.
    pub total: Option<f64>,
    /// `restore`: the parts of `compute`, each summed over the batches. Seconds in the VAE encoder.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encode: Option<f64>,
    /// `restore`: seconds in the DiT.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dit: Option<f64>,
    /// `restore`: seconds in the VAE decoder.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode: Option<f64>,
    /// `restore`: seconds in the colour fix.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub color_fix: Option<f64>,
    /// Frames per second through the pipeline.
    pub fps: Option<f64>,
    /// Peak resident set of the server process during the job (Linux VmHWM).
    pub peak_host_bytes: Option<u64>,
    /// Peak bytes held by tensors in the CUDA allocator during the job; null on CPU.
    pub peak_device_bytes: Option<u64>,
    pub device: Option<String>,
    /// The precision that ran.
    pub dtype: Option<String>,
    /// Seconds this job lent the executor to synchronous calls and short jobs that came while it ran (at its
    /// chunk ends); not part of `total`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lent: Option<f64>,
}

/// Where a queued job stands: its place in the claim order, counting every owner's jobs (none of them named).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct QueuePlace {
    /// 1: the next job any worker claims.
    pub position: usize,
    /// Jobs ahead of it (of every owner), and jobs running now.
    pub ahead: usize,
    pub running: usize,
    /// Seconds until it starts, from the running jobs' ETAs and the estimates of the jobs ahead, shared over
    /// the workers; null where one of those has no basis.
    pub starts_in_s: Option<f64>,
}

/// What the box expects of a job before it runs, from its own measured rates for that op and model
/// (`POST /v1/estimate`, and each queued job's `estimate`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Estimate {
    /// Frames the result will have, and its size.
    pub frames: u64,
    pub width: u32,
    pub height: u32,
    /// Seconds the job will run on this box (load, read, compute, write); null until a job of this op and
    /// model has finished here (then `basis` says which).
    pub seconds: Option<f64>,
    /// Bytes of the result: a latent's exactly, a video's from the bitrate the box's earlier results of this
    /// op had (null before any).
    pub output_bytes: Option<u64>,
    /// Bytes the job takes on the data dir while it runs: its input, its result and its checkpoints' segments.
    pub disk_bytes: Option<u64>,
    /// The earlier jobs the time comes from: `3 jobs of upscale realesrgan-animevideov3 (bf16, cpu)`.
    pub basis: Option<String>,
}

/// `vae_reconstruct`: how close the decoded frames are to the input.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct QualityMetrics {
    /// Over all frames compared; null when the frames are identical.
    pub psnr_db: Option<f64>,
    /// Averaged over the frames; null if not a number.
    pub ssim: Option<f64>,
    pub frames_compared: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct JobError {
    pub code: String,
    pub message: String,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct InputInfo {
    pub file_name: String,
    pub bytes: u64,
    pub media: Option<MediaInfo>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct OutputInfo {
    /// False once the result was handed out and removed (a synchronous `/v1/decode` or `/v1/encode`
    /// returns it in its answer only): `url` then answers 410 `result-gone`.
    pub kept: bool,
    pub file_name: String,
    pub bytes: u64,
    pub content_type: String,
    pub url: String,
    pub media: Option<MediaInfo>,
}

/// A job as served by the API.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Job {
    pub id: Uuid,
    pub status: JobStatus,
    pub op: Op,
    pub model: String,
    /// Higher runs first; FIFO among equals.
    pub priority: i64,
    pub params: JobParams,
    #[schema(format = DateTime)]
    pub created_at: String,
    #[schema(format = DateTime)]
    pub started_at: Option<String>,
    #[schema(format = DateTime)]
    pub finished_at: Option<String>,
    pub input: InputInfo,
    pub output: Option<OutputInfo>,
    pub progress: Option<Progress>,
    /// Null until the job has run.
    pub timings: Option<Timings>,
    /// How the job ran (tiles, chunks, batches, out-of-memory fallbacks); null until it has run.
    pub plan: Option<JobPlan>,
    pub metrics: Option<QualityMetrics>,
    /// Why a failed job failed (`code` is one of the Error schema's codes).
    pub error: Option<JobError>,
    pub attempts: i64,
    /// The worker that runs it, or ran it to its end (null while queued, and for jobs cancelled while queued).
    pub worker: Option<String>,
    /// The access token (by name) that made the job; null when the box has no tokens.
    pub owner: Option<String>,
    /// The webhook (`callback_url`) and its deliveries; null when the job has none.
    pub callback: Option<super::callback::CallbackInfo>,
    /// A whole-clip job made from a short try (`POST /v1/jobs/{id}/whole`): the try's id; null for a job
    /// submitted with its own upload.
    pub from_try: Option<Uuid>,
    /// A running job asked to pause: it stops at its next checkpoint and is then `paused`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pausing: bool,
    /// What the box expected of the job when it was queued.
    pub estimate: Option<Estimate>,
    /// A queued job's place among every owner's jobs; null for any other.
    pub queue: Option<QueuePlace>,
    /// A cancelled job whose finished segments were kept as its (shorter) result.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub partial: bool,
    /// A cancel asked to keep the finished segments (`…/cancel?keep=true`).
    #[serde(skip)]
    pub keep_partial: bool,
    /// A job run in parts: each part's frames and where it stands (null for a job run whole).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parts: Option<Vec<PartView>>,
    /// Where a job run in parts stands: its parts run, or it waits to be joined.
    #[serde(skip)]
    pub split: Option<SplitState>,
    /// A part of a job run in parts: which (parts are rows of their own, never listed).
    #[serde(skip)]
    pub part: Option<JobPart>,
    #[serde(skip)]
    pub input_path: String,
    #[serde(skip)]
    pub output_path: Option<String>,
}

/// Which frames of its job a part runs, and where it stands among the job's parts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct JobPart {
    /// The job it is a part of.
    pub of: Uuid,
    /// 0 for the first part.
    pub index: usize,
    pub count: usize,
    /// Its first frame, counted in the job's frames (0: the job's first).
    pub first_frame: u64,
    /// How many frames; none for the last part, which runs to the input's end.
    pub frames: Option<u64>,
}

impl JobPart {
    /// `part 2 of 4 (frames 60–119)`: how errors and logs name it.
    pub fn describe(&self) -> String {
        let last = match self.frames {
            Some(frames) => format!("{}", self.first_frame + frames.max(1) - 1),
            None => "the end".into(),
        };
        format!("part {} of {} (frames {}–{last})", self.index + 1, self.count, self.first_frame)
    }
}

/// Where a job run in parts stands (`split_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SplitState {
    /// Its parts run; the job has no worker of its own.
    Parts,
    /// Every part succeeded: queued, or running, to be joined.
    Join,
}

impl SplitState {
    pub fn as_str(self) -> &'static str {
        match self {
            SplitState::Parts => "parts",
            SplitState::Join => "join",
        }
    }

    pub fn parse(text: &str) -> Option<SplitState> {
        [SplitState::Parts, SplitState::Join].into_iter().find(|state| state.as_str() == text)
    }
}

/// A part as its job shows it (`GET /v1/jobs/{id}`, the page).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct PartView {
    /// Its own id: its checkpoints' name in a shared storage, and what the workers' logs say.
    pub id: Uuid,
    pub index: usize,
    pub first_frame: u64,
    /// None for the last part: to the input's end.
    pub frames: Option<u64>,
    pub status: JobStatus,
    pub worker: Option<String>,
    #[schema(format = DateTime)]
    pub started_at: Option<String>,
    #[schema(format = DateTime)]
    pub finished_at: Option<String>,
    pub attempts: i64,
    pub progress: Option<Progress>,
    pub error: Option<JobError>,
}

/// What the executor hands back for a finished job.
#[derive(Debug, Clone)]
pub struct JobOutcome {
    pub output_name: String,
    pub output_path: std::path::PathBuf,
    pub output_bytes: u64,
    pub output_media: Option<MediaInfo>,
    pub timings: Timings,
    pub plan: Option<JobPlan>,
    pub metrics: Option<QualityMetrics>,
}

pub fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

pub fn seconds_between(start: &str, end: &str) -> Option<f64> {
    let start = chrono::DateTime::parse_from_rfc3339(start).ok()?;
    let end = chrono::DateTime::parse_from_rfc3339(end).ok()?;
    Some((end - start).num_microseconds()? as f64 / 1e6)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_eta_follows_the_rate_so_far() {
        let p = Progress::frames(25, 100, 5.0);
        assert_eq!(p.fraction, 0.25);
        assert!((p.eta_s.unwrap() - 15.0).abs() < 1e-9);
        assert_eq!(Progress::frames(0, 100, 1.0).eta_s, None);
    }

    #[test]
    fn names_round_trip() {
        for op in Op::ALL {
            assert_eq!(Op::parse(op.as_str()), Some(op));
        }
        assert_eq!(JobStatus::parse("running"), Some(JobStatus::Running));
        assert_eq!(JobStatus::parse("paused"), Some(JobStatus::Paused));
        assert_eq!(JobStatus::parse("sleeping"), None);
    }
}
