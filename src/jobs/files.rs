//! Where a job's files are for this process: its own data dir (`jobs/{id}/`), and the shared storage when
//! one is set (`storage`), which is then the one place every process finds them.
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use uuid::Uuid;

use super::blobs::{file_name, BlobError, Blobs};

#[derive(Clone)]
pub struct JobFiles {
    jobs_dir: PathBuf,
    blobs: Option<Arc<Blobs>>,
}

impl JobFiles {
    pub fn new(data_dir: &Path, blobs: Option<Arc<Blobs>>) -> JobFiles {
        JobFiles { jobs_dir: data_dir.join("jobs"), blobs }
    }

    pub fn blobs(&self) -> Option<&Blobs> {
        self.blobs.as_deref()
    }

    /// The shared storage, for what outlives a call (a job's checkpoint uploads).
    pub fn shared_blobs(&self) -> Option<Arc<Blobs>> {
        self.blobs.clone()
    }

    pub fn job_dir(&self, id: Uuid) -> PathBuf {
        self.jobs_dir.join(id.to_string())
    }

    /// This process's path for a file the store records. Without shared storage every process sees the
    /// same data dir, so the recorded path is the file; with it, the recorded path is another box's, and
    /// the local copy (if any) has the same name in this box's job folder.
    pub fn local(&self, id: Uuid, recorded: &str) -> PathBuf {
        match self.blobs {
            None => PathBuf::from(recorded),
            Some(_) => self.job_dir(id).join(file_name(Path::new(recorded))),
        }
    }

    /// [`local`](Self::local), copied from the shared storage first when this box has no copy yet.
    pub async fn ensure_local(&self, id: Uuid, recorded: &str) -> Result<PathBuf, BlobError> {
        let local = self.local(id, recorded);
        if let Some(blobs) = &self.blobs {
            if !tokio::fs::try_exists(&local).await.unwrap_or(false) {
                blobs.fetch(id, &file_name(&local), &local).await?;
            }
        }
        Ok(local)
    }

    /// Puts a file of the job's folder into the shared storage, if there is one.
    pub async fn share(&self, id: Uuid, local: &Path) -> Result<(), BlobError> {
        match &self.blobs {
            Some(blobs) => blobs.put_file(id, local).await,
            None => Ok(()),
        }
    }

    /// The job's files: this box's folder and what the shared storage holds.
    pub async fn remove(&self, id: Uuid) {
        self.remove_folder(id).await;
        if let Some(blobs) = &self.blobs {
            if let Err(error) = blobs.delete_job(id).await {
                tracing::warn!(%id, %error, "could not remove a job's files from the shared storage");
            }
        }
    }

    /// This box's copies of the job's files, when the shared storage holds the originals; without one the
    /// folder is the only copy (a data dir every process mounts) and stays.
    pub async fn drop_local_copies(&self, id: Uuid) {
        if self.blobs.is_some() {
            self.remove_folder(id).await;
        }
    }

    async fn remove_folder(&self, id: Uuid) {
        if let Err(error) = tokio::fs::remove_dir_all(self.job_dir(id)).await {
            if error.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(%id, %error, "could not remove a job's folder");
            }
        }
    }
}

/// How a worker waits out a storage outage: a job whose input cannot be fetched, or whose result cannot be
/// put, waits for the storage (retries with a growing pause) rather than failing at the first refusal.
pub struct Patience<'a> {
    /// Then the job fails with the last error.
    pub give_up_after: Duration,
    /// A cancelled job stops waiting.
    pub cancelled: &'a AtomicBool,
}

impl Patience<'_> {
    const FIRST_PAUSE: Duration = Duration::from_millis(500);
    const LONGEST_PAUSE: Duration = Duration::from_secs(10);

    /// `attempt` until it succeeds, fails for good (the file is not there, the setting is wrong), the job is
    /// cancelled or the patience runs out.
    pub async fn retry<T, F, Fut>(&self, what: &str, mut attempt: F) -> Result<T, BlobError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, BlobError>>,
    {
        let deadline = Instant::now() + self.give_up_after;
        let mut pause = Self::FIRST_PAUSE;
        loop {
            match attempt().await {
                Err(BlobError::Store(error)) if Instant::now() < deadline && !self.cancelled.load(Ordering::Relaxed) => {
                    tracing::warn!(%error, retry_in_s = pause.as_secs_f64(), "{what}: the storage refused; waiting for it");
                    tokio::time::sleep(pause.min(deadline.saturating_duration_since(Instant::now()))).await;
                    pause = (pause * 2).min(Self::LONGEST_PAUSE);
                }
                other => return other,
            }
        }
    }
}
