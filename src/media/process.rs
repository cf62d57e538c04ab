//! One ffmpeg/ffprobe child process with a deadline, a bounded stderr tail, and kill-and-reap on drop.

use std::ffi::OsString;
use std::io::Read;
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use super::MediaError;

/// ffmpeg's last lines say why it failed; earlier ones are rarely needed and must not grow memory.
const STDERR_TAIL_BYTES: usize = 8 * 1024;

pub(crate) struct ProcessSpec<'a> {
    pub program: &'a Path,
    pub args: Vec<OsString>,
    /// Bounds the whole life of the process, including time spent blocked on its pipes.
    pub timeout: Duration,
    pub pipe_stdin: bool,
    pub pipe_stdout: bool,
    pub priority: ProcessPriority,
}

/// How a media process shares the CPU with the model computing beside it (config `media_priority`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProcessPriority {
    #[default]
    Normal,
    /// Linux `SCHED_IDLE`: the process runs on CPU time nothing else wants. A model on the CPU runs its
    /// threads in lock-step, so a core taken by the encoder stalls all of them; at idle priority the
    /// encoder works while the model waits for it instead (docs/benchmarks.md).
    Idle,
}

pub(crate) struct BoundedChild {
    program: String,
    timeout: Duration,
    pid: u32,
    control: Arc<ChildControl>,
    pub stdin: Option<ChildStdin>,
    pub stdout: Option<ChildStdout>,
    stderr_tail: Arc<Mutex<Vec<u8>>>,
    stderr_reader: Option<JoinHandle<()>>,
    /// Dropping this sender tells the watchdog the process is finished.
    watchdog_cancel: Option<mpsc::Sender<()>>,
}

/// Shared between the owner and the watchdog. `exit` is set once the child is reaped; after that its
/// pid may belong to another process, so nobody may signal it any more.
struct ChildControl {
    state: Mutex<ChildState>,
    timed_out: AtomicBool,
}

struct ChildState {
    child: Child,
    exit: Option<ExitStatus>,
}

impl ChildControl {
    fn kill(&self) {
        let mut state = lock(&self.state);
        if state.exit.is_none() {
            let _ = state.child.kill(); // fails only when it already exited, which is what we want
        }
    }
}

/// Lets another thread (e.g. a reader blocked on the child's stdout) stop the process.
#[derive(Clone)]
pub(crate) struct ChildKiller(Arc<ChildControl>);

impl ChildKiller {
    pub fn kill(&self) {
        self.0.kill();
    }
}

impl BoundedChild {
    pub fn spawn(spec: ProcessSpec<'_>) -> Result<Self, MediaError> {
        let program = spec.program.file_name().unwrap_or(spec.program.as_os_str()).to_string_lossy().into_owned();
        let mut command = Command::new(spec.program);
        command
            .args(&spec.args)
            .stdin(if spec.pipe_stdin { Stdio::piped() } else { Stdio::null() })
            .stdout(if spec.pipe_stdout { Stdio::piped() } else { Stdio::null() })
            .stderr(Stdio::piped());
        if spec.priority == ProcessPriority::Idle {
            run_at_idle_priority(&mut command);
        }
        let mut child = command.spawn().map_err(|source| match source.kind() {
            std::io::ErrorKind::NotFound | std::io::ErrorKind::PermissionDenied => {
                MediaError::Missing { program: spec.program.to_path_buf(), source }
            }
            _ => MediaError::io(format!("spawning {program}"), source),
        })?;
        let pid = child.id();
        let stdin = child.stdin.take();
        let stdout = child.stdout.take();
        let stderr = child.stderr.take().expect("stderr is piped");
        let control = Arc::new(ChildControl {
            state: Mutex::new(ChildState { child, exit: None }),
            timed_out: AtomicBool::new(false),
        });

        let stderr_tail = Arc::new(Mutex::new(Vec::new()));
        let stderr_reader = spawn_stderr_reader(stderr, Arc::clone(&stderr_tail), &program);
        let watchdog_cancel = match spawn_watchdog(Arc::clone(&control), spec.timeout, &program) {
            Ok(cancel) => Some(cancel),
            Err(e) => {
                // Without a watchdog the deadline could not be enforced: refuse to run unbounded.
                control.kill();
                let _ = lock(&control.state).child.wait();
                return Err(MediaError::io("starting the media watchdog thread", e));
            }
        };

        tracing::debug!(program, pid, args = ?spec.args, "spawned media process");
        Ok(BoundedChild {
            program,
            timeout: spec.timeout,
            pid,
            control,
            stdin,
            stdout,
            stderr_tail,
            stderr_reader,
            watchdog_cancel,
        })
    }

