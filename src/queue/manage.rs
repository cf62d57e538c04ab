//! A queued or finished job: found (by whoever may see it), listed, cancelled, deleted, its result located.
use std::path::PathBuf;

use uuid::Uuid;

use super::{Queue, QueueError};
use crate::error_codes as codes;
use crate::jobs::store::IdPrefix;
use crate::jobs::{CancelOutcome, DeleteOutcome, Job, JobStatus, ListFilter, PauseOutcome};

/// Jobs a short id that names several lists (newest first); the refusal counts them all.
const SHORT_ID_CANDIDATES: i64 = 16;

/// The least of an id that names a job: below it nearly every id would be ambiguous on a busy box.
const SHORTEST_ID: usize = 4;

/// A short id as the store looks up the start of ids, or `None` for text that starts no id.
fn short_id_prefix(raw: &str) -> Option<IdPrefix> {
    (raw.len() >= SHORTEST_ID).then(|| IdPrefix::parse(raw)).flatten()
}

/// A succeeded job's output file.
pub struct JobResult {
    pub path: PathBuf,
    /// The name a download is given.
    pub file_name: String,
}

impl Queue {
    /// The job, if the caller sees it: `owner`'s jobs only, or (`None`) every job; another token's job is as
    /// unknown as a missing one. `raw_id` is the id as the client wrote it; a malformed one is simply not found.
    /// A short id (the first 8 characters the page, the CLI and the clients show, or any 4 or more) names the
    /// one job the caller sees whose id starts with it; several are refused, counted, with the newest ids
    /// (`ambiguous-job-id`).
    pub async fn find(&self, raw_id: &str, owner: Option<&str>) -> Result<Job, QueueError> {
        let not_found = || QueueError::JobNotFound(raw_id.into());
        if let Ok(id) = Uuid::parse_str(raw_id) {
            let sees = |job: &Job| owner.is_none_or(|owner| job.owner.as_deref() == Some(owner));
            return self.store.get(id).await?.filter(sees).ok_or_else(not_found);
        }
        let prefix = short_id_prefix(raw_id).ok_or_else(not_found)?;
        // The owner is part of the lookup: another owner's newer jobs with the same start must not fill the
        // candidates and hide the caller's.
        let mut found = self.store.jobs_with_id_prefix(&prefix, owner, SHORT_ID_CANDIDATES).await?;
        match found.total {
            0 => Err(not_found()),
            1 => found.jobs.pop().ok_or_else(not_found),
            total => {
                let ids: Vec<String> = found.jobs.iter().map(|job| job.id.to_string()).collect();
                let listed = match ids.len() as i64 {
                    shown if shown < total => format!("the newest {shown}: {}", ids.join(", ")),
                    _ => ids.join(", "),
                };
                let message = format!("`{raw_id}` starts {total} jobs' ids ({listed}); give more of the id");
                Err(QueueError::refused(codes::AMBIGUOUS_JOB_ID, message))
            }
        }
    }

    pub async fn list(&self, filter: &ListFilter) -> Result<Vec<Job>, QueueError> {
        Ok(self.store.list(filter).await?)
    }

    /// A queued job is cancelled at once; a running one is asked to stop at its next chunk. `keep`: its
    /// finished segments become its (shorter) result (`keep`).
    pub async fn cancel(&self, raw_id: &str, owner: Option<&str>, keep: bool) -> Result<Job, QueueError> {
        let found = self.find(raw_id, owner).await?;
        if keep && found.split.is_some() {
            let message = "this job runs in parts, whose finished segments are not joined when it is cancelled; cancel it without keep";
            return Err(QueueError::refused(codes::NOTHING_TO_KEEP, message));
        }
        if keep && !super::keep::can_keep(&found) {
            let message = format!("this {} job makes no video segments to keep (it writes a latent, a still or PNG frames); cancel it without keep", found.op.as_str());
            return Err(QueueError::refused(codes::NOTHING_TO_KEEP, message));
        }
        let id = found.id;
        let job = match self.store.request_cancel(id, keep).await? {
            CancelOutcome::NotFound => return Err(QueueError::JobNotFound(raw_id.into())),
            CancelOutcome::AlreadyFinished(job) => {
                let message = format!("job {raw_id} already finished ({})", job.status.as_str());
                return Err(QueueError::refused(codes::JOB_ALREADY_FINISHED, message));
            }
            CancelOutcome::Cancelled(job) if keep => {
                // A paused job's segments are in its folder: they are kept now.
                let output = super::output_path::output_path_for(&job);
                if let Some(kept) = super::keep::keep_finished(&self.config, &self.files, &job, &output).await {
                    self.store.keep_output(id, &kept).await?;
                }
                self.store.get(id).await?.unwrap_or(job)
            }
            CancelOutcome::Cancelled(job) => job,
            CancelOutcome::Requested(job) => {
                self.cancels.raise(id);
                job
            }
        };
        for part in self.parts_of(&job).await {
            self.cancels.raise(part);
            let _ = self.events.send(part);
        }
        // Cancelled at once (none of its parts ran): nobody else is left to remove what its parts wrote.
        if job.split.is_some() && job.status == JobStatus::Cancelled {
            let dir = crate::jobs::shared_resume::resume_dir(&self.files.local(id, &super::output_path::output_path_for(&job).to_string_lossy()));
            let _ = crate::jobs::shared_resume::remove_dir(&dir).await;
        }
        let _ = self.events.send(id);
        Ok(job)
    }

