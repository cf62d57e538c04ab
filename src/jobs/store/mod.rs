//! The job store: the truth about every job, behind one trait. SQLite (`sqlite`) is the embedded default
//! for one box; PostgreSQL (`postgres`) is the queue several boxes share. Both keep the same rows (`row`)
//! and the same leases: a claimed job belongs to one worker while its heartbeats keep the lease alive.
mod api_listens;
pub mod id_prefix;
mod postgres;
mod row;
mod sqlite;
mod sqlite_parts;
mod postgres_parts;

use crate::models::Op;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::{broadcast, Notify};
use uuid::Uuid;

use super::callback::{CallbackNext, CallbackState, Delivery};
use super::claim_order::{Entry, Snapshot};
use super::model::*;
use super::parts::{JobPart, Settled};
pub use crate::config::DatabaseTarget;
use crate::media::MediaInfo;

pub use id_prefix::{IdPrefix, PrefixMatches};
pub use postgres::PgStore;
pub use row::content_type_for;
pub use sqlite::SqliteStore;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
    #[error("database migration: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("stored job {id} is unreadable: {reason}")]
    Corrupt { id: String, reason: String },
}

impl StoreError {
    /// The database cannot be reached right now (as opposed to refusing what was asked): callers answer
    /// 503 and workers wait.
    pub fn is_outage(&self) -> bool {
        matches!(
            self,
            StoreError::Database(
                sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::Io(_) | sqlx::Error::Tls(_) | sqlx::Error::WorkerCrashed
            )
        )
    }
}

pub struct NewJob {
    pub id: Uuid,
    pub op: Op,
    pub model: String,
    pub priority: i64,
    pub params: JobParams,
    pub input_name: String,
    pub input_path: String,
    pub input_bytes: u64,
    pub input_media: Option<MediaInfo>,
    /// Seconds the upload's checks took before it was queued; the job's `probe` timing.
    pub probe_s: Option<f64>,
    /// The name of the access token that made it (none when the box has no tokens).
    pub owner: Option<String>,
    /// Workers whose device offers less do not claim it.
    pub device_bytes_needed: u64,
    /// The box whose open connection waits for the result (a synchronous `/v1/decode` or `/v1/encode`);
    /// None for an ordinary job.
    pub answered_by: Option<String>,
    /// The webhook to call when the job ends (checked against the config at submission).
    pub callback_url: Option<String>,
    /// The short job (a range of the same input) this whole-clip job was made from.
    pub from_try: Option<Uuid>,
    /// What the box expects of it (`queue::estimate`).
    pub estimate: Option<Estimate>,
}

/// A part of a job being cut (`JobStore::split`): the rest of its row is its job's.
#[derive(Debug, Clone)]
pub struct NewPart {
    pub id: Uuid,
    pub part: JobPart,
    /// Its share of the job's estimate.
    pub estimate: Option<Estimate>,
}

#[derive(Debug, Clone, Default)]
pub struct ListFilter {
    pub status: Option<JobStatus>,
    /// Only this token's jobs.
    pub owner: Option<String>,
    pub limit: i64,
    pub offset: i64,
}

/// A cancelled job's finished frames, joined into a file of their own.
#[derive(Debug, Clone)]
pub struct KeptOutput {
    pub name: String,
    pub path: String,
    pub bytes: u64,
    pub media: Option<MediaInfo>,
}

pub enum PauseOutcome {
    /// Queued: now paused (or back in line); running: asked to pause at its next checkpoint (or no longer).
    Changed(Job),
    AlreadyFinished(Job),
    NotFound,
}

pub enum CancelOutcome {
    /// It was waiting; it is now cancelled.
    Cancelled(Job),
    /// It is running; the executor stops it at the next chunk.
    Requested(Job),
    AlreadyFinished(Job),
    NotFound,
}

pub enum DeleteOutcome {
    Deleted(Job),
    NotFinished(Job),
    NotFound,
}

/// What a worker asks for when it claims.
#[derive(Debug, Clone)]
pub struct Claim {
    pub worker: String,
    /// The claim (and each heartbeat) holds the job this long.
    pub lease: Duration,
    /// Only jobs for these models (the ones this worker has); `None`: any.
    pub models: Option<Vec<String>>,
    /// Only jobs that need at most this much device memory; `None`: any.
    pub device_memory_bytes: Option<u64>,
    pub lane: Lane,
}

