//! Jobs: what a job is (`model`), where it is kept (`store`), and who runs it next (`scheduler`).
pub mod model;
pub mod scheduler;
pub mod store;

pub use model::*;
pub use store::{CancelOutcome, DeleteOutcome, JobStore, ListFilter, NewJob, SqliteStore, StoreError};
