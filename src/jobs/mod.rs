//! Jobs: what a job is (`model`), how it ran (`plan`), where it is kept (`store`), what its life reports to
//! metrics (`telemetry`), the checks before the first (`preflight`), and the data dir's disk (`disk`). The
//! scheduler that runs them is the queue's (`queue::scheduler`).
pub mod blobs;
pub mod callback;
pub mod claim_order;
pub mod disk;
pub mod files;
pub mod model;
pub mod parts;
pub mod plan;
pub mod preflight;
pub mod retention;
pub mod shared_resume;
pub mod store;
pub mod telemetry;

pub use callback::{CallbackInfo, CallbackNext, CallbackState, Delivery};
pub use model::*;
pub use plan::JobPlan;
pub use store::{
    CancelOutcome, Claim, DatabaseTarget, DeleteOutcome, Expired, JobStore, KeptOutput, Lane, Lease, LeaseState, ListFilter, NewJob, PauseOutcome, PgStore,
    SqliteStore, StoreError, WatchState, WatchedFile, WorkerInfo,
};
