//! Jobs: what a job is (`model`), how it ran (`plan`), where it is kept (`store`), who runs it next (`scheduler`), and what
//! its life reports to metrics (`telemetry`).
pub mod model;
pub mod plan;
pub mod scheduler;
pub mod store;
pub mod telemetry;

pub use model::*;
pub use plan::JobPlan;
pub use store::{CancelOutcome, DeleteOutcome, JobStore, ListFilter, NewJob, SqliteStore, StoreError};
