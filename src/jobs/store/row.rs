//! A job row as both databases keep it (text, JSON text and 64-bit integers), and its reading into a `Job`.
use crate::models::Op;
use std::time::Duration;

use serde::de::DeserializeOwned;
use uuid::Uuid;

use super::{Expired, StoreError, WatchState, WatchedFile, WorkerInfo};
use crate::jobs::callback::{CallbackInfo, CallbackState};
use crate::jobs::model::*;
use crate::jobs::parts::SplitState;

/// The columns a `Job` is read from, by name; `SELECT *` in either database yields them.
#[derive(sqlx::FromRow)]
pub(super) struct JobRow {
    id: String,
    status: String,
    op: String,
    model: String,
    priority: i64,
    params: String,
    input_name: String,
    input_path: String,
    input_bytes: i64,
    input_media: Option<String>,
    output_name: Option<String>,
    output_path: Option<String>,
    output_bytes: Option<i64>,
    output_media: Option<String>,
    progress: Option<String>,
    timings: Option<String>,
    plan: Option<String>,
    metrics: Option<String>,
    error_code: Option<String>,
    error_message: Option<String>,
    attempts: i64,
    created_at: String,
    started_at: Option<String>,
    finished_at: Option<String>,
    owner: Option<String>,
    worker: Option<String>,
    callback_url: Option<String>,
    callback_state: Option<String>,
    callback_deliveries: Option<String>,
    from_try: Option<String>,
    paused: i64,
    estimate: Option<String>,
    keep_partial: i64,
    part: Option<String>,
    split_state: Option<String>,
}

/// An RFC 3339 instant `offset` from now, in the form `now_rfc3339` writes (so text order is time order).
pub(super) fn rfc3339_in(offset: Duration, later: bool) -> String {
    let offset = chrono::Duration::from_std(offset).unwrap_or(chrono::Duration::MAX);
    let now = chrono::Utc::now();
    let at = if later { now + offset } else { now - offset };
    at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// Byte counts as the databases' signed 64-bit integers (no real count comes near the top).
pub(super) fn clamp_i64(bytes: u64) -> i64 {
    bytes.min(i64::MAX as u64) as i64
}

pub(super) fn to_json<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value).expect("job values serialize")
}

pub(super) fn from_json<T: DeserializeOwned>(id: &str, column: &str, text: Option<String>) -> Result<Option<T>, StoreError> {
    text.map(|t| {
        serde_json::from_str(&t).map_err(|e| StoreError::Corrupt { id: id.into(), reason: format!("{column}: {e}") })
    })
    .transpose()
}

pub(super) fn parse_id(id: String) -> Result<Uuid, StoreError> {
    Uuid::parse_str(&id).map_err(|e| StoreError::Corrupt { reason: e.to_string(), id })
}

pub(super) fn parse_ids(ids: Vec<String>) -> Result<Vec<Uuid>, StoreError> {
    ids.into_iter().map(parse_id).collect()
}

impl JobRow {
    pub(super) fn into_job(self) -> Result<Job, StoreError> {
        let id = self.id;
        let corrupt = |reason: String| StoreError::Corrupt { id: id.clone(), reason };
        let uuid = Uuid::parse_str(&id).map_err(|e| corrupt(e.to_string()))?;
        let kept = self.output_path.is_some();
        let output = match (self.output_name, self.output_bytes) {
            (Some(file_name), Some(bytes)) => Some(OutputInfo {
                kept,
                content_type: content_type_for(&file_name).into(),
                url: format!("/v1/jobs/{id}/result"),
                file_name,
                bytes: bytes as u64,
                media: from_json(&id, "output_media", self.output_media)?,
            }),
            _ => None,
        };
        let callback = match (self.callback_url, self.callback_state) {
            (Some(url), Some(state)) => Some(CallbackInfo {
                url,
                state: CallbackState::parse(&state).ok_or_else(|| corrupt(format!("callback_state {state}")))?,
                deliveries: from_json(&id, "callback_deliveries", self.callback_deliveries)?.unwrap_or_default(),
            }),
            _ => None,
        };
        let status = match JobStatus::parse(&self.status).ok_or_else(|| corrupt(format!("status {}", self.status)))? {
            // A paused job is a queued row held back (migrations/sqlite/0009_shared_box.sql).
            JobStatus::Queued if self.paused != 0 => JobStatus::Paused,
            status => status,
        };
        let partial = status == JobStatus::Cancelled && self.keep_partial != 0 && output.is_some();
        Ok(Job {
            id: uuid,
            status,
            op: Op::parse(&self.op).ok_or_else(|| corrupt(format!("op {}", self.op)))?,
            model: self.model,
            priority: self.priority,
            params: from_json(&id, "params", Some(self.params))?.ok_or_else(|| corrupt("no params".into()))?,
            created_at: self.created_at,
            started_at: self.started_at,
            finished_at: self.finished_at,
            input: InputInfo {
                file_name: self.input_name,
                bytes: self.input_bytes as u64,
                media: from_json(&id, "input_media", self.input_media)?,
            },
            output,
            progress: from_json(&id, "progress", self.progress)?,
            timings: from_json(&id, "timings", self.timings)?,
            plan: from_json(&id, "plan", self.plan)?,
            metrics: from_json(&id, "metrics", self.metrics)?,
            error: self.error_code.map(|code| JobError { code, message: self.error_message.unwrap_or_default() }),
            attempts: self.attempts,
            owner: self.owner,
            worker: self.worker,
            callback,
            from_try: self.from_try.map(parse_id).transpose()?,
            pausing: status == JobStatus::Running && self.paused != 0,
            estimate: from_json(&id, "estimate", self.estimate)?,
            queue: None,
            partial,
            keep_partial: self.keep_partial != 0,
            parts: None,
            split: self.split_state.as_deref().map(|state| SplitState::parse(state).ok_or_else(|| corrupt(format!("split_state {state}")))).transpose()?,
            part: from_json(&id, "part", self.part)?,
            input_path: self.input_path,
            output_path: self.output_path,
        })
    }
}

