//! The Python client (clients/python) against the real server: its generated module is the box's current
//! document, `pip install` builds it offline as `vaebox-client` (its old name `vaebox`, the server's too, naming
//! the server binary when given a server command), and the command submits a folder and downloads the
//! results next to the inputs (a folder sent again leaves them out), continues an interrupted download with a Range request, lists, shows and
//! cancels jobs, runs a try's whole clip, and reports the box's refusals by code; it estimates a job, shows a
//! queued job's place, pauses and resumes one (a `submit --wait` waiting on through the pause), and keeps a
//! cancelled job's finished frames as a result it downloads. It lists a FlashVSR model by family and release and
//! restores with it sending only the fields given (none of SeedVR2's defaults). Behind a misbehaving proxy it keeps the token from
//! another host, bounds a download by the result's bytes and names every malformed answer. Run from its source
//! folder (`PYTHONPATH`), with the project's Python (`VAEBOX_PYTHON`, else `.venv`): nothing is installed
//! outside a temporary folder.
use crate::common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

pub(crate) const SECRET: &str = "python-client-secret";

pub(crate) fn client_dir() -> PathBuf {
    Path::new(REPO).join("clients/python")
}

/// `python -m vaebox ARGS` in `cwd`, addressed to `server` through the client's own variables.
pub(crate) fn vaebox(server: &Server, cwd: &Path, args: &[&str]) -> Output {
    vaebox_with_token(server, cwd, SECRET, args)
}

fn vaebox_with_token(server: &Server, cwd: &Path, token: &str, args: &[&str]) -> Output {
    vaebox_command(server, cwd, token, args).output().expect("python runs (set VAEBOX_PYTHON)")
}

fn vaebox_command(server: &Server, cwd: &Path, token: &str, args: &[&str]) -> Command {
    let mut command = Command::new(python());
    command
        .args(["-m", "vaebox"])
        .args(args)
        .current_dir(cwd)
        .env("PYTHONPATH", client_dir())
        .env("VAEBOX_CLIENT_URL", &server.base)
        .env("VAEBOX_CLIENT_TOKEN", token);
    command
}

pub(crate) fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Succeeded, with its stdout.
pub(crate) fn ok(args: &[&str], output: Output) -> String {
    assert!(output.status.success(), "vaebox {args:?} failed:\n{}{}", text(&output.stdout), text(&output.stderr));
    text(&output.stdout)
}

