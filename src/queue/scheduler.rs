//! The scheduler: claims the next queued job from the store, hands it to the executor, writes
//! progress and the outcome back, and announces every change to listeners (SSE); finished jobs are
//! reported to `telemetry`.
use crate::models::{OutputName, Writes};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{broadcast, watch, Notify};
use uuid::Uuid;

use crate::jobs::disk::DiskReserve;
use crate::jobs::files::{JobFiles, Patience};
use crate::jobs::model::*;
use crate::jobs::shared_resume::{remove_dir, resume_dir, SharedCheckpoints};
use crate::jobs::store::{Claim, JobStore, Lane, Lease, LeaseState, WorkerInfo};
use crate::executor::{ExecError, ExecutorHandle, JobHooks, JobSpec};

/// Progress reaches the database at most this often; SSE listeners see the same rate.
const PROGRESS_INTERVAL: Duration = Duration::from_millis(250);
/// News about the running job (progress, a cancellation asked elsewhere) makes the worker read its row at
/// most this often.
const NEWS_CHECK_INTERVAL: Duration = Duration::from_millis(500);
/// A safety net in case a wake-up is missed (e.g. a job inserted by another process).
const IDLE_POLL: Duration = Duration::from_secs(2);
/// While a job runs, the queue is read for a synchronous call or a short job to lend the executor to at most
/// this often (each queued job's news wakes it sooner).
const LEND_CHECK_INTERVAL: Duration = Duration::from_millis(200);
const LEND_IDLE_POLL: Duration = Duration::from_millis(500);
/// Writing a job's outcome is tried again until the store takes it, pausing 0.25 s, 0.5 s, … up to 2 s
/// between tries: once the database is back, the outcome is written before the job's lease is swept.
const OUTCOME_RETRY_FIRST_PAUSE: Duration = Duration::from_millis(250);
const OUTCOME_RETRY_MAX_PAUSE: Duration = Duration::from_secs(2);
/// A still-failing write of an outcome is logged as an error this often (warnings in between).
const OUTCOME_RETRY_ERROR_EVERY: Duration = Duration::from_secs(60);

/// The flags of running jobs, shared between the API and the scheduler (a cancel; a request to make way at the
/// next checkpoint), and whether the server is stopping (then nothing more is claimed, running jobs make way at
/// their next checkpoint, and a job stopped by its flag is left to be re-queued).
#[derive(Clone, Default)]
pub struct CancelFlags {
    running: Arc<Mutex<HashMap<Uuid, JobFlags>>>,
    stopping: Arc<AtomicBool>,
}

/// One running job's flags.
#[derive(Clone, Default)]
struct JobFlags {
    cancel: Arc<AtomicBool>,
    make_way: Arc<AtomicBool>,
}

impl CancelFlags {
    fn register(&self, id: Uuid) -> JobFlags {
        let flags = JobFlags::default();
        flags.make_way.store(self.is_stopping(), Ordering::Relaxed);
        self.running.lock().unwrap().insert(id, flags.clone());
        flags
    }

    fn remove(&self, id: Uuid) {
        self.running.lock().unwrap().remove(&id);
    }

    /// Returns whether the job was running here.
    pub fn raise(&self, id: Uuid) -> bool {
        match self.running.lock().unwrap().get(&id) {
            Some(flags) => {
                flags.cancel.store(true, Ordering::Relaxed);
                true
            }
            None => false,
        }
    }

    /// Asks the job, if it runs here, to make way at its next checkpoint (`false`: no longer). Whether it runs
    /// here.
    pub fn make_way(&self, id: Uuid, make_way: bool) -> bool {
        match self.running.lock().unwrap().get(&id) {
            Some(flags) => {
                flags.make_way.store(make_way || self.is_stopping(), Ordering::Relaxed);
                true
            }
            None => false,
        }
    }

    /// The server is stopping: the scheduler claims no more jobs, and running jobs stop at their next
    /// checkpoint (they go on from it at the next start).
    pub fn stop_claiming(&self) {
        self.stopping.store(true, Ordering::Relaxed);
        self.running.lock().unwrap().values().for_each(|flags| flags.make_way.store(true, Ordering::Relaxed));
    }

    /// The shutdown grace is over: running jobs stop at their next chunk and are re-queued at the next start.
    pub fn stop_running(&self) {
        self.stop_claiming();
        self.running.lock().unwrap().values().for_each(|flags| flags.cancel.store(true, Ordering::Relaxed));
    }

    fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::Relaxed)
    }
}

/// Announcements of "job X changed"; listeners re-read the job from the store.
pub type JobEvents = broadcast::Sender<Uuid>;

/// Who this scheduler claims as.
#[derive(Clone)]
pub struct Worker {
    pub name: String,
    /// What `/healthz` shows for it.
    pub device: String,
    pub lease: Duration,
    /// It claims only jobs for the models found here,
    pub models_dir: PathBuf,
    /// and only jobs that need at most this much device memory (`None`: no limit).
    pub device_memory_bytes: Option<u64>,
    /// `short_job_s`: jobs expected to take at most this long are lent the executor while another runs.
    pub short_job_s: f64,
    /// `fair_wait_s`: a running job makes way for another owner's job that waited this long (0: never).
    pub fair_wait_s: f64,
}

impl Worker {
    fn claim(&self, lane: Lane) -> Claim {
        let models = crate::models::registry::scan(&self.models_dir).into_iter().filter(|m| m.present()).map(|m| m.name).collect();
        Claim { worker: self.name.clone(), lease: self.lease, models: Some(models), device_memory_bytes: self.device_memory_bytes, lane }
    }

    /// This worker as `/healthz` lists it, heard of now.
    fn info(&self, started_at: &str, current_job: Option<Uuid>) -> WorkerInfo {
        WorkerInfo {
            name: self.name.clone(),
            device: self.device.clone(),
            device_memory_bytes: self.device_memory_bytes,
            current_job,
            started_at: started_at.into(),
            last_heartbeat: now_rfc3339(),
        }
    }

    /// Heartbeats go three times per lease: one late or lost beat does not cost the job.
    fn beat(&self) -> Duration {
        self.lease / 3
    }
}

pub struct Scheduler {
    pub store: Arc<dyn JobStore>,
    pub executor: ExecutorHandle,
    pub worker: Worker,
    pub wake: Arc<Notify>,
    pub events: JobEvents,
    pub cancels: CancelFlags,
    /// Taken back before each claim; given up when a job's outcome cannot be written for lack of space.
    pub reserve: Arc<DiskReserve>,
    /// The job's input comes from, and its result goes to, the shared storage when one is set.
    pub files: JobFiles,
    /// With shared storage, whether this box keeps its copies of a job's files after the job (an API in
    /// the same process serves from them) or removes them (a worker only: the storage has them).
    pub keep_local_copies: bool,
    /// How long a job waits for a shared storage that refuses (`storage_wait_s`) before it fails.
    pub storage_wait: Duration,
    /// The media tools a cancel that keeps its frames joins them with.
    pub config: Arc<crate::config::Config>,
}

/// A storage error that ended a job: its cancellation if a user asked while it waited.
fn storage_error(patience: &Patience<'_>, message: String) -> ExecError {
    if patience.cancelled.load(Ordering::Relaxed) {
        ExecError::Cancelled
    } else {
        ExecError::Storage(message)
    }
}

impl Scheduler {
    /// Runs jobs until the server stops (`CancelFlags::stop_claiming`); returns once the job in hand ended.
    /// Two lanes: the executor's own jobs, in the claim order, and the synchronous calls and short jobs lent
    /// the executor at a running job's chunk ends (`executor::lending`).
    pub async fn run(self) {
        let started_at = now_rfc3339();
        let busy = Mutex::new(None);
        tokio::join!(self.own_lane(&started_at, &busy), self.lending_lane(&started_at, &busy));
    }

    /// `busy`: the job the executor runs as its own, while it does.
    async fn own_lane(&self, started_at: &str, busy: &Mutex<Option<Uuid>>) {
        while !self.cancels.is_stopping() {
            self.reserve.ensure();
            self.seen(started_at, None).await;
            match self.store.claim_next(&self.worker.claim(Lane::Any)).await {
                Ok(Some(job)) => {
                    *busy.lock().unwrap() = Some(job.id);
                    self.execute(job, started_at, Run::Own).await;
                    *busy.lock().unwrap() = None;
                }
                Ok(None) => {
                    let _ = tokio::time::timeout(IDLE_POLL.min(self.worker.beat()), self.wake.notified()).await;
                }
                Err(e) => {
                    // A store outage: wait for it to come back, do not stop.
                    tracing::error!(error = %e, "cannot claim the next job");
                    tokio::time::sleep(IDLE_POLL).await;
                }
            }
        }
    }