pub fn content_type_for(file_name: &str) -> &'static str {
    match file_name.rsplit('.').next().unwrap_or("") {
        "mp4" => "video/mp4",
        "mov" => "video/quicktime",
        "mkv" => "video/x-matroska",
        "zip" => "application/zip",
        "png" => "image/png",
        _ => "application/octet-stream",
    }
}

/// The reason a lost lease is recorded with; the job's error names them all if it runs out of attempts.
pub(super) fn lease_lost_reason(worker: Option<&str>, attempt: i64, at: &str) -> String {
    format!("attempt {attempt}: worker {} stopped sending heartbeats (lease expired at {at})", worker.unwrap_or("?"))
}

/// The error of a job that lost its lease on its last allowed attempt.
pub(super) fn attempts_exhausted(reasons: &[String]) -> JobError {
    JobError {
        code: crate::error_codes::ATTEMPTS_EXHAUSTED.into(),
        message: format!("the job was started {} times and its worker was lost each time: {}", reasons.len(), reasons.join("; ")),
    }
}

/// A running job whose lease ran out, as read from its row.
pub(super) struct LostLease {
    pub worker: Option<String>,
    pub attempts: i64,
    pub lease_until: String,
    /// JSON list of the reasons of earlier losses.
    pub earlier: Option<String>,
    pub cancel_requested: bool,
}

/// What becomes of a job that lost its lease.
pub(super) struct Verdict {
    pub status: JobStatus,
    pub error: Option<JobError>,
    /// JSON list of every loss's reason, this one last.
    pub lost_leases: String,
}

impl LostLease {
    pub(super) fn verdict(&self, max_attempts: i64) -> Verdict {
        let mut reasons: Vec<String> = self.earlier.as_deref().and_then(|text| serde_json::from_str(text).ok()).unwrap_or_default();
        reasons.push(lease_lost_reason(self.worker.as_deref(), self.attempts, &self.lease_until));
        let (status, error) = if self.cancel_requested {
            (JobStatus::Cancelled, None)
        } else if self.attempts >= max_attempts {
            (JobStatus::Failed, Some(attempts_exhausted(&reasons)))
        } else {
            (JobStatus::Queued, None)
        };
        Verdict { status, error, lost_leases: to_json(&reasons) }
    }
}

impl Verdict {
    pub(super) fn count(&self, id: Uuid, expired: &mut Expired) {
        match self.status {
            JobStatus::Queued => expired.requeued.push(id),
            _ => expired.failed.push(id),
        }
    }
}

#[derive(sqlx::FromRow)]
pub(super) struct WorkerRow {
    name: String,
    device: String,
    current_job: Option<String>,
    started_at: String,
    last_heartbeat: String,
    device_memory_bytes: Option<i64>,
}

impl WorkerRow {
    pub(super) fn into_info(self) -> WorkerInfo {
        WorkerInfo {
            name: self.name,
            device: self.device,
            device_memory_bytes: self.device_memory_bytes.map(|bytes| bytes.max(0) as u64),
            current_job: self.current_job.and_then(|id| Uuid::parse_str(&id).ok()),
            started_at: self.started_at,
            last_heartbeat: self.last_heartbeat,
        }
    }
}

/// A watched file's row, read into a `WatchedFile`.
#[derive(sqlx::FromRow)]
pub(super) struct WatchedRow {
    job_id: String,
    folder: String,
    file_name: String,
    state: String,
    output_name: Option<String>,
}

