//! Where queued jobs stand: each one's place in the claim order among every owner's jobs, and its estimated
//! start, without naming any job its caller cannot see.
use super::Queue;
use crate::jobs::claim_order::Snapshot;
use crate::jobs::{Job, JobStatus};

impl Queue {
    /// The jobs, each queued one with its place (`Job::queue`).
    pub async fn placed(&self, mut jobs: Vec<Job>) -> Vec<Job> {
        if !jobs.iter().any(|job| job.status == JobStatus::Queued) {
            return jobs;
        }
        let Some((snapshot, workers)) = self.queue_now().await else { return jobs };
        for job in jobs.iter_mut().filter(|job| job.status == JobStatus::Queued) {
            job.queue = snapshot.place(job.id, workers);
        }
        jobs
    }

    pub async fn placed_one(&self, job: Job) -> Job {
        self.placed(vec![job]).await.pop().expect("one job in, one out")
    }

    /// The queue as the store has it, and the workers that run jobs from it (at least one).
    async fn queue_now(&self) -> Option<(Snapshot, usize)> {
        let snapshot = match self.store.queue_snapshot().await {
            Ok(snapshot) => snapshot,
            Err(error) => {
                tracing::warn!(%error, "cannot read the queue for the jobs' places");
                return None;
            }
        };
        let workers = self.store.workers(self.config.lease() * 3).await.map(|workers| workers.len()).unwrap_or(1).max(1);
        Some((snapshot, workers))
    }
}
