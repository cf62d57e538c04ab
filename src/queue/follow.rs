//! Following a job: its changes as they are announced (the SSE stream), or only its end (the synchronous
//! remote-VAE calls). Announcements say only "job X changed"; the job is re-read from the store.
use std::time::Duration;

use futures_util::Stream;
use tokio::sync::broadcast::{self, error::RecvError};
use uuid::Uuid;

use super::{Queue, QueueError};
use crate::jobs::Job;

/// A follower re-reads the job at least this often, in case an announcement was missed.
const FOLLOW_POLL: Duration = Duration::from_secs(5);
const WAIT_POLL: Duration = Duration::from_secs(2);

/// Announcements of changed jobs, subscribed to before the job is queued or read, so that none is missed.
pub struct Changes(broadcast::Receiver<Uuid>);

impl Changes {
    /// Returns when `id` changed, or when announcements may have been lost (lagged, closed).
    async fn of(&mut self, id: Uuid) {
        loop {
            match self.0.recv().await {
                Ok(changed) if changed == id => return,
                Ok(_) => continue,
                Err(RecvError::Lagged(_)) | Err(RecvError::Closed) => return,
            }
        }
    }
}

/// What a follower sees.
pub enum Followed {
    /// The job, at once and whenever it changes; the last one has a final status.
    Job(Job),
    /// The server is stopping; the job goes on after the restart.
    Shutdown,
}

impl Queue {
    pub fn changes(&self) -> Changes {
        Changes(self.events.subscribe())
    }

    /// The job as it is now, then as it changes, until a final status (or the server stops, or the job
    /// can no longer be read).
    pub fn follow(&self, job: Job) -> impl Stream<Item = Followed> {
        struct Follow {
            queue: Queue,
            id: Uuid,
            changes: Changes,
            first: Option<Job>,
            done: bool,
        }
        let state = Follow { queue: self.clone(), id: job.id, changes: self.changes(), first: Some(job), done: false };
        futures_util::stream::unfold(state, |mut s| async move {
            if s.done {
                return None;
            }
            let job = match s.first.take() {
                Some(job) => job,
                None => {
                    let waited = tokio::time::timeout(FOLLOW_POLL, s.changes.of(s.id));
                    if s.queue.shutdown.run_until_cancelled(waited).await.is_none() {
                        s.done = true;
                        return Some((Followed::Shutdown, s));
                    }
                    match s.queue.store.get(s.id).await {
                        Ok(Some(job)) => job,
                        _ => return None,
                    }
                }
            };
            s.done = job.status.is_terminal();
            let job = s.queue.placed_one(job).await;
            Some((Followed::Job(job), s))
        })
    }

    /// Waits until the job has a final status, for at most `job_timeout_s`.
    pub async fn wait(&self, id: Uuid, changes: &mut Changes) -> Result<Job, QueueError> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(self.config.job_timeout_s);
        loop {
            let job = self.store.get(id).await?.ok_or_else(|| QueueError::JobNotFound(id.to_string()))?;
            if job.status.is_terminal() {
                return Ok(job);
            }
            if tokio::time::Instant::now() > deadline {
                return Err(QueueError::Internal(format!("job {id} did not finish within job_timeout_s")));
            }
            let _ = tokio::time::timeout(WAIT_POLL, changes.of(id)).await;
        }
    }
}
