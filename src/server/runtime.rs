//! The async runtime every command runs on.
use std::time::Duration;

use tokio::runtime::{Builder, Runtime};

/// Threads for blocking work (file system calls, probes): plenty for the upload slots and the
/// per-job file work, and a bound on what a burst can leave behind.
const MAX_BLOCKING_THREADS: usize = 64;

/// Tokio ends idle blocking threads after 10 s by default. A job runs longer than that, so the pool
/// was empty whenever a job ended, and the next file call had to start a thread in whatever memory
/// the job had left; when that failed (a full address space), tokio panicked the request that made
/// the call. Threads kept for an hour (and one started before any job) never meet that moment.
const BLOCKING_THREAD_KEEP_ALIVE: Duration = Duration::from_secs(3600);

pub fn build() -> std::io::Result<Runtime> {
    let runtime = Builder::new_multi_thread()
        .enable_all()
        .max_blocking_threads(MAX_BLOCKING_THREADS)
        .thread_keep_alive(BLOCKING_THREAD_KEEP_ALIVE)
        .build()?;
    runtime.block_on(async { tokio::task::spawn_blocking(|| ()).await })?;
    Ok(runtime)
}
