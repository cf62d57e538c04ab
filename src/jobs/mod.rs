//! Jobs: what a job is (`model`), where it is kept (`store`), who runs it next (`scheduler`), and what
//! its life reports to metrics (`telemetry`).
pub mod model;
pub mod preflight;
pub mod scheduler;
pub mod store;
pub mod telemetry;

pub use model::*;
pub use store::{CancelOutcome, DeleteOutcome, JobStore, ListFilter, NewJob, SqliteStore, StoreError};
