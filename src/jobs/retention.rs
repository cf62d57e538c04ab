//! Nothing is kept forever: jobs that ended more than `retention_hours` ago lose their folder (input,
//! output) and then their row, oldest first, in a sweep that runs a few times per retention period.
use std::sync::Arc;
use std::time::Duration;

use super::files::JobFiles;
use super::store::JobStore;

/// Rows removed per sweep step, so one sweep never holds the database for long.
const BATCH: i64 = 100;
/// Sweeps run at a quarter of the retention period, within these bounds.
const MIN_INTERVAL: Duration = Duration::from_millis(500);
const MAX_INTERVAL: Duration = Duration::from_secs(300);

pub struct Retention {
    pub store: Arc<dyn JobStore>,
    /// The jobs' folders (and their shared storage).
    pub files: JobFiles,
    pub keep: Duration,
}

impl Retention {
    pub async fn run(self) {
        let interval = (self.keep / 4).clamp(MIN_INTERVAL, MAX_INTERVAL);
        loop {
            tokio::time::sleep(interval).await;
            match self.sweep().await {
                Ok(0) => {}
                Ok(removed) => tracing::info!(removed, "removed jobs past the retention period"),
                Err(error) => tracing::warn!(%error, "retention sweep failed; trying again later"),
            }
        }
    }

    /// Removes every job that ended before now − keep; returns how many.
    pub async fn sweep(&self) -> Result<usize, super::StoreError> {
        let keep = chrono::Duration::from_std(self.keep).unwrap_or(chrono::Duration::MAX);
        let before = (chrono::Utc::now() - keep).to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        let mut removed = 0;
        loop {
            let expired = self.store.finished_before(&before, BATCH).await?;
            if expired.is_empty() {
                return Ok(removed);
            }
            for id in expired {
                // Files first: on a full disk deleting them is what makes room for the row's deletion.
                self.files.remove(id).await;
                self.store.delete(id).await?;
                removed += 1;
            }
        }
    }
}
