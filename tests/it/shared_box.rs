//! A box shared by several people (issue 52), with real jobs on the real server: a synchronous call and another
//! owner's short job run at a long job's chunk ends while it waits in memory, and it still writes the bytes an
//! undisturbed run writes; owners take turns in the queue and each sees her true place; a job paused, resumed,
//! paused again across a restart and resumed writes those bytes too, and a cancel can keep what is done; an
//! estimate made from one earlier job, and an ETA right after a resume, are near what the box then measures.
use crate::common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

const ANN: &str = "ann-secret-12345";
const BOB: &str = "bob-secret-12345";
const CAT: &str = "cat-secret-12345";
const TOKENS: &str = "ann:ann-secret-12345,bob:bob-secret-12345,cat:cat-secret-12345";
/// Animevideov3 ×2 on 128×96 frames, written as H.264 (the default): about 30 ms a frame here.
const UPSCALE: &str = "op=upscale&model=realesrgan-animevideov3&scale=2";

/// A client that sends `secret` with every request, as a user's tool does.
fn user(secret: &str) -> reqwest::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(reqwest::header::AUTHORIZATION, format!("Bearer {secret}").parse().unwrap());
    reqwest::Client::builder().default_headers(headers).timeout(Duration::from_secs(600)).build().unwrap()
}

/// `frames` frames of the real carphone clip (looped) at 128×96, as H.264, as a user sends them.
fn clip(dir: &Path, frames: u32) -> Vec<u8> {
    let path = dir.join(format!("clip{frames}.mp4"));
    let status = std::process::Command::new("ffmpeg")
        .args(["-nostdin", "-v", "error", "-y", "-stream_loop", "-1", "-i"])
        .arg(media("carphone_pristine.mp4"))
        .args(["-vf", "scale=128:96,setsar=1", "-frames:v", &frames.to_string(), "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p"])
        .arg(&path)
        .status()
        .expect("run ffmpeg");
    assert!(status.success());
    std::fs::read(path).unwrap()
}

async fn submit(client: &reqwest::Client, server: &Server, query: &str, body: Vec<u8>) -> Value {
    let (status, job) = upload_raw(client, server, query, body).await;
    assert_eq!(status, 202, "{job}");
    job
}

async fn job(client: &reqwest::Client, server: &Server, id: &str) -> Value {
    let (status, job) = get_json(client, &server.url(&format!("/v1/jobs/{id}"))).await;
    assert_eq!(status, 200, "{job}");
    job
}

