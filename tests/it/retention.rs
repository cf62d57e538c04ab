//! Nothing piles up: synchronous calls keep no files once answered, finished jobs go after
//! `retention_hours`, and `/healthz` tells how much the data dir holds.
use crate::common;

use std::time::{Duration, Instant};

use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn synchronous_results_are_not_kept_and_finished_jobs_expire() {
    let dir = tempfile::tempdir().unwrap();
    let models = models_with_small_wan21(dir.path());
    std::os::unix::fs::symlink(std::path::Path::new(REPO).join("models/realesrgan"), models.join("realesrgan")).unwrap();
    // 0.002 h = 7.2 s: long enough to look at a finished job, short enough to watch it go.
    let server = Server::start(dir.path(), &[("VAEBOX_MODELS_DIR", models.to_str().unwrap()), ("VAEBOX_RETENTION_HOURS", "0.002")]);
    let client = client();
    let jobs_dir = server.data_dir.join("data/jobs");

    // A synchronous decode: the bytes come back, the job's row stays (timings, plan), its files do not.
    let latent: Vec<u8> = (0..16 * 2 * 4 * 4).flat_map(|i| ((i % 7) as f32 * 0.1).to_le_bytes()).collect();
    let response = client.post(server.url("/v1/decode?model=wan21-small&shape=1&shape=16&shape=2&shape=4&shape=4")).body(latent).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let id = response.headers()["x-vaebox-job"].to_str().unwrap().to_string();
    let bytes = response.bytes().await.unwrap();
    assert_eq!(bytes.len(), 3 * 5 * 32 * 32 * 4);
    assert!(!jobs_dir.join(&id).exists(), "the synchronous call's folder is still there");
    let (status, job) = get_json(&client, &server.url(&format!("/v1/jobs/{id}"))).await;
    assert_eq!((status, job["status"].as_str()), (200, Some("succeeded")), "{job}");
    // The record says so (the page then offers no download), and neither the result nor a thumbnail
    // of it is attempted: 410 and 409 with their codes, not a 500 from ffmpeg on a missing file.
    assert_eq!(job["output"]["kept"], false, "{job}");
    let (status, body) = get_json(&client, &server.url(&format!("/v1/jobs/{id}/result"))).await;
    assert_eq!((status, body["error"]["code"].as_str()), (410, Some("result-gone")), "{body}");
    for path in ["thumbnail", "preview?side=output"] {
        let (status, body) = get_json(&client, &server.url(&format!("/v1/jobs/{id}/{path}"))).await;
        assert_eq!((status, body["error"]["code"].as_str()), (409, Some("preview-unavailable")), "{path}: {body}");
    }

    // A queued job: its result is there to download, then it expires with its row.
    let clip = dir.path().join("clip.mp4");
    make_clip(&media("carphone_pristine.mp4"), 2, false, &clip);
    let job = run_job(&client, &server, "op=upscale&model=realesrgan-animevideov3&scale=2", std::fs::read(&clip).unwrap()).await;
    let upscale_id = job["id"].as_str().unwrap().to_string();
    assert_eq!(job["output"]["kept"], true, "{job}");
    assert!(!fetch(&client, &server, &job).await.is_empty());
    let (_, health) = get_json(&client, &server.url("/healthz")).await;
    assert!(health["data_dir_bytes"].as_u64().unwrap() > 0 && health["disk_free_bytes"].as_u64().unwrap() > 0, "{health}");
    let deadline = Instant::now() + Duration::from_secs(60);
    for id in [&id, &upscale_id] {
        while get_json(&client, &server.url(&format!("/v1/jobs/{id}"))).await.0 != 404 {
            assert!(Instant::now() < deadline, "job {id} outlived the retention period");
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
    assert!(!jobs_dir.join(&upscale_id).exists(), "the expired job's folder is still there");
}
