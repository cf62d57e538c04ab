//! The jobs a synchronous call waits for. Its client is the only one who will read their results, so when
//! the call goes away (hyper drops the handler's future once the client hangs up) the jobs go too: a long
//! decode no one waits for would hold the device for nothing.
use uuid::Uuid;

use super::Queue;

pub struct WaitedJobs {
    queue: Queue,
    ids: Vec<Uuid>,
    answered: bool,
}

impl WaitedJobs {
    pub fn new(queue: Queue) -> WaitedJobs {
        WaitedJobs { queue, ids: Vec::new(), answered: false }
    }

    pub fn add(&mut self, id: Uuid) {
        self.ids.push(id);
    }

    pub fn ids(&self) -> &[Uuid] {
        &self.ids
    }

    /// Every job finished and the call answered: nothing is left to cancel.
    pub fn answered(mut self) {
        self.answered = true;
    }
}

impl Drop for WaitedJobs {
    fn drop(&mut self) {
        if self.answered || self.ids.is_empty() {
            return;
        }
        // Drop cannot await; the cancellation runs beside. A job that finished meanwhile refuses it, harmlessly.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        let (queue, ids) = (self.queue.clone(), std::mem::take(&mut self.ids));
        runtime.spawn(async move {
            for id in ids {
                if queue.cancel(&id.to_string(), None, false).await.is_ok() {
                    tracing::info!(%id, "a synchronous call ended before its job finished (its client left, or another item of its batch failed); the job was cancelled");
                }
            }
        });
    }
}
