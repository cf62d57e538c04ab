//! The defaults a newcomer meets after the first job: a one-scale model without `scale`, a ×4 that would be too
//! large, a still where a clip is needed, the short ids the page and clients show, timecodes in ranges,
//! refusals that name what would do, and a `vaebox run` summary of a picture.
use crate::common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::*;
use serde_json::{json, Value};

const BIN: &str = env!("CARGO_BIN_EXE_vaebox");

/// `frames` frames of carphone at `width`×`height`.
fn clip(frames: u32, width: u32, height: u32, out: &Path) {
    let status = Command::new("ffmpeg")
        .args(["-nostdin", "-v", "error", "-y", "-i"])
        .arg(media("carphone_pristine.mp4"))
        .args(["-frames:v", &frames.to_string(), "-vf", &format!("scale={width}:{height}"), "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p"])
        .arg(out)
        .status()
        .unwrap();
    assert!(status.success());
}

/// A 48×40 crop of the astronaut photograph, as a PNG.
fn picture(out: &Path) {
    let status = Command::new("ffmpeg")
        .args(["-nostdin", "-v", "error", "-y", "-i"])
        .arg(media("astronaut.png"))
        .args(["-vf", "crop=48:40:180:60", "-pix_fmt", "rgb24"])
        .arg(out)
        .status()
        .unwrap();
    assert!(status.success());
}

fn refused(status: u16, body: &Value, expected_status: u16, code: &str) -> String {
    assert_eq!((status, body["error"]["code"].as_str()), (expected_status, Some(code)), "{body}");
    body["error"]["message"].as_str().unwrap().to_string()
}

/// Every Real-CUGAN model has one scale: without `scale` it is that one, over HTTP and in `vaebox run`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_with_one_scale_takes_it_when_none_is_given() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.mp4");
    clip(2, 40, 32, &input);
    let server = Server::start(dir.path(), &[]);
    let client = client();
    let job = run_job(&client, &server, "model=realcugan-se-2x&filename=in.mp4", std::fs::read(&input).unwrap()).await;
    assert_eq!((job["status"].as_str(), job["params"]["scale"].as_i64()), (Some("succeeded"), Some(2)), "{job}");
    assert_eq!((job["output"]["media"]["width"].as_u64(), job["output"]["file_name"].as_str()), (Some(80), Some("in_x2.mp4")), "{job}");
    // A scale the model does not have is still refused, naming the one it has.
    let (status, body) = upload_raw(&client, &server, "model=realcugan-se-2x&scale=4&filename=in.mp4", std::fs::read(&input).unwrap()).await;
    assert!(refused(status, &body, 400, "invalid-scale").contains("[2]"));

    let output = dir.path().join("out.mp4");
    let out = Command::new(BIN)
        .current_dir(dir.path())
        .env("VAEBOX_MODELS_DIR", Path::new(REPO).join("models"))
        .args(["run", "--model", "realcugan-se-3x", "--input", "in.mp4", "--output", "out.mp4"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(ffprobe(&output).width, 120);
}

/// A default ×4 past `max_width` says which scale would fit; a model none of whose scales fits says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upscale_too_large_at_its_default_scale_says_which_scale_fits() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.mp4");
    clip(2, 96, 64, &input);
    let server = Server::start(dir.path(), &[("VAEBOX_MAX_WIDTH", "256")]);
    let client = client();
    let body = std::fs::read(&input).unwrap();
    let (status, answer) = upload_raw(&client, &server, "op=upscale&filename=in.mp4", body.clone()).await;
    let message = refused(status, &answer, 422, "output-too-large");
    assert!(message.contains("width 384 (max 256)") && message.contains("scale 2 fits (`scale=2`)"), "{message}");
    let (status, answer) = upload_raw(&client, &server, "model=realcugan-se-3x&filename=in.mp4", body).await;
    let message = refused(status, &answer, 422, "output-too-large");
    assert!(message.contains("no scale of `realcugan-se-3x` fits a 96×64 input (scales [3])"), "{message}");
}

/// A still picture is not a clip: interpolate and a range ("Try first") refuse it with a clear message,
/// and `vaebox run` reports a picture, not "1 frames".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_still_is_refused_where_a_clip_is_needed_and_reported_as_a_picture() {
    let dir = tempfile::tempdir().unwrap();
    let png = dir.path().join("face.png");
    picture(&png);
    let server = Server::start(dir.path(), &[]);
    let client = client();
    let bytes = std::fs::read(&png).unwrap();
    for query in ["op=interpolate&filename=face.png", "op=upscale&scale=2&duration=5&filename=face.png", "op=upscale&scale=2&start=0&filename=face.png"] {
        let (status, body) = upload_raw(&client, &server, query, bytes.clone()).await;
        let message = refused(status, &body, 400, "input-is-a-still");
        assert!(message.contains("still picture"), "{query}: {message}");
    }
    let (_, listed) = get_json(&client, &server.url("/v1/jobs")).await;
    assert_eq!(listed["jobs"], json!([]), "a refused still made a job");

    let out = Command::new(BIN)
        .current_dir(dir.path())
        .env("VAEBOX_MODELS_DIR", Path::new(REPO).join("models"))
        .args(["run", "--scale", "2", "--input", "face.png", "--output", "big.png"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.starts_with("wrote big.png: 96×80 picture, "), "{stdout}");
}

