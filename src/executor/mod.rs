//! The executor: one `std::thread` that owns the device, the loaded models and every tensor.
//! Async code reaches it through a channel of commands, each with a oneshot reply; progress goes
//! back on a `watch` channel and cancellation arrives as a flag checked between chunks. The jobs'
//! ops are in `vae`, `upscale` and `restore`; running a model tile by tile on a planned layout is in
//! `tiled`.
mod alpha;
mod attempt;
mod error;
pub mod frames;
pub mod frame_workers;
mod media_io;
mod models;
mod quality;
// Out of memory: retry a push shorter (`resilient`), then re-plan the job for less memory (`replan`);
// the VAE ops and restore's VAE stages share both.
mod replan;
mod resilient;
mod resume;
mod segment_digests;
mod stage_clock;
pub mod restore;
pub mod scene;
pub mod tiled;
pub mod interpolate;
mod upscale;
mod vae;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Instant;

use tch::Device;
use tokio::sync::{oneshot, watch};
use uuid::Uuid;

pub use error::ExecError;
use models::LoadedModels;

use crate::config::Config;
use crate::jobs::{JobOutcome, JobParams, Progress, Timings};
use crate::models::Op;
use crate::media::{MediaInfo, MediaLimits, MediaTools};

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
}

impl JobHooks {
    pub fn check_cancelled(&self) -> Result<(), ExecError> {
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

struct RunCommand {
    job: JobSpec,
    hooks: JobHooks,
    reply: oneshot::Sender<(Result<JobOutcome, ExecError>, Timings)>,
}

/// The async side's handle; cheap to clone.
#[derive(Clone)]
pub struct ExecutorHandle {
    commands: mpsc::Sender<RunCommand>,
    device: String,
    /// A CUDA device's total memory; `None` on CPU.
    device_memory_bytes: Option<u64>,
}

impl ExecutorHandle {
    /// Starts the executor thread; returns once the device is chosen.
    pub fn spawn(config: ExecutorConfig) -> ExecutorHandle {
        let (commands, inbox) = mpsc::channel::<RunCommand>();
        let (device_tx, device_rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("vaebox-executor".into())
            .spawn(move || {
                let device = crate::device::init(config.device, config.threads, config.cpu_allocator);
                crate::models::nn::winograd::set_enabled(config.cpu_winograd);
                if crate::device::cuda::set_tf32(config.tf32) {
                    tracing::info!(tf32 = config.tf32, "CUDA TF32 switch applied");
                }
                if !device.is_cuda() && config.cpu_allocator == crate::device::HostAllocator::Fast && config.memory_budget_mib > 0 {
                    tracing::warn!("cpu_allocator = \"fast\": glibc keeps freed tensors, so memory_budget_mib is not held on CPU");
                }
                let _ = device_tx.send((device, crate::device::cuda::memory_for_this_process(device).map(|(_, total)| total)));
                serve(Executor { config, device, models: LoadedModels::default() }, inbox, None);
            })
            .expect("spawn executor thread");
        let (device, device_memory_bytes) = match device_rx.recv() {
            Ok((device, total)) => (crate::device::device_name(device), total),
            Err(_) => ("unavailable".into(), None),
        };
        ExecutorHandle { commands, device, device_memory_bytes }
    }

    pub fn device(&self) -> &str {
        &self.device
    }

    pub fn device_memory_bytes(&self) -> Option<u64> {
        self.device_memory_bytes
    }

    /// Runs one job to the end; the timings measured so far come back even when it fails.
    pub async fn run(&self, job: JobSpec, hooks: JobHooks) -> (Result<JobOutcome, ExecError>, Timings) {
        let fallback = job.timings.clone();
        let (reply, answer) = oneshot::channel();
        if self.commands.send(RunCommand { job, hooks, reply }).is_err() {
            return (Err(ExecError::ExecutorGone), fallback);
        }
        answer.await.unwrap_or((Err(ExecError::ExecutorGone), fallback))
    }
}

/// Runs the jobs in `inbox` one by one (`first`, if given, before them) until the server ends. Once a
/// kernel could not be created on this thread (see [`attempt`]), the next job moves serving to a new
/// thread: at the next job and not right after the failure, since whatever limited memory then may
/// also keep a thread from starting.
fn serve(mut executor: Executor, mut inbox: mpsc::Receiver<RunCommand>, mut first: Option<RunCommand>) {
    loop {
        let Some(command) = first.take().or_else(|| inbox.recv().ok()) else { return };
        let command = if attempt::this_thread_cannot_create_kernels() {
            match serve_on_a_new_thread(Handover { executor, inbox, command }) {
                Ok(()) => return,
                Err(kept) => {
                    (executor, inbox) = (kept.executor, kept.inbox);
                    kept.command
                }
            }
        } else {
            command
        };
        let mut timings = command.job.timings.clone();
        // tch turns libtorch exceptions into panics; one bad job must not take the device's owner down.
        let result = attempt::attempt(|| executor.run(&command.job, &command.hooks, &mut timings));
        let _ = command.reply.send((result, timings));
    }
}

/// What one executor thread passes to the next.
struct Handover {
    executor: Executor,
    inbox: mpsc::Receiver<RunCommand>,
    command: RunCommand,
}

/// Hands the settings, the inbox and the job at hand to a new executor thread. The loaded models stay
/// behind and are freed (the job loads its model again): they are not `Send`, and after an
/// out-of-memory the memory is better free. If no thread can be started, everything comes back.
fn serve_on_a_new_thread(handover: Handover) -> Result<(), Box<Handover>> {
    let Handover { executor: Executor { config, device, models }, inbox, command } = handover;
    let threads = tch::get_num_threads();
    let (give, take) = mpsc::sync_channel::<(ExecutorConfig, mpsc::Receiver<RunCommand>, RunCommand)>(1);
    let spawned = std::thread::Builder::new().name("vaebox-executor".into()).spawn(move || {
        let Ok((config, inbox, command)) = take.recv() else { return };
        tch::set_num_threads(threads);
        serve(Executor { config, device, models: LoadedModels::default() }, inbox, Some(command));
    });
    match spawned {
        Ok(_) => {
            tracing::warn!("a kernel could not be created on the executor thread (out of memory); the executor goes on on a new thread");
            drop(models);
            let _ = give.send((config, inbox, command));
            Ok(())
        }
        Err(error) => {
            tracing::warn!(%error, "cannot start a new executor thread; jobs with new shapes may fail until one starts");
            Err(Box::new(Handover { executor: Executor { config, device, models }, inbox, command }))
        }
    }
}

struct Executor {
    config: ExecutorConfig,
    device: Device,
    models: LoadedModels,
}

impl Executor {
    fn run(&mut self, job: &JobSpec, hooks: &JobHooks, timings: &mut Timings) -> Result<JobOutcome, ExecError> {
        let started = Instant::now();
        crate::device::reset_peak_host_bytes();
        crate::device::cuda::reset_peak(self.device);
        // An earlier job's out-of-memory may have switched it off (device::cuda::stop_autotuning_after_out_of_memory).
        crate::device::cuda::set_autotuning(self.device, self.config.cudnn_benchmark);
        timings.device = Some(crate::device::device_name(self.device));
        hooks.progress.send_replace(Progress::starting(job.input_media.as_ref().map_or(0, |media| media.frames)));
        let result = match job.op {
            Op::Upscale => upscale::run(self, job, hooks, timings),
            Op::VaeEncode | Op::VaeDecode | Op::VaeReconstruct => vae::run(self, job, hooks, timings),
            Op::Restore => restore::run(self, job, hooks, timings),
            Op::Interpolate => interpolate::run(self, job, hooks, timings),
        };
        timings.total = Some(started.elapsed().as_secs_f64());
        timings.peak_host_bytes = crate::device::peak_host_bytes();
        timings.peak_device_bytes = crate::device::cuda::peak_allocated_bytes(self.device);
        if result.as_ref().is_err_and(ExecError::is_out_of_memory) {
            // What the failed attempt cached would shrink the next job's free-memory budget.
            crate::device::release_cached_memory(self.device);
        }
        if result.is_ok() {
            hooks.progress.send_modify(Progress::finished);
        }
        result.map(|mut outcome: JobOutcome| {
            outcome.timings = timings.clone();
            outcome
        })
    }

    /// MiB of working memory for the job: its own budget, else the configured one, else (on CUDA, with the
    /// job's models loaded) the free device memory minus the margin; 0 = no limit.
    fn working_budget_mib(&self, job: &JobSpec) -> u64 {
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
    fn max_push_latent_frames(&self, temporal_factor: i64) -> i64 {
        if self.device.is_cuda() {
            i64::MAX
        } else {
            (self.config.chunk_frames as i64 / temporal_factor).max(1)
        }
    }

    /// The job's precision, or the box's default; recorded in the timings so users see what ran.
    fn resolve_kind(&self, job: &JobSpec, timings: &mut Timings) -> tch::Kind {
        let choice = match job.params.dtype {
            crate::device::DtypeChoice::Auto => self.config.dtype,
            chosen => chosen,
        };
        let kind = choice.resolve(self.device);
        timings.dtype = Some(crate::device::kind_name(kind).into());
        kind
    }
}
