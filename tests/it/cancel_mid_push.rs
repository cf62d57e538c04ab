//! A cancel takes effect inside the long pieces of a VAE or restore job, not at their end: one push of a
//! large latent through the tiled decoder, or one restoration batch (VAE encode, DiT, VAE decode), is
//! many seconds of CPU, and a cancel used to wait for it. The flag is now asked between tiles, causal
//! convolutions and DiT blocks. Each job is cancelled in the middle of its first push or batch (nothing
//! written yet), must end `cancelled` within two seconds of the cancel's answer, and leaves no output.
use crate::common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};

/// Longest a cancel may take, from its answer to the job's final status (polled every 50 ms): the work
/// between two asks (a convolution of one tile, a DiT block) is well under a second on this CPU.
const CANCEL_WITHIN: Duration = Duration::from_secs(2);

/// Polls job `id` until `under_way` says its long piece of work has begun, waits `settle` more, cancels
/// it and returns the job once final, with the time from the cancel's answer to that.
pub(crate) async fn cancel_under_way(client: &reqwest::Client, server: &Server, id: &str, under_way: impl Fn(&Value) -> bool, settle: Duration) -> (Value, Duration) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (_, job) = get_json(client, &server.url(&format!("/v1/jobs/{id}"))).await;
        if under_way(&job) {
            break;
        }
        assert!(Instant::now() < deadline && job["status"] != "succeeded" && job["status"] != "failed", "the job never got under way: {job}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(settle).await;
    assert_eq!(client.post(server.url(&format!("/v1/jobs/{id}/cancel"))).send().await.unwrap().status(), 200);
    let asked = Instant::now();
    loop {
        let (_, job) = get_json(client, &server.url(&format!("/v1/jobs/{id}"))).await;
        if matches!(job["status"].as_str(), Some("succeeded" | "failed" | "cancelled")) {
            return (job, asked.elapsed());
        }
        assert!(asked.elapsed() < Duration::from_secs(120), "the cancelled job never ended: {job}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// What the job left in its folder besides its input: nothing, for a cancelled job. The scheduler removes
/// an ended job's checkpoints and partial output just after it records the outcome (it asks the store
/// whether the job ended, since a run that lost its lease stops the same way), so a poll that sees
/// `cancelled` can come a few milliseconds before that: the folder is given a second to settle.
async fn leftovers(server: &Server, id: &str) -> Vec<std::path::PathBuf> {
    let settled_by = Instant::now() + Duration::from_secs(1);
    loop {
        let left: Vec<_> = files_under(&server.data_dir.join("data/jobs").join(id)).into_iter().filter(|p| !p.file_name().unwrap().to_string_lossy().starts_with("input.")).collect();
        if left.is_empty() || Instant::now() >= settled_by {
            return left;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A latent of `shape` with values spread over about [-1, 1] (deterministic).
fn latent_values(shape: &[usize]) -> Vec<f32> {
    (0..shape.iter().product::<usize>()).map(|i| ((i as f32) * 0.618).sin()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_stops_a_vae_decode_inside_its_push() {
    let dir = tempfile::tempdir().unwrap();
    let models = models_with_small_wan21(dir.path());
    // 17 frames of 1280×720 in one push (chunks of 64 frames): many seconds of CPU without a cancel inside it.
    let shape = [1, 16, 5, 90, 160];
    let latent = dir.path().join("latent.safetensors");
    write_safetensors(&latent, "latent", &shape, &latent_values(&shape), json!({"family": "wan21"}));
    let server = Server::start(dir.path(), &[("VAEBOX_MODELS_DIR", models.to_str().unwrap()), ("VAEBOX_CHUNK_FRAMES", "64")]);
    let client = client();
    let (status, job) = upload_raw(&client, &server, "op=vae_decode&model=wan21-small&dtype=f32", std::fs::read(&latent).unwrap()).await;
    assert_eq!(status, 202, "{job}");
    let id = job["id"].as_str().unwrap();
    let (job, took) = cancel_under_way(&client, &server, id, |job| job["status"] == "running", Duration::from_millis(1500)).await;
    println!("vae_decode: cancelled {took:?} after the cancel's answer");
    assert_eq!((job["status"].as_str(), job["progress"]["done"].as_u64()), (Some("cancelled"), Some(0)), "the cancel did not land in the first push: {job}");
    assert!(took < CANCEL_WITHIN, "the cancel took {took:?}: the push ran on to its end");
    assert_eq!(leftovers(&server, id).await, Vec::<std::path::PathBuf>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_stops_a_restore_inside_its_batch() {
    let dir = tempfile::tempdir().unwrap();
    let models = models_with_small_seedvr2(dir.path());
    let server = Server::start(dir.path(), &[("VAEBOX_MODELS_DIR", models.to_str().unwrap())]);
    let client = client();
    let clip = dir.path().join("clip.mp4");
    make_clip(&media("carphone_pristine.mp4"), 5, false, &clip);
    // One batch of 5 frames at 4× (1408×1152): its encode alone is many seconds here, the whole batch over a minute.
    let query = "op=restore&model=seedvr2-3b-small&scale=4&batch_frames=5&dtype=f32&filename=clip.mp4";
    let (status, job) = upload_raw(&client, &server, query, std::fs::read(&clip).unwrap()).await;
    assert_eq!(status, 202, "{job}");
    let id = job["id"].as_str().unwrap();
    let in_stage = |job: &Value| job["progress"]["stage"].as_str().is_some_and(|stage| stage.starts_with("encode batch"));
    let (job, took) = cancel_under_way(&client, &server, id, in_stage, Duration::from_millis(1000)).await;
    println!("restore: cancelled {took:?} after the cancel's answer");
    assert_eq!((job["status"].as_str(), job["progress"]["done"].as_u64()), (Some("cancelled"), Some(0)), "the cancel did not land in the first batch: {job}");
    assert!(took < CANCEL_WITHIN, "the cancel took {took:?}: the batch ran on to its end");
    assert_eq!(leftovers(&server, id).await, Vec::<std::path::PathBuf>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_stops_a_vae_encode_of_a_zip_inside_its_push() {
    let dir = tempfile::tempdir().unwrap();
    let models = models_with_small_wan21(dir.path());
    // 17 PNG frames of 1280×720 in a zip, encoded in one push (chunks of 64 frames): a hard test's
    // 200-frame zip ran ~100 s past its cancel.
    let body = png_zip_of_clip(dir.path(), &media("carphone_pristine.mp4"), 17, "1280:720");
    let server = Server::start(dir.path(), &[("VAEBOX_MODELS_DIR", models.to_str().unwrap()), ("VAEBOX_CHUNK_FRAMES", "64")]);
    let client = client();
    let (status, job) = upload_raw(&client, &server, "op=vae_encode&model=wan21-small&dtype=f32&filename=frames.zip", body).await;
    assert_eq!(status, 202, "{job}");
    let id = job["id"].as_str().unwrap();
    let (job, took) = cancel_under_way(&client, &server, id, |job| job["status"] == "running", Duration::from_millis(1500)).await;
    println!("vae_encode: cancelled {took:?} after the cancel's answer");
    assert_eq!((job["status"].as_str(), job["progress"]["done"].as_u64()), (Some("cancelled"), Some(0)), "the cancel did not land in the first push: {job}");
    assert!(took < CANCEL_WITHIN, "the cancel took {took:?}: the push ran on to its end");
    assert_eq!(leftovers(&server, id).await, Vec::<std::path::PathBuf>::new());
}

/// Frames that fit one tile go through the upscaler in one call per chunk: the cancel is asked between the
/// network's layers there too (a hard test's x4plus on 12 frames of 256² ended 137 s after its cancel).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_stops_an_upscale_whose_frames_fit_one_tile() {
    let dir = tempfile::tempdir().unwrap();
    let clip = dir.path().join("clip.mp4");
    make_clip(&media("carphone_pristine.mp4"), 4, false, &clip);
    // 4 frames of 176×144 in one chunk and one tile: x4plus's convolutions at 704×576 make it tens of seconds here.
    let server = Server::start(dir.path(), &[("VAEBOX_CHUNK_FRAMES", "4")]);
    let client = client();
    let query = "op=upscale&model=realesrgan-x4plus&scale=4&dtype=f32&tile=512&filename=clip.mp4";
    let (status, job) = upload_raw(&client, &server, query, std::fs::read(&clip).unwrap()).await;
    assert_eq!(status, 202, "{job}");
    let id = job["id"].as_str().unwrap();
    // The model loads in 0.5–1.5 s; the chunk's one call then takes half a minute: a cancel 3 s in lands inside it.
    let (job, took) = cancel_under_way(&client, &server, id, |job| job["status"] == "running", Duration::from_secs(3)).await;
    println!("upscale in one tile: cancelled {took:?} after the cancel's answer");
    assert_eq!((job["status"].as_str(), job["progress"]["done"].as_u64()), (Some("cancelled"), Some(0)), "the cancel did not land in the first chunk: {job}");
    assert!(took < CANCEL_WITHIN, "the cancel took {took:?}: the chunk ran on to its end");
    assert_eq!(leftovers(&server, id).await, Vec::<std::path::PathBuf>::new());
}
