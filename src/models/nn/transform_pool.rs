//! Helper threads for the Winograd transforms, started once and reused.
//!
//! Why not a thread per call: starting a thread allocates its stack and bookkeeping, and under a
//! memory limit a failed allocation there ends the process (Rust aborts on it), where libtorch's own
//! failures come back as errors the executor retries. The helpers start at the first call; later
//! calls allocate nothing. A call that finds the helpers busy (another thread is using them) runs all
//! its parts on its own thread.
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Condvar, Mutex, MutexGuard, Once, OnceLock};

/// The work of one call, `work(part)`, borrowed for the call only.
type Work<'a> = &'a (dyn Fn(usize) + Sync);

struct Pool {
    /// Held by the call using the helpers.
    in_use: Mutex<()>,
    state: Mutex<State>,
    wake: Condvar,
    done: Condvar,
}

#[derive(Default)]
struct State {
    /// Helpers that started.
    helpers: usize,
    /// Counts calls; a helper runs a call once.
    generation: u64,
    /// The present call's work, its lifetime erased: set only while that call waits for `pending == 0`.
    work: Option<Work<'static>>,
    /// Helpers 1..=helping take part `index` of the present call.
    helping: usize,
    pending: usize,
    panicked: bool,
}

static POOL: OnceLock<Pool> = OnceLock::new();
static STARTED: Once = Once::new();

/// How many parts a call should be split into to keep every thread busy.
pub fn parts() -> usize {
    tch::get_num_threads().max(1) as usize
}

/// Runs `work(0)`…`work(parts − 1)`: part 0 on this thread, the others on helpers when they are free.
pub fn run_parts(parts: usize, work: &(dyn Fn(usize) + Sync)) {
    let pool = POOL.get_or_init(|| Pool { in_use: Mutex::new(()), state: Mutex::default(), wake: Condvar::new(), done: Condvar::new() });
    STARTED.call_once(|| start_helpers(pool, self::parts().saturating_sub(1)));
    let busy = pool.in_use.try_lock();
    let helpers = lock(&pool.state).helpers;
    let (Ok(_turn), true) = (busy, helpers > 0 && parts > 1) else {
        (0..parts).for_each(work);
        return;
    };
    let helping = (parts - 1).min(helpers);
    // SAFETY: helpers read the erased borrow only until `pending` is back to zero, which this function
    // waits for before it returns, while `work` is still borrowed.
    let erased = unsafe { std::mem::transmute::<Work<'_>, Work<'static>>(work) };
    {
        let mut state = lock(&pool.state);
        state.work = Some(erased);
        state.helping = helping;
        state.pending = helping;
        state.panicked = false;
        state.generation += 1;
    }
    pool.wake.notify_all();
    work(0);
    (helping + 1..parts).for_each(work);
    let mut state = lock(&pool.state);
    while state.pending > 0 {
        state = pool.done.wait(state).unwrap_or_else(|e| e.into_inner());
    }
    state.work = None;
    if state.panicked {
        drop(state);
        panic!("a transform helper thread panicked");
    }
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|e| e.into_inner())
}

fn start_helpers(pool: &'static Pool, wanted: usize) {
    let mut started = 0;
    for index in 1..=wanted {
        let spawned = std::thread::Builder::new().name(format!("vaebox-transform-{index}")).stack_size(256 << 10).spawn(move || helper(pool, index));
        if spawned.is_err() {
            break;
        }
        started += 1;
    }
    lock(&pool.state).helpers = started;
}

fn helper(pool: &'static Pool, index: usize) {
    let mut seen = 0;
    loop {
        let work = {
            let mut state = lock(&pool.state);
            while state.generation == seen {
                state = pool.wake.wait(state).unwrap_or_else(|e| e.into_inner());
            }
            seen = state.generation;
            match state.work {
                Some(work) if index <= state.helping => work,
                _ => continue,
            }
        };
        let finished = catch_unwind(AssertUnwindSafe(|| work(index))).is_ok();
        let mut state = lock(&pool.state);
        state.panicked |= !finished;
        state.pending -= 1;
        if state.pending == 0 {
            pool.done.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn every_part_runs_once_also_from_threads_at_once() {
        std::thread::scope(|scope| {
            for _ in 0..3 {
                scope.spawn(|| {
                    for parts in [1, 2, 5] {
                        let runs: Vec<AtomicUsize> = (0..parts).map(|_| AtomicUsize::new(0)).collect();
                        run_parts(parts, &|part| {
                            runs[part].fetch_add(1, Ordering::Relaxed);
                        });
                        assert!(runs.iter().all(|r| r.load(Ordering::Relaxed) == 1));
                    }
                });
            }
        });
    }
}
