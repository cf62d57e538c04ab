//! A job cancelled while it ran, then killed at once (kill -9, before its run reached its clean-up), left its
//! checkpoints (`.NAME.resume/`, as large as the video so far) in its folder for good (issue 53). The next
//! start records it cancelled and removes them.
use crate::common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::*;

use crate::resume::{clip, submit, RESTORE, RESTORE_FRAMES, SETTINGS};

fn resume_folder(server: &Server, id: &str) -> Option<PathBuf> {
    let dir = server.data_dir.join("data/jobs").join(id);
    std::fs::read_dir(dir).ok()?.flatten().map(|e| e.path()).find(|p| p.to_string_lossy().ends_with(".resume"))
}

async fn wait_until(what: &str, within: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_cancelled_then_killed_at_once_leaves_no_checkpoints_after_the_next_start() {
    let dir = tempfile::tempdir().unwrap();
    let models = models_with_small_seedvr2(dir.path());
    let mut settings = SETTINGS.to_vec();
    settings.push(("VAEBOX_MODELS_DIR", models.to_str().unwrap()));
    let mut server = Server::start(dir.path(), &settings);
    let client = client();
    let id = submit(&client, &server, RESTORE, clip(dir.path(), RESTORE_FRAMES)).await;
    // A checkpoint after the first batch: the second one (seconds of DiT) is running.
    wait_until("a checkpoint after the first batch", Duration::from_secs(300), || {
        resume_folder(&server, &id).is_some_and(|folder| folder.join("checkpoint.json").is_file())
    })
    .await;
    let (status, job) = send_json(client.post(server.url(&format!("/v1/jobs/{id}/cancel")))).await;
    assert_eq!(status, 200, "{job}");
    server.kill9();
    let folder = resume_folder(&server, &id).expect("the run was killed before it removed its checkpoints");

    let server = server.restart_after_kill9();
    let (status, job) = get_json(&client, &server.url(&format!("/v1/jobs/{id}"))).await;
    assert_eq!((status, job["status"].as_str()), (200, Some("cancelled")), "{job}");
    wait_until("the ended job's checkpoints removed", Duration::from_secs(30), || !folder.exists()).await;
    assert!(server.data_dir.join("data/jobs").join(&id).is_dir(), "the job's own folder stays (its input)");
}
