//! An upscale's progress moves within a chunk, tile by tile: a chunk of big frames (or many tiles) was minutes
//! at 0 % with no ETA. The job's progress is sampled while it runs (the box stores it every 250 ms).
use crate::common;

use std::time::{Duration, Instant};

use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upscale_progress_moves_within_the_first_chunk() {
    let dir = tempfile::tempdir().unwrap();
    // One chunk of the whole clip, cut into 32-pixel tiles: its frames are counted only at its end.
    let server = Server::start(dir.path(), &[("VAEBOX_CHUNK_FRAMES", "16")]);
    let client = client();
    let clip = dir.path().join("clip.mp4");
    make_clip(&media("carphone_pristine.mp4"), 16, false, &clip);
    let (status, job) = upload_raw(&client, &server, "op=upscale&model=realesrgan-animevideov3&scale=2&tile=32", std::fs::read(&clip).unwrap()).await;
    assert_eq!(status, 202, "{job}");
    let id = job["id"].as_str().unwrap();
    let mut samples: Vec<(String, u64, f64, Option<f64>)> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let (_, job) = get_json(&client, &server.url(&format!("/v1/jobs/{id}"))).await;
        let progress = &job["progress"];
        if let (Some(stage), Some(done), Some(fraction)) = (progress["stage"].as_str(), progress["done"].as_u64(), progress["fraction"].as_f64()) {
            samples.push((stage.to_string(), done, fraction, progress["eta_s"].as_f64()));
        }
        if job["status"] != "running" && job["status"] != "queued" {
            assert_eq!(job["status"], "succeeded", "{job}");
            assert!(job["plan"]["tiles_per_frame"].as_u64().unwrap() > 1, "{}", job["plan"]);
            break;
        }
        assert!(Instant::now() < deadline, "the upscale did not end");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let in_chunk: Vec<_> = samples.iter().filter(|(stage, done, fraction, _)| stage == "upscale" && *done == 0 && *fraction > 0.0).collect();
    let fractions: std::collections::BTreeSet<u64> = in_chunk.iter().map(|(_, _, fraction, _)| fraction.to_bits()).collect();
    assert!(fractions.len() > 1, "the first chunk stood still: {samples:?}");
    assert!(in_chunk.iter().any(|(_, _, _, eta)| eta.is_some()), "no ETA within the first chunk: {samples:?}");
    let all: Vec<f64> = samples.iter().map(|(_, _, fraction, _)| *fraction).collect();
    assert!(all.windows(2).all(|w| w[0] <= w[1]), "the fraction went back: {samples:?}");
}