    pub fn killer(&self) -> ChildKiller {
        ChildKiller(Arc::clone(&self.control))
    }

    /// Closes our pipe ends, waits for the exit and maps a timeout or a non-zero exit to an error
    /// that carries the stderr tail. On success returns the stderr tail (warnings).
    pub fn finish(mut self) -> Result<String, MediaError> {
        let status = self.wait_for_exit().map_err(|e| MediaError::io(format!("waiting for {}", self.program), e))?;
        if self.control.timed_out.load(Ordering::SeqCst) {
            return Err(self.timeout_error());
        }
        if !status.success() {
            return Err(MediaError::FfmpegFailed {
                program: self.program.clone(),
                status: describe_exit(status),
                stderr: self.stderr_tail(),
            });
        }
        Ok(self.stderr_tail())
    }

    pub fn timeout_error(&self) -> MediaError {
        MediaError::Timeout { program: self.program.clone(), after: self.timeout, stderr: self.stderr_tail() }
    }

    /// Complete only after the process exited (the reader thread is joined then).
    pub fn stderr_tail(&self) -> String {
        let tail = lock(&self.stderr_tail);
        String::from_utf8_lossy(&tail).trim().to_string()
    }

    fn wait_for_exit(&mut self) -> std::io::Result<ExitStatus> {
        self.stdin.take();
        self.stdout.take();
        // Block without the lock (and without reaping) so the watchdog can still kill meanwhile.
        wait_until_exited_without_reaping(self.pid)?;
        let status = {
            let mut state = lock(&self.control.state);
            let status = state.child.wait()?;
            state.exit = Some(status);
            status
        };
        self.watchdog_cancel.take();
        if let Some(reader) = self.stderr_reader.take() {
            let _ = reader.join();
        }
        Ok(status)
    }
}

impl Drop for BoundedChild {
    fn drop(&mut self) {
        self.stdin.take();
        self.stdout.take();
        let mut state = lock(&self.control.state);
        if state.exit.is_none() {
            let _ = state.child.kill();
            if let Ok(status) = state.child.wait() {
                state.exit = Some(status);
            }
        }
        drop(state);
        self.watchdog_cancel.take();
        // The stderr reader ends by itself once the pipe closes; no need to wait for it here.
    }
}

fn spawn_stderr_reader(
    mut stderr: std::process::ChildStderr,
    tail: Arc<Mutex<Vec<u8>>>,
    program: &str,
) -> Option<JoinHandle<()>> {
    let spawned = std::thread::Builder::new().name(format!("{program}-stderr")).spawn(move || {
        let mut buf = [0u8; 4096];
        loop {
            match stderr.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let mut tail = lock(&tail);
                    tail.extend_from_slice(&buf[..n]);
                    let excess = tail.len().saturating_sub(STDERR_TAIL_BYTES);
                    tail.drain(..excess);
                }
            }
        }
    });
    spawned.ok()
}

fn spawn_watchdog(control: Arc<ChildControl>, timeout: Duration, program: &str) -> std::io::Result<mpsc::Sender<()>> {
    let (cancel, cancelled) = mpsc::channel::<()>();
    let program_name = program.to_string();
    std::thread::Builder::new().name(format!("{program}-watchdog")).spawn(move || {
        if let Err(mpsc::RecvTimeoutError::Timeout) = cancelled.recv_timeout(timeout) {
            tracing::warn!(program = program_name, ?timeout, "media process timed out; killing it");
            let mut state = lock(&control.state);
            if state.exit.is_none() {
                control.timed_out.store(true, Ordering::SeqCst);
                let _ = state.child.kill();
            }
        }
    })?;
    Ok(cancel)
}

/// `waitid(WNOWAIT)` leaves the child a zombie, so its pid stays reserved until `Child::wait` reaps it.
fn wait_until_exited_without_reaping(pid: u32) -> std::io::Result<()> {
    loop {
        // SAFETY: siginfo_t is plain data that waitid fills in; the pid is our own unreaped child.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        let rc = unsafe { libc::waitid(libc::P_PID, pid as libc::id_t, &mut info, libc::WEXITED | libc::WNOWAIT) };
        if rc == 0 {
            return Ok(());
        }
        let err = std::io::Error::last_os_error();
        if err.kind() != std::io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

fn describe_exit(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        _ => status.to_string(),
    }
}

/// Puts the calling thread at `priority`: a thread that only feeds a media process at idle priority would
/// otherwise wake at normal priority for every pipe's worth and interrupt the model's threads.
pub(crate) fn set_thread_priority(priority: ProcessPriority) {
    #[cfg(target_os = "linux")]
    if priority == ProcessPriority::Idle {
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: a system call on the calling thread (pid 0); on failure the thread keeps its priority.
        unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) };
    }
}

