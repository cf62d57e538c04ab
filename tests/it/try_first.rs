//! A job over part of the input (`start`/`start_frame`, `frames`/`duration`), as people try a few seconds
//! before a long run: exactly the frames the whole job would have made there, the sound of that time only,
//! the box's limits held against the part, and ranges that name no frame refused; and the whole clip run
//! from a try by the server (`POST /v1/jobs/{id}/whole`), from the input the try kept.
use crate::common;

use std::path::Path;
use std::process::Command;

use common::*;
use serde_json::Value;

const FPS: u32 = 25;
const CLIP_FRAMES: u32 = 40;

/// `CLIP_FRAMES` frames of a real clip at 64×48 and 25 fps, with a tone as sound.
fn small_clip(out: &Path) {
    let status = Command::new("ffmpeg")
        .args(["-nostdin", "-v", "error", "-y", "-i"])
        .arg(media("carphone_pristine.mp4"))
        .args(["-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000", "-map", "0:v:0", "-map", "1:a:0", "-c:a", "aac", "-shortest"])
        .args(["-vf", "scale=64:48,setsar=1", "-r", &FPS.to_string(), "-frames:v", &CLIP_FRAMES.to_string()])
        .args(["-c:v", "libx264", "-qp", "0", "-preset", "ultrafast", "-pix_fmt", "yuv444p"])
        .arg(out)
        .status()
        .expect("run ffmpeg");
    assert!(status.success(), "ffmpeg could not make the clip");
}

/// Seconds of sound in `path`: its first audio stream decoded, samples counted.
fn audio_seconds(path: &Path) -> f64 {
    let output = Command::new("ffmpeg")
        .args(["-nostdin", "-v", "error", "-i"])
        .arg(path)
        .args(["-map", "0:a:0", "-ac", "1", "-ar", "48000", "-f", "s16le", "-"])
        .output()
        .unwrap();
    assert!(output.status.success(), "no sound in {}: {}", path.display(), String::from_utf8_lossy(&output.stderr));
    output.stdout.len() as f64 / 2.0 / 48000.0
}

async fn finished(client: &reqwest::Client, server: &Server, query: &str, clip: &Path) -> Value {
    let (status, job) = upload_raw(client, server, query, std::fs::read(clip).unwrap()).await;
    assert_eq!(status, 202, "{query}: {job}");
    let job = wait_for_final(client, server, job["id"].as_str().unwrap(), std::time::Duration::from_secs(300)).await;
    assert_eq!(job["status"], "succeeded", "{query}: {job}");
    job
}