    /// While the executor runs a job of its own, claims synchronous calls and short jobs and has them lent the
    /// executor at the running job's next chunk end, one at a time. A short job is lent it only while the
    /// running job has longer than `short_job_s` left (or no estimate): one short job does not wait on another.
    async fn lending_lane(&self, started_at: &str, busy: &Mutex<Option<Uuid>>) {
        let mut news = self.events.subscribe();
        while !self.cancels.is_stopping() {
            let running = *busy.lock().unwrap();
            if let Some(running) = running {
                let short = Lane::Short { short_job_s: self.lendable_s(running).await };
                match self.store.claim_next(&self.worker.claim(short)).await {
                    Ok(Some(job)) => {
                        self.execute(job, started_at, Run::Lent).await;
                        continue;
                    }
                    Ok(None) => {}
                    Err(e) => tracing::warn!(error = %e, "cannot look for a job to lend the executor to"),
                }
            }
            tokio::time::sleep(LEND_CHECK_INTERVAL).await;
            // Until any job's news (a queued job is one), or a short poll (the server's stop is seen soon).
            let _ = tokio::time::timeout(LEND_IDLE_POLL, news.recv()).await;
        }
    }

    /// The longest job lent the executor while `running` runs: `short_job_s`, or none but synchronous calls
    /// when `running` itself has no longer than that left.
    async fn lendable_s(&self, running: Uuid) -> f64 {
        let remaining = match self.store.queue_snapshot().await {
            Ok(snapshot) => snapshot.entry(running).and_then(|entry| entry.remaining_s),
            Err(_) => None,
        };
        match remaining {
            Some(left) if left <= self.worker.short_job_s => 0.0,
            _ => self.worker.short_job_s,
        }
    }

    async fn seen(&self, started_at: &str, current_job: Option<Uuid>) {
        if let Err(e) = self.store.worker_seen(&self.worker.info(started_at, current_job)).await {
            tracing::warn!(error = %e, "cannot record this worker's heartbeat");
        }
    }

