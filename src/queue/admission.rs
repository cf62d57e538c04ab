//! Explicit admission: a full queue answers 429 at once rather than making clients wait unboundedly.
//! The limits count queued jobs AND uploads admitted but not yet queued, checked and reserved under one
//! lock, so they hold however many uploads arrive at once (an upload takes seconds between the check and
//! its row; counting rows alone let 50 concurrent uploads through a limit of 10). The box's limit holds
//! for all callers together, the per-token one for each access token.
use std::collections::HashMap;
use std::sync::{Arc, Mutex as SyncMutex};

use tokio::sync::Mutex;

use super::QueueError;
use crate::jobs::{JobStatus, JobStore, ListFilter};

#[derive(Clone, Default)]
pub struct Admission {
    /// Serialises check-and-reserve.
    gate: Arc<Mutex<()>>,
    /// Admitted uploads not yet queued, by owner (`None`: the box has no tokens).
    in_flight: Arc<SyncMutex<HashMap<Option<String>, usize>>>,
}

/// What limits an admission.
pub struct Limits {
    /// Queued jobs of everyone together.
    pub queued: u32,
    /// Queued jobs of one token (0 = no limit of its own).
    pub queued_per_token: u32,
}

/// A place in the queue, held from admission until the job's row exists (or the upload fails).
pub struct Ticket {
    owner: Option<String>,
    in_flight: Arc<SyncMutex<HashMap<Option<String>, usize>>>,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut in_flight = self.in_flight.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(count) = in_flight.get_mut(&self.owner) {
            *count = count.saturating_sub(1);
        }
    }
}

impl Admission {
    pub async fn admit(&self, store: &dyn JobStore, owner: Option<String>, limits: &Limits) -> Result<Ticket, QueueError> {
        let _gate = self.gate.lock().await;
        let (all_in_flight, own_in_flight) = {
            let in_flight = self.in_flight.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            (in_flight.values().sum::<usize>(), in_flight.get(&owner).copied().unwrap_or(0))
        };
        // A ticket is dropped after its row is written, so for a moment a job counts twice: the limits err
        // on the side of refusing.
        let queued = store.count(JobStatus::Queued).await?.max(0) as usize;
        if queued + all_in_flight >= limits.queued as usize {
            return Err(QueueError::QueueFull { limit: limits.queued });
        }
        if let (Some(name), per_token @ 1..) = (&owner, limits.queued_per_token) {
            let filter = ListFilter { status: Some(JobStatus::Queued), owner: Some(name.clone()), limit: i64::from(per_token), offset: 0 };
            let own_queued = store.list(&filter).await?.len();
            if own_queued + own_in_flight >= per_token as usize {
                return Err(QueueError::TokenQueueFull { limit: per_token });
            }
        }
        *self.in_flight.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).entry(owner.clone()).or_default() += 1;
        Ok(Ticket { owner, in_flight: self.in_flight.clone() })
    }
}