async fn refusal(client: &reqwest::Client, server: &Server, query: &str, clip: &Path) -> (u16, String) {
    let (status, body) = upload_raw(client, server, query, std::fs::read(clip).unwrap()).await;
    (status, body["error"]["code"].as_str().unwrap_or_else(|| panic!("{query}: no error in {body}")).to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_part_is_the_frames_the_whole_job_makes_there_with_the_sound_of_that_time() {
    let dir = tempfile::tempdir().unwrap();
    let clip = dir.path().join("clip.mp4");
    small_clip(&clip);
    let server = Server::start(dir.path(), &[]);
    let client = client();
    let upscale = "op=upscale&model=realesrgan-animevideov3&scale=2&output_format=ffv1&filename=clip.mp4";

    let whole = finished(&client, &server, upscale, &clip).await;
    let part = finished(&client, &server, &format!("{upscale}&start_frame=10&frames=12"), &clip).await;
    let span = &part["input"]["media"]["span"];
    assert_eq!((span["start_frame"].as_u64(), span["frames"].as_u64(), span["source_frames"].as_u64()), (Some(10), Some(12), Some(40)), "{part}");
    assert_eq!(part["input"]["media"]["frames"], 12);
    assert_eq!(part["progress"]["done"], 12, "{part}");
    assert_eq!(part["output"]["file_name"], "clip_x2_f10+12f.mkv", "{part}");

    let frame_bytes = 128 * 96 * 3;
    let whole_frames = stored_frames(&fetch(&client, &server, &whole).await, &dir.path().join("whole.mkv"), "rgb24");
    let part_path = dir.path().join("part.mkv");
    let part_frames = stored_frames(&fetch(&client, &server, &part).await, &part_path, "rgb24");
    assert_eq!((whole_frames.len() / frame_bytes, whole_frames.len() % frame_bytes), (40, 0), "the whole job's frames");
    assert_eq!((part_frames.len() / frame_bytes, part_frames.len() % frame_bytes), (12, 0), "the part's frames");
    assert!(part_frames == whole_frames[10 * frame_bytes..22 * frame_bytes], "the part's frames are not the whole job's frames 10..22");
    let seconds = audio_seconds(&part_path);
    assert!((seconds - 12.0 / FPS as f64).abs() < 0.05, "the part's sound lasts {seconds} s, its frames 0.48 s");

    // Seconds: the frames that start in [0.5 s, 0.9 s) are 13..=22, ten frames, twice as many interpolated.
    let interpolated = finished(&client, &server, "op=interpolate&factor=2&start=0.5&duration=0.4&filename=clip.mp4", &clip).await;
    assert_eq!((interpolated["input"]["media"]["span"]["start_frame"].as_u64(), interpolated["input"]["media"]["frames"].as_u64()), (Some(13), Some(10)));
    let written = dir.path().join("interpolated.mp4");
    std::fs::write(&written, fetch(&client, &server, &interpolated).await).unwrap();
    assert_eq!(ffprobe(&written).frames, 20);
    assert_eq!(interpolated["output"]["file_name"], "clip_x2fps_0.5s+0.4s.mp4");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_hold_for_the_part_and_ranges_that_name_no_frame_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let clip = dir.path().join("clip.mp4");
    small_clip(&clip);
    let server = Server::start(dir.path(), &[("VAEBOX_MAX_FRAMES", "30")]);
    let client = client();
    let upscale = "op=upscale&model=realesrgan-animevideov3&scale=2&filename=clip.mp4";

    // 40 frames are over the limit of 30; 20 of them are not, 35 of them are.
    assert_eq!(refusal(&client, &server, upscale, &clip).await, (422, "media-too-large".into()));
    assert_eq!(refusal(&client, &server, &format!("{upscale}&start_frame=5"), &clip).await, (422, "media-too-large".into()));
    let part = finished(&client, &server, &format!("{upscale}&start_frame=5&frames=20"), &clip).await;
    assert_eq!(part["progress"]["done"], 20);

    for (query, expected) in [
        ("start=1&start_frame=3", (400, "invalid-range")),
        ("frames=4&duration=1", (400, "invalid-range")),
        ("start=soon", (400, "invalid-range")),
        ("frames=0", (400, "invalid-range")),
        ("duration=-1", (400, "invalid-range")),
        ("start=1.6", (422, "range-outside-input")),
        ("start_frame=40", (422, "range-outside-input")),
    ] {
        assert_eq!(refusal(&client, &server, &format!("{upscale}&{query}"), &clip).await, (expected.0, expected.1.to_string()), "{query}");
    }
    // A latent is decoded whole: a range is not for vae_decode.
    let (status, code) = refusal(&client, &server, "op=vae_decode&model=any&frames=3", &clip).await;
    assert_eq!((status, code.as_str()), (400, "parameter-not-for-op"));
}

async fn ask_whole(client: &reqwest::Client, server: &Server, id: &str) -> (u16, Value) {
    send_json(client.post(server.url(&format!("/v1/jobs/{id}/whole")))).await
}

fn links_of(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())).nlink()
}

