//! Jobs: what a job is (`model`), how it ran (`plan`), where it is kept (`store`), who runs it next
//! (`scheduler`), what its life reports to metrics (`telemetry`), the checks before the first (`preflight`), and the
//! data dir's disk (`disk`).
pub mod disk;
pub mod model;
pub mod plan;
pub mod preflight;
pub mod retention;
pub mod scheduler;
pub mod store;
pub mod telemetry;

pub use model::*;
pub use plan::JobPlan;
pub use store::{CancelOutcome, DeleteOutcome, JobStore, ListFilter, NewJob, SqliteStore, StoreError};
