//! A job's life has one home: `Queue` submits (the checks and admission shared by HTTP, the remote-VAE
//! endpoints and `vaebox run`), follows, waits for, cancels and deletes jobs, over the store and the scheduler.
mod admission;
pub mod callbacks;
mod device_need;
mod error;
pub mod estimate;
mod fit_input;
mod follow;
mod inspect;
mod keep;
pub mod leases;
mod manage;
mod output_size;
mod output_path;
pub mod parts;
pub mod parameters;
mod places;
mod progress_eta;
mod preview;
mod request;
pub mod scheduler;
mod staged;
mod submit;
mod waited;
mod whole;

use std::path::PathBuf;
use std::sync::Arc;

use tokio::sync::{Notify, Semaphore};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

pub use admission::{Admission, Limits, Ticket};
pub use error::QueueError;
pub use follow::{Changes, Followed};
pub use inspect::{inspect_input, InputKind, Probed};
pub use manage::JobResult;
pub use output_size::{check_output_size, output_size, InputSize};
pub use parameters::{refuse_parameters_not_for, JobFields, Parameter, PARAMETERS};
pub use preview::PreviewSide;
pub use request::{bad_memory_budget, bad_priority, bad_scale, bad_tile, check, default_model, find_model, JobOptions, JobRequest};
pub use staged::StagedFile;
pub use submit::Submission;
pub use waited::WaitedJobs;
pub use whole::Whole;

use crate::config::Config;
use scheduler::{CancelFlags, JobEvents};
use crate::jobs::disk::DiskReserve;
use crate::jobs::files::JobFiles;
use crate::jobs::JobStore;

/// What the queue works over; the scheduler shares the store, the wake-up, the announcements and the flags.
pub struct QueueParts {
    pub config: Arc<Config>,
    pub store: Arc<dyn JobStore>,
    /// Rung when a job is queued, so the scheduler need not wait for its next poll.
    pub wake: Arc<Notify>,
    pub events: JobEvents,
    pub cancels: CancelFlags,
    /// Cancelled when the server starts to stop: followers are told and let go.
    pub shutdown: CancellationToken,
    /// Given up when a deletion cannot be written for lack of space.
    pub reserve: Arc<DiskReserve>,
    pub files: JobFiles,
}

#[derive(Clone)]
pub struct Queue {
    config: Arc<Config>,
    store: Arc<dyn JobStore>,
    wake: Arc<Notify>,
    events: JobEvents,
    cancels: CancelFlags,
    shutdown: CancellationToken,
    reserve: Arc<DiskReserve>,
    files: JobFiles,
    admission: Admission,
    /// Previews made at once (thumbnails, proxies): one, beside the running job.
    previews: Arc<Semaphore>,
}

impl Queue {
    pub fn new(parts: QueueParts) -> Queue {
        let QueueParts { config, store, wake, events, cancels, shutdown, reserve, files } = parts;
        let previews = Arc::new(Semaphore::new(1));
        Queue { config, store, wake, events, cancels, shutdown, reserve, files, admission: Admission::default(), previews }
    }

    /// The store, for what reads it beyond one job's life (health, metrics).
    /// Whether the disk reserve is in place (`/healthz` says so: without it a full disk can stop the box
    /// recording what happened).
    pub fn disk_reserve_held(&self) -> bool {
        self.reserve.is_held()
    }

    pub fn store(&self) -> &dyn JobStore {
        self.store.as_ref()
    }

    fn job_dir(&self, id: Uuid) -> PathBuf {
        self.files.job_dir(id)
    }
}
