//! A crash (SIGKILL) with one job running and one queued loses neither: both complete after a restart.
use crate::common;

use std::time::{Duration, Instant};

use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_with_a_running_and_a_queued_job_then_both_complete() {
    let dir = tempfile::tempdir().unwrap();
    let long_clip = dir.path().join("carphone40.mp4");
    let short_clip = dir.path().join("carphone4.mp4");
    make_clip(&media("carphone_pristine.mp4"), 40, false, &long_clip);
    make_clip(&media("carphone_pristine.mp4"), 4, false, &short_clip);
    let settings = [("VAEBOX_CHUNK_FRAMES", "2")];
    let server = Server::start(dir.path(), &settings);
    let client = client();
    let query = "op=upscale&model=realesrgan-animevideov3&scale=4&dtype=f32";
    let (status, running) = upload_raw(&client, &server, &format!("{query}&filename=long.mp4"), std::fs::read(&long_clip).unwrap()).await;
    assert_eq!(status, 202);
    let (status, queued) = upload_raw(&client, &server, &format!("{query}&filename=short.mp4"), std::fs::read(&short_clip).unwrap()).await;
    assert_eq!(status, 202);
    let (running_id, queued_id) = (running["id"].as_str().unwrap().to_string(), queued["id"].as_str().unwrap().to_string());

    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (_, job) = get_json(&client, &server.url(&format!("/v1/jobs/{running_id}"))).await;
        if job["status"] == "running" && job["progress"]["done"].as_u64().unwrap_or(0) > 0 {
            break;
        }
        assert!(Instant::now() < deadline, "the first job never got going: {job}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (_, job) = get_json(&client, &server.url(&format!("/v1/jobs/{queued_id}"))).await;
    assert_eq!(job["status"], "queued");

    let server = server.restart_after_kill9();
    // Nothing half-written is visible: the interrupted job has no result.
    let (_, job) = get_json(&client, &server.url(&format!("/v1/jobs/{running_id}"))).await;
    assert!(job["output"].is_null(), "{job}");
    assert!(matches!(job["status"].as_str(), Some("queued" | "running")), "{job}");

    for id in [&running_id, &queued_id] {
        let job = wait_for_final(&client, &server, id, Duration::from_secs(300)).await;
        assert_eq!(job["status"], "succeeded", "{job}");
        let path = dir.path().join(format!("{id}.mp4"));
        let bytes = client.get(server.url(&format!("/v1/jobs/{id}/result"))).send().await.unwrap().bytes().await.unwrap();
        std::fs::write(&path, &bytes).unwrap();
        let probed = ffprobe(&path);
        assert_eq!((probed.width, probed.height), (704, 576));
        assert_eq!(probed.frames, job["input"]["media"]["frames"].as_u64().unwrap());
    }
    let (_, job) = get_json(&client, &server.url(&format!("/v1/jobs/{running_id}"))).await;
    assert_eq!(job["attempts"], 2, "the interrupted job should have been claimed twice: {job}");
    // No temporary output lies around after the rerun.
    let partials: Vec<_> = files_under(&server.data_dir.join("data/jobs"))
        .into_iter()
        .filter(|p| p.to_string_lossy().contains("partial"))
        .collect();
    assert!(partials.is_empty(), "{partials:?}");
}

/// `vaebox serve` on `data_dir`, expected to refuse to start: its stderr.
fn refused_start(data_dir: &std::path::Path) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_vaebox"))
        .arg("serve")
        .env("VAEBOX_LISTEN", "127.0.0.1:0")
        .env("VAEBOX_DATA_DIR", data_dir)
        .env("VAEBOX_LOG", "warn")
        .output()
        .unwrap();
    assert!(!out.status.success(), "the server started: {}", String::from_utf8_lossy(&out.stdout));
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Start-up stops with the path and what to do: an emptied database beside the folders of its jobs
/// (which would otherwise be orphaned silently), and a data dir that cannot be written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_up_refuses_an_emptied_database_and_an_unwritable_data_dir() {
    let dir = tempfile::tempdir().unwrap();
    let clip = dir.path().join("clip.mp4");
    make_clip(&media("carphone_pristine.mp4"), 2, false, &clip);
    let server = Server::start(dir.path(), &[]);
    let client = client();
    let (status, job) = upload_raw(&client, &server, "op=upscale&model=realesrgan-animevideov3&scale=2", std::fs::read(&clip).unwrap()).await;
    assert_eq!(status, 202, "{job}");
    wait_for_final(&client, &server, job["id"].as_str().unwrap(), Duration::from_secs(120)).await;
    drop(server);
    let data = dir.path().join("data");
    std::fs::write(data.join("vaebox.db"), b"").unwrap();
    for sidecar in ["vaebox.db-wal", "vaebox.db-shm"] {
        let _ = std::fs::remove_file(data.join(sidecar));
    }
    let message = refused_start(&data);
    assert!(message.contains("knows no jobs") && message.contains(&data.join("jobs").display().to_string()), "{message}");
    assert!(message.contains("Restore the database from a backup"), "{message}");

    // A data dir that is a file's child cannot be created, whoever runs the test.
    let blocked = dir.path().join("a-file");
    std::fs::write(&blocked, b"").unwrap();
    let message = refused_start(&blocked.join("data"));
    assert!(message.contains(&blocked.join("data").display().to_string()) && message.contains("data_dir"), "{message}");
}