/// Which queued jobs a claim takes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Lane {
    /// Any, in the claim order (`claim_order`).
    Any,
    /// Only those that may run at a running job's chunk ends (`executor::lending`): synchronous calls, and
    /// jobs the box expects to take at most `short_job_s`.
    Short { short_job_s: f64 },
}

impl Claim {
    /// Whether this worker may take the queued job `entry`.
    pub fn accepts(&self, entry: &Entry) -> bool {
        let model = self.models.as_ref().is_none_or(|models| models.contains(&entry.model));
        let memory = self.device_memory_bytes.is_none_or(|bytes| entry.device_bytes_needed <= bytes);
        let lane = match self.lane {
            Lane::Any => true,
            Lane::Short { short_job_s } => entry.interactive || (short_job_s > 0.0 && entry.estimate_s.is_some_and(|s| s <= short_job_s)),
        };
        model && memory && lane
    }
}

/// A claim that found its job taken by another worker between the read and the write reads again, this many
/// times at most.
const CLAIM_RACES: usize = 8;

/// A running job as its worker holds it. Progress and the outcome are written only while the worker
/// still holds it, so a worker that lost its lease (paused, cut off) cannot record a second result.
/// One exception: a success whose lease ran out while the store was away is still recorded if nobody has
/// claimed the job since (it is queued, with the attempt count of this claim), so a finished result is
/// not thrown away to run the job again.
#[derive(Debug, Clone)]
pub struct Lease {
    pub id: Uuid,
    pub worker: String,
    /// The job's `attempts` as this claim left it; any later claim counts one more.
    pub attempt: i64,
}

/// What a heartbeat learns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseState {
    Held { cancel_requested: bool, pause_requested: bool },
    /// The lease expired and the job went back to the queue (or failed); this worker must stop it.
    Lost,
}

/// A worker as the store last heard of it (`GET /healthz`, the page).
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct WorkerInfo {
    pub name: String,
    /// `cpu`, `cuda:0`, ...
    pub device: String,
    /// The device memory it offers jobs (`device_memory_mib`, else a CUDA device's total); none: no limit.
    pub device_memory_bytes: Option<u64>,
    /// The job it is running, if any.
    pub current_job: Option<Uuid>,
    #[schema(format = DateTime)]
    pub started_at: String,
    #[schema(format = DateTime)]
    pub last_heartbeat: String,
}

/// Jobs whose lease ran out: back in the queue, or failed after `max_attempts` runs.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Expired {
    pub requeued: Vec<Uuid>,
    pub failed: Vec<Uuid>,
}

/// Why a synchronous call's job failed after its box restarted.
pub const CALLER_GONE_MESSAGE: &str =
    "a synchronous call (/v1/decode or /v1/encode) whose server restarted before it was answered: nobody waits for its result any more; call again";