/// Polls the job until `reached` holds; the job then.
async fn wait_until(client: &reqwest::Client, server: &Server, id: &str, what: &str, reached: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let job = job(client, server, id).await;
        if reached(&job) {
            return job;
        }
        assert!(!matches!(job["status"].as_str(), Some("succeeded" | "failed" | "cancelled")), "job ended before it was {what}: {job}");
        assert!(Instant::now() < deadline, "job {id} never was {what}: {job}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn post(client: &reqwest::Client, server: &Server, path: &str) -> (u16, Value) {
    send_json(client.post(server.url(path))).await
}

fn done(job: &Value) -> u64 {
    job["progress"]["done"].as_u64().unwrap_or(0)
}

/// A result's bytes, fetched with the owner's client.
async fn result(client: &reqwest::Client, server: &Server, job: &Value) -> Vec<u8> {
    let response = client.get(server.url(job["output"]["url"].as_str().unwrap())).send().await.unwrap();
    assert_eq!(response.status(), 200, "{job}");
    response.bytes().await.unwrap().to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decode_and_another_owners_short_job_run_beside_a_long_upscale_which_still_writes_the_same_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let models = models_with_small_wan21(dir.path());
    std::os::unix::fs::symlink(Path::new(REPO).join("models/realesrgan"), models.join("realesrgan")).unwrap();
    // Jobs expected to take at most 3 s are short: the 12-frame upscale, not the long job's remaining seconds.
    let env = [("VAEBOX_MODELS_DIR", models.to_str().unwrap()), ("VAEBOX_TOKENS", TOKENS), ("VAEBOX_CHUNK_FRAMES", "2"), ("VAEBOX_SHORT_JOB_S", "3")];
    let server = Server::start(dir.path(), &env);
    let (ann, bob) = (user(ANN), user(BOB));
    // Long enough to be running still, several seconds after the call and the short job, on a loaded machine.
    let long = clip(dir.path(), 600);

    // Undisturbed: the bytes to match, and this box's rate for the short job's estimate.
    let undisturbed = run_job(&ann, &server, &format!("{UPSCALE}&filename=long.mp4"), long.clone()).await;
    let expected = result(&ann, &server, &undisturbed).await;

    let running = submit(&ann, &server, &format!("{UPSCALE}&filename=long.mp4"), long).await;
    let id = running["id"].as_str().unwrap().to_string();
    wait_until(&ann, &server, &id, "well under way", |j| j["status"] == "running" && done(j) >= 60).await;

    // Bob's 5-frame decode (diffusers' remote_decode sends exactly this).
    let latent = vec![0u8; 16 * 2 * 2 * 2 * 4];
    let asked = Instant::now();
    let response = bob.post(server.url("/v1/decode?model=wan21-small&shape=1&shape=16&shape=2&shape=2&shape=2")).body(latent).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let call_s = asked.elapsed().as_secs_f64();
    let call_id = response.headers()["x-vaebox-job"].to_str().unwrap().to_string();
    let call = job(&bob, &server, &call_id).await;
    let compute_s = call["timings"]["total"].as_f64().unwrap();
    assert!(call_s < 5.0 + compute_s, "the decode answered in {call_s:.2} s beside the long job ({compute_s:.2} s its own)");
    assert_eq!(job(&ann, &server, &id).await["status"], "running", "the decode ran while the long job was still running");

    // Bob's short upscale: 12 frames, estimated from the long job's rate, runs at the long job's next chunk end.
    let asked = Instant::now();
    let short = submit(&bob, &server, &format!("{UPSCALE}&filename=short.mp4"), clip(dir.path(), 12)).await;
    let estimate = short["estimate"]["seconds"].as_f64().expect("an estimate from the long job's rate");
    assert!(estimate < 30.0, "{}", short["estimate"]);
    let short = wait_for_final(&bob, &server, short["id"].as_str().unwrap(), Duration::from_secs(120)).await;
    let short_s = asked.elapsed().as_secs_f64();
    assert_eq!(short["status"], "succeeded", "{short}");
    let own_s = short["timings"]["total"].as_f64().unwrap();
    assert!(short_s < 5.0 + own_s, "the short job took {short_s:.2} s from its upload ({own_s:.2} s its own)");
    assert_eq!(job(&ann, &server, &id).await["status"], "running", "the short job ran while the long job was still running");

    let finished = wait_for_final(&ann, &server, &id, Duration::from_secs(300)).await;
    assert_eq!(finished["status"], "succeeded", "{finished}");
    assert!(finished["timings"]["lent"].as_f64().unwrap_or(0.0) > 0.0, "the long job records the time it lent: {}", finished["timings"]);
    assert!(result(&ann, &server, &finished).await == expected, "the long job's result differs from its undisturbed run's");
}

/// Ann queues ten jobs and Bob one while Cat's job runs: Bob's starts after at most one of Ann's, and Bob's
/// place counts Ann's job ahead of his, which he cannot see.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_jobs_of_one_owner_let_another_owners_one_in_after_at_most_one_of_them() {
    let dir = tempfile::tempdir().unwrap();
    let env = [("VAEBOX_TOKENS", TOKENS), ("VAEBOX_SHORT_JOB_S", "0"), ("VAEBOX_FAIR_WAIT_S", "0")];
    let server = Server::start(dir.path(), &env);
    let (ann, bob, cat) = (user(ANN), user(BOB), user(CAT));
    let blocker = submit(&cat, &server, &format!("{UPSCALE}&filename=blocker.mp4"), clip(dir.path(), 240)).await;
    let small = clip(dir.path(), 4);
    let mut anns = Vec::new();
    for n in 0..10 {
        anns.push(submit(&ann, &server, &format!("{UPSCALE}&filename=ann{n}.mp4"), small.clone()).await["id"].as_str().unwrap().to_string());
    }
    let bobs = submit(&bob, &server, &format!("{UPSCALE}&filename=bob.mp4"), small).await;
    let bobs_id = bobs["id"].as_str().unwrap().to_string();
    assert_eq!(job(&cat, &server, blocker["id"].as_str().unwrap()).await["status"], "running", "the blocker still runs: the order is the queue's");
    let place = &job(&bob, &server, &bobs_id).await["queue"];
    assert_eq!((place["position"].as_u64(), place["running"].as_u64()), (Some(2), Some(1)), "one of Ann's (unseen) goes first: {place}");
    let (_, listed) = get_json(&bob, &server.url("/v1/jobs")).await;
    assert_eq!(listed["jobs"].as_array().unwrap().len(), 1, "Bob sees only his own job: {listed}");

    let bobs_start = wait_for_final(&bob, &server, &bobs_id, Duration::from_secs(300)).await["started_at"].as_str().unwrap().to_string();
    let mut before = 0;
    for id in &anns {
        let started = wait_for_final(&ann, &server, id, Duration::from_secs(300)).await["started_at"].as_str().unwrap().to_string();
        before += usize::from(started < bobs_start);
    }
    assert_eq!(before, 1, "of Ann's ten, {before} started before Bob's one");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_resumed_paused_across_a_restart_and_resumed_a_job_writes_its_undisturbed_bytes_and_a_kept_cancel_is_a_shorter_file() {
    let dir = tempfile::tempdir().unwrap();
    // A checkpoint every second of video: 30 frames.
    let env = [("VAEBOX_TOKENS", TOKENS), ("VAEBOX_CHUNK_FRAMES", "2"), ("VAEBOX_CHECKPOINT_S", "1"), ("VAEBOX_SHORT_JOB_S", "0")];
    let mut server = Server::start(dir.path(), &env);
    let ann = user(ANN);
    let input = clip(dir.path(), 300);
    let query = format!("{UPSCALE}&filename=clip.mp4");
    let undisturbed = run_job(&ann, &server, &query, input.clone()).await;
    let expected = result(&ann, &server, &undisturbed).await;

    let id = submit(&ann, &server, &query, input.clone()).await["id"].as_str().unwrap().to_string();
    wait_until(&ann, &server, &id, "past its first checkpoint", |j| done(j) > 40).await;
    let (status, pausing) = post(&ann, &server, &format!("/v1/jobs/{id}/pause")).await;
    assert_eq!(status, 200, "{pausing}");
    let paused = wait_until(&ann, &server, &id, "paused", |j| j["status"] == "paused").await;
    assert_eq!(paused["worker"], Value::Null, "a paused job holds no executor: {paused}");
    let (status, resumed) = post(&ann, &server, &format!("/v1/jobs/{id}/resume")).await;
    assert_eq!((status, resumed["status"].as_str()), (200, Some("queued")), "{resumed}");
    let again = done(&paused) + 20;
    wait_until(&ann, &server, &id, "further on", |j| j["status"] == "running" && done(j) > again).await;
    post(&ann, &server, &format!("/v1/jobs/{id}/pause")).await;
    let paused = wait_until(&ann, &server, &id, "paused again", |j| j["status"] == "paused").await;

    server = server.restart_after_kill9();
    assert_eq!(job(&ann, &server, &id).await["status"], "paused", "a pause survives a restart");
    let (status, _) = post(&ann, &server, &format!("/v1/jobs/{id}/resume")).await;
    assert_eq!(status, 200);
    // The ETA as soon as the resumed run gives one, against the time it then took.
    let first_eta = wait_until(&ann, &server, &id, "giving an ETA after its resume", |j| {
        j["status"] == "running" && done(j) > done(&paused) && j["progress"]["eta_s"].is_number()
    })
    .await;
    let (eta, seen) = (first_eta["progress"]["eta_s"].as_f64().unwrap(), Instant::now());
    let finished = wait_for_final(&ann, &server, &id, Duration::from_secs(300)).await;
    let left = seen.elapsed().as_secs_f64();
    assert_eq!(finished["status"], "succeeded", "{finished}");
    assert!((eta - left).abs() <= 0.3 * left, "ETA {eta:.1} s right after the resume; it took {left:.1} s");
    assert_eq!(finished["attempts"], 1, "making way is not an attempt: {finished}");
    assert!(result(&ann, &server, &finished).await == expected, "the paused and resumed job's result differs from its undisturbed run's");

    // Stopped with keep: its finished segments are a valid, shorter file, frame for frame the start of the whole.
    let id = submit(&ann, &server, &query, input).await["id"].as_str().unwrap().to_string();
    wait_until(&ann, &server, &id, "two segments in", |j| done(j) > 70).await;
    let (status, _) = post(&ann, &server, &format!("/v1/jobs/{id}/cancel?keep=true")).await;
    assert_eq!(status, 200);
    let kept = wait_for_final(&ann, &server, &id, Duration::from_secs(120)).await;
    assert_eq!((kept["status"].as_str(), kept["partial"].as_bool()), (Some("cancelled"), Some(true)), "{kept}");
    let file_name = kept["output"]["file_name"].as_str().unwrap();
    assert!(file_name.starts_with("clip_x2_partial-") && file_name.ends_with("f.mp4"), "{file_name}");
    let whole = rgb_frames(&expected, &dir.path().join("whole.mp4"));
    let part = rgb_frames(&result(&ann, &server, &kept).await, &dir.path().join("part.mp4"));
    let frame_bytes = 256 * 192 * 3;
    let frames = part.len() / frame_bytes;
    assert!(frames >= 60 && frames % 30 == 0 && frames < 300, "kept {frames} frames");
    assert!(part[..] == whole[..part.len()], "the kept frames are not the whole result's first {frames}");
    let refused = submit(&ann, &server, "op=upscale&scale=2&filename=still.png", std::fs::read(media("coffee.png")).unwrap()).await;
    let (status, answer) = post(&ann, &server, &format!("/v1/jobs/{}/cancel?keep=true", refused["id"].as_str().unwrap())).await;
    assert_eq!((status, answer["error"]["code"].as_str()), (400, Some("nothing-to-keep")), "{answer}");
}

/// After one earlier job of the model, the box's estimate of a 600-frame upscale is within 30 % of the time
/// it then takes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_estimate_from_one_earlier_job_is_within_30_percent_of_a_600_frame_upscale() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[("VAEBOX_CHUNK_FRAMES", "2")]);
    let client = client();
    let long = clip(dir.path(), 600);
    let (status, before) = send_json(client.post(server.url(&format!("/v1/estimate?{UPSCALE}&filename=long.mp4"))).body(long.clone())).await;
    assert_eq!(status, 200, "{before}");
    assert_eq!((before["frames"].as_u64(), before["width"].as_u64(), before["seconds"].as_f64()), (Some(600), Some(256), None), "no basis yet: {before}");

    run_job(&client, &server, &format!("{UPSCALE}&filename=earlier.mp4"), clip(dir.path(), 90)).await;
    let (status, estimate) = send_json(client.post(server.url(&format!("/v1/estimate?{UPSCALE}&filename=long.mp4"))).body(long.clone())).await;
    assert_eq!(status, 200, "{estimate}");
    let seconds = estimate["seconds"].as_f64().expect("an estimate from the earlier job");
    assert!(estimate["output_bytes"].as_u64().is_some_and(|bytes| bytes > 0) && estimate["disk_bytes"].as_u64() > estimate["output_bytes"].as_u64(), "{estimate}");
    let (_, listed) = get_json(&client, &server.url("/v1/jobs")).await;
    assert_eq!(listed["jobs"].as_array().unwrap().len(), 1, "an estimate queues nothing: {listed}");

    let job = run_job(&client, &server, &format!("{UPSCALE}&filename=long.mp4"), long).await;
    let took = job["timings"]["total"].as_f64().unwrap();
    assert!((seconds - took).abs() <= 0.3 * took, "estimated {seconds:.1} s, took {took:.1} s ({})", estimate["basis"]);
    assert_eq!(job["estimate"]["seconds"].as_f64().map(|s| (s * 10.0).round()), Some((seconds * 10.0).round()), "the job keeps the estimate it was queued with");
}

