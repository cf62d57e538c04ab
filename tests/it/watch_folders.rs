//! Watch folders (`[[watch]]`): a clip written slowly becomes one job once it stopped growing, its result
//! lands in the output folder (beside, never over, a file of the same name) and the clip moves to done/; a
//! file that is not a video moves to failed/ with its error; a restart while a file's job runs does not
//! submit it again; a watch whose folder is missing stops start-up, naming it.
use crate::common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::*;

const POLL_S: f64 = 0.5;

struct Folders {
    input: PathBuf,
    output: PathBuf,
}

/// A config.toml in `dir` watching `dir/in` into `dir/out` with a fast upscale.
fn watching(dir: &Path, extra: &str) -> Folders {
    let folders = Folders { input: dir.join("in"), output: dir.join("out") };
    std::fs::create_dir_all(&folders.input).unwrap();
    std::fs::create_dir_all(&folders.output).unwrap();
    let config = format!(
        "watch_poll_s = {POLL_S}\n{extra}\n[[watch]]\nfolder = {:?}\noutput = {:?}\nop = \"upscale\"\nscale = 2\ndtype = \"f32\"\n",
        folders.input, folders.output
    );
    std::fs::write(dir.join("config.toml"), config).unwrap();
    folders
}

fn tiny_clip(dir: &Path) -> Vec<u8> {
    let clip = dir.join("source.mp4");
    make_clip(&media("carphone_pristine.mp4"), 2, false, &clip);
    std::fs::read(&clip).unwrap()
}

fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir).map_or(Vec::new(), |entries| {
        entries.map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect()
    });
    names.sort();
    names
}

