//! A job's cancel as the model code sees it: a flag asked between pieces of work (tiles, causal
//! convolutions, DiT blocks), so that a cancel ends a long push or DiT call within about a second
//! instead of at its end. Asking is one relaxed atomic load: free beside any piece of work.
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::ModelError;

/// The flag to ask, or none (a caller that never stops: whole-clip helpers, tests, benchmarks).
#[derive(Debug, Clone, Default)]
pub struct StopFlag(Option<Arc<AtomicBool>>);

impl StopFlag {
    /// Raised when `flag` is set (a job's cancel flag).
    pub fn on(flag: Arc<AtomicBool>) -> StopFlag {
        StopFlag(Some(flag))
    }

    /// Never raised.
    pub fn never() -> StopFlag {
        StopFlag(None)
    }

    pub fn is_raised(&self) -> bool {
        self.0.as_ref().is_some_and(|flag| flag.load(Ordering::Relaxed))
    }

    /// `ModelError::Stopped` once raised: the work in hand ends here, its partial result is dropped.
    pub fn check(&self) -> Result<(), ModelError> {
        if self.is_raised() {
            return Err(ModelError::Stopped);
        }
        Ok(())
    }
}
