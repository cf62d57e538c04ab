//! One job in parts that several workers run at once (`jobs::parts`): an upscale cut on its segments' bounds
//! runs on both CPU workers of one box, and its result is the one a single worker gives, frame for frame, with
//! the input's audio and pixel shape; a cancel reaches every part; a job that cannot be cut says so.
use crate::common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

/// Segments of 6 frames (0.2 s at 29.97 fps): the 24-frame clip has 4.
pub(crate) const SETTINGS: &[(&str, &str)] = &[("VAEBOX_THREADS", "1"), ("VAEBOX_CHECKPOINT_S", "0.2"), ("VAEBOX_CHUNK_FRAMES", "2")];
pub(crate) const UPSCALE: &str = "op=upscale&model=realesrgan-animevideov3&scale=2&dtype=f32&filename=clip.mp4";
const FRAMES: u32 = 24;

/// `frames` frames of carphone with a tone and non-square pixels (128:117): what the join must keep.
pub(crate) fn clip_with_audio(dir: &Path, frames: u32) -> Vec<u8> {
    let out = dir.join(format!("clip_{frames}.mp4"));
    let status = Command::new("ffmpeg")
        .args(["-nostdin", "-v", "error", "-y", "-i"])
        .arg(media("carphone_pristine.mp4"))
        .args(["-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000", "-map", "0:v:0", "-map", "1:a:0", "-c:a", "aac", "-shortest"])
        .args(["-frames:v", &frames.to_string(), "-vf", "setsar=sar=128/117:max=65535", "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p"])
        .arg(&out)
        .status()
        .expect("run ffmpeg");
    assert!(status.success());
    std::fs::read(out).unwrap()
}

/// The result's frames as stored, and what ffprobe says of it.
pub(crate) async fn result_of(client: &reqwest::Client, server: &Server, job: &Value, dir: &Path, name: &str) -> (Vec<u8>, Probed) {
    let bytes = fetch(client, server, job).await;
    let path = dir.join(format!("{name}.mp4"));
    let frames = stored_frames(&bytes, &path, "rgb24");
    (frames, ffprobe(&path))
}

