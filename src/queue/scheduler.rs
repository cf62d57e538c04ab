//! The scheduler: claims the next queued job from the store, hands it to the executor, writes
//! progress and the outcome back, and announces every change to listeners (SSE); finished jobs are
//! reported to `telemetry`.
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
use crate::executor::{ExecError, ExecutorHandle, JobHooks, JobSpec, Portion};
use super::output_path::output_path_for;
use super::progress_eta::forward_progress;

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
    /// Each look reads the queue once; the worker's models are read once per running job.
    async fn lending_lane(&self, started_at: &str, busy: &Mutex<Option<Uuid>>) {
        let mut news = self.events.subscribe();
        let mut claim: Option<(Uuid, Claim)> = None;
        while !self.cancels.is_stopping() {
            let running = *busy.lock().unwrap();
            if let Some(running) = running {
                if claim.as_ref().is_none_or(|(for_job, _)| *for_job != running) {
                    claim = Some((running, self.worker.claim(Lane::Any)));
                }
                let (_, claim) = claim.as_mut().expect("read above");
                match self.lend_next(running, claim).await {
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

    /// Claims the next job to lend the executor to beside `running`: synchronous calls, and jobs expected to take
    /// at most `short_job_s` when `running` itself has longer than that left. None also when another worker
    /// took it first (the next look tries again).
    async fn lend_next(&self, running: Uuid, claim: &mut Claim) -> Result<Option<Job>, crate::jobs::StoreError> {
        let snapshot = self.store.queue_snapshot().await?;
        let short_job_s = match snapshot.entry(running).and_then(|entry| entry.remaining_s) {
            Some(left) if left <= self.worker.short_job_s => 0.0,
            _ => self.worker.short_job_s,
        };
        claim.lane = Lane::Short { short_job_s };
        let Some(next) = snapshot.next(|entry| claim.accepts(entry)) else { return Ok(None) };
        self.store.claim_job(next.id, claim).await
    }

    async fn seen(&self, started_at: &str, current_job: Option<Uuid>) {
        if let Err(e) = self.store.worker_seen(&self.worker.info(started_at, current_job)).await {
            tracing::warn!(error = %e, "cannot record this worker's heartbeat");
        }
    }

    /// Keeps the job's lease while it runs, and stops the job when a user cancelled it through another
    /// process (the flag is in the store; a shared database announces it at once, else the next beat sees
    /// it) or when the lease was lost (another worker may have it now).
    ///
    /// `finishing` is raised just before the run's outcome (or its hand-back) is written: a beat from then on
    /// may find the job ended by that very write (the write's own news wakes the beat, at once on PostgreSQL),
    /// which is the lease ending, not a lease lost.
    fn heartbeat(&self, lease: Lease, started_at: String, run: Run, finishing: Arc<AtomicBool>) -> impl std::future::Future<Output = ()> + Send + 'static {
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
                    Ok(LeaseState::Lost) if finishing.load(Ordering::Acquire) => return,
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
        if run == Run::Own && self.cut_into_parts(&job).await {
            return;
        }
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
        let finishing = Arc::new(AtomicBool::new(false));
        let heartbeat = tokio_util::task::AbortOnDropHandle::new(tokio::spawn(self.heartbeat(lease.clone(), started_at.to_string(), run, finishing.clone())));
        let estimate_s = job.estimate.as_ref().and_then(|estimate| estimate.seconds);
        let forwarder = tokio::spawn(forward_progress(self.store.clone(), self.events.clone(), lease.clone(), progress_rx, estimate_s, job.part.as_ref().map(|part| part.of)));

        let queued = job.started_at.as_deref().and_then(|started| seconds_between(&job.created_at, started));
        // The upload's checks ran before the job was queued; their time is part of its record.
        let timings = Timings { queued, probe: job.timings.as_ref().and_then(|t| t.probe), ..Timings::default() };
        let patience = Patience { give_up_after: self.storage_wait, cancelled: &cancel };
        // A part's input is its job's.
        let input_of = job.part.as_ref().map_or(id, |part| part.of);
        let fetched = patience.retry("fetching the job's input", || self.files.ensure_local(input_of, &job.input_path)).await;
        let (result, timings, checkpoints) = match fetched {
            Err(e) => (Err(storage_error(&patience, format!("the job's input could not be fetched: {e}"))), timings, None),
            Ok(input) => {
                job.input_path = input.to_string_lossy().into_owned();
                let (output_path, params, input_media) = match &job.part {
                    Some(part) => (Self::part_output_path(&job, part), Self::part_run(&job, part).0, None),
                    None => (output_path_for(&job), job.params.clone(), job.input.media.clone()),
                };
                // With a shared storage, a checkpoint another box made goes on here, and this box's go up.
                let checkpoints = SharedCheckpoints::start(&self.files, id, resume_dir(&output_path), &patience, cancel.clone()).await;
                let portion = self.portion_of(&job, &output_path).await;
                let spec = JobSpec {
                    id,
                    op: job.op,
                    model: job.model.clone(),
                    params,
                    input_path: input,
                    input_media,
                    output_path,
                    timings,
                    shared_checkpoints: checkpoints.as_ref().map(SharedCheckpoints::reports),
                    portion: portion.clone().unwrap_or(Portion::Whole),
                };
                let hooks = JobHooks::new(progress_tx, cancel.clone(), flags.make_way.clone());
                let (result, timings) = match (portion, run) {
                    (Err(message), _) => (Err(ExecError::Storage(message)), timings_of(&spec)),
                    (Ok(_), Run::Own) => self.executor.run(spec, hooks).await,
                    (Ok(_), Run::Lent) => self.executor.lend(spec, hooks).await,
                };
                // A part has no result of its own: its segments are its checkpoints'. A joined job is timed
                // over its parts.
                let timings = match job.split {
                    Some(_) => self.whole_timings(&job, timings).await,
                    None => timings,
                };
                let result = result.map(|outcome| JobOutcome { timings: timings.clone(), ..outcome });
                let result = match job.part {
                    Some(_) => result,
                    None => self.share_result(id, result, &patience).await,
                };
                (result, timings, checkpoints)
            }
        };
        let _ = forwarder.await;
        self.cancels.remove(id);
        finishing.store(true, Ordering::Release);
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
        // Before the outcome is stored: whoever sees the job final then finds it in /metrics too (a job run
        // in parts once, at its join).
        if job.part.is_none() {
            crate::jobs::telemetry::job_finished(job.op, status, &timings);
        }
        // Joined before the outcome is stored: whoever sees the job cancelled sees what it kept.
        let kept = match status {
            JobStatus::Cancelled => self.kept_if_asked(&job).await,
            _ => None,
        };
        self.record_outcome(&lease, &result, &timings, kept.as_ref()).await;
        // The lease ended with the outcome.
        drop(heartbeat);
        if let Some(checkpoints) = checkpoints {
            match (&result, &job.part) {
                // A finished part's segments are what its join reads: all of them are put into the shared
                // storage, and a worker that keeps no copies lets go of its own (the join fetches them).
                (Ok(_), Some(part)) => {
                    checkpoints.hand_over().await;
                    if !self.keep_local_copies && self.files.shared_blobs().is_some() {
                        let _ = remove_dir(&resume_dir(&Self::part_output_path(&job, part))).await;
                    }
                }
                (Ok(_), None) => checkpoints.remove().await,
                (Err(_), _) => checkpoints.stop().await,
            }
        }
        match (&result, &job.part) {
            (Ok(_), _) => tracing::info!(%id, total_s = timings.total, part = job.part.as_ref().map(|p| p.index), "job succeeded"),
            (Err(e), part) => {
                tracing::warn!(%id, code = e.code(), error = %e, "job did not succeed");
                // A part's files are its job's, and go with it.
                if part.is_none() {
                    self.drop_checkpoints_if_ended(&job).await;
                }
            }
        }
        match &job.part {
            Some(part) => self.settle_parts_of(part.of).await,
            None if job.split.is_some() && result.is_ok() => self.forget_stored_parts(id).await,
            None => {}
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

/// The stages measured before a run that never reached the executor.
fn timings_of(spec: &JobSpec) -> Timings {
    spec.timings.clone()
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
