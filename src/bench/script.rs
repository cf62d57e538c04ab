//! Runs a reference Python script (or any child that answers in JSON lines) as a subprocess with a
//! hard timeout: either one call that prints one JSON line, or a session that answers one JSON line
//! per command line (so its runs can be interleaved with ours). The child's stderr is echoed live and
//! its tail kept for errors.
use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use anyhow::{bail, Context};
use serde_json::Value;

/// Lines of the script's stderr kept for an error message.
const STDERR_TAIL_LINES: usize = 20;

#[derive(Debug, Clone)]
pub struct PythonScript {
    pub python: PathBuf,
    pub script: PathBuf,
    /// Limit for one call, or for one command of a session.
    pub timeout: Duration,
    /// Pins the reference to the same thread count as our side (also via OMP/MKL env variables, which
    /// torch reads before `set_num_threads` runs).
    pub threads: usize,
    /// Extra environment of the child (e.g. the allocator settings our side runs with).
    pub env: Vec<(String, String)>,
}

impl PythonScript {
    /// Runs `python script args…` to the end; returns the last stdout line that is a JSON object.
    /// The timeout applies to each stdout line; these modes print a single line when done.
    pub fn run_json(&self, args: &[String]) -> anyhow::Result<Value> {
        run_json(self.command(args), self.label(args), self.timeout)
    }

    /// Starts `python script args…` as a command server and waits for its first JSON line (readiness).
    pub fn start_session(&self, args: &[String]) -> anyhow::Result<(ScriptSession, Value)> {
        let process = self.spawn(args)?;
        let mut session = ScriptSession { process, timeout: self.timeout };
        let ready = session.read_reply()?;
        Ok((session, ready))
    }

    fn spawn(&self, args: &[String]) -> anyhow::Result<ScriptProcess> {
        ScriptProcess::spawn(self.command(args), self.label(args))
    }

    fn command(&self, args: &[String]) -> Command {
        let threads = self.threads.to_string();
        let mut command = Command::new(&self.python);
        command.arg(&self.script).args(args).env("OMP_NUM_THREADS", &threads).env("MKL_NUM_THREADS", &threads);
        command.envs(self.env.iter().map(|(k, v)| (k, v)));
        command
    }

    fn label(&self, args: &[String]) -> String {
        format!("{} {}", self.script.display(), args.join(" "))
    }
}

/// Runs `command` to the end and returns the last stdout line that is a JSON object. `timeout` bounds
/// the wait for each stdout line (for a child that prints one line when done: its whole run); on
/// timeout or error the child is killed.
pub fn run_json(command: Command, label: String, timeout: Duration) -> anyhow::Result<Value> {
    let mut process = ScriptProcess::spawn(command, label)?;
    drop(process.stdin.take());
    let mut last_json = None;
    loop {
        match process.next_line(timeout)? {
            Some(line) => last_json = parse_object(&line).or(last_json),
            None => break,
        }
    }
    let status = process.child.wait()?;
    if !status.success() {
        bail!("{} failed ({status}); stderr tail:\n{}", process.label, process.stderr_tail());
    }
    last_json.with_context(|| format!("{} printed no JSON line", process.label))
}

/// A running script; killed when dropped, so an error or timeout on our side never leaves it behind.
struct ScriptProcess {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    tail: Arc<Mutex<VecDeque<String>>>,
    label: String,
}

impl ScriptProcess {
    fn spawn(mut command: Command, label: String) -> anyhow::Result<ScriptProcess> {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("cannot start {label}"))?;

        let stdout = child.stdout.take().expect("stdout is piped");
        let (line_sender, lines) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if line_sender.send(line).is_err() {
                    break;
                }
            }
        });
        let stderr = child.stderr.take().expect("stderr is piped");
        let tail = Arc::new(Mutex::new(VecDeque::new()));
        let tail_writer = Arc::clone(&tail);
        thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                eprintln!("  | {line}");
                let mut tail = tail_writer.lock().expect("stderr tail lock");
                tail.push_back(line);
                if tail.len() > STDERR_TAIL_LINES {
                    tail.pop_front();
                }
            }
        });
        let stdin = child.stdin.take();
        Ok(ScriptProcess { child, stdin, lines, tail, label })
    }

    /// The next stdout line, or `None` once stdout has closed (the script ended).
    fn next_line(&mut self, timeout: Duration) -> anyhow::Result<Option<String>> {
        match self.lines.recv_timeout(timeout) {
            Ok(line) => Ok(Some(line)),
            Err(RecvTimeoutError::Disconnected) => Ok(None),
            Err(RecvTimeoutError::Timeout) => {
                let _ = self.child.kill();
                bail!("{} timed out after {timeout:?}; stderr tail:\n{}", self.label, self.stderr_tail())
            }
        }
    }

    fn stderr_tail(&self) -> String {
        self.tail.lock().map(|t| t.iter().cloned().collect::<Vec<_>>().join("\n")).unwrap_or_default()
    }
}

impl Drop for ScriptProcess {
    fn drop(&mut self) {
        drop(self.stdin.take());
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// A script in command-server mode: one command line in, one JSON line out.
pub struct ScriptSession {
    process: ScriptProcess,
    timeout: Duration,
}

impl ScriptSession {
    /// Sends one command; a reply with an `error` field becomes an error.
    pub fn request(&mut self, command: &str) -> anyhow::Result<Value> {
        let stdin = self.process.stdin.as_mut().context("script stdin is closed")?;
        writeln!(stdin, "{command}").and_then(|_| stdin.flush()).with_context(|| format!("{} stopped reading commands", self.process.label))?;
        let reply = self.read_reply()?;
        if let Some(error) = reply.get("error") {
            bail!("{}: `{command}` failed: {error}", self.process.label);
        }
        Ok(reply)
    }

    fn read_reply(&mut self) -> anyhow::Result<Value> {
        loop {
            let Some(line) = self.process.next_line(self.timeout)? else {
                bail!("{} exited; stderr tail:\n{}", self.process.label, self.process.stderr_tail());
            };
            if let Some(reply) = parse_object(&line) {
                return Ok(reply);
            }
            // Anything else on stdout (a library's print) is not a reply; show it and keep reading.
            eprintln!("  | {line}");
        }
    }
}

fn parse_object(line: &str) -> Option<Value> {
    serde_json::from_str::<Value>(line).ok().filter(Value::is_object)
}