    /// Keeps the job's lease while it runs, and stops the job when a user cancelled it through another
    /// process (the flag is in the store; a shared database announces it at once, else the next beat sees
    /// it) or when the lease was lost (another worker may have it now).
    fn heartbeat(&self, lease: Lease, started_at: String, run: Run) -> impl std::future::Future<Output = ()> + Send + 'static {
        let store = self.store.clone();
        let cancels = self.cancels.clone();
        let mut changed = self.events.subscribe();
        let worker = self.worker.clone();
        let (beat, extend) = (worker.beat(), worker.lease);
        // The models this worker has, read once: the turns are asked at every beat.
        let claim = worker.claim(Lane::Any);
        async move {
            let mut next_beat = tokio::time::Instant::now() + beat;
            let mut last_check = tokio::time::Instant::now();
            let mut their_turn = false;
            loop {
                tokio::select! {
                    _ = tokio::time::sleep_until(next_beat) => {
                        let _ = store.worker_seen(&worker.info(&started_at, Some(lease.id))).await;
                    }
                    news = changed.recv() => match news {
                        // The job's own progress is news too: the store is asked at most twice a second.
                        Ok(id) if id == lease.id && last_check.elapsed() < NEWS_CHECK_INTERVAL => {
                            next_beat = next_beat.min(last_check + NEWS_CHECK_INTERVAL);
                            continue;
                        }
                        Ok(id) if id == lease.id => {}
                        Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => continue,
                        Err(broadcast::error::RecvError::Closed) => return,
                    },
                }
                last_check = tokio::time::Instant::now();
                next_beat = last_check + beat;
                match store.heartbeat(&lease, extend).await {
                    Ok(LeaseState::Held { cancel_requested, pause_requested }) => {
                        if cancel_requested {
                            cancels.raise(lease.id);
                        }
                        // A lent job is short: it runs to its end.
                        if run == Run::Own {
                            let turn = another_owners_turn(store.as_ref(), &claim, worker.fair_wait_s, lease.id).await;
                            if turn && !their_turn {
                                tracing::info!(id = %lease.id, "another owner's job waited its turn: the running job makes way at its next checkpoint");
                            }
                            their_turn = turn;
                            cancels.make_way(lease.id, pause_requested || turn);
                        }
                    }
                    Ok(LeaseState::Lost) => {
                        tracing::error!(id = %lease.id, "this worker lost the job's lease (it was given to another worker); stopping it");
                        cancels.raise(lease.id);
                        return;
                    }
                    Err(e) => tracing::warn!(id = %lease.id, error = %e, "cannot renew the job's lease; trying again"),
                }
            }
        }
    }

    async fn execute(&self, mut job: Job, started_at: &str, run: Run) {
        let id = job.id;
        let _ = self.events.send(id);
        tracing::info!(%id, op = job.op.as_str(), model = %job.model, lent = run == Run::Lent, "job started");
        let flags = self.cancels.register(id);
        let cancel = flags.cancel.clone();
        // Paused before this claim saw it: make way at the first checkpoint.
        if job.pausing {
            self.cancels.make_way(id, true);
        }
        let (progress_tx, progress_rx) = watch::channel(Progress::default());
        let lease = Lease { id, worker: self.worker.name.clone(), attempt: job.attempts };
        // Renewed until the outcome is written (every return below ends it).
        let heartbeat = tokio_util::task::AbortOnDropHandle::new(tokio::spawn(self.heartbeat(lease.clone(), started_at.to_string(), run)));
        let estimate_s = job.estimate.as_ref().and_then(|estimate| estimate.seconds);
        let forwarder = tokio::spawn(forward_progress(self.store.clone(), self.events.clone(), lease.clone(), progress_rx, estimate_s));

        let queued = job.started_at.as_deref().and_then(|started| seconds_between(&job.created_at, started));
        // The upload's checks ran before the job was queued; their time is part of its record.
        let timings = Timings { queued, probe: job.timings.as_ref().and_then(|t| t.probe), ..Timings::default() };
        let patience = Patience { give_up_after: self.storage_wait, cancelled: &cancel };
        let fetched = patience.retry("fetching the job's input", || self.files.ensure_local(id, &job.input_path)).await;
        let (result, timings, checkpoints) = match fetched {
            Err(e) => (Err(storage_error(&patience, format!("the job's input could not be fetched: {e}"))), timings, None),
            Ok(input) => {
                job.input_path = input.to_string_lossy().into_owned();
                let output_path = output_path_for(&job);
                // With a shared storage, a checkpoint another box made goes on here, and this box's go up.
                let checkpoints = SharedCheckpoints::start(&self.files, id, resume_dir(&output_path), &patience, cancel.clone()).await;
                let spec = JobSpec {
                    id,
                    op: job.op,
                    model: job.model.clone(),
                    params: job.params.clone(),
                    input_path: input,
                    input_media: job.input.media.clone(),
                    output_path,
                    timings,
                    shared_checkpoints: checkpoints.as_ref().map(SharedCheckpoints::reports),
                };
                let hooks = JobHooks::new(progress_tx, cancel.clone(), flags.make_way.clone());
                let (result, timings) = match run {
                    Run::Own => self.executor.run(spec, hooks).await,
                    Run::Lent => self.executor.lend(spec, hooks).await,
                };
                (self.share_result(id, result, &patience).await, timings, checkpoints)
            }
        };
        let _ = forwarder.await;
        self.cancels.remove(id);
        let stopped_by_shutdown = matches!(result, Err(ExecError::Cancelled)) && self.cancels.is_stopping();
        if stopped_by_shutdown || matches!(result, Err(ExecError::MadeWay)) {
            if let Some(checkpoints) = checkpoints {
                checkpoints.hand_over().await;
            }
            // Back in the queue (cancelled if a user asked, paused if its owner did), not counted as an
            // attempt; if the store cannot take it now, the job is left `running` and the next start re-queues it.
            match self.store.give_back(&lease).await {
                Ok(()) if self.cancels.is_stopping() => tracing::warn!(%id, "job stopped by the shutdown; it is back in the queue"),
                Ok(()) => tracing::info!(%id, "job made way at a checkpoint; it goes on from there at its turn"),
                Err(e) => tracing::warn!(%id, error = %e, "job stopped; it is re-queued at the next start"),
            }
            let _ = self.events.send(id);
            return;
        }

        let status = match &result {
            Ok(_) => JobStatus::Succeeded,
            Err(ExecError::Cancelled | ExecError::MadeWay) => JobStatus::Cancelled,
            Err(_) => JobStatus::Failed,
        };
        // Before the outcome is stored: whoever sees the job final then finds it in /metrics too.
        crate::jobs::telemetry::job_finished(job.op, status, &timings);
        // Joined before the outcome is stored: whoever sees the job cancelled sees what it kept.
        let kept = match status {
            JobStatus::Cancelled => self.kept_if_asked(&job).await,
            _ => None,
        };
        self.record_outcome(&lease, &result, &timings, kept.as_ref()).await;
        // The lease ends with the outcome: a beat now would find the job ended and take it for a lost lease.
        drop(heartbeat);
        if let Some(checkpoints) = checkpoints {
            match &result {
                Ok(_) => checkpoints.remove().await,
                Err(_) => checkpoints.stop().await,
            }
        }
        match &result {
            Ok(_) => tracing::info!(%id, total_s = timings.total, "job succeeded"),
            Err(e) => {
                tracing::warn!(%id, code = e.code(), error = %e, "job did not succeed");
                self.drop_checkpoints_if_ended(&job).await;
            }
        }
        if !self.keep_local_copies {
            self.files.drop_local_copies(id).await;
        }
        let _ = self.events.send(id);
    }

    /// A job cancelled with `keep=true`: its finished segments joined, to be its result.
    async fn kept_if_asked(&self, job: &Job) -> Option<crate::jobs::KeptOutput> {
        match self.store.get(job.id).await {
            Ok(Some(now)) if now.keep_partial => super::keep::keep_finished(&self.config, &self.files, &now, &output_path_for(&now)).await,
            _ => None,
        }
    }

    /// A job that failed or was cancelled never runs again: its checkpoints go. Asked of the store, not
    /// taken from this run's result: a run that lost its lease stops as cancelled while the job goes on
    /// elsewhere, from those checkpoints when the data dir is shared.
    /// Checkpoints are large: a tile-major decode's raw spools are as large as the decoded video.
    async fn drop_checkpoints_if_ended(&self, job: &Job) {
        let Ok(Some(now)) = self.store.get(job.id).await else { return };
        if !now.status.is_terminal() {
            return;
        }
        // This box's copy: the output's path as the job records it may be another box's.
        let dir = self.files.local(job.id, &resume_dir(&output_path_for(job)).to_string_lossy());
        if let Err(error) = remove_dir(&dir).await {
            tracing::warn!(id = %job.id, %error, "could not remove a job's checkpoints");
        }
        // A latent written in place (vae_encode) keeps its partial file beside the output for a resume,
        // which an ended job never has: a cancel must leave nothing behind.
        let output = self.files.local(job.id, &output_path_for(job).to_string_lossy());
        match tokio::fs::remove_file(crate::media::safetensors::partial_path(&output)).await {
            Ok(()) => {}
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => tracing::warn!(id = %job.id, %error, "could not remove a job's partial output"),
        }
    }

    /// With shared storage, the result is put there before the job is recorded as succeeded: whoever
    /// sees it succeeded can download it from any box.
    async fn share_result(&self, id: Uuid, result: Result<JobOutcome, ExecError>, patience: &Patience<'_>) -> Result<JobOutcome, ExecError> {
        let outcome = result?;
        match patience.retry("storing the job's result", || self.files.share(id, &outcome.output_path)).await {
            Ok(()) => Ok(outcome),
            Err(e) => Err(storage_error(patience, format!("the result could not be stored: {e}"))),
        }
    }

    /// Writes the outcome, trying again until the store takes it: finished work is never thrown away
    /// for a database outage (one of 45 s once cost a finished job, re-run from the start after its
    /// lease ran out). The job's heartbeat goes on meanwhile, and the write is fenced by the lease (the
    /// store takes it only while this worker holds the job). Only a stopping server leaves it unwritten:
    /// the job is then still `running` and is queued again at the next start.
    async fn record_outcome(&self, lease: &Lease, result: &Result<JobOutcome, ExecError>, timings: &Timings, kept: Option<&crate::jobs::KeptOutput>) {
        let id = lease.id;
        let mut pause = OUTCOME_RETRY_FIRST_PAUSE;
        let started = Instant::now();
        let mut last_error_logged = started;
        for attempt in 1u64.. {
            let stored = match result {
                Ok(outcome) => self.store.succeed(lease, outcome).await,
                Err(ExecError::Cancelled | ExecError::MadeWay) => self.store.mark_cancelled(lease, Some(timings), kept).await,
                Err(e) => {
                    // What clients see; the log line of `execute` keeps the paths.
                    let error = JobError { code: e.code().into(), message: crate::redact::client_message(&e.to_string()) };
                    self.store.fail(lease, &error, Some(timings)).await
                }
            };
            match stored {
                Ok(()) => {
                    if attempt > 1 {
                        tracing::info!(%id, attempt, waited_s = started.elapsed().as_secs_f64(), "the job's outcome is recorded");
                    }
                    return;
                }
                Err(e) if self.cancels.is_stopping() => {
                    tracing::error!(%id, error = %e, "cannot record the job's outcome before the server stops; the job is re-queued at the next start");
                    return;
                }
                Err(e) if self.reserve.release_if_full(&e) => continue,
                Err(e) if last_error_logged.elapsed() >= OUTCOME_RETRY_ERROR_EVERY => {
                    last_error_logged = Instant::now();
                    tracing::error!(%id, error = %e, attempt, waited_s = started.elapsed().as_secs_f64(), "still cannot record the job's outcome; trying again");
                }
                Err(e) => tracing::warn!(%id, error = %e, attempt, "cannot record the job's outcome yet; trying again"),
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(OUTCOME_RETRY_MAX_PAUSE);
        }
    }
}

