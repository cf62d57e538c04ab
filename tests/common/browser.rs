//! A headless Chromium driven over the Chrome DevTools Protocol, for tests that look at where things are on
//! the page and what it shows after the user did something, which `rendered_dom` (a one-shot `--dump-dom`)
//! cannot. No crate: `--remote-debugging-pipe` reads commands from the browser's fd 3 and writes replies
//! and events to its fd 4, each a JSON object ended by a NUL byte.
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::{FromRawFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{json, Value};

/// How long one command may take before the test gives up on the browser.
const REPLY_TIMEOUT: Duration = Duration::from_secs(60);

pub struct Browser {
    child: Child,
    commands: File,
    replies: Receiver<Value>,
    next_id: u64,
    /// The page's session: commands for the page carry it.
    session: String,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// Starts Chromium with one blank page of `width` × `height` CSS pixels (device scale 1).
    pub fn start(width: u32, height: u32) -> Browser {
        let profile = tempfile::tempdir().unwrap();
        let (browser_reads, commands) = pipe();
        let (replies, browser_writes) = pipe();
        let mut command = Command::new("chromium");
        // The flags keep Chromium off the (closed) network and out of first-run work, as `rendered_dom`'s.
        command
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--remote-debugging-pipe",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--hide-scrollbars",
                "--mute-audio",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // SAFETY: between fork and exec only async-signal-safe calls (dup2, fcntl) on fds this process owns.
        unsafe {
            command.pre_exec(move || {
                move_fd(browser_reads, 3)?;
                move_fd(browser_writes, 4)
            });
        }
        let child = command.spawn().expect("chromium is installed by scripts/setup.sh --test");
        // The browser's ends now live in the child only: closing ours lets a dead browser read as end of file.
        unsafe {
            libc::close(browser_reads);
            libc::close(browser_writes);
        }
        let commands = unsafe { File::from_raw_fd(commands) };
        let replies = read_messages(unsafe { File::from_raw_fd(replies) });
        let mut browser = Browser { child, commands, replies, next_id: 0, session: String::new(), _profile: profile };
        let target = browser.browser_call("Target.createTarget", json!({ "url": "about:blank" }));
        let attached = browser.browser_call("Target.attachToTarget", json!({ "targetId": target["targetId"], "flatten": true }));
        browser.session = attached["sessionId"].as_str().expect("a session id").to_string();
        let metrics = json!({ "width": width, "height": height, "deviceScaleFactor": 1, "mobile": false });
        browser.call("Emulation.setDeviceMetricsOverride", metrics);
        // Without it, scripts added by `before_each_document` are not run. Its events are skipped.
        browser.call("Page.enable", json!({}));
        browser
    }

    /// Runs `script` in every document this page loads from now on, before the document's own scripts.
    pub fn before_each_document(&mut self, script: &str) {
        self.call("Page.addScriptToEvaluateOnNewDocument", json!({ "source": script }));
    }

    /// Loads `url` as a new document (not a jump within the page) and waits until it has loaded.
    pub fn open(&mut self, url: &str) {
        self.mark_document();
        let reply = self.call("Page.navigate", json!({ "url": url }));
        assert!(reply["errorText"].is_null(), "cannot open {url}: {reply}");
        self.wait_for_new_document(url);
    }

    /// Loads the page again, from the server.
    pub fn reload(&mut self) {
        let url = self.eval("location.href").as_str().unwrap().to_string();
        self.mark_document();
        self.call("Page.reload", json!({ "ignoreCache": true }));
        self.wait_for_new_document(&url);
    }

    /// Marks the document shown now, so that a wait can tell it from the next one.
    fn mark_document(&mut self) {
        self.eval("window.__replacedSoon = true");
    }

    fn wait_for_new_document(&mut self, url: &str) {
        let loaded = "!window.__replacedSoon && document.readyState === 'complete'";
        self.wait_until(loaded, Duration::from_secs(30)).unwrap_or_else(|| panic!("{url} did not load"));
    }

    /// The value of a JavaScript expression in the page; a promise is awaited. Panics on an exception.
    pub fn eval(&mut self, expression: &str) -> Value {
        self.try_eval(expression).unwrap_or_else(|error| panic!("{expression}\nfailed: {error}"))
    }

    fn try_eval(&mut self, expression: &str) -> Result<Value, String> {
        let params = json!({ "expression": expression, "returnByValue": true, "awaitPromise": true, "userGesture": true });
        let session = self.session.clone();
        let reply = self.send(json!({ "method": "Runtime.evaluate", "params": params, "sessionId": session })).map_err(|e| e.to_string())?;
        match reply.get("exceptionDetails") {
            Some(exception) => Err(exception["exception"]["description"].as_str().map_or_else(|| exception.to_string(), str::to_string)),
            None => Ok(reply["result"]["value"].clone()),
        }
    }

    /// Evaluates `condition` every 100 ms until it is truthy; its value then, or None after `within`. An
    /// evaluation that fails (the page is between documents, say) counts as not yet.
    pub fn wait_until(&mut self, condition: &str, within: Duration) -> Option<Value> {
        let deadline = Instant::now() + within;
        loop {
            let value = self.try_eval(condition).unwrap_or(Value::Null);
            let truthy = !matches!(&value, Value::Null | Value::Bool(false)) && value != json!(0) && value != json!("");
            if truthy {
                return Some(value);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// What the window shows now, as a PNG of the viewport's size.
    pub fn screenshot(&mut self, png: &Path) {
        let reply = self.call("Page.captureScreenshot", json!({ "format": "png" }));
        let bytes = base64::engine::general_purpose::STANDARD.decode(reply["data"].as_str().expect("screenshot data")).unwrap();
        std::fs::write(png, bytes).unwrap();
    }

    /// A command to the page.
    fn call(&mut self, method: &str, params: Value) -> Value {
        let session = self.session.clone();
        let message = json!({ "method": method, "params": params, "sessionId": session });
        self.send(message).unwrap_or_else(|error| panic!("{method} failed: {error}"))
    }

    /// A command to the browser itself (targets, sessions).
    fn browser_call(&mut self, method: &str, params: Value) -> Value {
        self.send(json!({ "method": method, "params": params })).unwrap_or_else(|error| panic!("{method} failed: {error}"))
    }

    /// Sends a command and waits for its answer: its result, or the error the browser gave.
    fn send(&mut self, mut message: Value) -> Result<Value, Value> {
        self.next_id += 1;
        let id = self.next_id;
        message["id"] = json!(id);
        let mut bytes = serde_json::to_vec(&message).unwrap();
        bytes.push(0);
        self.commands.write_all(&bytes).expect("chromium stopped reading commands");
        let deadline = Instant::now() + REPLY_TIMEOUT;
        loop {
            let reply = match self.replies.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(reply) => reply,
                Err(RecvTimeoutError::Timeout) => panic!("chromium did not answer {message}"),
                Err(RecvTimeoutError::Disconnected) => panic!("chromium exited while answering {message}"),
            };
            // Events (no id) and answers to earlier commands are not ours.
            if reply["id"] != json!(id) {
                continue;
            }
            return match reply.get("error") {
                Some(error) => Err(error.clone()),
                None => Ok(reply["result"].clone()),
            };
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A pipe as (read end, write end), both closed on exec: the child gets only the copies `move_fd` makes.
fn pipe() -> (RawFd, RawFd) {
    let mut fds = [0; 2];
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0, "pipe2: {}", std::io::Error::last_os_error());
    (fds[0], fds[1])
}

/// In the child: `fd` as `target`, kept across exec.
fn move_fd(fd: RawFd, target: RawFd) -> std::io::Result<()> {
    // dup2 onto itself would leave close-on-exec set.
    let done = if fd == target { unsafe { libc::fcntl(fd, libc::F_SETFD, 0) } } else { unsafe { libc::dup2(fd, target) } };
    if done < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The browser's messages, parsed, from a thread (so a hung browser times a test out instead of blocking it).
fn read_messages(from: File) -> Receiver<Value> {
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut reader = BufReader::new(from);
        let mut message = Vec::new();
        while reader.read_until(0, &mut message).map_or(false, |n| n > 0) {
            if message.last() == Some(&0) {
                message.pop();
            }
            if let Ok(value) = serde_json::from_slice::<Value>(&message) {
                if sender.send(value).is_err() {
                    return;
                }
            }
            message.clear();
        }
    });
    receiver
}

/// Width and height from a PNG's header (its IHDR chunk).
pub fn png_size(png: &Path) -> (u32, u32) {
    let bytes = std::fs::read(png).unwrap();
    assert!(bytes.len() > 24 && bytes.starts_with(b"\x89PNG\r\n\x1a\n") && &bytes[12..16] == b"IHDR", "{} is not a PNG", png.display());
    let be = |at: usize| u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap());
    (be(16), be(20))
}