#[async_trait]
pub trait JobStore: Send + Sync + 'static {
    async fn insert(&self, job: NewJob) -> Result<Job, StoreError>;
    async fn get(&self, id: Uuid) -> Result<Option<Job>, StoreError>;
    /// The newest whole-clip job of the try `tried` that is queued, running or succeeded (a failed or
    /// cancelled one may be run again).
    async fn whole_of(&self, tried: Uuid) -> Result<Option<Job>, StoreError>;
    /// The jobs whose ids start with `prefix` (an index range, never a scan), `owner`'s only when given,
    /// newest first, at most `limit`; and how many there are in all.
    async fn jobs_with_id_prefix(&self, prefix: &IdPrefix, owner: Option<&str>, limit: i64) -> Result<PrefixMatches, StoreError>;
    async fn list(&self, filter: &ListFilter) -> Result<Vec<Job>, StoreError>;
    async fn count(&self, status: JobStatus) -> Result<i64, StoreError>;
    /// The queued (not paused) and running jobs and each owner's latest start: what the claim order reads.
    async fn queue_snapshot(&self) -> Result<Snapshot, StoreError>;
    /// Moves the job `id` to `running`, leased to the worker, if it is still queued and not paused.
    async fn claim_job(&self, id: Uuid, claim: &Claim) -> Result<Option<Job>, StoreError>;
    /// Moves the next queued job this worker can run, in the claim order (`claim_order`), to `running`.
    async fn claim_next(&self, claim: &Claim) -> Result<Option<Job>, StoreError> {
        for _ in 0..CLAIM_RACES {
            let snapshot = self.queue_snapshot().await?;
            let Some(next) = snapshot.next(|entry| claim.accepts(entry)) else { return Ok(None) };
            if let Some(job) = self.claim_job(next.id, claim).await? {
                return Ok(Some(job));
            }
        }
        Ok(None)
    }
    /// Pauses or resumes a queued or running job.
    async fn set_paused(&self, id: Uuid, paused: bool) -> Result<PauseOutcome, StoreError>;
    /// Extends the lease; says whether the worker still holds it and whether a user asked to cancel.
    async fn heartbeat(&self, lease: &Lease, extend: Duration) -> Result<LeaseState, StoreError>;
    async fn set_progress(&self, lease: &Lease, progress: &Progress) -> Result<(), StoreError>;
    async fn succeed(&self, lease: &Lease, outcome: &JobOutcome) -> Result<(), StoreError>;
    async fn fail(&self, lease: &Lease, error: &JobError, timings: Option<&Timings>) -> Result<(), StoreError>;
    /// `kept`: the finished segments it keeps as its result (`…/cancel?keep=true`), recorded with the status.
    async fn mark_cancelled(&self, lease: &Lease, timings: Option<&Timings>, kept: Option<&KeptOutput>) -> Result<(), StoreError>;
    /// `keep`: the job's finished segments become its (shorter) result.
    async fn request_cancel(&self, id: Uuid, keep: bool) -> Result<CancelOutcome, StoreError>;
    /// A cancelled job's finished segments, joined, are its result (`…/cancel?keep=true`).
    async fn keep_output(&self, id: Uuid, output: &KeptOutput) -> Result<(), StoreError>;
    async fn delete(&self, id: Uuid) -> Result<DeleteOutcome, StoreError>;
    /// The job's files are gone (a synchronous call returned its result once): its record stays, its
    /// result no longer reads as kept.
    async fn files_removed(&self, id: Uuid) -> Result<(), StoreError>;
    /// After a restart: the jobs this worker was running when its process died go back to the queue,
    /// or fail (`attempts-exhausted`) once they have been started `max_attempts` times: a job that
    /// crashes the process must not start it again forever.
    async fn requeue_interrupted(&self, worker: &str, max_attempts: i64) -> Result<Expired, StoreError>;
    /// A running job that stopped to make way (its owner paused it, another owner's turn, the server stops) goes
    /// back in line (paused, if asked; cancelled, if a user asked); the stop does not count as one of its
    /// attempts, and its start (the owner's turn) and progress stay.
    async fn give_back(&self, lease: &Lease) -> Result<(), StoreError>;
    /// After a restart of box `answered_by`: the synchronous calls it was answering lost their caller with
    /// the connection; those not finished fail (`caller-gone`) instead of running for nobody. Their ids.
    async fn fail_unanswered_calls(&self, answered_by: &str) -> Result<Vec<Uuid>, StoreError>;
    /// Running jobs whose lease ran out (their worker died or was cut off) go back to the queue, or fail
    /// with the reasons once they have been started `max_attempts` times.
    async fn expire_leases(&self, max_attempts: i64) -> Result<Expired, StoreError>;
    /// Jobs that ended before `before` (RFC 3339), oldest first, at most `limit`.
    async fn finished_before(&self, before: &str, limit: i64) -> Result<Vec<Uuid>, StoreError>;
    /// Records that a worker is alive (and what it runs); workers not heard of for long are dropped.
    async fn worker_seen(&self, worker: &WorkerInfo) -> Result<(), StoreError>;
    /// Workers heard of within `within`.
    async fn workers(&self, within: Duration) -> Result<Vec<WorkerInfo>, StoreError>;
    /// Takes the next webhook due (its job ended, its next try is due, nobody holds it) for `hold`, so that
    /// one process sends it; the job as it stands. First tries before tries again (oldest job first in
    /// each); only first tries unless `again`.
    async fn claim_callback(&self, worker: &str, hold: Duration, again: bool) -> Result<Option<Job>, StoreError>;
    /// Records a try of a webhook this process holds, with what follows it, and lets go of it.
    async fn record_delivery(&self, id: Uuid, worker: &str, deliveries: &[Delivery], next: &CallbackNext) -> Result<(), StoreError>;
    /// Records that an API process listens at `addresses` (`ip:port`), now: a webhook must not call into one.
    async fn api_listening(&self, addresses: &[String]) -> Result<(), StoreError>;
    /// The addresses API processes recorded within `within`.
    async fn api_addresses(&self, within: Duration) -> Result<Vec<String>, StoreError>;
    /// A file taken from a watch folder, recorded before its job is submitted (under `file.job_id`).
    async fn watch_record(&self, file: &WatchedFile) -> Result<(), StoreError>;
    /// The files of a watch folder not yet done or failed.
    async fn watch_open(&self, folder: &str) -> Result<Vec<WatchedFile>, StoreError>;
    /// A watched file's next state (and the name its result got in the output folder).
    async fn watch_set(&self, job_id: Uuid, state: WatchState, output_name: Option<&str>) -> Result<(), StoreError>;
    /// Cuts the running job `lease` holds into `parts` (rows of their own, queued in its place in the claim
    /// order) and lets go of it: it stays running, without a worker or a lease, while they run. False (and
    /// nothing cut) when the lease is no longer held.
    async fn split(&self, lease: &Lease, parts: &[NewPart]) -> Result<bool, StoreError>;
    /// The parts of job `id`, first to last (none for a job run whole).
    async fn parts_of(&self, id: Uuid) -> Result<Vec<Job>, StoreError>;
    /// Moves the split job `id` on as its parts stand (`parts::settle`): queued to be joined, failed with the
    /// part named, or cancelled (its parts too). What it became, when it changed.
    async fn settle_split(&self, id: Uuid) -> Result<Option<Settled>, StoreError>;
    /// The jobs whose parts run: what the lease keeper settles after parts were lost.
    async fn split_jobs(&self) -> Result<Vec<Uuid>, StoreError>;
    /// Forwards the store's news from other processes: a job was queued (`wake`), a job changed
    /// (`changed`). One process (SQLite) has nothing to forward.
    async fn forward_news(&self, _wake: std::sync::Arc<Notify>, _changed: broadcast::Sender<Uuid>) -> Result<(), StoreError> {
        Ok(())
    }
}