/// The job's parts as `GET /v1/jobs/{id}` shows them.
pub(crate) fn parts(job: &Value) -> Vec<Value> {
    job["parts"].as_array().cloned().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upscale_in_parts_on_two_workers_of_one_box_equals_one_workers_result() {
    let dir = tempfile::tempdir().unwrap();
    let mut settings = SETTINGS.to_vec();
    settings.extend([("VAEBOX_DEVICES", "cpu,cpu"), ("VAEBOX_WORKER_NAME", "box")]);
    let server = Server::start(dir.path(), &settings);
    let client = client();
    let body = clip_with_audio(dir.path(), FRAMES);

    let whole = run_job(&client, &server, &format!("{UPSCALE}&parts=1"), body.clone()).await;
    assert!(whole["parts"].is_null(), "parts=1 runs whole: {whole}");
    let split = run_job(&client, &server, UPSCALE, body).await;
    let shown = parts(&split);
    assert_eq!(shown.len(), 2, "parts=auto with two workers: two parts of two segments each: {split}");
    assert_eq!(shown.iter().map(|p| (p["first_frame"].as_u64(), p["frames"].as_u64())).collect::<Vec<_>>(), vec![(Some(0), Some(12)), (Some(12), None)]);
    assert!(shown.iter().all(|p| p["status"] == "succeeded"), "{split}");
    let workers: BTreeSet<&str> = shown.iter().filter_map(|p| p["worker"].as_str()).collect();
    assert_eq!(workers, BTreeSet::from(["box-0", "box-1"]), "each worker ran a part: {split}");
    assert_eq!(split["plan"]["frames"], FRAMES, "the plan counts every part's frames: {split}");

    let (whole_frames, whole_probe) = result_of(&client, &server, &whole, dir.path(), "whole").await;
    let (split_frames, split_probe) = result_of(&client, &server, &split, dir.path(), "split").await;
    assert_eq!(split_probe.frames, u64::from(FRAMES));
    assert!(split_frames == whole_frames, "the joined parts' frames differ from one worker's");
    assert!(split_probe.has_audio, "the input's audio is in the joined result");
    assert_eq!((split_probe.sample_aspect_ratio.as_deref(), whole_probe.sample_aspect_ratio.as_deref()), (Some("128:117"), Some("128:117")));
    assert_eq!((split_probe.width, split_probe.height, &split_probe.fps), (whole_probe.width, whole_probe.height, &whole_probe.fps));
    // Nothing of the parts is left beside the result.
    let job_dir = server.data_dir.join("data/jobs").join(split["id"].as_str().unwrap());
    let left: Vec<PathBuf> = files_under(&job_dir).into_iter().filter(|p| p.to_string_lossy().contains(".resume")).collect();
    assert_eq!(left, Vec::<PathBuf>::new());
    // The job list shows the job, never its parts.
    let (_, listed) = get_json(&client, &server.url("/v1/jobs")).await;
    assert_eq!(listed["jobs"].as_array().map(Vec::len), Some(2), "{listed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parts_are_refused_where_a_job_runs_whole() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), SETTINGS);
    let client = client();
    let body = clip_with_audio(dir.path(), 4);
    for (query, says) in [
        ("parts=0", "not auto or a whole number"),
        ("parts=two", "not auto or a whole number"),
        ("parts=2&metrics=true", "metrics"),
        ("parts=2&output_format=png", "PNG"),
        ("parts=2&interpolate=2", "interpolate"),
    ] {
        let (status, answer) = upload_raw(&client, &server, &format!("{UPSCALE}&{query}"), body.clone()).await;
        assert_eq!(status, 400, "{query}: {answer}");
        assert_eq!(answer["error"]["code"], "invalid-parts", "{query}: {answer}");
        assert!(answer["error"]["message"].as_str().unwrap().contains(says), "{query}: {answer}");
    }
    let (status, answer) = upload_raw(&client, &server, "op=restore&parts=2", body).await;
    assert_eq!((status, answer["error"]["code"].as_str()), (400, Some("parameter-not-for-op")), "{answer}");
}

/// Polls job `id` until `reached` holds; the job then.
pub(crate) async fn wait_until(client: &reqwest::Client, server: &Server, id: &str, what: &str, reached: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let (_, job) = get_json(client, &server.url(&format!("/v1/jobs/{id}"))).await;
        if reached(&job) {
            return job;
        }
        assert!(!matches!(job["status"].as_str(), Some("succeeded" | "failed" | "cancelled")), "job ended before it was {what}: {job}");
        assert!(Instant::now() < deadline, "job {id} never was {what}: {job}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Every part of `job` running.
pub(crate) fn all_parts_running(job: &Value) -> bool {
    let shown = parts(job);
    !shown.is_empty() && shown.iter().all(|p| p["status"] == "running" && p["progress"]["done"].as_u64().unwrap_or(0) > 0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_ends_every_part_within_a_second_and_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut settings = SETTINGS.to_vec();
    settings.extend([("VAEBOX_DEVICES", "cpu,cpu"), ("VAEBOX_WORKER_NAME", "box"), ("VAEBOX_CHECKPOINT_S", "1")]);
    let server = Server::start(dir.path(), &settings);
    let client = client();
    // Two parts of 60 frames, seconds each.
    let (status, job) = upload_raw(&client, &server, UPSCALE, clip_with_audio(dir.path(), 120)).await;
    assert_eq!(status, 202, "{job}");
    let id = job["id"].as_str().unwrap().to_string();
    wait_until(&client, &server, &id, "running in parts", all_parts_running).await;
    let (status, answer) = send_json(client.post(server.url(&format!("/v1/jobs/{id}/cancel")))).await;
    assert_eq!(status, 200, "{answer}");
    let asked = Instant::now();
    let ended = loop {
        let (_, job) = get_json(&client, &server.url(&format!("/v1/jobs/{id}"))).await;
        if job["status"] == "cancelled" && parts(&job).iter().all(|p| p["status"] == "cancelled") {
            break asked.elapsed();
        }
        assert!(asked.elapsed() < Duration::from_secs(60), "the parts never stopped: {job}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    println!("a job in two parts: every part cancelled {ended:?} after the cancel's answer");
    assert!(ended < Duration::from_secs(1), "the cancel took {ended:?} to reach every part");
    let settled_by = Instant::now() + Duration::from_secs(2);
    let job_dir = server.data_dir.join("data/jobs").join(&id);
    let left = loop {
        let left: Vec<PathBuf> = files_under(&job_dir).into_iter().filter(|p| !p.file_name().unwrap().to_string_lossy().starts_with("input.")).collect();
        if left.is_empty() || Instant::now() > settled_by {
            break left;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(left, Vec::<PathBuf>::new(), "a cancelled job's parts leave nothing");
}

/// Owners take turns with parts as with jobs: a part counts as its owner's running job, so the worker that a
/// part frees takes another owner's waiting job before the next part.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_owners_job_starts_when_a_part_ends_not_after_every_part() {
    const TOKENS: &str = "ann:ann-secret-12345,bob:bob-secret-12345";
    let dir = tempfile::tempdir().unwrap();
    let mut settings = SETTINGS.to_vec();
    settings.extend([("VAEBOX_DEVICES", "cpu,cpu"), ("VAEBOX_WORKER_NAME", "box"), ("VAEBOX_TOKENS", TOKENS), ("VAEBOX_SHORT_JOB_S", "0"), ("VAEBOX_FAIR_WAIT_S", "0")]);
    let server = Server::start(dir.path(), &settings);
    let user = |secret: &str| {
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert(reqwest::header::AUTHORIZATION, format!("Bearer {secret}").parse().unwrap());
        reqwest::Client::builder().default_headers(headers).build().unwrap()
    };
    let (ann, bob) = (user("ann-secret-12345"), user("bob-secret-12345"));
    let (status, long) = upload_raw(&ann, &server, &format!("{UPSCALE}&parts=4"), clip_with_audio(dir.path(), 48)).await;
    assert_eq!(status, 202, "{long}");
    let long_id = long["id"].as_str().unwrap().to_string();
    wait_until(&ann, &server, &long_id, "running in parts", |job| parts(job).iter().filter(|p| p["status"] == "running").count() == 2).await;
    let (status, short) = upload_raw(&bob, &server, UPSCALE, clip_with_audio(dir.path(), 4)).await;
    assert_eq!(status, 202, "{short}");
    let short = wait_for_final(&bob, &server, short["id"].as_str().unwrap(), Duration::from_secs(300)).await;
    let long = wait_for_final(&ann, &server, &long_id, Duration::from_secs(300)).await;
    assert_eq!((long["status"].as_str(), short["status"].as_str()), (Some("succeeded"), Some("succeeded")), "{long}\n{short}");
    let starts: Vec<String> = parts(&long).iter().map(|p| p["started_at"].as_str().unwrap().to_string()).collect();
    let short_start = short["started_at"].as_str().unwrap();
    let later_parts = starts.iter().filter(|start| start.as_str() > short_start).count();
    assert!(later_parts >= 1, "Bob's job started at {short_start}, after all of Ann's parts had started ({starts:?})");
}
