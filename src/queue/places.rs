//! Where queued jobs stand: each one's place in the claim order among every owner's jobs, and its estimated
//! start, without naming any job its caller cannot see.
use super::Queue;
use crate::jobs::claim_order::Snapshot;
use crate::jobs::parts::{progress_of, PartView, SplitState};
use crate::jobs::{Job, JobStatus};

impl Queue {
    /// The jobs, each queued one with its place (`Job::queue`).
    pub async fn placed(&self, mut jobs: Vec<Job>) -> Vec<Job> {
        for job in jobs.iter_mut().filter(|job| job.split.is_some()) {
            self.show_parts(job).await;
        }
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

    /// A job run in parts with its parts (`Job::parts`) and, while they run, its progress from theirs; paused
    /// once none of them runs.
    async fn show_parts(&self, job: &mut Job) {
        let parts = match self.store.parts_of(job.id).await {
            Ok(parts) => parts,
            Err(error) => return tracing::warn!(id = %job.id, %error, "cannot read the job's parts"),
        };
        let views: Vec<PartView> = parts
            .into_iter()
            .filter_map(|part| {
                let info = part.part?;
                Some(PartView { id: part.id, index: info.index, first_frame: info.first_frame, frames: info.frames, status: part.status, worker: part.worker, started_at: part.started_at, finished_at: part.finished_at, attempts: part.attempts, progress: part.progress, error: part.error })
            })
            .collect();
        if job.split == Some(SplitState::Parts) && job.status == JobStatus::Running {
            job.progress = progress_of(&views);
            if job.pausing && !views.iter().any(|part| part.status == JobStatus::Running) {
                (job.status, job.pausing) = (JobStatus::Paused, false);
            }
        }
        job.parts = Some(views);
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