/// How a claimed job runs: on the executor as its own, or lent the executor at a running job's chunk ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Run {
    Own,
    Lent,
}

/// Whether the running job `id` should make way at its next checkpoint for another owner's job that is next
/// in the claim order and has waited `fair_wait_s` (`claim_order::Snapshot::makes_way_for`).
async fn another_owners_turn(store: &dyn JobStore, claim: &Claim, fair_wait_s: f64, id: Uuid) -> bool {
    if fair_wait_s <= 0.0 {
        return false;
    }
    match store.queue_snapshot().await {
        Ok(snapshot) => match snapshot.makes_way_for(id, |entry| claim.accepts(entry), fair_wait_s, &now_rfc3339()) {
            Some(_) => true,
            None => false,
        },
        Err(e) => {
            tracing::warn!(%id, error = %e, "cannot read the queue for the owners' turns");
            false
        }
    }
}

/// `in.mp4` upscaled ×4 becomes `in_x4.mp4`, next to the input in the job's folder.
pub fn output_path_for(job: &Job) -> PathBuf {
    use crate::executor::interpolate::settings::DEFAULT_FACTOR;
    let input = PathBuf::from(&job.input_path);
    let stem = std::path::Path::new(&job.input.file_name)
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "video".into());
    let still = job.input.media.as_ref().is_some_and(|media| media.still);
    let spec = job.op.spec();
    let extension = match spec.writes {
        Writes::Latent => "latent.safetensors",
        Writes::Video { .. } => job.params.output_format.unwrap_or(OutputFormat::H264).extension_for(still),
    };
    let factor = job.params.interpolate.as_ref().and_then(|p| p.factor);
    let label = match spec.output_name {
        OutputName::Suffix(suffix) => suffix.to_string(),
        OutputName::Scale => {
            let interpolated = factor.map(|factor| format!("_x{factor}fps")).unwrap_or_default();
            format!("_x{}{interpolated}", job.op.scale_or_default(job.params.scale))
        }
        OutputName::Rate => match job.params.interpolate.as_ref().and_then(|p| p.fps.as_deref()) {
            // `60000/1001` → `in_60000-1001fps.mp4`; a factor: `in_x2fps.mp4`.
            Some(fps) => format!("_{}fps", fps.strip_suffix("/1").unwrap_or(fps).replace('/', "-")),
            None => format!("_x{}fps", factor.unwrap_or(DEFAULT_FACTOR)),
        },
    };
    // `in_x4.mp4` over part of the input: `in_x4_12.5s+5s.mp4`, `in_x4_f120+48f.mp4`; before the extension
    // the op wrote, whatever dots the input's own name has (`cam.2024_x4_0s+5s.mp4`).
    let range = job.params.range.as_ref().map(|range| format!("_{}", range_label(range))).unwrap_or_default();
    let name = format!("{stem}{label}{range}.{extension}");
    input.parent().map(|dir| dir.join(&name)).unwrap_or_else(|| PathBuf::from(name))
}