impl WatchedRow {
    pub(super) fn into_file(self) -> Result<WatchedFile, StoreError> {
        let state = WatchState::parse(&self.state).ok_or_else(|| StoreError::Corrupt { id: self.job_id.clone(), reason: format!("watch state {}", self.state) })?;
        Ok(WatchedFile { job_id: parse_id(self.job_id)?, folder: self.folder, file_name: self.file_name, state, output_name: self.output_name })
    }
}


/// The queued (not paused) and running jobs, as the claim order reads them; the same text in both databases.
/// A job whose parts run is not in it (its parts are); a part takes its job's place (`queue_seq`), and a job
/// waiting to be joined goes first, as a synchronous call does: its work is done but for the join.
pub(super) const SNAPSHOT_JOBS: &str = "SELECT id, owner, priority, COALESCE(queue_seq, seq) AS seq, status, answered_by, model,
            device_bytes_needed, estimate, COALESCE(queued_at, created_at) AS waiting_since, started_at, progress, split_state
     FROM jobs WHERE (status = 'running' OR (status = 'queued' AND paused = 0)) AND (split_state IS NULL OR split_state <> 'parts')
     ORDER BY COALESCE(queue_seq, seq), seq";

/// Each owner's latest start, over all its jobs.
pub(super) const SNAPSHOT_STARTS: &str = "SELECT owner, MAX(started_at) AS at FROM jobs WHERE started_at IS NOT NULL GROUP BY owner";

/// A row of `SNAPSHOT_JOBS`.
#[derive(sqlx::FromRow)]
pub(super) struct EntryRow {
    id: String,
    owner: Option<String>,
    priority: i64,
    seq: i64,
    status: String,
    answered_by: Option<String>,
    model: String,
    device_bytes_needed: Option<i64>,
    estimate: Option<String>,
    waiting_since: String,
    started_at: Option<String>,
    progress: Option<String>,
    split_state: Option<String>,
}

/// A row of `SNAPSHOT_STARTS`.
#[derive(sqlx::FromRow)]
pub(super) struct StartRow {
    owner: Option<String>,
    at: Option<String>,
}

/// The snapshot the claim order reads, from the rows of `SNAPSHOT_JOBS` and `SNAPSHOT_STARTS`.
pub(super) fn snapshot(jobs: Vec<EntryRow>, starts: Vec<StartRow>) -> Result<crate::jobs::claim_order::Snapshot, StoreError> {
    let now = now_rfc3339();
    let entries = jobs.into_iter().map(|row| row.into_entry(&now)).collect::<Result<_, _>>()?;
    let last_start = starts.into_iter().filter_map(|row| Some((row.owner, row.at?))).collect();
    Ok(crate::jobs::claim_order::Snapshot { entries, last_start })
}

impl EntryRow {
    fn into_entry(self, now: &str) -> Result<crate::jobs::claim_order::Entry, StoreError> {
        let estimate: Option<Estimate> = from_json(&self.id, "estimate", self.estimate)?;
        let estimate_s = estimate.and_then(|e| e.seconds);
        let running = self.status == "running";
        let progress: Option<Progress> = if running { from_json(&self.id, "progress", self.progress)? } else { None };
        let ran_s = self.started_at.as_deref().and_then(|started| seconds_between(started, now));
        let remaining_s = match (progress.and_then(|p| p.eta_s), estimate_s, ran_s) {
            (Some(eta), _, _) => Some(eta),
            (None, Some(estimate), Some(ran)) => Some((estimate - ran).max(0.0)),
            _ => None,
        };
        Ok(crate::jobs::claim_order::Entry {
            id: parse_id(self.id)?,
            owner: self.owner,
            priority: self.priority,
            seq: self.seq,
            running,
            interactive: self.answered_by.is_some() || self.split_state.is_some(),
            model: self.model,
            device_bytes_needed: self.device_bytes_needed.unwrap_or(0).max(0) as u64,
            estimate_s,
            waiting_since: self.waiting_since,
            remaining_s: running.then_some(remaining_s).flatten(),
        })
    }
}

/// The `status` column a status is kept in: a paused job is a queued row held back (`paused = 1`).
pub(super) fn stored_status(status: JobStatus) -> &'static str {
    match status {
        JobStatus::Paused => JobStatus::Queued.as_str(),
        other => other.as_str(),
    }
}

/// The `paused` column a listed status needs; `None`: either.
pub(super) fn paused_flag(status: JobStatus) -> Option<i64> {
    match status {
        JobStatus::Queued => Some(0),
        JobStatus::Paused => Some(1),
        JobStatus::Running | JobStatus::Succeeded | JobStatus::Failed | JobStatus::Cancelled => None,
    }
}
