//! The executor: one `std::thread` that owns the device, the loaded models and every tensor.
//! Async code reaches it through a channel of commands, each with a oneshot reply; progress goes
//! back on a `watch` channel and cancellation arrives as a flag the ops and models ask between tiles,
//! layers and chunks. What an op reads of the executor and its job is in `context`, below the ops. The
//! jobs' ops are in `vae`, `upscale`, `restore` and `interpolate`; running a model tile by tile on a planned
//! layout is in `tiled`.
mod alpha;
mod attempt;
mod context;
mod error;
pub mod frames;
mod lending;
pub mod frame_workers;
mod media_io;
mod models;
mod parts;
mod quality;
// Out of memory: retry a push shorter (`resilient`), then re-plan the job for less memory (`replan`);
// the VAE ops and restore's VAE stages share both.
mod replan;
mod resilient;
mod resume;
mod segment_digests;
mod stage_clock;
pub mod flashvsr;
pub mod restore;
pub mod scene;
pub mod tiled;
pub mod interpolate;
mod upscale;
mod vae;

use std::sync::mpsc;
use std::time::Instant;

use tokio::sync::oneshot;

use context::Executor;
pub use context::{ExecutorConfig, JobHooks, JobSpec, PartFrames, Portion};
pub use error::ExecError;
use models::LoadedModels;

use crate::jobs::{JobOutcome, Progress, Timings};
use crate::models::Op;

struct RunCommand {
    job: JobSpec,
    hooks: JobHooks,
    reply: oneshot::Sender<(Result<JobOutcome, ExecError>, Timings)>,
}

/// What the executor thread is asked.
enum Command {
    /// A job of its own: run to its end, lending the executor at its chunk ends.
    Run(RunCommand),
    /// Jobs are waiting to be lent the executor: run them now if it is idle (else the running job's next
    /// chunk end already did).
    Lend,
}

/// The async side's handle; cheap to clone.
#[derive(Clone)]
pub struct ExecutorHandle {
    commands: mpsc::Sender<Command>,
    /// Synchronous calls and short jobs waiting for the running job's next chunk end (`lending`).
    waiting: Waiting,
    device: String,
    /// A CUDA device's total memory; `None` on CPU.
    device_memory_bytes: Option<u64>,
}

impl ExecutorHandle {
    /// Starts the executor thread; returns once the device is chosen.
    pub fn spawn(config: ExecutorConfig) -> ExecutorHandle {
        let (commands, inbox) = mpsc::channel::<Command>();
        let waiting = Waiting::default();
        let lent = waiting.clone();
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
                serve(Executor { config, device, models: LoadedModels::default() }, Inbox { commands: inbox, waiting: lent }, None);
            })
            .expect("spawn executor thread");
        let (device, device_memory_bytes) = match device_rx.recv() {
            Ok((device, total)) => (crate::device::device_name(device), total),
            Err(_) => ("unavailable".into(), None),
        };
        ExecutorHandle { commands, waiting, device, device_memory_bytes }
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
        if self.commands.send(Command::Run(RunCommand { job, hooks, reply })).is_err() {
            return (Err(ExecError::ExecutorGone), fallback);
        }
        answer.await.unwrap_or((Err(ExecError::ExecutorGone), fallback))
    }

    /// Runs one job at the running job's next chunk end, or at once when the executor is idle (`lending`).
    pub async fn lend(&self, job: JobSpec, hooks: JobHooks) -> (Result<JobOutcome, ExecError>, Timings) {
        let fallback = job.timings.clone();
        let (reply, answer) = oneshot::channel();
        self.waiting.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).push_back(RunCommand { job, hooks, reply });
        if self.commands.send(Command::Lend).is_err() {
            return (Err(ExecError::ExecutorGone), fallback);
        }
        answer.await.unwrap_or((Err(ExecError::ExecutorGone), fallback))
    }
}

/// The jobs waiting to be lent the executor (`lending`), in the order they came.
type Waiting = std::sync::Arc<std::sync::Mutex<std::collections::VecDeque<RunCommand>>>;

/// What the executor thread reads its work from.
struct Inbox {
    commands: mpsc::Receiver<Command>,
    waiting: Waiting,
}

fn next_waiting(waiting: &Waiting) -> Option<RunCommand> {
    waiting.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).pop_front()
}

/// Runs every job waiting to be lent the executor on `executor` itself (it is idle).
fn run_waiting(waiting: &Waiting, executor: &mut Executor) {
    while let Some(command) = next_waiting(waiting) {
        run_command(executor, command);
    }
}

/// What a chunk end of `executor`'s own job calls to lend it: the next waiting job, run on a side executor.
fn lender(executor: &Executor, waiting: &Waiting) -> lending::LendOne {
    let (mut side, waiting) = (executor.side(), waiting.clone());
    Box::new(move || match next_waiting(&waiting) {
        Some(command) => {
            tracing::info!(id = %command.job.id, op = command.job.op.as_str(), "the running job lends the executor");
            run_command(&mut side, command);
            true
        }
        None => false,
    })
}

/// Runs one job on `executor` and sends its outcome back.
fn run_command(executor: &mut Executor, command: RunCommand) {
    let mut timings = command.job.timings.clone();
    // tch turns libtorch exceptions into panics; one bad job must not take the device's owner down.
    let result = attempt::attempt(|| executor.run(&command.job, &command.hooks, &mut timings));
    let _ = command.reply.send((result, timings));
}

/// Runs the jobs in `inbox` one by one (`first`, if given, before them) until the server ends. Once a
/// kernel could not be created on this thread (see [`attempt`]), the next job moves serving to a new
/// thread: at the next job and not right after the failure, since whatever limited memory then may
/// also keep a thread from starting.
fn serve(mut executor: Executor, mut inbox: Inbox, mut first: Option<RunCommand>) {
    loop {
        let command = match first.take() {
            Some(command) => command,
            None => match inbox.commands.recv() {
                Ok(Command::Run(command)) => command,
                Ok(Command::Lend) => {
                    run_waiting(&inbox.waiting, &mut executor);
                    continue;
                }
                Err(_) => return,
            },
        };
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
        let lend_one = lender(&executor, &inbox.waiting);
        lending::lending_while(lend_one, || run_command(&mut executor, command));
    }
}

/// What one executor thread passes to the next.
struct Handover {
    executor: Executor,
    inbox: Inbox,
    command: RunCommand,
}

/// Hands the settings, the inbox and the job at hand to a new executor thread. The loaded models stay
/// behind and are freed (the job loads its model again): they are not `Send`, and after an
/// out-of-memory the memory is better free. If no thread can be started, everything comes back.
fn serve_on_a_new_thread(handover: Handover) -> Result<(), Box<Handover>> {
    let Handover { executor: Executor { config, device, models }, inbox, command } = handover;
    let threads = tch::get_num_threads();
    let (give, take) = mpsc::sync_channel::<(ExecutorConfig, Inbox, RunCommand)>(1);
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

impl Executor {
    /// An executor over the same device and settings with no model loaded: where lent jobs run.
    fn side(&self) -> Executor {
        Executor { config: self.config.clone(), device: self.device, models: LoadedModels::default() }
    }

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
        // The time lent to others is theirs, not this job's.
        let lent = hooks.lent_s();
        timings.lent = (lent > 0.0).then_some(lent);
        timings.total = Some((started.elapsed().as_secs_f64() - lent).max(0.0));
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
}
