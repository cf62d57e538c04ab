//! `vaebox run` stopped and run again: one run at a time writes an output (a lock in its `.resume` folder,
//! where the checkpoints the next run goes on from are), and Ctrl-C says how far the run came and that the
//! same command goes on from there.
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::Context;
use vaebox::jobs::shared_resume::{resume_dir, CHECKPOINT};
use vaebox::jobs::Progress;

/// The lock file in the output's `.resume` folder (a dot name, as the folder's own temporary files).
pub const LOCK_FILE: &str = ".run.lock";

/// The exit status of a run stopped by Ctrl-C (128 + SIGINT, as a shell reports it).
pub const STOPPED_EXIT: u8 = 130;

/// Held while a run writes its output: a second run of the same output is refused at once, naming this one's
/// process; two runs would write the same segments and checkpoint.
pub struct RunLock {
    _file: File,
    path: PathBuf,
    dir: PathBuf,
}

impl RunLock {
    pub fn take(output: &Path) -> anyhow::Result<RunLock> {
        let dir = resume_dir(output);
        std::fs::create_dir_all(&dir).with_context(|| format!("cannot make the run's checkpoint folder {}", dir.display()))?;
        let path = dir.join(LOCK_FILE);
        let mut file = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(&path).with_context(|| format!("cannot open {}", path.display()))?;
        // SAFETY: flock on a descriptor this function owns; the lock goes with it when the process ends, however it ends.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let error = std::io::Error::last_os_error();
            if error.raw_os_error() != Some(libc::EWOULDBLOCK) {
                return Err(error).with_context(|| format!("cannot lock {}", path.display()));
            }
            let mut pid = String::new();
            let _ = file.read_to_string(&mut pid);
            let other = match pid.trim() {
                "" => "another `vaebox run`".to_string(),
                pid => format!("another `vaebox run` (pid {pid})"),
            };
            anyhow::bail!(
                "{other} is writing {} (its checkpoints are in {}); wait for it to end, or stop it, before running this again",
                output.display(),
                dir.display()
            );
        }
        file.set_len(0)?;
        file.write_all(format!("{}\n", std::process::id()).as_bytes())?;
        Ok(RunLock { _file: file, path, dir })
    }
}

impl Drop for RunLock {
    /// The folder stays while it holds a checkpoint to go on from (the executor removes it with the output whole).
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// Ctrl-C (SIGINT) during a run: the job is cancelled (between tiles, within about a second) and the run ends
/// saying where the next one goes on; a second Ctrl-C ends the process at once.
pub struct Interrupt {
    raised: Arc<AtomicBool>,
}

impl Interrupt {
    /// Listens from now on (inside the runtime).
    pub fn listen() -> Interrupt {
        let raised = Arc::new(AtomicBool::new(false));
        let flag = raised.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_err() {
                return;
            }
            flag.store(true, Ordering::SeqCst);
            eprintln!("\nstopping: the frames since the last checkpoint are dropped (Ctrl-C again to stop at once)");
            if tokio::signal::ctrl_c().await.is_ok() {
                std::process::exit(STOPPED_EXIT.into());
            }
        });
        Interrupt { raised }
    }

    /// The job's cancel flag (`JobHooks::cancel`), raised by Ctrl-C.
    pub fn flag(&self) -> Arc<AtomicBool> {
        self.raised.clone()
    }

    pub fn raised(&self) -> bool {
        self.raised.load(Ordering::SeqCst)
    }
}

/// The run was stopped by Ctrl-C: `main` prints this and exits with [`STOPPED_EXIT`].
#[derive(Debug)]
pub struct Stopped {
    /// Frames the last checkpoint holds: where the next run goes on.
    pub kept: u64,
    pub total: u64,
    pub unit: String,
}

impl Stopped {
    /// Where a run of `output` stopped, from its checkpoint (none: nothing kept) and its last progress.
    pub fn of(output: &Path, last: &Progress) -> Stopped {
        let checkpoint = std::fs::read(resume_dir(output).join(CHECKPOINT)).ok();
        let kept = checkpoint.and_then(|text| serde_json::from_slice::<serde_json::Value>(&text).ok()).and_then(|c| c["frames"].as_u64()).unwrap_or(0);
        let unit = if last.unit.is_empty() { "frames".to_string() } else { last.unit.clone() };
        Stopped { kept, total: last.total.max(kept), unit }
    }
}

impl std::fmt::Display for Stopped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let total = if self.total > 0 { self.total.to_string() } else { "?".into() };
        write!(f, "stopped at {}/{total} {}; run the same command to go on", self.kept, self.unit)?;
        if self.kept == 0 {
            write!(f, " (no checkpoint was made yet: it starts over)")?;
        }
        Ok(())
    }
}

impl std::error::Error for Stopped {}
