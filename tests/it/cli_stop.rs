//! `vaebox run` stopped with Ctrl-C and run again: it says how far it came and exits 130, the same command
//! goes on from its checkpoint, and a second run of the same output while one runs is refused at once,
//! naming the first one's process.
use crate::common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

const BIN: &str = env!("CARGO_BIN_EXE_vaebox");
const FRAMES: u32 = 40;

#[test]
fn ctrl_c_says_where_to_go_on_and_a_second_run_is_locked_out() {
    let dir = tempfile::tempdir().unwrap();
    let clip = dir.path().join("in.mp4");
    make_clip(&media("carphone_pristine.mp4"), FRAMES, false, &clip);
    let output = dir.path().join("out.mp4");
    let command = || {
        let mut command = Command::new(BIN);
        command
            .current_dir(dir.path())
            .env("VAEBOX_MODELS_DIR", Path::new(REPO).join("models"))
            // A checkpoint every 3 frames, and 32-pixel tiles: slow enough to be stopped midway.
            .env("VAEBOX_CHECKPOINT_S", "0.1")
            .env("VAEBOX_LOG", "warn")
            .args(["run", "--op", "upscale", "--model", "realesrgan-animevideov3", "--scale", "2", "--tile", "32", "--json", "--input"])
            .arg(&clip)
            .arg("--output")
            .arg(&output)
            .stdin(Stdio::null());
        command
    };
    let mut first = command().stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let resume = dir.path().join(".out.resume");
    let deadline = Instant::now() + Duration::from_secs(240);
    while !resume.join("checkpoint.json").exists() {
        assert!(first.try_wait().unwrap().is_none(), "the run ended before its first checkpoint");
        assert!(Instant::now() < deadline, "no checkpoint was made");
        std::thread::sleep(Duration::from_millis(20));
    }

    // The same command again while the first runs: refused at once, naming the first run's process.
    let started = Instant::now();
    let second = command().output().unwrap();
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(!second.status.success(), "a second run of the same output ran: {stderr}");
    assert!(stderr.contains(&format!("another `vaebox run` (pid {}) is writing {}", first.id(), output.display())), "{stderr}");
    assert!(started.elapsed() < Duration::from_secs(20), "refused only after {:?}", started.elapsed());

    // Ctrl-C: the first run says where it stopped and that the same command goes on; exit status 130.
    // SAFETY: a signal to the child this test started and has not reaped.
    assert_eq!(unsafe { libc::kill(first.id() as i32, libc::SIGINT) }, 0);
    let stopped = first.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&stopped.stderr);
    assert_eq!(stopped.status.code(), Some(130), "{stderr}");
    let line = stderr.lines().find(|line| line.starts_with("stopped at ")).unwrap_or_else(|| panic!("no `stopped at`: {stderr}"));
    let (kept, rest) = line["stopped at ".len()..].split_once('/').unwrap();
    let kept: u64 = kept.parse().unwrap();
    assert!(rest.starts_with(&format!("{FRAMES} frames; run the same command to go on")), "{line}");
    assert!(kept > 0 && kept < FRAMES as u64 && kept % 3 == 0, "{line}");
    assert!(!output.exists(), "a stopped run left an output");
    assert!(resume.join("checkpoint.json").exists(), "the checkpoint was not kept");

    // The same command goes on from there and writes the whole clip.
    let again = command().output().unwrap();
    assert!(again.status.success(), "{}", String::from_utf8_lossy(&again.stderr));
    let report: serde_json::Value = serde_json::from_slice(&again.stdout).unwrap();
    assert_eq!(report["plan"]["resumed_from"]["frame"].as_u64(), Some(kept), "{}", report["plan"]);
    assert_eq!(ffprobe(&output).frames, FRAMES as u64);
    assert!(!resume.exists(), "the checkpoint folder stayed after the whole output was written");
}
