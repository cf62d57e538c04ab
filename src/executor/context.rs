//! What a running job's op reads from the executor: the job (`JobSpec`), its hooks to the outside
//! (`JobHooks`), the executor's settings and device (`Executor`, `ExecutorConfig`) and the job's memory and
//! precision as the box decides them. A leaf below the ops: mod.rs dispatches to them, they import this.
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use tch::Device;
use tokio::sync::watch;
use uuid::Uuid;

use super::error::ExecError;
use super::models::LoadedModels;
use crate::config::Config;
use crate::jobs::{JobParams, Progress, Timings};
use crate::media::{MediaInfo, MediaLimits, MediaTools};
use crate::models::Op;

/// Everything the executor needs to run one job; built by the scheduler or the one-shot CLI.
#[derive(Debug, Clone)]
pub struct JobSpec {
    pub id: Uuid,
    pub op: Op,
    pub model: String,
    pub params: JobParams,
    pub input_path: PathBuf,
    pub input_media: Option<MediaInfo>,
    /// The final output path; it appears only once complete.
    pub output_path: PathBuf,
    /// Stages measured before the executor got the job (`queued`, `probe`).
    pub timings: Timings,
    /// With a shared storage (`storage`): the job may go on on another box, so its checkpoints know the
    /// input by what every box sees of it, and each one is reported here to be put into the storage.
    pub shared_checkpoints: Option<crate::jobs::shared_resume::CheckpointReports>,
    /// The whole job, one part of a job run in parts, or the join of its parts.
    pub portion: Portion,
}

/// A part's output frames: from `first`, `count` of them (none: to the end).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartFrames {
    pub first: u64,
    pub count: Option<u64>,
}

/// How much of a job a run does (`jobs::parts`).
#[derive(Debug, Clone)]
pub enum Portion {
    /// All of it, into its result.
    Whole,
    /// One part into finished segments and a checkpoint in its resume folder, which the join reads; no
    /// result of its own. Its frames: the job's `range` (an upscale), or `outputs` of the job's output
    /// frames (an interpolation, whose output frames are not its input's).
    Part { outputs: Option<PartFrames> },
    /// The parts' segments, in their resume folders first to last, joined into the result with the input's
    /// audio, as the whole job's own segments are; `plan`: how the parts ran.
    Join { parts: Vec<PathBuf>, plan: Option<crate::jobs::JobPlan> },
}

/// The settings of the executor thread: the box's config (read through `Deref`, so every setting is
/// named once, in `Config`), the device this executor runs on (a box with two GPUs runs one executor on
/// each), and the media settings made from the config once.
#[derive(Debug, Clone)]
pub struct ExecutorConfig {
    pub device: crate::device::DeviceChoice,
    pub tools: MediaTools,
    pub limits: MediaLimits,
    config: Arc<Config>,
}

impl ExecutorConfig {
    pub fn from_config(config: &Config) -> ExecutorConfig {
        ExecutorConfig { device: config.device, tools: config.media_tools(), limits: config.media_limits(), config: Arc::new(config.clone()) }
    }

    /// The same settings on another device.
    pub fn on_device(self, device: crate::device::DeviceChoice) -> ExecutorConfig {
        ExecutorConfig { device, ..self }
    }
}

impl std::ops::Deref for ExecutorConfig {
    type Target = Config;

    fn deref(&self) -> &Config {
        &self.config
    }
}

/// What a running job can see of the outside world.
pub struct JobHooks {
    pub progress: watch::Sender<Progress>,
    pub cancel: Arc<AtomicBool>,
    /// Raised when the job should make way (its owner paused it, another owner's turn, the server stops): it
    /// stops right after its next checkpoint (`ExecError::MadeWay`) and goes on from it later.
    pub make_way: Arc<AtomicBool>,
    /// Microseconds the job lent the executor to others at its chunk ends (`lending`).
    lent_us: AtomicU64,
}

impl JobHooks {
    pub fn new(progress: watch::Sender<Progress>, cancel: Arc<AtomicBool>, make_way: Arc<AtomicBool>) -> JobHooks {
        JobHooks { progress, cancel, make_way, lent_us: AtomicU64::new(0) }
    }

    /// A chunk end, where the job holds nothing another job could disturb: a cancel stops it here, and the
    /// synchronous calls and short jobs waiting for the executor run now (`lending`).
    pub fn between_chunks(&self) -> Result<(), ExecError> {
        self.check_cancelled()?;
        let lent = super::lending::lend();
        if !lent.is_zero() {
            self.lent_us.fetch_add(lent.as_micros() as u64, Ordering::Relaxed);
            self.check_cancelled()?;
        }
        Ok(())
    }

    /// Seconds lent to others so far.
    pub fn lent_s(&self) -> f64 {
        self.lent_us.load(Ordering::Relaxed) as f64 / 1e6
    }

    /// Whether the job should stop after the checkpoint it just wrote.
    pub fn should_make_way(&self) -> bool {
        self.make_way.load(Ordering::Relaxed)
    }

    fn check_cancelled(&self) -> Result<(), ExecError> {
        if self.cancel.load(Ordering::Relaxed) {
            Err(ExecError::Cancelled)
        } else {
            Ok(())
        }
    }

    /// The cancel as the models ask it inside a push or a DiT call (`ModelError::Stopped` → `Cancelled`).
    pub fn stop_flag(&self) -> crate::models::stop::StopFlag {
        crate::models::stop::StopFlag::on(self.cancel.clone())
    }
}

pub(super) struct Executor {
    pub(super) config: ExecutorConfig,
    pub(super) device: Device,
    pub(super) models: LoadedModels,
}

impl Executor {
    /// MiB of working memory for the job: its own budget, else the configured one, else (on CUDA, with the
    /// job's models loaded) the free device memory minus the margin; 0 = no limit.
    pub(super) fn working_budget_mib(&self, job: &JobSpec) -> u64 {
        let budget_mib = job.params.memory_budget_mib.unwrap_or(self.config.memory_budget_mib);
        if budget_mib == 0 {
            // Blocks the allocator caches from earlier jobs are free for this one but not to the driver.
            crate::device::cuda::empty_cache(self.device);
        }
        match (budget_mib, crate::device::cuda::memory_for_this_process(self.device)) {
            // The loaded weights are already off the free memory, so what is left is working memory.
            (0, Some((free, _))) => (free >> 20).saturating_sub(self.config.device_memory_margin_mib).max(1),
            (budget, _) => budget,
        }
    }

    /// The longest VAE push a job's planner may choose, in latent frames. On the CPU `chunk_frames`: a
    /// longer push only holds more memory there. On a GPU no cap beyond the clip: one latent frame per push
    /// is too little work per call (an H200's 480p decode job ran at a fifth of its bench, one frame per
    /// push with 140 GB free), so the planner takes as many frames as the budget (by default the device's
    /// free memory) holds.
    pub(super) fn max_push_latent_frames(&self, temporal_factor: i64) -> i64 {
        if self.device.is_cuda() {
            i64::MAX
        } else {
            (self.config.chunk_frames as i64 / temporal_factor).max(1)
        }
    }

    /// The job's precision, or the box's default; recorded in the timings so users see what ran.
    pub(super) fn resolve_kind(&self, job: &JobSpec, timings: &mut Timings) -> tch::Kind {
        let choice = match job.params.dtype {
            crate::device::DtypeChoice::Auto => self.config.dtype,
            chosen => chosen,
        };
        let kind = choice.resolve(self.device);
        timings.dtype = Some(crate::device::kind_name(kind).into());
        kind
    }
}