/// The 8-character ids the page, the clients and the CLI show name the job wherever an id is taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_id_names_its_job_everywhere() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.mp4");
    clip(3, 40, 32, &input);
    let server = Server::start(dir.path(), &[]);
    let client = client();
    let job = run_job(&client, &server, "scale=2&duration=0.05&filename=in.mp4", std::fs::read(&input).unwrap()).await;
    let id = job["id"].as_str().unwrap();
    let short = &id[..8];
    let (status, found) = get_json(&client, &server.url(&format!("/v1/jobs/{short}"))).await;
    assert_eq!((status, found["id"].as_str()), (200, Some(id)), "{found}");
    let (status, upper) = get_json(&client, &server.url(&format!("/v1/jobs/{}", short.to_uppercase()))).await;
    assert_eq!((status, upper["id"].as_str()), (200, Some(id)), "{upper}");
    let result = client.get(server.url(&format!("/v1/jobs/{short}/result"))).send().await.unwrap();
    assert_eq!(result.status(), 200);
    let events = client.get(server.url(&format!("/v1/jobs/{short}/events?compact=1"))).send().await.unwrap().text().await.unwrap();
    assert!(events.contains("event: succeeded"), "{events}");
    let (status, whole) = send_json(client.post(server.url(&format!("/v1/jobs/{short}/whole")))).await;
    assert_eq!((status, whole["from_try"].as_str()), (202, Some(id)), "{whole}");
    let whole_id = whole["id"].as_str().unwrap();
    wait_for_final(&client, &server, whole_id, Duration::from_secs(120)).await;
    let deleted = client.delete(server.url(&format!("/v1/jobs/{}", &whole_id[..8]))).send().await.unwrap();
    assert_eq!(deleted.status(), 204);
    // Too short to name a job, or no job's: not found.
    for unknown in [&id[..3], "ffffffff"] {
        let (status, body) = get_json(&client, &server.url(&format!("/v1/jobs/{unknown}"))).await;
        refused(status, &body, 404, "job-not-found");
    }
}

/// `start` and `duration` take timecodes as a player shows them; the same part of the clip either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ranges_take_timecodes() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.mp4");
    clip(40, 40, 32, &input);
    let server = Server::start(dir.path(), &[]);
    let client = client();
    let body = std::fs::read(&input).unwrap();
    let seconds = run_job(&client, &server, "scale=2&start=1&duration=0.2&filename=in.mp4", body.clone()).await;
    let timecode = run_job(&client, &server, "scale=2&start=0:01&duration=0:00.2&filename=in.mp4", body.clone()).await;
    assert_eq!(timecode["status"], "succeeded", "{timecode}");
    assert_eq!(timecode["params"]["range"], seconds["params"]["range"]);
    assert_eq!(timecode["progress"]["done"], seconds["progress"]["done"]);
    for bad in ["start=1:75", "start=1::2", "duration=a:00", "start=-0:01"] {
        let (status, answer) = upload_raw(&client, &server, &format!("scale=2&{bad}&filename=in.mp4"), body.clone()).await;
        let message = refused(status, &answer, 400, "invalid-range");
        assert!(message.contains("timecode"), "{bad}: {message}");
    }
}

/// A model that cannot do the op, or one the box does not have, is refused naming the models that can.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_name_the_models_that_can_do_the_op() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.mp4");
    clip(2, 40, 32, &input);
    let server = Server::start(dir.path(), &[]);
    let client = client();
    let body = std::fs::read(&input).unwrap();
    let (status, answer) = upload_raw(&client, &server, "op=interpolate&model=realesrgan-x4plus&filename=in.mp4", body.clone()).await;
    let message = refused(status, &answer, 400, "unsupported-op");
    assert!(message.ends_with("models that can: rife-hdv3"), "{message}");
    let (status, answer) = upload_raw(&client, &server, "op=interpolate&model=rife-v4&filename=in.mp4", body).await;
    let message = refused(status, &answer, 400, "unknown-model");
    assert!(message.ends_with("for `interpolate` this box has rife-hdv3"), "{message}");
    // The document says what `scale` is for each op.
    let (_, document) = get_json(&client, &server.url("/openapi.json")).await;
    let text = document.to_string();
    assert!(text.contains("a Real-CUGAN model has one, its own, taken when scale is not given"), "scale's description");
}

/// Two jobs whose ids start alike (written into the box's own database, as another box of a shared queue
/// would): their common start is refused with both ids, and one more character names each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_id_that_starts_two_jobs_ids_is_refused_with_both() {
    use vaebox::jobs::{JobStore, SqliteStore};
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let store = SqliteStore::open(&dir.path().join("data/vaebox.db")).await.unwrap();
    let ids = ["abcd1111-0000-4000-8000-000000000001", "abcd2222-0000-4000-8000-000000000002"];
    for id in ids {
        store.insert(crate::short_ids::parked_job(id, None)).await.unwrap();
    }
    let client = client();
    let (status, body) = get_json(&client, &server.url("/v1/jobs/abcd")).await;
    let message = refused(status, &body, 400, "ambiguous-job-id");
    assert!(ids.iter().all(|id| message.contains(id)), "{message}");
    let (status, job) = get_json(&client, &server.url("/v1/jobs/abcd2")).await;
    assert_eq!((status, job["id"].as_str()), (200, Some(ids[1])), "{job}");
    let (status, body) = send_json(client.post(server.url("/v1/jobs/abcd/cancel"))).await;
    refused(status, &body, 400, "ambiguous-job-id");
}
