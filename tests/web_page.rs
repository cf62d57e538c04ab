//! The web page, run by a real headless browser against the real server: its script fills the model
//! list from /v1/models, the header from /healthz and the job list from /v1/jobs.
mod common;

use std::time::Duration;

use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn page_shows_models_health_and_jobs_from_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let clip = dir.path().join("clip.mp4");
    make_clip(&media("carphone_pristine.mp4"), 3, false, &clip);
    let server = Server::start(dir.path(), &[]);
    let client = client();
    let (status, job) = upload_raw(&client, &server, "op=upscale&scale=2&filename=page-check.mp4", std::fs::read(&clip).unwrap()).await;
    assert_eq!(status, 202, "{job}");
    wait_for_final(&client, &server, job["id"].as_str().unwrap(), Duration::from_secs(120)).await;

    let url = server.url("/");
    let profile = dir.path().join("chromium-profile");
    let dom = tokio::task::spawn_blocking(move || rendered_dom(&url, &profile)).await.unwrap();
    assert!(dom.contains("<option value=\"realesrgan-x4plus\""), "model list not filled from /v1/models:\n{dom}");
    assert!(dom.contains("<strong>cpu</strong>"), "device not shown from /healthz:\n{dom}");
    assert!(dom.contains("page-check.mp4"), "the job is not listed:\n{dom}");
    assert!(dom.contains(&format!("/v1/jobs/{}/result", job["id"].as_str().unwrap())), "no download link:\n{dom}");
    assert!(dom.contains("Peak device memory"), "timings miss the device peak:\n{dom}");
    // No out-of-memory retry happened (tests/out_of_memory.rs renders one that did): nothing to show.
    assert!(!dom.contains("Out-of-memory fallbacks") && !dom.contains("Row split"), "an empty fallback list is shown:\n{dom}");
}