/// A small clip: the first `frames` frames of a real one (looped past its 120), shrunk to `width`×`height`.
fn small_clip(frames: u32, size: Option<(u32, u32)>, out: &Path) {
    let mut command = Command::new("ffmpeg");
    command.args(["-nostdin", "-v", "error", "-y", "-stream_loop", "-1", "-i"]).arg(media("carphone_pristine.mp4"));
    if let Some((width, height)) = size {
        command.args(["-vf", &format!("scale={width}:{height}")]);
    }
    command.args(["-frames:v", &frames.to_string(), "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p"]).arg(out);
    assert!(command.status().expect("run ffmpeg").success(), "ffmpeg could not make {}", out.display());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_generated_module_is_the_box_document_and_pip_installs_vaebox_client_offline() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);

    let generated = dir.path().join("_generated.py");
    let out = Command::new(python())
        .arg(client_dir().join("generate.py"))
        .args(["--url", &server.base, "--output"])
        .arg(&generated)
        .output()
        .unwrap();
    assert!(out.status.success(), "generate.py failed: {}", text(&out.stderr));
    let committed = std::fs::read_to_string(client_dir().join("vaebox/_generated.py")).unwrap();
    let current = std::fs::read_to_string(&generated).unwrap();
    assert!(
        committed == current,
        "clients/python/vaebox/_generated.py does not match this box's /openapi.json: start the box built from this tree and \
         run `python clients/python/generate.py --url http://127.0.0.1:8080`, then commit the file"
    );
    // The document is the one the queue refuses by: each parameter's ops, as the generated module has them.
    for (name, ops) in [("scale", "('upscale', 'restore')"), ("seed", "('restore',)"), ("factor", "('interpolate',)")] {
        assert!(current.contains(&format!("'{name}': Parameter('{name}', ")) && current.contains(ops), "{name}: {current}");
    }

    // `pip install ./clients/python` into a throwaway venv, offline: the build uses the setuptools of the
    // project's venv (made visible by a .pth, with its pip), and the copy keeps build files out of the tree.
    let source = dir.path().join("client-source");
    copy_tree(&client_dir(), &source);
    let venv = dir.path().join("venv");
    let made = Command::new(python()).args(["-m", "venv", "--without-pip"]).arg(&venv).status().unwrap();
    assert!(made.success());
    let purelib = |python: &Path| {
        let out = Command::new(python).args(["-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).output().unwrap();
        PathBuf::from(text(&out.stdout).trim())
    };
    let venv_python = venv.join("bin/python");
    std::fs::write(purelib(&venv_python).join("project_venv.pth"), format!("{}\n", purelib(&python()).display())).unwrap();
    let install = Command::new(&venv_python)
        .args(["-m", "pip", "install", "--no-index", "--no-build-isolation", "--no-deps", "--disable-pip-version-check", "-q"])
        .arg(&source)
        .output()
        .unwrap();
    assert!(install.status.success(), "pip install failed (scripts/setup.sh --test puts setuptools>=77 in .venv):\n{}", text(&install.stderr));
    let installed = Command::new(venv.join("bin/vaebox-client")).args(["--url", &server.base, "models"]).current_dir(dir.path()).output().unwrap();
    let models = ok(&["models"], installed);
    assert!(models.lines().any(|l| l.starts_with("realesrgan-animevideov3\tupscaler\tupscale\tx2,x4\tpresent")), "{models}");
    // `vaebox` is the server binary's name (`vaebox run ...` in the README): the client's old name, kept for
    // scripts, runs client commands and, given a server command, says which program takes it; so does the new one.
    let old_name = Command::new(venv.join("bin/vaebox")).args(["--url", &server.base, "models"]).current_dir(dir.path()).output().unwrap();
    assert_eq!(ok(&["models"], old_name), models);
    for (script, args) in [("vaebox", &["run", "--input", "in.mp4", "--output", "out.mp4"][..]), ("vaebox-client", &["--url", &server.base, "serve"][..])] {
        let told = Command::new(venv.join("bin").join(script)).args(args).current_dir(dir.path()).output().unwrap();
        let said = text(&told.stderr);
        assert_eq!(told.status.code(), Some(2), "{script} {args:?}: {said}");
        let command = args.iter().find(|a| ["run", "serve"].contains(a)).unwrap();
        assert!(said.starts_with(&format!("error: `{command}` is a command of the vaebox server (the Rust binary), not of this Python client.")), "{said}");
        assert!(said.contains(&format!("vaebox {command} ...")) && said.contains("the client: vaebox-client COMMAND"), "{said}");
        assert!(!said.contains("invalid choice"), "{said}");
    }
    let module = Command::new(&venv_python).args(["-c", "import vaebox; print(vaebox.__file__)"]).current_dir(dir.path()).output().unwrap();
    assert!(text(&module.stdout).starts_with(venv.to_str().unwrap()), "not the installed copy: {}", text(&module.stdout));
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap().flatten() {
        let name = entry.file_name();
        if name == "__pycache__" || name == "build" || name.to_string_lossy().ends_with(".egg-info") {
            continue;
        }
        if entry.path().is_dir() {
            copy_tree(&entry.path(), &to.join(&name));
        } else {
            std::fs::copy(entry.path(), to.join(&name)).unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_submits_a_folder_downloads_resumes_lists_and_cancels() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    let folder = work.join("clips");
    std::fs::create_dir_all(&folder).unwrap();
    for name in ["a.mp4", "b.mp4"] {
        small_clip(3, Some((96, 72)), &folder.join(name));
    }
    std::fs::write(folder.join("notes.txt"), "not a video: the folder submission leaves it out").unwrap();
    // The client's variables in the server's environment too, as in a shell that runs both: the server
    // refuses unknown VAEBOX_* names, and must not refuse these.
    let tokens = format!("alice:{SECRET}");
    let server = Server::start(
        dir.path(),
        &[("VAEBOX_TOKENS", &tokens), ("VAEBOX_CLIENT_URL", "http://127.0.0.1:9"), ("VAEBOX_CLIENT_TOKEN", "elsewhere")],
    );

    // A folder: each video in it, followed, each result next to its input under the box's name.
    let args = ["submit", "clips", "--op", "upscale", "--model", "realesrgan-animevideov3", "--param", "scale=2", "--wait"];
    let started = Instant::now();
    let output = vaebox(&server, &work, &args);
    let stderr = text(&output.stderr);
    let stdout = ok(&args, output);
    println!("submit --wait of two 3-frame clips: {:.1} s", started.elapsed().as_secs_f64());
    let ids: Vec<String> = stdout.lines().map(|l| l.split('\t').next().unwrap().to_string()).collect();
    assert_eq!(ids.len(), 2, "one line per submitted file: {stdout}");
    for (name, result) in [("a.mp4", "a_x2.mp4"), ("b.mp4", "b_x2.mp4")] {
        assert!(stdout.contains(&format!("\t{}", Path::new("clips").join(name).display())), "{stdout}");
        let probed = ffprobe(&folder.join(result));
        assert_eq!((probed.width, probed.height, probed.frames), (192, 144, 3), "{result}");
        // Not a terminal: plain progress lines, one job after the other, each ending where its result went.
        assert!(stderr.contains(&format!("{name}  [########################] 100%  succeeded")), "{stderr}");
        assert!(stderr.contains(&format!("{name}  saved {}\n", Path::new("clips").join(result).display())), "{stderr}");
    }
    assert!(!stderr.contains('\r'), "a redrawn line in a log: {stderr:?}");
    // What the folder held besides: named, with why it was not sent.
    assert!(stderr.contains(&format!("skipped {}: not a video, picture or zip of frames", Path::new("clips").join("notes.txt").display())), "{stderr}");

    // list, status (by the token: without it the box refuses, and the command says how).
    let listed = ok(&["list"], vaebox(&server, &work, &["list"]));
    for id in &ids {
        assert!(listed.lines().any(|l| l.starts_with(&format!("{id}\tsucceeded\tupscale\trealesrgan-animevideov3\t100%"))), "{listed}");
    }
    let shown = ok(&["status"], vaebox(&server, &work, &["status", &ids[0]]));
    assert!(shown.contains("status    succeeded") && shown.contains("output    a_x2.mp4 ("), "{shown}");
    let job: Value = serde_json::from_str(&ok(&["status", "--json"], vaebox(&server, &work, &["status", &ids[0], "--json"]))).unwrap();
    assert_eq!(job["output"]["file_name"], "a_x2.mp4");
    let refused = vaebox_with_token(&server, &work, "", &["list"]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(text(&refused.stderr).starts_with("error: unauthorized: "), "{}", text(&refused.stderr));

    // A whole download, then one cut at half its bytes continued from there: the same file.
    let whole = work.join("whole");
    std::fs::create_dir_all(&whole).unwrap();
    let saved = ok(&["download"], vaebox(&server, &work, &["download", &ids[0], "whole"]));
    assert_eq!(saved.trim(), "whole/a_x2.mp4");
    let bytes = std::fs::read(whole.join("a_x2.mp4")).unwrap();
    assert_eq!(bytes, std::fs::read(folder.join("a_x2.mp4")).unwrap());
    // Never over an existing file: the next download of the same result gets a number.
    let again = ok(&["download"], vaebox(&server, &work, &["download", &ids[0], "whole"]));
    assert_eq!(again.trim(), "whole/a_x2-1.mp4");
    let resumed = work.join("resumed");
    std::fs::create_dir_all(&resumed).unwrap();
    let half = bytes.len() / 2;
    let part = resumed.join(format!("a_x2.mp4.{}.part", &ids[0][..8]));
    std::fs::write(&part, &bytes[..half]).unwrap();
    let output = vaebox(&server, &work, &["download", &ids[0], "resumed/a_x2.mp4"]);
    let said = text(&output.stderr);
    ok(&["download"], output);
    assert!(said.contains(&format!("{} bytes, {} fetched, continued from byte {half}", bytes.len(), bytes.len() - half)), "{said}");
    assert!(std::fs::read(resumed.join("a_x2.mp4")).unwrap() == bytes, "the continued download differs from the whole one");
    assert!(!part.exists(), "the .part was left behind");
    // On a terminal the line is redrawn in place: `\r`, no line per update.
    let on_terminal = Command::new(python())
        .args(["-c", "import os, pty, sys; sys.exit(os.waitstatus_to_exitcode(pty.spawn(sys.argv[1:])))"])
        .arg(python())
        .args(["-m", "vaebox", "download", &ids[1], "whole"])
        .current_dir(&work)
        .env("PYTHONPATH", client_dir())
        .env("VAEBOX_CLIENT_URL", &server.base)
        .env("VAEBOX_CLIENT_TOKEN", SECRET)
        .output()
        .unwrap();
    let drawn = text(&on_terminal.stdout);
    assert!(on_terminal.status.success(), "{drawn}");
    let label = &ids[1][..8];
    assert!(drawn.contains(&format!("\r{label}  [########################] 100%  download")), "{drawn:?}");
    assert!(drawn.contains(&format!("\r{label}  saved whole/b_x2.mp4: ")), "{drawn:?}");
    assert!(whole.join("b_x2.mp4").is_file());
    // An explicit file that exists is refused, not overwritten.
    let exists = vaebox(&server, &work, &["download", &ids[0], "resumed/a_x2.mp4"]);
    assert!(text(&exists.stderr).starts_with("error: file-exists: "), "{}", text(&exists.stderr));

    // The box's refusals by code, and the names the client refuses itself before sending.
    let args = ["submit", "clips/a.mp4", "--model", "no-such-model"];
    let refused = vaebox(&server, &work, &args);
    assert_ne!(refused.status.code(), Some(0));
    assert!(text(&refused.stderr).starts_with("error: unknown-model: "), "{}", text(&refused.stderr));
    // Refused from the query while the body is still going out (64 MiB, more than the sockets buffer):
    // the box's answer is read, not a broken pipe.
    let large = work.join("large.mp4");
    std::fs::write(&large, vec![0u8; 64 << 20]).unwrap();
    let refused = vaebox(&server, &work, &["submit", "large.mp4", "--model", "no-such-model"]);
    assert!(text(&refused.stderr).starts_with("error: unknown-model: "), "{}", text(&refused.stderr));
    std::fs::remove_file(&large).unwrap();
    let refused = vaebox(&server, &work, &["submit", "clips/a.mp4", "--param", "scal=2"]);
    assert_ne!(refused.status.code(), Some(0));
    assert!(text(&refused.stderr).contains("error: unknown-parameter: unknown parameter `scal`; did you mean `scale`?"), "{}", text(&refused.stderr));
    let refused = vaebox(&server, &work, &["submit", "clips/a.mp4", "--op", "interpolate", "--param", "seed=3"]);
    assert!(text(&refused.stderr).starts_with("error: parameter-not-for-op: "), "{}", text(&refused.stderr));

    // The README's library example, pasted (its token from the client's variable, as the README sets it).
    let readme = std::fs::read_to_string(Path::new(REPO).join("README.md")).unwrap();
    let section = readme.split("\n## Python client\n").nth(1).expect("README has a `## Python client` section");
    let section = section.split("\n## ").next().unwrap();
    let example = section.split("```python\n").nth(1).expect("a Python example").split("```").next().unwrap();
    let pasted = work.join("pasted");
    std::fs::create_dir_all(&pasted).unwrap();
    std::fs::copy(folder.join("a.mp4"), pasted.join("clip.mp4")).unwrap();
    let program = example.replace("http://box:8080", &server.base);
    let out = Command::new(python())
        .args(["-c", &program])
        .current_dir(&pasted)
        .env("PYTHONPATH", client_dir())
        .env("VAEBOX_CLIENT_TOKEN", SECRET)
        .output()
        .unwrap();
    assert!(out.status.success(), "the README's example failed:\n{program}\n{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("succeeded 1"), "no final progress: {}", text(&out.stdout));
    assert_eq!(text(&out.stdout).lines().last(), Some("clip_x2.mp4"), "{}", text(&out.stdout));
    assert_eq!(ffprobe(&pasted.join("clip_x2.mp4")).frames, 3);

    // Cancel: a longer job, cancelled while queued or running, ends cancelled; cancelling it again is refused.
    let long = work.join("long.mp4");
    small_clip(40, None, &long);
    let submitted = ok(&["submit"], vaebox(&server, &work, &["submit", "long.mp4", "--param", "scale=4"]));
    let id = submitted.split('\t').next().unwrap().to_string();
    let cancelled = ok(&["cancel"], vaebox(&server, &work, &["cancel", &id]));
    assert!(cancelled.starts_with(&format!("{id}\t")), "{cancelled}");
    let deadline = Instant::now() + Duration::from_secs(120);
    let last = loop {
        let job: Value = serde_json::from_str(&ok(&["status"], vaebox(&server, &work, &["status", &id, "--json"]))).unwrap();
        if job["status"] != "queued" && job["status"] != "running" {
            break job;
        }
        assert!(Instant::now() < deadline, "the cancelled job is still {}", job["status"]);
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(last["status"], "cancelled", "{last}");
    assert!(last["progress"]["done"].as_u64().unwrap_or(0) < 40, "it ran to the end: {last}");
    let again = vaebox(&server, &work, &["cancel", &id]);
    assert_eq!(again.status.code(), Some(1));
    assert!(text(&again.stderr).starts_with("error: job-already-finished: "), "{}", text(&again.stderr));
    assert!(!work.join("long_x4.mp4").exists());

    // The whole clip of a part: a new job over the input the box kept, named after the part's job; a job
    // over its whole input is refused.
    let tried = ok(&["submit"], vaebox(&server, &work, &["submit", "long.mp4", "--param", "frames=2"]));
    let tried = tried.split('\t').next().unwrap().to_string();
    let whole = ok(&["whole"], vaebox(&server, &work, &["whole", &tried]));
    let whole = whole.split('\t').next().unwrap().to_string();
    let job: Value = serde_json::from_str(&ok(&["status"], vaebox(&server, &work, &["status", &whole, "--json"]))).unwrap();
    assert_eq!((job["from_try"].as_str(), job["input"]["media"]["frames"].as_u64()), (Some(tried.as_str()), Some(40)), "{job}");
    ok(&["cancel"], vaebox(&server, &work, &["cancel", &whole]));
    let refused = vaebox(&server, &work, &["whole", &whole]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(text(&refused.stderr).starts_with("error: job-has-no-range: "), "{}", text(&refused.stderr));
}

/// What a newcomer meets at the prompt: a box without presets says so, a listing cut short by its reader
/// (`vaebox list | head`) ends quietly, and a folder with nothing to send says what it skipped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_says_what_it_did_not_do() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir_all(work.join("notes")).unwrap();
    std::fs::write(work.join("notes/readme.txt"), "text").unwrap();
    std::fs::create_dir_all(work.join("notes/older")).unwrap();
    let server = Server::start(dir.path(), &[("VAEBOX_TOKENS", &format!("alice:{SECRET}"))]);

    let presets = vaebox(&server, &work, &["presets"]);
    assert!(presets.status.success());
    assert!(text(&presets.stderr).contains("this box has no presets"), "{}", text(&presets.stderr));

    let sent = vaebox(&server, &work, &["submit", "notes"]);
    assert_eq!(sent.status.code(), Some(1));
    let stderr = text(&sent.stderr);
    for line in ["skipped notes/older: a folder (subfolders are not sent)", "skipped notes/readme.txt: not a video, picture or zip of frames", "error: no-files: notes holds no file to send (2 skipped)"] {
        assert!(stderr.contains(line), "{line}: {stderr}");
    }

    // A job to list, then a reader that is gone before the first line.
    small_clip(2, Some((32, 24)), &work.join("a.mp4"));
    ok(&["submit"], vaebox(&server, &work, &["submit", "a.mp4", "--param", "scale=2"]));
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let listed = Command::new(python())
        .args(["-m", "vaebox", "list"])
        .current_dir(&work)
        .env("PYTHONPATH", client_dir())
        .env("VAEBOX_CLIENT_URL", &server.base)
        .env("VAEBOX_CLIENT_TOKEN", SECRET)
        .stdout(writer)
        .output()
        .unwrap();
    assert_eq!(listed.status.code(), Some(0), "{}", text(&listed.stderr));
    assert_eq!(text(&listed.stderr), "", "a closed pipe is not an error");
}

/// The job's JSON through `status --json` once `done(job)` holds (within a minute).
async fn status_once(server: &Server, work: &Path, id: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let job: Value = serde_json::from_str(&ok(&["status"], vaebox(server, work, &["status", id, "--json"]))).unwrap();
        if done(&job) {
            return job;
        }
        assert!(Instant::now() < deadline, "job {id} is not {what}: {job}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// What a line-by-line reader of a running command has seen, once it holds `needle` (within a minute).
async fn seen_once(seen: &Mutex<String>, needle: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let text = seen.lock().unwrap().clone();
        if text.contains(needle) {
            return text;
        }
        assert!(Instant::now() < deadline, "never shown: {needle}\n{text}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A command left running is stopped when the test ends early.
struct Running(std::process::Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub(crate) fn first_field(line: &str) -> String {
    line.split('\t').next().unwrap().trim().to_string()
}

/// A box that runs one job at a time (none lent beside another) and makes a segment per chunk: an estimate, a
/// queued job's place, a pause that a `submit --wait` waits through, a resume, and cancels that keep, or cannot
/// keep, what is done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_estimates_pauses_resumes_and_keeps_a_cancelled_jobs_frames() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    small_clip(3, Some((96, 72)), &work.join("a.mp4"));
    // Upscaled x4 on the CPU this takes about a minute; it is cancelled long before.
    small_clip(900, None, &work.join("long.mp4"));
    let tokens = format!("alice:{SECRET}");
    let env = [("VAEBOX_TOKENS", tokens.as_str()), ("VAEBOX_SHORT_JOB_S", "0"), ("VAEBOX_CHECKPOINT_S", "0"), ("VAEBOX_CHUNK_FRAMES", "4")];
    let server = Server::start(dir.path(), &env);

    // An estimate: the result's frames and size, its time unknown on a box that has finished no such job, its
    // fields checked as a submission's are, and nothing queued.
    let estimate = ok(&["estimate"], vaebox(&server, &work, &["estimate", "a.mp4", "--param", "scale=2"]));
    assert!(estimate.starts_with("frames    3\nsize      192x144\ntime      not known yet"), "{estimate}");
    let refused = vaebox(&server, &work, &["estimate", "a.mp4", "--param", "scal=2"]);
    assert!(text(&refused.stderr).contains("error: unknown-parameter: unknown parameter `scal`; did you mean `scale`?"), "{}", text(&refused.stderr));
    assert_eq!(ok(&["list"], vaebox(&server, &work, &["list"])), "", "an estimate queued a job");

    // A long job runs (a few segments done), and a short one submitted with --wait waits behind it.
    let long = first_field(&ok(&["submit"], vaebox(&server, &work, &["submit", "long.mp4", "--param", "scale=4"])));
    status_once(&server, &work, &long, "running", |job| job["progress"]["done"].as_u64().unwrap_or(0) >= 12).await;
    let args = ["submit", "a.mp4", "--param", "scale=2", "--wait"];
    let mut waiting = Running(vaebox_command(&server, &work, SECRET, &args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap());
    let mut submitted = String::new();
    BufReader::new(waiting.0.stdout.take().unwrap()).read_line(&mut submitted).unwrap();
    let short = first_field(&submitted);
    let progress = Arc::new(Mutex::new(String::new()));
    let (lines, seen) = (BufReader::new(waiting.0.stderr.take().unwrap()).lines(), progress.clone());
    let reader = std::thread::spawn(move || lines.map_while(Result::ok).for_each(|line| seen.lock().unwrap().push_str(&(line + "\n"))));

    // Its place in the queue, in the progress line, `status` and `list`.
    seen_once(&progress, "a.mp4  [........................]   0%  queued, position 1 · start").await;
    let shown = ok(&["status"], vaebox(&server, &work, &["status", &short]));
    assert!(shown.contains("status    queued, position 1 · start"), "{shown}");
    let listed = ok(&["list"], vaebox(&server, &work, &["list"]));
    assert!(listed.contains(&format!("{short}\tqueued\tupscale\trealesrgan-animevideov3\tposition 1 · start")), "{listed}");

    // Paused: the waiting command says so and waits on; a running job cannot be resumed; the paused one goes
    // back to its place.
    assert_eq!(ok(&["pause"], vaebox(&server, &work, &["pause", &short])), format!("{short}\tpaused\n"));
    seen_once(&progress, &format!("0%  paused  waiting for `vaebox-client resume {short}`")).await;
    assert!(waiting.0.try_wait().unwrap().is_none(), "the wait ended at the pause: {}", progress.lock().unwrap());
    let refused = vaebox(&server, &work, &["resume", &long]);
    assert!(text(&refused.stderr).starts_with("error: job-not-pausable: "), "{}", text(&refused.stderr));
    let resumed = ok(&["resume"], vaebox(&server, &work, &["resume", &short]));
    assert!(resumed.starts_with(&format!("{short}\tqueued, position 1 · ")), "{resumed}");

    // PNG frames have no segments to keep: `cancel --keep` is refused and a plain cancel is not. The running
    // upscale's finished segments are kept as its result.
    let args = ["submit", "a.mp4", "--param", "scale=2", "--param", "output_format=png"];
    let frames = first_field(&ok(&args, vaebox(&server, &work, &args)));
    assert!(ok(&["status"], vaebox(&server, &work, &["status", &frames])).contains("status    queued, position 2 · "));
    let refused = vaebox(&server, &work, &["cancel", &frames, "--keep"]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(text(&refused.stderr).starts_with("error: nothing-to-keep: "), "{}", text(&refused.stderr));
    assert!(ok(&["cancel"], vaebox(&server, &work, &["cancel", &frames])).starts_with(&format!("{frames}\tcancelled")));
    assert!(ok(&["cancel"], vaebox(&server, &work, &["cancel", &long, "--keep"])).starts_with(&format!("{long}\t")));
    // The box marks the job cancelled first and joins its segments after.
    let kept = status_once(&server, &work, &long, "cancelled with its frames kept", |job| job["partial"] == true).await;
    assert_eq!(kept["status"], "cancelled", "{kept}");
    let kept_frames = kept["output"]["media"]["frames"].as_u64().unwrap();
    assert!((1..900).contains(&kept_frames), "{kept}");
    let shown = ok(&["status"], vaebox(&server, &work, &["status", &long]));
    assert!(shown.contains("status    cancelled, its finished frames kept as a partial result"), "{shown}");
    let saved = ok(&["download"], vaebox(&server, &work, &["download", &long, "."]));
    assert_eq!(saved.trim(), format!("long_x4_partial-{kept_frames}f.mp4"));
    let probed = ffprobe(&work.join(saved.trim()));
    assert_eq!((probed.width, probed.height, probed.frames), (704, 576, kept_frames));

    // The waiting command's job ran once the way was clear: its result saved next to its input.
    let status = waiting.0.wait().unwrap();
    reader.join().unwrap();
    let said = progress.lock().unwrap().clone();
    assert!(status.success(), "{said}");
    assert!(said.contains("a.mp4  [########################] 100%  succeeded") && said.contains("a.mp4  saved a_x2.mp4\n"), "{said}");
    assert_eq!(ffprobe(&work.join("a_x2.mp4")).frames, 3);
    // Now the box has finished such a job, the estimate has a time.
    let estimate = ok(&["estimate"], vaebox(&server, &work, &["estimate", "a.mp4", "--param", "scale=2"]));
    assert!(estimate.contains("\ntime      about "), "{estimate}");
}

/// A folder whose results `submit --wait` saved into it, submitted again, sends its inputs only: the results it
/// listed in `.vaebox-results`, and files named as the box names a result of another file there (saved before
/// the list existed), are skipped with why; their inputs give results of the same size, not ones upscaled twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_folder_submitted_again_leaves_out_the_results_saved_in_it() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    let folder = work.join("clips");
    std::fs::create_dir_all(&folder).unwrap();
    small_clip(3, Some((96, 72)), &folder.join("a.mp4"));
    let server = Server::start(dir.path(), &[("VAEBOX_TOKENS", &format!("alice:{SECRET}"))]);

    let args = ["submit", "clips", "--param", "scale=2", "--wait"];
    assert_eq!(ok(&args, vaebox(&server, &work, &args)).lines().count(), 1);
    assert_eq!(std::fs::read_to_string(folder.join(".vaebox-results")).unwrap(), "\"a_x2.mp4\"\n");
    // A result an older client saved: named after its input, not listed.
    std::fs::copy(folder.join("a.mp4"), folder.join("b.mp4")).unwrap();
    std::fs::copy(folder.join("a_x2.mp4"), folder.join("b_x2.mp4")).unwrap();

    let output = vaebox(&server, &work, &args);
    let stderr = text(&output.stderr);
    let stdout = ok(&args, output);
    let sent: Vec<&str> = stdout.lines().map(|l| l.split('\t').nth(1).unwrap()).collect();
    assert_eq!(sent, ["clips/a.mp4", "clips/b.mp4"], "{stdout}{stderr}");
    assert!(stderr.contains("skipped clips/a_x2.mp4: a result this client saved here (listed in .vaebox-results); name the file to send it"), "{stderr}");
    assert!(stderr.contains("skipped clips/b_x2.mp4: named as the box names a result of b.mp4; name the file to send it"), "{stderr}");
    for result in ["a_x2-1.mp4", "b_x2-1.mp4"] {
        let probed = ffprobe(&folder.join(result));
        assert_eq!((probed.width, probed.height), (192, 144), "{result}");
    }
    assert!(!folder.join("a_x2_x2.mp4").exists() && !folder.join("b_x2_x2.mp4").exists());
    // Named on its own, a result is sent like any file.
    let args = ["submit", "clips/a_x2.mp4", "--param", "scale=2"];
    assert_eq!(ok(&args, vaebox(&server, &work, &args)).lines().count(), 1);
}

/// Behind a proxy (tests/python/python_client_answers_check.py, http.server) in front of the real box: a `/result`
/// redirected to another host gets no `Authorization` (one to the box's own host keeps it), a download that says
/// or sends more than the job's result has stops with `download-too-large` and leaves nothing, and six kinds of
/// malformed answer (not JSON, JSON of another type, missing keys, wrong field types, a body cut short, not UTF-8)
/// raise `vaebox.MalformedAnswer` (code `bad-answer`) from every call, not a KeyError or JSONDecodeError.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_keeps_its_token_from_other_hosts_bounds_downloads_and_names_malformed_answers() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    small_clip(3, Some((96, 72)), &work.join("a.mp4"));
    let server = Server::start(dir.path(), &[("VAEBOX_TOKENS", &format!("alice:{SECRET}"))]);
    let args = ["submit", "a.mp4", "--param", "scale=2", "--wait"];
    let id = first_field(&ok(&args, vaebox(&server, &work, &args)));
    let scratch = dir.path().join("scratch");
    std::fs::create_dir_all(&scratch).unwrap();

    let script = Path::new(REPO).join("tests/python/python_client_answers_check.py");
    let output = Command::new(python()).arg(script).args([&server.base, SECRET, &id]).arg(&scratch).output().unwrap();
    assert!(output.status.success(), "python_client_answers_check.py failed:\n{}", text(&output.stderr));
    let stdout = text(&output.stdout);
    let result: Value = serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    println!("{result:#}");

    assert_eq!(result["elsewhere_same_bytes"], true, "{result}");
    assert_eq!(result["storage_saw_authorization"], serde_json::json!([null]), "the token went to another host: {result}");
    assert_eq!(result["same_host_redirect"], "returned", "{result}");
    for mode in ["endless", "overdeclared"] {
        let said = result[format!("{mode}_download")].as_str().unwrap();
        assert!(said.starts_with("BoxError download-too-large: "), "{mode}: {said}");
        assert_eq!(result[format!("{mode}_files_left")], serde_json::json!([]), "{result}");
    }
    for mode in ["nonjson", "wrongtype", "missing", "wrongfield", "truncated", "notutf8"] {
        for call in ["job", "jobs", "models", "presets", "download"] {
            let said = result[format!("{mode}/{call}")].as_str().unwrap();
            assert!(said.starts_with("MalformedAnswer bad-answer: "), "{mode}/{call}: {said}");
        }
    }
    assert!(result["truncated/job"].as_str().unwrap().contains("the answer was cut short"), "{result}");
    assert!(result["wrongfield/job"].as_str().unwrap().contains("`status` is 3 (int)"), "{result}");
    assert!(result["missing/models"].as_str().unwrap().contains("`models[0].name` is missing"), "{result}");
    assert!(result["badevent/follow"].as_str().unwrap().starts_with("MalformedAnswer bad-answer: an event of GET "), "{result}");
    assert_eq!(result["command_exit"], 1, "{result}");
    let said = result["command_stderr"].as_str().unwrap();
    assert!(said.starts_with("error: bad-answer: GET /v1/jobs/") && !said.contains("Traceback"), "{said}");
}
