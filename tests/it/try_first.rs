//! A job over part of the input (`start`/`start_frame`, `frames`/`duration`), as people try a few seconds
//! before a long run: exactly the frames the whole job would have made there, the sound of that time only,
//! the box's limits held against the part, and ranges that name no frame refused.
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