#[cfg(unix)]
fn run_at_idle_priority(command: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: between fork and exec the closure makes one system call, which is async-signal-safe; lowering
    // one's own priority needs no privilege, and should it fail the process runs at normal priority.
    unsafe {
        command.pre_exec(|| {
            set_thread_priority(ProcessPriority::Idle);
            Ok(())
        });
    }
}

#[cfg(not(unix))]
fn run_at_idle_priority(_command: &mut Command) {}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    fn shell(script: &str, timeout: Duration) -> BoundedChild {
        BoundedChild::spawn(ProcessSpec {
            program: Path::new("/bin/sh"),
            args: vec!["-c".into(), script.into()],
            timeout,
            pipe_stdin: false,
            pipe_stdout: true,
            priority: ProcessPriority::Normal,
        })
        .unwrap()
    }

    /// The scheduling policy of the process `script` runs in, read by the process itself (field 41 of
    /// `/proc/self/stat`: 0 SCHED_OTHER, 5 SCHED_IDLE).
    fn policy_seen_by_child(priority: ProcessPriority) -> u32 {
        let mut child = BoundedChild::spawn(ProcessSpec {
            program: Path::new("/bin/sh"),
            args: vec!["-c".into(), "cat /proc/self/stat".into()],
            timeout: Duration::from_secs(20),
            pipe_stdin: false,
            pipe_stdout: true,
            priority,
        })
        .unwrap();
        let mut stat = String::new();
        child.stdout.as_mut().unwrap().read_to_string(&mut stat).unwrap();
        child.finish().unwrap();
        // The command name in parentheses may hold spaces; the fields after it start at field 3.
        let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 1..].split_whitespace().collect();
        fields[41 - 3].parse().unwrap()
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn an_idle_priority_process_runs_under_sched_idle_and_a_normal_one_does_not() {
        assert_eq!(policy_seen_by_child(ProcessPriority::Idle), libc::SCHED_IDLE as u32);
        assert_eq!(policy_seen_by_child(ProcessPriority::Normal), libc::SCHED_OTHER as u32);
    }

    #[test]
    fn a_stalled_process_is_killed_at_the_deadline_even_while_its_stdout_is_being_read() {
        let mut child = shell("exec sleep 30", Duration::from_millis(200));
        let started = Instant::now();
        let mut out = Vec::new();
        child.stdout.as_mut().unwrap().read_to_end(&mut out).unwrap();
        let err = child.finish().unwrap_err();
        assert_eq!(err.code(), "media-timeout");
        assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());
    }

    #[test]
    fn stderr_tail_is_bounded_and_keeps_the_end() {
        let child = shell("i=0; while [ $i -lt 2000 ]; do echo line$i >&2; i=$((i+1)); done; exit 3", Duration::from_secs(20));
        let err = child.finish().unwrap_err();
        let MediaError::FfmpegFailed { status, stderr, .. } = err else { panic!("wrong error") };
        assert_eq!(status, "exit code 3");
        assert!(stderr.len() <= STDERR_TAIL_BYTES);
        assert!(stderr.ends_with("line1999"), "tail: {}", &stderr[stderr.len() - 40..]);
        assert!(!stderr.contains("line0\n"));
    }

    #[test]
    fn a_missing_program_maps_to_ffmpeg_missing() {
        let err = BoundedChild::spawn(ProcessSpec {
            program: Path::new("/nonexistent/ffmpeg"),
            args: vec![],
            timeout: Duration::from_secs(1),
            pipe_stdin: false,
            pipe_stdout: false,
            priority: ProcessPriority::Normal,
        })
        .err()
        .unwrap();
        assert_eq!(err.code(), "ffmpeg-missing");
    }

    #[test]
    fn dropping_kills_and_reaps_the_process() {
        let child = shell("exec sleep 30", Duration::from_secs(60));
        let pid = child.pid as libc::pid_t;
        drop(child);
        // SAFETY: signal 0 only checks existence; ESRCH means the pid is gone (reaped).
        let alive = unsafe { libc::kill(pid, 0) } == 0;
        assert!(!alive, "process {pid} still exists after drop");
    }
}