/// Waits until job `id` runs and has written a frame.
async fn wait_until_running(client: &reqwest::Client, server: &Server, id: &str) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (_, job) = get_json(client, &server.url(&format!("/v1/jobs/{id}"))).await;
        if job["status"] == "running" && job["progress"]["done"].as_u64().unwrap_or(0) > 0 {
            return job;
        }
        assert!(Instant::now() < deadline, "the job never got going: {job}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `max_attempts` counts the starts a crash interrupted: a job that the process dies in on each of its
/// attempts fails with its reason instead of starting again after every restart (one job reached 11
/// attempts over 10 kill -9 rounds).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_restarts_count_as_attempts() {
    let dir = tempfile::tempdir().unwrap();
    let clip = dir.path().join("carphone40.mp4");
    make_clip(&media("carphone_pristine.mp4"), 200, false, &clip);
    let server = Server::start(dir.path(), &[("VAEBOX_CHUNK_FRAMES", "2"), ("VAEBOX_MAX_ATTEMPTS", "2")]);
    let client = client();
    let (status, job) = upload_raw(&client, &server, "op=upscale&scale=4&dtype=f32&filename=long.mp4", std::fs::read(&clip).unwrap()).await;
    assert_eq!(status, 202, "{job}");
    let id = job["id"].as_str().unwrap().to_string();

    let job = wait_until_running(&client, &server, &id).await;
    assert_eq!(job["attempts"], 1, "{job}");
    let server = server.restart_after_kill9();
    let job = wait_until_running(&client, &server, &id).await;
    assert_eq!(job["attempts"], 2, "{job}");
    let server = server.restart_after_kill9();
    let job = wait_for_final(&client, &server, &id, Duration::from_secs(30)).await;
    assert_eq!((job["status"].as_str(), job["error"]["code"].as_str()), (Some("failed"), Some("attempts-exhausted")), "{job}");
    assert!(job["error"]["message"].as_str().unwrap().contains("started 2 times"), "{job}");
}

/// A synchronous call (`/v1/decode`) that a crash cuts off is not run again for nobody: after the
/// restart its job fails with `caller-gone` and its files (the uploaded latent) are removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_synchronous_call_cut_off_by_a_crash_is_not_run_again() {
    let dir = tempfile::tempdir().unwrap();
    let models = models_with_small_wan21(dir.path());
    let server = Server::start(dir.path(), &[("VAEBOX_MODELS_DIR", models.to_str().unwrap()), ("VAEBOX_CHUNK_FRAMES", "4")]);
    let client = client();
    let shape = [1usize, 16, 13, 96, 96];
    let latent: Vec<u8> = (0..shape.iter().product::<usize>()).flat_map(|i| ((i % 13) as f32 * 0.1 - 0.6).to_le_bytes()).collect();
    let query: String = shape.iter().map(|s| format!("&shape={s}")).collect();
    let call = tokio::spawn({
        let (client, url) = (client.clone(), server.url(&format!("/v1/decode?model=wan21-small{query}&output_type=pt")));
        async move { client.post(url).body(latent).send().await.map(|r| r.status().as_u16()) }
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    let id = loop {
        let (_, list) = get_json(&client, &server.url("/v1/jobs?status=running")).await;
        if let Some(job) = list["jobs"].as_array().and_then(|jobs| jobs.first()) {
            break job["id"].as_str().unwrap().to_string();
        }
        assert!(Instant::now() < deadline, "the call's job did not start");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let server = server.restart_after_kill9();
    assert!(call.await.unwrap().is_err(), "the cut-off call got an answer");
    let (_, job) = get_json(&client, &server.url(&format!("/v1/jobs/{id}"))).await;
    assert_eq!((job["status"].as_str(), job["error"]["code"].as_str()), (Some("failed"), Some("caller-gone")), "{job}");
    assert_eq!(job["attempts"], 1, "it ran again: {job}");
    assert!(!server.data_dir.join("data/jobs").join(&id).exists(), "the call's files are still there");
}
