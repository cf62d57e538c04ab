//! Runs a reference Python script as a subprocess with a hard timeout and reads the one JSON line it
//! prints. Its stderr (progress) is echoed live and kept for the error message.
use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

/// How often a running script is checked for exit or timeout.
const POLL_INTERVAL: Duration = Duration::from_millis(100);
/// Lines of the script's stderr kept for an error message.
const STDERR_TAIL_LINES: usize = 20;

#[derive(Debug, Clone)]
pub struct PythonScript {
    pub python: PathBuf,
    pub script: PathBuf,
    pub timeout: Duration,
    /// Pins the reference to the same thread count as our side (also via OMP/MKL env variables, which
    /// torch reads before `set_num_threads` runs).
    pub threads: usize,
}

impl PythonScript {
    /// Runs `python script args…`; returns the last stdout line that parses as a JSON object.
    pub fn run_json(&self, args: &[String]) -> anyhow::Result<serde_json::Value> {
        let started = Instant::now();
        let threads = self.threads.to_string();
        let mut child = Command::new(&self.python)
            .arg(&self.script)
            .args(args)
            .env("OMP_NUM_THREADS", &threads)
            .env("MKL_NUM_THREADS", &threads)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("cannot start {} {}", self.python.display(), self.script.display()))?;

        let mut stdout = child.stdout.take().expect("stdout is piped");
        let stdout_reader = thread::spawn(move || {
            let mut text = String::new();
            stdout.read_to_string(&mut text).map(|_| text)
        });
        let stderr = child.stderr.take().expect("stderr is piped");
        let stderr_reader = thread::spawn(move || {
            let mut tail = Vec::new();
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                eprintln!("  | {line}");
                tail.push(line);
                if tail.len() > STDERR_TAIL_LINES {
                    tail.remove(0);
                }
            }
            tail.join("\n")
        });

        let status = loop {
            if let Some(status) = child.try_wait()? {
                break status;
            }
            if started.elapsed() > self.timeout {
                // The child's pipes close when it dies, so the reader threads end too.
                let _ = child.kill();
                let _ = child.wait();
                let tail = stderr_reader.join().unwrap_or_default();
                bail!("{} {:?} timed out after {:?}; stderr tail:\n{tail}", self.script.display(), args, self.timeout);
            }
            thread::sleep(POLL_INTERVAL);
        };
        let stdout = stdout_reader.join().map_err(|_| anyhow::anyhow!("stdout reader panicked"))??;
        let tail = stderr_reader.join().unwrap_or_default();
        if !status.success() {
            bail!("{} {:?} failed ({status}); stderr tail:\n{tail}", self.script.display(), args);
        }
        stdout
            .lines()
            .rev()
            .find_map(|line| serde_json::from_str::<serde_json::Value>(line).ok().filter(|v| v.is_object()))
            .with_context(|| format!("{} {:?} printed no JSON line; stdout:\n{stdout}", self.script.display(), args))
    }
}
