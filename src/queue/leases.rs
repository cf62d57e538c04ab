//! The lease keeper: running jobs whose worker stopped sending heartbeats (killed, cut off) go back to the
//! queue, or fail with the reasons after `max_attempts` runs. Every process runs one: which one acts first
//! does not matter, the store hands each expired job to one of them.
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{broadcast, Notify};
use uuid::Uuid;

use crate::jobs::JobStore;

pub struct LeaseKeeper {
    pub store: Arc<dyn JobStore>,
    pub max_attempts: i64,
    /// How often leases are checked (a third of a lease: a lost job waits at most 4/3 of a lease).
    pub every: Duration,
    /// Followers hear of the jobs it moved; idle workers wake for the re-queued ones.
    pub changed: broadcast::Sender<Uuid>,
    pub wake: Arc<Notify>,
}

impl LeaseKeeper {
    pub async fn run(self) {
        loop {
            tokio::time::sleep(self.every).await;
            match self.store.expire_leases(self.max_attempts).await {
                Ok(expired) if expired.requeued.is_empty() && expired.failed.is_empty() => {}
                Ok(expired) => {
                    tracing::warn!(requeued = ?expired.requeued, failed = ?expired.failed, "jobs whose worker was lost");
                    for id in expired.requeued.iter().chain(&expired.failed) {
                        let _ = self.changed.send(*id);
                    }
                    self.wake.notify_one();
                }
                Err(e) => tracing::warn!(error = %e, "cannot check the leases of running jobs"),
            }
            self.settle_split_jobs().await;
        }
    }

    /// Jobs run in parts move on as their parts end; the worker that ends a part does it at once, this
    /// catches the parts whose worker was lost (re-queued, or failed past `max_attempts`).
    async fn settle_split_jobs(&self) {
        let ids = match self.store.split_jobs().await {
            Ok(ids) => ids,
            Err(e) => return tracing::warn!(error = %e, "cannot read the jobs run in parts"),
        };
        for id in ids {
            match self.store.settle_split(id).await {
                Ok(Some(settled)) => {
                    tracing::info!(%id, ?settled, "a job run in parts moved on");
                    let _ = self.changed.send(id);
                    self.wake.notify_one();
                }
                Ok(None) => {}
                Err(e) => tracing::warn!(%id, error = %e, "cannot move a job run in parts on"),
            }
        }
    }
}