/// Where a file taken from a watch folder stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchState {
    /// Its job is (to be) submitted; followed until it ends.
    Submitted,
    /// The result is in the output folder; the input is still to be moved to `done/`.
    OutputWritten,
    Done,
    Failed,
}

impl WatchState {
    pub fn as_str(self) -> &'static str {
        match self {
            WatchState::Submitted => "submitted",
            WatchState::OutputWritten => "output-written",
            WatchState::Done => "done",
            WatchState::Failed => "failed",
        }
    }

    pub fn parse(text: &str) -> Option<WatchState> {
        [WatchState::Submitted, WatchState::OutputWritten, WatchState::Done, WatchState::Failed].into_iter().find(|s| s.as_str() == text)
    }
}

/// A file taken from a watch folder, and the job it became.
#[derive(Debug, Clone, PartialEq)]
pub struct WatchedFile {
    pub job_id: Uuid,
    /// The watch folder, as its path reads.
    pub folder: String,
    pub file_name: String,
    pub state: WatchState,
    pub output_name: Option<String>,
}

/// A try's outcome as the columns keep it: the state, and when the next try is due.
fn next_columns(next: &CallbackNext) -> (&'static str, Option<&str>) {
    match next {
        CallbackNext::Delivered => (CallbackState::Delivered.as_str(), None),
        CallbackNext::RetryAt(at) => (CallbackState::Pending.as_str(), Some(at.as_str())),
        CallbackNext::GaveUp => (CallbackState::GaveUp.as_str(), None),
    }
}

/// Opens the store a `database` setting names: `postgres://…` (or `postgresql://…`), else a SQLite file.
pub async fn open(database: &DatabaseTarget) -> Result<std::sync::Arc<dyn JobStore>, StoreError> {
    Ok(match database {
        DatabaseTarget::Sqlite(path) => std::sync::Arc::new(SqliteStore::open(path).await?),
        DatabaseTarget::Postgres(url) => std::sync::Arc::new(PgStore::open(url).await?),
    })
}
