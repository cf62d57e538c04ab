//! A queued or finished job: found (by whoever may see it), listed, cancelled, deleted, its result located.
use std::path::PathBuf;

use uuid::Uuid;

use super::{Queue, QueueError};
use crate::error_codes as codes;
use crate::jobs::{CancelOutcome, DeleteOutcome, Job, JobStatus, ListFilter};

/// A succeeded job's output file.
pub struct JobResult {
    pub path: PathBuf,
    /// The name a download is given.
    pub file_name: String,
}

impl Queue {
    /// The job, if `visible` lets this caller see it (another token's job is as unknown as a missing one).
    /// `raw_id` is the id as the client wrote it; a malformed one is simply not found.
    pub async fn find(&self, raw_id: &str, visible: impl Fn(&Job) -> bool) -> Result<Job, QueueError> {
        let id = Uuid::parse_str(raw_id).map_err(|_| QueueError::JobNotFound(raw_id.into()))?;
        self.store.get(id).await?.filter(|job| visible(job)).ok_or_else(|| QueueError::JobNotFound(raw_id.into()))
    }

    pub async fn list(&self, filter: &ListFilter) -> Result<Vec<Job>, QueueError> {
        Ok(self.store.list(filter).await?)
    }

    /// A queued job is cancelled at once; a running one is asked to stop at its next chunk.
    pub async fn cancel(&self, raw_id: &str, visible: impl Fn(&Job) -> bool) -> Result<Job, QueueError> {
        let id = self.find(raw_id, visible).await?.id;
        let job = match self.store.request_cancel(id).await? {
            CancelOutcome::NotFound => return Err(QueueError::JobNotFound(raw_id.into())),
            CancelOutcome::AlreadyFinished(job) => {
                let message = format!("job {raw_id} already finished ({})", job.status.as_str());
                return Err(QueueError::refused(codes::JOB_ALREADY_FINISHED, message));
            }
            CancelOutcome::Cancelled(job) => job,
            CancelOutcome::Requested(job) => {
                self.cancels.raise(id);
                job
            }
        };
        let _ = self.events.send(id);
        Ok(job)
    }

    /// Deletes a finished job's row and its files.
    pub async fn delete(&self, raw_id: &str, visible: impl Fn(&Job) -> bool) -> Result<(), QueueError> {
        let id = self.find(raw_id, visible).await?.id;
        match self.store.delete(id).await? {
            DeleteOutcome::NotFound => Err(QueueError::JobNotFound(raw_id.into())),
            DeleteOutcome::NotFinished(job) => {
                Err(QueueError::NotFinished(format!("job {raw_id} is {}; cancel it first, then delete it", job.status.as_str())))
            }
            DeleteOutcome::Deleted(_) => {
                if let Err(e) = tokio::fs::remove_dir_all(self.job_dir(id)).await {
                    if e.kind() != std::io::ErrorKind::NotFound {
                        tracing::warn!(%id, error = %e, "job deleted but its files remain");
                    }
                }
                Ok(())
            }
        }
    }

    /// Where a succeeded job's output is; `job-not-finished` for any other.
    pub fn result(&self, job: &Job, raw_id: &str) -> Result<JobResult, QueueError> {
        let (Some(output), Some(path), JobStatus::Succeeded) = (&job.output, &job.output_path, job.status) else {
            return Err(QueueError::NotFinished(format!("job {raw_id} has no result (status {})", job.status.as_str())));
        };
        Ok(JobResult { path: PathBuf::from(path), file_name: output.file_name.clone() })
    }

    /// A synchronous call's result leaves in its response and nowhere else: once the file is open, its job
    /// folder goes (the open file keeps its data readable until the response ends). The row stays, with its
    /// timings and plan, until the retention period ends.
    pub async fn discard_files(&self, id: Uuid) {
        if let Err(error) = tokio::fs::remove_dir_all(self.job_dir(id)).await {
            tracing::warn!(%id, %error, "could not remove a synchronous call's files");
        }
    }
}