/// "Run the whole clip" done by the server from the try's kept input, asked while the try is still queued
/// or running: the frames and sound of the same job uploaded whole, the link recorded; each job names the
/// input file itself, so deleting the try leaves the whole job's, and deleting every job leaves nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_whole_clip_of_a_try_is_the_job_the_whole_upload_makes() {
    let dir = tempfile::tempdir().unwrap();
    let clip = dir.path().join("clip.mp4");
    small_clip(&clip);
    let server = Server::start(dir.path(), &[]);
    let client = client();
    let jobs_dir = dir.path().join("data/jobs");
    let upscale = "op=upscale&model=realesrgan-animevideov3&scale=2&output_format=ffv1&filename=clip.mp4";

    let (status, tried) = upload_raw(&client, &server, &format!("{upscale}&start_frame=10&frames=12&priority=3"), std::fs::read(&clip).unwrap()).await;
    assert_eq!(status, 202, "{tried}");
    let tried_id = tried["id"].as_str().unwrap().to_string();
    let (status, whole) = ask_whole(&client, &server, &tried_id).await;
    assert_eq!(status, 202, "{whole}");
    let whole_id = whole["id"].as_str().unwrap().to_string();
    assert_eq!((whole["from_try"].as_str(), &tried["from_try"]), (Some(tried_id.as_str()), &Value::Null), "{whole}");
    // Asked again while it is queued or running: that job (200), nothing new queued.
    let (status, again) = ask_whole(&client, &server, &tried_id).await;
    assert_eq!((status, again["id"].as_str()), (200, Some(whole_id.as_str())), "{again}");
    let mut untried = tried["params"].clone();
    assert!(untried.as_object_mut().unwrap().remove("range").is_some(), "{tried}");
    assert_eq!(whole["params"], untried, "the try's settings without its range");
    assert_eq!((&whole["op"], &whole["model"], &whole["priority"]), (&tried["op"], &tried["model"], &tried["priority"]));
    assert_eq!((&whole["input"]["file_name"], &whole["input"]["bytes"]), (&tried["input"]["file_name"], &tried["input"]["bytes"]));
    assert_eq!(whole["input"]["media"]["frames"], 40, "{whole}");
    // One file on disk, named by both jobs.
    let (tried_input, whole_input) = (jobs_dir.join(&tried_id).join("input.mp4"), jobs_dir.join(&whole_id).join("input.mp4"));
    assert_eq!((links_of(&tried_input), links_of(&whole_input)), (2, 2));

    let direct = finished(&client, &server, &format!("{upscale}&priority=3"), &clip).await;
    assert_eq!(direct["params"], whole["params"]);
    let whole = wait_for_final(&client, &server, &whole_id, std::time::Duration::from_secs(300)).await;
    assert_eq!(whole["status"], "succeeded", "{whole}");
    assert_eq!((whole["output"]["file_name"].as_str(), whole["progress"]["done"].as_u64()), (Some("clip_x2.mkv"), Some(40)), "{whole}");
    let whole_path = dir.path().join("whole.mkv");
    let whole_frames = stored_frames(&fetch(&client, &server, &whole).await, &whole_path, "rgb24");
    let direct_frames = stored_frames(&fetch(&client, &server, &direct).await, &dir.path().join("direct.mkv"), "rgb24");
    assert_eq!(whole_frames.len(), 40 * 128 * 96 * 3);
    assert!(whole_frames == direct_frames, "the whole clip's frames are not those of the same job uploaded whole");
    let seconds = audio_seconds(&whole_path);
    assert!((seconds - 40.0 / FPS as f64).abs() < 0.05, "the whole clip's sound lasts {seconds} s");
    // Three jobs, two uploads: the whole clip received nothing.
    let metrics = client.get(server.url("/metrics")).send().await.unwrap().text().await.unwrap();
    let series = |name: &str| metrics.lines().find_map(|line| line.strip_prefix(name)?.trim().parse::<f64>().ok());
    let clip_bytes = std::fs::metadata(&clip).unwrap().len() as f64;
    assert_eq!(series(r#"vaebox_jobs_created_total{op="upscale"}"#), Some(3.0), "{metrics}");
    assert_eq!(series(r#"vaebox_upload_bytes_total{op="upscale"}"#), Some(2.0 * clip_bytes), "{metrics}");

    // A job over its whole input has no more of it to run, a whole clip included.
    for id in [direct["id"].as_str().unwrap(), &whole_id] {
        let (status, body) = ask_whole(&client, &server, id).await;
        assert_eq!((status, body["error"]["code"].as_str()), (400, Some("job-has-no-range")), "{body}");
    }

    // The try deleted: the whole job's input stays, whole; the try can no longer be asked.
    wait_for_final(&client, &server, &tried_id, std::time::Duration::from_secs(300)).await;
    assert_eq!(client.delete(server.url(&format!("/v1/jobs/{tried_id}"))).send().await.unwrap().status(), 204);
    assert!(!tried_input.exists());
    assert_eq!(links_of(&whole_input), 1);
    assert!(std::fs::read(&whole_input).unwrap() == std::fs::read(&clip).unwrap(), "the whole job's input changed");
    let (status, body) = ask_whole(&client, &server, &tried_id).await;
    assert_eq!((status, body["error"]["code"].as_str()), (404, Some("job-not-found")), "{body}");
    for id in [direct["id"].as_str().unwrap(), &whole_id] {
        assert_eq!(client.delete(server.url(&format!("/v1/jobs/{id}"))).send().await.unwrap().status(), 204);
    }
    assert_eq!(files_under(&jobs_dir), Vec::<std::path::PathBuf>::new(), "files left once no job needs them");
}

/// With a shared storage, asked of a box that has no copy of the try's input (another box of the fleet took
/// the upload; here its folder is removed by hand): the whole clip's input comes from the storage, and the
/// whole job runs over all of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_whole_clip_of_a_try_comes_from_the_shared_storage_when_the_box_kept_no_copy() {
    let dir = tempfile::tempdir().unwrap();
    let clip = dir.path().join("clip.mp4");
    small_clip(&clip);
    let storage = format!("file://{}", dir.path().join("shared").display());
    let server = Server::start(dir.path(), &[("VAEBOX_STORAGE", &storage)]);
    let client = client();
    let upscale = "op=upscale&model=realesrgan-animevideov3&scale=2&output_format=ffv1&filename=clip.mp4";

    let tried = finished(&client, &server, &format!("{upscale}&start_frame=10&frames=6"), &clip).await;
    let tried_id = tried["id"].as_str().unwrap();
    assert_eq!(tried["progress"]["done"], 6, "{tried}");
    std::fs::remove_dir_all(dir.path().join("data/jobs").join(tried_id)).unwrap();
    let (status, whole) = ask_whole(&client, &server, tried_id).await;
    assert_eq!(status, 202, "{whole}");
    let whole = wait_for_final(&client, &server, whole["id"].as_str().unwrap(), std::time::Duration::from_secs(300)).await;
    assert_eq!((whole["status"].as_str(), whole["progress"]["done"].as_u64()), (Some("succeeded"), Some(CLIP_FRAMES as u64)), "{whole}");
    let frames = stored_frames(&fetch(&client, &server, &whole).await, &dir.path().join("whole.mkv"), "rgb24");
    assert_eq!(frames.len(), CLIP_FRAMES as usize * 128 * 96 * 3);
}

/// The whole clip is held to the box's limits as an upload is, and a try whose files are gone cannot give
/// one; a refusal leaves no file behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whole_clip_over_the_limits_or_of_a_removed_input_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let clip = dir.path().join("clip.mp4");
    small_clip(&clip);
    let server = Server::start(dir.path(), &[("VAEBOX_MAX_FRAMES", "30")]);
    let client = client();
    let data_dir = dir.path().join("data");

    let tried = finished(&client, &server, "op=upscale&model=realesrgan-animevideov3&scale=2&start_frame=5&frames=20&filename=clip.mp4", &clip).await;
    let tried_id = tried["id"].as_str().unwrap();
    let tried_input = data_dir.join("jobs").join(tried_id).join("input.mp4");
    let (status, body) = ask_whole(&client, &server, tried_id).await;
    assert_eq!((status, body["error"]["code"].as_str()), (422, Some("media-too-large")), "40 frames, 30 allowed: {body}");
    assert_eq!(links_of(&tried_input), 1, "the refused job's link to the input is left behind");
    assert_eq!(files_under(&data_dir.join("uploads")), Vec::<std::path::PathBuf>::new());

    std::fs::remove_dir_all(tried_input.parent().unwrap()).unwrap();
    let (status, body) = ask_whole(&client, &server, tried_id).await;
    assert_eq!((status, body["error"]["code"].as_str()), (410, Some("input-gone")), "{body}");
    let (status, body) = ask_whole(&client, &server, "not-a-job").await;
    assert_eq!((status, body["error"]["code"].as_str()), (404, Some("job-not-found")), "{body}");
    let (_, listed) = get_json(&client, &server.url("/v1/jobs")).await;
    assert_eq!(listed["jobs"].as_array().unwrap().len(), 1, "a refused whole clip made a job: {listed}");
}

/// The page offers the whole clip on the card of any try that succeeded, one it did not send included (here
/// sent with curl's request, the page opened after), and the server makes the job: the page holds no file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_runs_the_whole_clip_of_a_try_it_did_not_send() {
    let dir = tempfile::tempdir().unwrap();
    let clip = dir.path().join("clip.mp4");
    small_clip(&clip);
    let server = Server::start(dir.path(), &[]);
    let client = client();
    let upscale = "op=upscale&model=realesrgan-animevideov3&scale=2&filename=clip.mp4";
    let tried = finished(&client, &server, &format!("{upscale}&duration=0.4"), &clip).await;
    let untried = finished(&client, &server, upscale, &clip).await;
    let (tried_id, untried_id) = (tried["id"].as_str().unwrap().to_string(), untried["id"].as_str().unwrap().to_string());

    let mut browser = common::browser::Browser::start(1280, 900);
    browser.open(&server.url("/"));
    let button = |id: &str| format!(r#"document.querySelector('#job-{id} button[aria-label^="Run the whole clip"]')"#);
    let shown = browser.wait_until(&format!("!!{}", button(&tried_id)), std::time::Duration::from_secs(15));
    assert!(shown.is_some(), "no Run the whole clip on the try's card");
    assert_eq!(browser.eval(&format!("!!{}", button(&untried_id))), Value::Bool(false), "a whole job's card offers its whole clip");
    browser.eval(&format!("{}.click()", button(&tried_id)));
    let whole_card = "[...document.querySelectorAll('.job-meta')].some((meta) => meta.textContent.includes('whole clip of'))";
    assert!(browser.wait_until(whole_card, std::time::Duration::from_secs(15)).is_some(), "the whole job's card does not say where it came from");

    // The try's card now links to that job instead of offering to run it again, and nothing new is queued.
    let (_, listed) = get_json(&client, &server.url("/v1/jobs")).await;
    let made: Vec<&Value> = listed["jobs"].as_array().unwrap().iter().filter(|job| job["from_try"] == tried["id"]).collect();
    assert_eq!(made.len(), 1, "{listed}");
    let link = format!(r##"!!document.querySelector('#job-{tried_id} a.whole-clip[href="#job-{}"]')"##, made[0]["id"].as_str().unwrap());
    assert!(browser.wait_until(&link, std::time::Duration::from_secs(15)).is_some(), "the try's card does not link to its whole clip");
    assert_eq!(browser.eval(&format!("!!{}", button(&tried_id))), Value::Bool(false), "the try's card still offers to run its whole clip");
    let whole = wait_for_final(&client, &server, made[0]["id"].as_str().unwrap(), std::time::Duration::from_secs(300)).await;
    assert_eq!((whole["status"].as_str(), whole["progress"]["done"].as_u64()), (Some("succeeded"), Some(40)), "{whole}");
}
