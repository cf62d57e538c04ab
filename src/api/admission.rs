//! Explicit admission: a full queue answers 429 at once rather than making clients wait unboundedly.
//! The limit counts queued jobs AND uploads admitted but not yet queued, checked and reserved under one
//! lock, so it holds however many uploads arrive at once (an upload takes seconds between the check and
//! its row; counting rows alone let 50 concurrent uploads through a limit of 10).
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::Mutex;

use super::error::ApiError;
use crate::jobs::{JobStatus, JobStore};

#[derive(Clone, Default)]
pub struct Admission {
    /// Serialises check-and-reserve; the count itself is read without it when a ticket is dropped.
    gate: Arc<Mutex<()>>,
    in_flight: Arc<AtomicUsize>,
}

/// A place in the queue, held from admission until the job's row exists (or the upload fails).
pub struct Ticket {
    in_flight: Arc<AtomicUsize>,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Admission {
    pub async fn admit(&self, store: &dyn JobStore, limit: u32) -> Result<Ticket, ApiError> {
        let _gate = self.gate.lock().await;
        let queued = store.count(JobStatus::Queued).await?.max(0) as usize;
        // A ticket is dropped after its row is written, so for a moment a job counts twice: the limit errs
        // on the side of refusing.
        if queued + self.in_flight.load(Ordering::SeqCst) >= limit as usize {
            return Err(ApiError::QueueFull { limit });
        }
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        Ok(Ticket { in_flight: self.in_flight.clone() })
    }
}