async fn wait_until(what: &str, within: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn jobs(client: &reqwest::Client, server: &Server) -> Vec<serde_json::Value> {
    let (status, list) = get_json(client, &server.url("/v1/jobs")).await;
    assert_eq!(status, 200, "{list}");
    list["jobs"].as_array().unwrap().clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clip_written_slowly_becomes_one_job_and_a_non_video_fails() {
    let dir = tempfile::tempdir().unwrap();
    let folders = watching(dir.path(), "");
    // A result of the same name is already there: it must stay as it is.
    std::fs::write(folders.output.join("clip_x2.mp4"), b"an older result").unwrap();
    let server = Server::start(dir.path(), &[]);
    let client = client();

    // In three pieces, each pause longer than one poll (but shorter than two): not taken half-written.
    let clip = tiny_clip(dir.path());
    let mut file = std::fs::File::create(folders.input.join("clip.mp4")).unwrap();
    let pieces: Vec<&[u8]> = clip.chunks(clip.len().div_ceil(3)).collect();
    for (index, piece) in pieces.iter().enumerate() {
        file.write_all(piece).unwrap();
        file.flush().unwrap();
        tokio::time::sleep(Duration::from_secs_f64(POLL_S * 1.5)).await;
        if index + 1 < pieces.len() {
            assert!(jobs(&client, &server).await.is_empty(), "a file still being written was taken");
        }
    }
    drop(file);
    std::fs::write(folders.input.join("notes.txt"), b"not a video at all").unwrap();

    wait_until("the clip's result in the output folder", Duration::from_secs(60), || folders.output.join("clip_x2-1.mp4").exists()).await;
    wait_until("both inputs moved", Duration::from_secs(30), || names_in(&folders.input) == ["done", "failed"]).await;
    assert_eq!(names_in(&folders.input.join("done")), ["clip.mp4"]);
    assert_eq!(std::fs::read(folders.input.join("done/clip.mp4")).unwrap(), clip, "the input moved whole");
    assert_eq!(std::fs::read(folders.output.join("clip_x2.mp4")).unwrap(), b"an older result");
    assert_eq!(names_in(&folders.output), ["clip_x2-1.mp4", "clip_x2.mp4"]);
    let result = ffprobe(&folders.output.join("clip_x2-1.mp4"));
    assert_eq!((result.width, result.height), (352, 288), "the upscaled clip: {result:?}");

    assert_eq!(names_in(&folders.input.join("failed")), ["notes.txt", "notes.txt.error.txt"]);
    let error = std::fs::read_to_string(folders.input.join("failed/notes.txt.error.txt")).unwrap();
    assert!(error.starts_with("not-a-video\n") && error.contains("notes.txt"), "{error}");
    assert!(!error.contains(&*dir.path().to_string_lossy()), "no path of the box: {error}");

    let jobs = jobs(&client, &server).await;
    assert_eq!(jobs.len(), 1, "exactly one job, for the clip: {jobs:?}");
    assert_eq!((jobs[0]["status"].as_str(), jobs[0]["input"]["file_name"].as_str()), (Some("succeeded"), Some("clip.mp4")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_while_a_file_is_processed_does_not_submit_it_again() {
    let dir = tempfile::tempdir().unwrap();
    let folders = watching(dir.path(), "");
    let mut server = Server::start(dir.path(), &[]);
    let client = client();
    std::fs::write(folders.input.join("clip.mp4"), tiny_clip(dir.path())).unwrap();

    let deadline = Instant::now() + Duration::from_secs(30);
    while jobs(&client, &server).await.is_empty() {
        assert!(Instant::now() < deadline, "the clip was not taken");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    server.kill9();
    let server = server.restart_after_kill9();

    wait_until("the input in done/", Duration::from_secs(60), || folders.input.join("done/clip.mp4").exists()).await;
    assert_eq!(names_in(&folders.output), ["clip_x2.mp4"], "one result");
    tokio::time::sleep(Duration::from_secs_f64(POLL_S * 4.0)).await;
    let jobs = jobs(&client, &server).await;
    assert_eq!(jobs.len(), 1, "the file's job was followed after the restart, not submitted again: {jobs:?}");
    assert_eq!(jobs[0]["status"], "succeeded");
    assert_eq!(names_in(&folders.input), ["done"]);
}

#[test]
fn a_watch_of_a_missing_folder_or_with_a_bad_field_stops_start_up() {
    for (entry, expected) in [
        ("folder = \"/no/such/folder\"\noutput = \"out\"\nop = \"upscale\"\n", "watch[0].folder: /no/such/folder is not an existing folder"),
        ("folder = \"in\"\noutput = \"out\"\nscal = 2\n", "watch[0].scal is not a job field"),
        ("folder = \"in\"\noutput = \"out\"\nscale = 3\n", "watch[0]: scale `3` is not supported"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("in")).unwrap();
        std::fs::create_dir_all(dir.path().join("out")).unwrap();
        std::fs::write(dir.path().join("config.toml"), format!("[[watch]]\n{entry}")).unwrap();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_vaebox"))
            .arg("serve")
            .current_dir(dir.path())
            .env("VAEBOX_LISTEN", "127.0.0.1:0")
            .env("VAEBOX_DATA_DIR", dir.path().join("data"))
            .env("VAEBOX_MODELS_DIR", Path::new(REPO).join("models"))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && stderr.contains(expected), "{expected}: {stderr}");
    }
}

/// A writer that pauses for several poll intervals (6 s here, twelve looks) is not cut short: a file is
/// taken only once unchanged for `watch_settle_s` (it was taken with 59 of 120 frames).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_pausing_for_seconds_is_not_cut_short() {
    let dir = tempfile::tempdir().unwrap();
    let folders = watching(dir.path(), "watch_settle_s = 8");
    let server = Server::start(dir.path(), &[]);
    let client = client();
    let clip = tiny_clip(dir.path());
    let mut file = std::fs::File::create(folders.input.join("clip.mp4")).unwrap();
    let half = clip.len() / 2;
    file.write_all(&clip[..half]).unwrap();
    file.flush().unwrap();
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert!(jobs(&client, &server).await.is_empty(), "a file paused 6 s in its writing was taken");
    assert_eq!(names_in(&folders.input), ["clip.mp4"], "a half-written file was taken (and refused)");
    file.write_all(&clip[half..]).unwrap();
    drop(file);
    wait_until("the clip's result", Duration::from_secs(90), || folders.output.join("clip_x2.mp4").exists()).await;
    let jobs = jobs(&client, &server).await;
    assert_eq!((jobs.len(), jobs[0]["input"]["media"]["frames"].as_u64()), (1, Some(2)), "{jobs:?}");
}
