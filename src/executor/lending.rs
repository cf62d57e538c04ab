//! Lending the executor. A synchronous call (`/v1/decode`, `/v1/encode`) or a short job that comes while a
//! long job runs takes the executor at the long job's next chunk end (`JobHooks::between_chunks`), runs to
//! its end and hands it back. The long job's state (its streams, caches, open encoder) waits in memory
//! untouched, so it goes on exactly where it stood and writes the bytes an undisturbed run writes.
//!
//! The lent jobs run on a second `Executor` over the same device with models of its own, kept while the long
//! job runs (a second call of the same VAE finds it loaded) and freed when it ends. The long job's models
//! stay loaded meanwhile: on a GPU the lent job's budget is the device memory then free; a call whose model is
//! the long job's own loads a second copy of it.
use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::context::Executor;
use super::RunCommand;

/// The jobs waiting to be lent the executor, in the order they came.
pub(super) type Waiting = Arc<Mutex<VecDeque<RunCommand>>>;

struct Lender {
    waiting: Waiting,
    side: Executor,
}

thread_local! {
    /// Set on the executor thread while a job of its own runs; taken while a lent job runs, so that a lent
    /// job lends nothing in turn.
    static LENDER: RefCell<Option<Lender>> = const { RefCell::new(None) };
}

/// Runs `run` (the executor's own job) with the jobs in `waiting` lent the executor at its chunk ends, on
/// `side`.
pub(super) fn lending_while<T>(waiting: &Waiting, side: Executor, run: impl FnOnce() -> T) -> T {
    LENDER.with(|lender| *lender.borrow_mut() = Some(Lender { waiting: waiting.clone(), side }));
    let result = run();
    // The side executor's models go with it.
    LENDER.with(|lender| lender.borrow_mut().take());
    result
}

/// At a chunk end of the job running: runs every job waiting to be lent the executor. The time they took.
pub(super) fn lend() -> Duration {
    let Some(mut lender) = LENDER.with(|lender| lender.borrow_mut().take()) else { return Duration::ZERO };
    let started = Instant::now();
    let mut lent = false;
    loop {
        let next = lender.waiting.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).pop_front();
        let Some(command) = next else { break };
        lent = true;
        tracing::info!(id = %command.job.id, op = command.job.op.as_str(), "the running job lends the executor");
        super::run_command(&mut lender.side, command);
    }
    LENDER.with(|slot| *slot.borrow_mut() = Some(lender));
    if lent {
        started.elapsed()
    } else {
        Duration::ZERO
    }
}

/// Runs every job waiting to be lent the executor on `executor` itself (it is idle).
pub(super) fn run_waiting(waiting: &Waiting, executor: &mut Executor) {
    loop {
        let next = waiting.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).pop_front();
        let Some(command) = next else { return };
        super::run_command(executor, command);
    }
}