/// `12.5s+5s`, `f120+48f`, `0s+end`: where a part of the input starts and how long it is, for a file name.
fn range_label(range: &crate::media::InputRange) -> String {
    let start = match (range.start, range.start_frame) {
        (Some(seconds), _) => format!("{seconds}s"),
        (None, Some(frame)) => format!("f{frame}"),
        (None, None) => "0s".into(),
    };
    let length = match (range.frames, range.duration) {
        (Some(frames), _) => format!("{frames}f"),
        (None, Some(seconds)) => format!("{seconds}s"),
        (None, None) => "end".into(),
    };
    format!("{start}+{length}")
}

async fn forward_progress(store: Arc<dyn JobStore>, events: JobEvents, lease: Lease, mut rx: watch::Receiver<Progress>, estimate_s: Option<f64>) {
    let id = lease.id;
    let mut rate = RunRate { estimate_s, ..RunRate::default() };
    while rx.changed().await.is_ok() {
        let mut progress = rx.borrow_and_update().clone();
        rate.set_eta(&mut progress, Instant::now());
        if let Err(e) = store.set_progress(&lease, &progress).await {
            tracing::warn!(%id, error = %e, "cannot store progress");
        }
        let _ = events.send(id);
        tokio::time::sleep(PROGRESS_INTERVAL).await;
    }
}

