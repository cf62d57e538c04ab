//! One job in parts that several workers run at once (`jobs::parts`): an upscale cut on its segments' bounds
//! runs on both CPU workers of one box, and its result is the one a single worker gives, frame for frame, with
//! the input's audio and pixel shape; a cancel reaches every part; a job that cannot be cut says so.
use crate::common;
use crate::interpolate::small_clip;

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

/// Seconds from one RFC 3339 time to another.
fn seconds_between(start: &str, end: &str) -> f64 {
    let time = |text: &str| chrono::DateTime::parse_from_rfc3339(text).unwrap();
    (time(end) - time(start)).num_milliseconds() as f64 / 1000.0
}

/// The colour flags of a result's video, as ffprobe reads them.
fn colour_flags(path: &Path) -> String {
    let out = Command::new("ffprobe")
        .args(["-v", "error", "-select_streams", "v:0", "-show_entries", "stream=color_range,color_space,color_transfer,color_primaries", "-of", "default=nw=1"])
        .arg(path)
        .output()
        .expect("run ffprobe");
    String::from_utf8_lossy(&out.stdout).into_owned()
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
    assert_eq!(split["attempts"], 1, "the claim that cut the job is not one of its runs: {split}");
    // Timed as a whole: from its first start (before its parts') to its join's end, its stages over the parts.
    let started = split["started_at"].as_str().unwrap();
    assert!(shown.iter().all(|p| p["started_at"].as_str().unwrap() >= started), "{split}");
    let (total, compute) = (split["timings"]["total"].as_f64().unwrap(), split["timings"]["compute"].as_f64().unwrap());
    let longest_part = shown.iter().map(|p| seconds_between(p["started_at"].as_str().unwrap(), p["finished_at"].as_str().unwrap())).fold(0.0, f64::max);
    assert!(total >= longest_part && compute > 0.0, "total {total} s, compute {compute} s, the longest part {longest_part} s: {split}");

    let (whole_frames, whole_probe) = result_of(&client, &server, &whole, dir.path(), "whole").await;
    let (split_frames, split_probe) = result_of(&client, &server, &split, dir.path(), "split").await;
    assert_eq!(split_probe.frames, u64::from(FRAMES));
    assert!(split_frames == whole_frames, "the joined parts' frames differ from one worker's");
    assert!(split_probe.has_audio, "the input's audio is in the joined result");
    assert_eq!((split_probe.sample_aspect_ratio.as_deref(), whole_probe.sample_aspect_ratio.as_deref()), (Some("128:117"), Some("128:117")));
    assert_eq!((split_probe.width, split_probe.height, &split_probe.fps), (whole_probe.width, whole_probe.height, &whole_probe.fps));
    let (whole_colour, split_colour) = (colour_flags(&dir.path().join("whole.mp4")), colour_flags(&dir.path().join("split.mp4")));
    assert!(whole_colour.contains("color_space=smpte170m"), "{whole_colour}");
    assert_eq!(split_colour, whole_colour, "the joined result's colour flags are one worker's");
    // Nothing of the parts is left beside the result.
    let job_dir = server.data_dir.join("data/jobs").join(split["id"].as_str().unwrap());
    let left: Vec<PathBuf> = files_under(&job_dir).into_iter().filter(|p| p.to_string_lossy().contains(".resume")).collect();
    assert_eq!(left, Vec::<PathBuf>::new());
    // The job list shows the job, never its parts; the page shows the parts with the job.
    let (_, listed) = get_json(&client, &server.url("/v1/jobs")).await;
    assert_eq!(listed["jobs"].as_array().map(Vec::len), Some(2), "{listed}");
    let (url, profile) = (server.url("/"), dir.path().join("chromium-profile"));
    let dom = tokio::task::spawn_blocking(move || rendered_dom(&url, &profile)).await.unwrap();
    assert!(dom.contains("frames 0–11: succeeded") && dom.contains("frames 12–end: succeeded"), "the page does not show the parts:\n{dom}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parts_are_refused_where_a_job_runs_whole() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), SETTINGS);
    let client = client();
    // One worker: a job of four segments runs whole, as on any box with one device.
    let whole = run_job(&client, &server, UPSCALE, clip_with_audio(dir.path(), 24)).await;
    assert!(whole["parts"].is_null() && whole["plan"]["frames"] == 24, "{whole}");
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
    let (status, answer) = upload_raw(&client, &server, "op=vae_encode&parts=2", body).await;
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

/// An interpolation is cut on its output frames: ×3 makes 36 of 12 input frames (75 fps), in segments of 8, so the
/// second part begins inside a pair (output 16 is a third of the way from input 5 to 6), after a scene cut
/// (input 4) that the first part holds across. Each part passes over the output before its own without
/// calling the model, as a resume does; joined, the frames are one worker's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interpolation_in_parts_across_a_scene_cut_equals_one_workers_result() {
    let dir = tempfile::tempdir().unwrap();
    let (first, second, joined) = (dir.path().join("a.mp4"), dir.path().join("b.mp4"), dir.path().join("joined.mp4"));
    small_clip("bikes.mp4", 256, 24, 4, &first);
    small_clip("bigbuckbunny.mp4", 600, 300, 8, &second);
    let list = dir.path().join("list.txt");
    std::fs::write(&list, format!("file '{}'\nfile '{}'\n", first.display(), second.display())).unwrap();
    let status = Command::new("ffmpeg").args(["-nostdin", "-v", "error", "-f", "concat", "-safe", "0", "-i"]).arg(&list).args(["-c", "copy"]).arg(&joined).status().unwrap();
    assert!(status.success());
    let mut settings = SETTINGS.to_vec();
    settings.extend([("VAEBOX_DEVICES", "cpu,cpu"), ("VAEBOX_WORKER_NAME", "box"), ("VAEBOX_CHECKPOINT_S", "0.107")]);
    let server = Server::start(dir.path(), &settings);
    let client = client();
    let query = "op=interpolate&factor=3&output_format=ffv1&dtype=f32&filename=joined.mp4";
    let body = std::fs::read(&joined).unwrap();
    let whole = run_job(&client, &server, &format!("{query}&parts=1"), body.clone()).await;
    let split = run_job(&client, &server, query, body).await;
    let shown = parts(&split);
    assert_eq!(shown.iter().map(|p| (p["first_frame"].as_u64(), p["frames"].as_u64())).collect::<Vec<_>>(), vec![(Some(0), Some(16)), (Some(16), None)], "{split}");
    let plan = &split["plan"];
    assert_eq!((plan["frames"].as_u64(), plan["scene_cuts"].clone()), (Some(36), serde_json::json!([4])), "{plan}");
    assert_eq!(plan["interpolated"], whole["plan"]["interpolated"], "{plan}");
    let whole_frames = stored_frames(&fetch(&client, &server, &whole).await, &dir.path().join("whole.mkv"), "rgb48le");
    let split_path = dir.path().join("split.mkv");
    let split_frames = stored_frames(&fetch(&client, &server, &split).await, &split_path, "rgb48le");
    let probe = ffprobe(&split_path);
    assert_eq!(probe.frames, 36);
    assert!(probe.has_audio, "the input's audio is in the joined result");
    assert!(split_frames == whole_frames, "the joined parts' frames differ from one worker's");
}

/// 14 frames of carphone then 10 of bikes, at 64×48 and 25 fps, losslessly: a scene cut at frame 14.
fn two_scenes(out: &Path) {
    let scene = |clip: &str, frames: u32| format!("[{clip}:v]scale=64:48,setsar=1,trim=end_frame={frames},setpts=N/(25*TB)[s{clip}]");
    let status = Command::new("ffmpeg")
        .args(["-nostdin", "-v", "error", "-y", "-i"])
        .arg(media("carphone_pristine.mp4"))
        .arg("-i")
        .arg(media("bikes.mp4"))
        .args(["-filter_complex", &format!("{};{};[s0][s1]concat=n=2:v=1:a=0[v]", scene("0", 14), scene("1", 10)), "-map", "[v]", "-r", "25"])
        .args(["-c:v", "libx264", "-qp", "0", "-preset", "ultrafast", "-pix_fmt", "yuv444p"])
        .arg(out)
        .status()
        .expect("run ffmpeg");
    assert!(status.success(), "ffmpeg could not make the clip");
}

/// A restore is cut where its batches start (2 mirrored frames lead the 24: batches of 5 sharing 2 start
/// every 3 frames). The second part restores the batch before its first only to hand that batch's last frames
/// on to the cross-fade, passes over the earlier ones (their index still picks the noise), leaves the lead to
/// the first part, and holds the scene cut; joined, the frames are one worker's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_in_parts_with_overlap_a_lead_and_a_scene_cut_equals_one_workers_result() {
    let dir = tempfile::tempdir().unwrap();
    let models = models_with_small_seedvr2(dir.path());
    let clip = dir.path().join("two_scenes.mp4");
    two_scenes(&clip);
    let mut settings = SETTINGS.to_vec();
    settings.extend([("VAEBOX_DEVICES", "cpu,cpu"), ("VAEBOX_WORKER_NAME", "box"), ("VAEBOX_CHECKPOINT_S", "0.24"), ("VAEBOX_MODELS_DIR", models.to_str().unwrap())]);
    let server = Server::start(dir.path(), &settings);
    let client = client();
    let query = "op=restore&model=seedvr2-3b-small&scale=1&batch_frames=5&batch_overlap=2&prepend_frames=2&seed=7&output_format=ffv1&filename=clip.mp4";
    let body = std::fs::read(&clip).unwrap();
    let whole = run_job(&client, &server, &format!("{query}&parts=1"), body.clone()).await;
    let split = run_job(&client, &server, query, body).await;
    let shown = parts(&split);
    assert_eq!(shown.iter().map(|p| (p["first_frame"].as_u64(), p["frames"].as_u64())).collect::<Vec<_>>(), vec![(Some(0), Some(12)), (Some(12), None)], "{split}");
    for key in ["frames", "batches", "scene_cuts"] {
        assert_eq!(split["plan"][key], whole["plan"][key], "{key}: {}\n{}", split["plan"], whole["plan"]);
    }
    assert_eq!(whole["plan"]["scene_cuts"], serde_json::json!([14]), "{}", whole["plan"]);
    let whole_frames = stored_frames(&fetch(&client, &server, &whole).await, &dir.path().join("whole.mkv"), "rgb48le");
    let split_frames = stored_frames(&fetch(&client, &server, &split).await, &dir.path().join("split.mkv"), "rgb48le");
    assert_eq!(split_frames.len(), 24 * 64 * 48 * 6);
    assert!(split_frames == whole_frames, "the joined parts' frames differ from one worker's");
}
