//! A checkpoint that records no digests of its segments (what builds before them wrote, or one edited by
//! hand) is not trusted (issue 53): with a segment cut short while the server was down, the job used to go
//! on from it and "succeed" with frames missing; it starts over and its result has every frame.
use crate::common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

use crate::resume::{assert_same_frames, clip, result_frames, submit, HEIGHT, SETTINGS, WIDTH};

const UPSCALE: &str = "op=upscale&model=realesrgan-animevideov3&scale=2&dtype=f32&output_format=ffv1&filename=clip.mkv";

fn segments_folder(server: &Server, id: &str) -> Option<PathBuf> {
    let dir = server.data_dir.join("data/jobs").join(id);
    std::fs::read_dir(dir).ok()?.flatten().map(|e| e.path()).find(|p| p.to_string_lossy().ends_with(".resume"))
}

fn checkpoint(server: &Server, id: &str) -> Option<Value> {
    let text = std::fs::read_to_string(segments_folder(server, id)?.join("checkpoint.json")).ok()?;
    serde_json::from_str(&text).ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_without_digests_is_not_trusted_and_a_cut_segment_does_not_lose_frames() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path(), &SETTINGS);
    let client = client();
    let input = clip(dir.path(), 12);
    let whole = run_job(&client, &server, UPSCALE, input.clone()).await;
    let whole_frames = result_frames(&client, &server, &whole, dir.path(), 2 * WIDTH, 2 * HEIGHT).await;
    assert_eq!(whole_frames.len(), 12);

    let id = submit(&client, &server, UPSCALE, input).await;
    // Two whole segments or more (one frame each at these settings), and frames still to go.
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let frames = checkpoint(&server, &id).and_then(|c| c["frames"].as_u64()).unwrap_or(0);
        if (4..10).contains(&frames) {
            break;
        }
        assert!(Instant::now() < deadline, "never saw a checkpoint of 4 to 9 frames");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    server.kill9();

    let folder = segments_folder(&server, &id).unwrap();
    let mut written = checkpoint(&server, &id).unwrap();
    assert!(written["segment_digests"].as_array().is_some_and(|d| !d.is_empty()), "this build records digests: {written}");
    written.as_object_mut().unwrap().remove("segment_digests");
    std::fs::write(folder.join("checkpoint.json"), written.to_string()).unwrap();
    let cut = folder.join("segment_000001.mkv");
    let bytes = std::fs::read(&cut).unwrap();
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();

    let server = server.restart_after_kill9();
    let job = wait_for_final(&client, &server, &id, Duration::from_secs(300)).await;
    assert_eq!((job["status"].as_str(), job["attempts"].as_i64()), (Some("succeeded"), Some(2)), "{job}");
    assert!(job["plan"].get("resumed_from").is_none(), "went on from an untrusted checkpoint: {}", job["plan"]);
    assert_same_frames(&result_frames(&client, &server, &job, dir.path(), 2 * WIDTH, 2 * HEIGHT).await, &whole_frames);
}