/// An ETA is given once this run's rate was measured over at least this long (a few chunks' noise is not a rate).
const ETA_MEASURE_S: f64 = 1.0;
/// Until this run's rate was measured this long, its ETA leans on the job's estimate (the box's rate for the
/// op and model), the more the shorter the measure: the first seconds of a run (encoder start, caches) are
/// slower than the rest.
const ETA_TRUST_S: f64 = 10.0;

/// A job's ETA from the work this run did: a job that goes on from a checkpoint first passes over what it
/// had finished (read again, not computed), so its rate is measured from its first progress past that (the
/// first with any work done, after any `load` or `resume` stage), not from its start (once 3–30× short).
#[derive(Debug, Default)]
struct RunRate {
    /// When the measure starts, and the fraction done then.
    since: Option<(Instant, f64)>,
    /// The whole job's estimate when it was queued.
    estimate_s: Option<f64>,
}

impl RunRate {
    fn set_eta(&mut self, progress: &mut Progress, now: Instant) {
        if progress.fraction >= 1.0 {
            progress.eta_s = Some(0.0);
            return;
        }
        let passing = matches!(progress.stage.as_deref(), Some("load" | "resume")) || progress.fraction <= 0.0;
        progress.eta_s = match self.since {
            _ if passing => {
                self.since = None;
                None
            }
            Some((started, from)) if progress.fraction >= from => {
                let (gained, seconds) = (progress.fraction - from, now.duration_since(started).as_secs_f64());
                let measured = (gained > 0.0 && seconds >= ETA_MEASURE_S).then(|| seconds / gained * (1.0 - progress.fraction));
                let estimated = self.estimate_s.map(|whole| whole * (1.0 - progress.fraction));
                match (measured, estimated) {
                    (Some(measured), Some(estimated)) => {
                        let trust = (seconds / ETA_TRUST_S).min(1.0);
                        Some(trust * measured + (1.0 - trust) * estimated)
                    }
                    (Some(measured), None) => Some(measured),
                    (None, estimated) => estimated,
                }
            }
            // The first progress past the passing over (or one that went back): the measure starts here.
            _ => {
                self.since = Some((now, progress.fraction));
                None
            }
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::DtypeChoice;
    use crate::media::InputRange;
    use crate::models::Op;

    fn job(op: Op, params: JobParams) -> Job {
        Job {
            id: Uuid::nil(),
            status: JobStatus::Queued,
            op,
            model: "m".into(),
            priority: 0,
            params,
            created_at: String::new(),
            started_at: None,
            finished_at: None,
            input: InputInfo { file_name: "in.mp4".into(), bytes: 0, media: None },
            output: None,
            progress: None,
            timings: None,
            plan: None,
            metrics: None,
            error: None,
            attempts: 0,
            worker: None,
            owner: None,
            callback: None,
            from_try: None,
            pausing: false,
            estimate: None,
            queue: None,
            partial: false,
            keep_partial: false,
            input_path: "/jobs/1/in.mp4".into(),
            output_path: None,
        }
    }

    fn name(op: Op, params: JobParams) -> String {
        let path = output_path_for(&job(op, params));
        assert_eq!(path.parent(), Some(std::path::Path::new("/jobs/1")), "next to the input");
        path.file_name().unwrap().to_string_lossy().into_owned()
    }

    /// Every op's name for its output, as the op's spec gives it (clients and tests match these names).
    #[test]
    fn each_op_names_its_output() {
        let plain = || JobParams::new(DtypeChoice::Auto);
        let retimed = |factor, fps: Option<&str>| JobParams {
            interpolate: Some(InterpolateParams { factor, fps: fps.map(str::to_string), ..Default::default() }),
            ..plain()
        };
        assert_eq!(name(Op::Upscale, plain()), "in_x4.mp4", "the default scale");
        assert_eq!(name(Op::Upscale, JobParams { scale: Some(2), ..retimed(Some(3), None) }), "in_x2_x3fps.mp4");
        assert_eq!(name(Op::VaeEncode, plain()), "in.latent.safetensors");
        assert_eq!(name(Op::VaeDecode, plain()), "in_decoded.mp4");
        assert_eq!(name(Op::VaeReconstruct, JobParams { output_format: Some(OutputFormat::Ffv1), ..plain() }), "in_reconstructed.mkv");
        assert_eq!(name(Op::Restore, plain()), "in_restored.mp4");
        assert_eq!(name(Op::Interpolate, retimed(None, Some("60000/1001"))), "in_60000-1001fps.mp4");
        assert_eq!(name(Op::Interpolate, retimed(None, Some("60/1"))), "in_60fps.mp4");
        assert_eq!(name(Op::Interpolate, plain()), "in_x2fps.mp4");
        let part = InputRange { start_frame: Some(120), frames: Some(48), ..Default::default() };
        assert_eq!(name(Op::VaeEncode, JobParams { range: Some(part), ..plain() }), "in_f120+48f.latent.safetensors");
    }

    /// The ETA counts only the work this run did: a resumed job's frames passed over do not shorten it.
    #[test]
    fn an_eta_after_a_resume_counts_only_what_this_run_computed() {
        let start = Instant::now();
        let at = |s: f64| start + Duration::from_secs_f64(s);
        let mut rate = RunRate { estimate_s: Some(200.0), ..RunRate::default() };
        let mut step = |fraction: f64, stage: &str, t: f64| {
            let mut progress = Progress { fraction, stage: Some(stage.into()), eta_s: Some(0.1), ..Progress::default() };
            rate.set_eta(&mut progress, at(t));
            progress.eta_s
        };
        assert_eq!(step(0.0, "load", 0.0), None);
        // Half the clip passed over in a second, then 10 % computed in 10 s: 40 % left at that rate is 40 s.
        assert_eq!(step(0.3, "resume", 0.5), None);
        assert_eq!(step(0.5, "resume", 1.0), None);
        assert_eq!(step(0.5, "upscale", 1.0), None, "the first progress past the passing over starts the measure");
        // Measured over 10 s: the measure alone. Over 1 s: mostly the estimate (200 s for the whole, 80 s left).
        let eta = step(0.6, "upscale", 11.0).unwrap();
        assert!((eta - 40.0).abs() < 1e-6, "{eta}");
        let mut early = RunRate { estimate_s: Some(200.0), ..RunRate::default() };
        let mut progress = |fraction: f64, t: f64| {
            let mut progress = Progress { fraction, stage: Some("upscale".into()), ..Progress::default() };
            early.set_eta(&mut progress, at(t));
            progress.eta_s
        };
        progress(0.5, 0.0);
        let eta = progress(0.51, 1.0).unwrap();
        let (measured, estimated) = (1.0 / 0.01 * 0.49, 200.0 * 0.49);
        assert!((eta - (0.1 * measured + 0.9 * estimated)).abs() < 1e-6, "{eta}");
    }

    /// A dotted input name (as a camera or a watch folder gives them) keeps its part's tag at the end of the
    /// name, before the extension the op wrote, not after its first dot.
    #[test]
    fn a_dotted_name_gets_its_range_before_the_extension() {
        let mut dotted = job(Op::Upscale, JobParams { range: Some(InputRange { start: Some(12.5), duration: Some(5.0), ..Default::default() }), ..JobParams::new(DtypeChoice::Auto) });
        dotted.input.file_name = "cam.2024.06.01.mp4".into();
        let path = output_path_for(&dotted);
        assert_eq!(path.file_name().unwrap(), "cam.2024.06.01_x4_12.5s+5s.mp4");
        dotted.op = Op::VaeEncode;
        assert_eq!(output_path_for(&dotted).file_name().unwrap(), "cam.2024.06.01_12.5s+5s.latent.safetensors");
    }
}