    /// The ids of a job's parts, for the flags of those running in this process and their workers' news.
    async fn parts_of(&self, job: &Job) -> Vec<Uuid> {
        if job.split.is_none() {
            return Vec::new();
        }
        self.store.parts_of(job.id).await.map(|parts| parts.into_iter().map(|part| part.id).collect()).unwrap_or_default()
    }

    /// Pauses a queued job (it keeps its place, and is passed over until resumed) or a running one (it stops
    /// at its next checkpoint and goes on from there once resumed; one that makes no checkpoints, such as a
    /// still or a synchronous call, runs to its end). Pausing a paused job changes nothing.
    pub async fn pause(&self, raw_id: &str, owner: Option<&str>) -> Result<Job, QueueError> {
        let job = self.find(raw_id, owner).await?;
        if job.status == JobStatus::Paused {
            return Ok(job);
        }
        let job = self.set_paused(raw_id, job, true).await?;
        self.cancels.make_way(job.id, true);
        for part in self.parts_of(&job).await {
            self.cancels.make_way(part, true);
            let _ = self.events.send(part);
        }
        Ok(job)
    }

    /// Resumes a paused job: back in line where it was (a job that had run goes on from its checkpoint), or,
    /// if it had not stopped yet, on without stopping.
    pub async fn resume(&self, raw_id: &str, owner: Option<&str>) -> Result<Job, QueueError> {
        let job = self.find(raw_id, owner).await?;
        if job.status != JobStatus::Paused && !job.pausing {
            let message = format!("job {raw_id} is {}, not paused", job.status.as_str());
            return Err(QueueError::refused(codes::JOB_NOT_PAUSABLE, message));
        }
        let job = self.set_paused(raw_id, job, false).await?;
        self.cancels.make_way(job.id, false);
        for part in self.parts_of(&job).await {
            self.cancels.make_way(part, false);
        }
        self.wake.notify_one();
        Ok(job)
    }

    async fn set_paused(&self, raw_id: &str, job: Job, paused: bool) -> Result<Job, QueueError> {
        let job = match self.store.set_paused(job.id, paused).await? {
            PauseOutcome::Changed(job) => job,
            PauseOutcome::NotFound => return Err(QueueError::JobNotFound(raw_id.into())),
            PauseOutcome::AlreadyFinished(job) => {
                let message = format!("job {raw_id} already ended ({})", job.status.as_str());
                return Err(QueueError::refused(codes::JOB_NOT_PAUSABLE, message));
            }
        };
        let _ = self.events.send(job.id);
        Ok(job)
    }

    /// Deletes a finished job's files, then its row. Files first: on a full disk removing them is what
    /// makes room for the row's deletion (and the disk reserve is given up if that is still not enough).
    pub async fn delete(&self, raw_id: &str, owner: Option<&str>) -> Result<(), QueueError> {
        let job = self.find(raw_id, owner).await?;
        if !job.status.is_terminal() {
            return Err(not_finished(raw_id, &job));
        }
        self.files.remove(job.id).await;
        let deleted = match self.store.delete(job.id).await {
            Err(e) if self.reserve.release_if_full(&e) => self.store.delete(job.id).await?,
            other => other?,
        };
        match deleted {
            DeleteOutcome::NotFound => Err(QueueError::JobNotFound(raw_id.into())),
            DeleteOutcome::NotFinished(job) => Err(not_finished(raw_id, &job)),
            DeleteOutcome::Deleted(_) => Ok(()),
        }
    }

    /// Where a succeeded job's output is on this box (a copy may be only in the shared storage, see
    /// [`Queue::shared_files`]); `job-not-finished` for any other job.
    pub fn result(&self, job: &Job, raw_id: &str) -> Result<JobResult, QueueError> {
        let servable = job.status == JobStatus::Succeeded || job.partial;
        let (Some(output), Some(path), true) = (&job.output, &job.output_path, servable) else {
            if job.output.as_ref().is_some_and(|output| !output.kept) {
                return Err(QueueError::ResultGone(raw_id.into()));
            }
            return Err(QueueError::NotFinished(format!("job {raw_id} has no result (status {})", job.status.as_str())));
        };
        Ok(JobResult { path: self.files.local(job.id, path), file_name: output.file_name.clone() })
    }

    /// The shared storage, when one is set: results not on this box stream from it.
    pub fn shared_files(&self) -> Option<&crate::jobs::blobs::Blobs> {
        self.files.blobs()
    }

    /// A succeeded job's output on this box, copied from the shared storage first if needed.
    pub async fn local_result(&self, job: &Job, raw_id: &str) -> Result<JobResult, QueueError> {
        let result = self.result(job, raw_id)?;
        let recorded = job.output_path.as_deref().unwrap_or_default();
        let path = self.files.ensure_local(job.id, recorded).await.map_err(|e| QueueError::from_blob(e, raw_id))?;
        Ok(JobResult { path, ..result })
    }

    /// A synchronous call's result leaves in its response and nowhere else: once the file is open, its job
    /// folder goes (the open file keeps its data readable until the response ends). The row stays, with its
    /// timings and plan, until the retention period ends.
    pub async fn discard_files(&self, id: Uuid) {
        self.files.remove(id).await;
        if let Err(e) = self.store.files_removed(id).await {
            tracing::warn!(%id, error = %e, "cannot record that the job's files were removed");
        }
    }
}

fn not_finished(raw_id: &str, job: &Job) -> QueueError {
    QueueError::NotFinished(format!("job {raw_id} is {}; cancel it first, then delete it", job.status.as_str()))
}