/// On SIGTERM a running job stops at its next checkpoint: the stop does not wait its whole grace (two minutes
/// here) for the job to finish, and the job goes on from that checkpoint at the next start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopping_server_does_not_wait_its_grace_for_a_job_that_can_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let env = [("VAEBOX_CHUNK_FRAMES", "2"), ("VAEBOX_CHECKPOINT_S", "1"), ("VAEBOX_SHUTDOWN_GRACE_S", "120")];
    let mut server = Server::start(dir.path(), &env);
    let client = client();
    let id = submit(&client, &server, &format!("{UPSCALE}&filename=clip.mp4"), clip(dir.path(), 600)).await["id"].as_str().unwrap().to_string();
    wait_until(&client, &server, &id, "under way", |j| j["status"] == "running" && done(j) > 40).await;
    let asked = Instant::now();
    server.sigterm();
    let exited = server.wait_for_exit(Duration::from_secs(30));
    assert!(exited.is_some_and(|status| status.success()), "the server did not stop within 30 s: {exited:?}");
    let stopped_s = asked.elapsed().as_secs_f64();
    assert!(stopped_s < 10.0, "the stop took {stopped_s:.1} s");
    let server = server.restart_after_kill9();
    let finished = wait_for_final(&client, &server, &id, Duration::from_secs(300)).await;
    assert_eq!((finished["status"].as_str(), finished["attempts"].as_i64()), (Some("succeeded"), Some(1)), "{finished}");
    assert!(finished["plan"]["resumed_from"]["frame"].as_u64().is_some_and(|frame| frame >= 30), "{}", finished["plan"]);
}
