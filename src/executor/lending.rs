//! Lending the executor. A synchronous call (`/v1/decode`, `/v1/encode`) or a short job that comes while a
//! long job runs takes the executor at the long job's next chunk end (`JobHooks::between_chunks`), runs to
//! its end and hands it back. The long job's state (its streams, caches, open encoder) waits in memory
//! untouched, so it goes on exactly where it stood and writes the bytes an undisturbed run writes.
//!
//! What runs a lent job is the executor's (mod.rs): it runs them on a second `Executor` over the same device
//! with models of its own, kept while the long job runs (a second call of the same VAE finds it loaded) and
//! freed when it ends. The long job's models stay loaded meanwhile: on a GPU the lent job's budget is the
//! device memory then free; a call whose model is the long job's own loads a second copy of it. This file only
//! keeps the lender where a chunk end finds it, so that it imports nothing of the executor.
use std::cell::RefCell;
use std::time::{Duration, Instant};

/// Runs the next job waiting to be lent the executor, if any; whether there was one.
pub(super) type LendOne = Box<dyn FnMut() -> bool>;

thread_local! {
    /// Set on the executor thread while a job of its own runs; taken while a lent job runs, so that a lent
    /// job lends nothing in turn.
    static LENDER: RefCell<Option<LendOne>> = const { RefCell::new(None) };
}

/// Runs `run` (the executor's own job) lending the executor at its chunk ends through `lend_one`.
pub(super) fn lending_while<T>(lend_one: LendOne, run: impl FnOnce() -> T) -> T {
    LENDER.with(|lender| *lender.borrow_mut() = Some(lend_one));
    let result = run();
    // What the lender holds (the side executor's models) goes with it.
    LENDER.with(|lender| lender.borrow_mut().take());
    result
}

/// At a chunk end of the job running: runs every job waiting to be lent the executor. The time they took.
pub(super) fn lend() -> Duration {
    let Some(mut lend_one) = LENDER.with(|lender| lender.borrow_mut().take()) else { return Duration::ZERO };
    let started = Instant::now();
    let mut lent = false;
    while lend_one() {
        lent = true;
    }
    LENDER.with(|lender| *lender.borrow_mut() = Some(lend_one));
    if lent {
        started.elapsed()
    } else {
        Duration::ZERO
    }
}
