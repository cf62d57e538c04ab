//! The interpolate op over HTTP on real clips: RIFE's frames between the input's equal ECCV2022-RIFE's own
//! code on the same frames (scripts/rife_reference.py), the input's frames pass through untouched, the clip
//! keeps its length and sound at the new rate, and a scene cut gets no blended frame.
use crate::common;

use std::path::Path;
use std::process::Command;

use common::*;
use serde_json::Value;
use tch::{Kind, Tensor};
use vaebox::executor::scene;

/// models::rife against the reference, channels-last, fp32 (tests/it/rife_parity.rs: measured ≤ 3.8e-6), plus
/// half a 16-bit step for the lossless output's rounding.
const PARITY_TOLERANCE: f64 = 1e-4 + 0.5 / 65535.0;

/// `frames` frames of `clip`, cropped to 128×96 at (x, y), with a sine as sound, as a small MP4.
pub(crate) fn small_clip(clip: &str, x: u32, y: u32, frames: u32, out: &Path) {
    let status = Command::new("ffmpeg")
        .args(["-nostdin", "-v", "error", "-y", "-i"])
        .arg(media(clip))
        .args(["-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000", "-map", "0:v:0", "-map", "1:a:0", "-c:a", "aac", "-shortest"])
        .args(["-vf", &format!("crop=128:96:{x}:{y},setsar=1"), "-frames:v", &frames.to_string(), "-c:v", "libx264", "-qp", "0", "-preset", "ultrafast", "-pix_fmt", "yuv444p"])
        .arg(out)
        .status()
        .expect("run ffmpeg");
    assert!(status.success(), "ffmpeg could not make the clip");
}

/// The frames of a lossless (16-bit) result, `[n, 3, H, W]` Float in [0, 1].
fn frames_16bit(path: &Path, width: i64, height: i64) -> Tensor {
    let output = Command::new("ffmpeg").args(["-nostdin", "-v", "error", "-i"]).arg(path).args(["-fps_mode", "passthrough", "-f", "rawvideo", "-pix_fmt", "rgb48le", "-"]).output().unwrap();
    assert!(output.status.success(), "ffmpeg: {}", String::from_utf8_lossy(&output.stderr));
    let values: Vec<f32> = output.stdout.chunks_exact(2).map(|b| f32::from(u16::from_le_bytes([b[0], b[1]])) / 65535.0).collect();
    let n = values.len() as i64 / (3 * width * height);
    Tensor::from_slice(&values).view([n, height, width, 3]).permute([0, 3, 1, 2]).contiguous()
}

fn write_f32(path: &Path, frame: &Tensor) {
    let values: Vec<f32> = Vec::try_from(frame.flatten(0, -1)).unwrap();
    std::fs::write(path, values.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>()).unwrap();
}

/// The reference's frame halfway between `a` and `b` (`[3, H, W]`), clamped as the op writes it.
fn reference_middle(a: &Tensor, b: &Tensor) -> Tensor {
    let scratch = tempfile::tempdir().unwrap();
    let (frame0, frame1, out) = (scratch.path().join("a.f32"), scratch.path().join("b.f32"), scratch.path().join("out.f32"));
    write_f32(&frame0, a);
    write_f32(&frame1, b);
    let (code, model_dir) = (Path::new(REPO).join(".cache/rife/ECCV2022-RIFE"), Path::new(REPO).join("models/rife"));
    let [channels, height, width] = a.size()[..] else { panic!("[3, H, W]") };
    let shape = format!("{channels},{height},{width}");
    let args: Vec<&std::ffi::OsStr> = vec![
        "--code".as_ref(), code.as_os_str(), "--model-dir".as_ref(), model_dir.as_os_str(), "--frame0".as_ref(), frame0.as_os_str(),
        "--frame1".as_ref(), frame1.as_os_str(), "--shape".as_ref(), shape.as_ref(), "--time".as_ref(), "0.5".as_ref(), "--output-out".as_ref(), out.as_os_str(),
    ];
    run_python("scripts/rife_reference.py", &args);
    let values: Vec<f32> = std::fs::read(&out).unwrap().chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect();
    Tensor::from_slice(&values).view([channels, height, width]).clamp(0.0, 1.0)
}

fn max_abs(a: &Tensor, b: &Tensor) -> f64 {
    (a - b).abs().max().double_value(&[])
}

/// Probes duration and rate of the first video stream, and whether there is sound.
fn duration_s(path: &Path) -> f64 {
    let output = Command::new("ffprobe").args(["-v", "error", "-show_entries", "format=duration", "-of", "csv=p=0"]).arg(path).output().unwrap();
    String::from_utf8_lossy(&output.stdout).trim().parse().unwrap()
}

async fn submit(client: &reqwest::Client, server: &Server, query: &str, clip: &Path) -> (u16, Value) {
    upload_raw(client, server, query, std::fs::read(clip).unwrap()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frames_between_match_the_reference_and_the_clip_keeps_its_length_and_sound() {
    let dir = tempfile::tempdir().unwrap();
    let clip = dir.path().join("bikes.mp4");
    // The camera passes over a door: the plate moves ~5 px a frame.
    small_clip("bikes.mp4", 256, 24, 4, &clip);
    let server = Server::start(dir.path(), &[]);
    let client = client();
    let job = run_job(&client, &server, "op=interpolate&factor=2&output_format=ffv1&dtype=f32&scene_threshold=0", std::fs::read(&clip).unwrap()).await;
    assert_eq!(job["model"], "rife-hdv3", "{job}");
    let plan = &job["plan"];
    assert_eq!((plan["input_fps"].as_str(), plan["output_fps"].as_str()), (Some("25/1"), Some("50/1")), "{plan}");
    assert_eq!((plan["input_frames"].as_u64(), plan["frames"].as_u64(), plan["interpolated"].as_u64()), (Some(4), Some(8), Some(3)), "{plan}");
    let output = dir.path().join("out.mkv");
    std::fs::write(&output, fetch(&client, &server, &job).await).unwrap();
    let probed = ffprobe(&output);
    assert_eq!((probed.frames, probed.fps.as_str(), probed.has_audio), (8, "50/1", true), "{probed:?}");
    let (before, after) = (duration_s(&clip), duration_s(&output));
    assert!((before - after).abs() <= 0.03, "the clip lasted {before} s and lasts {after} s");

    let frames = frames_16bit(&output, 128, 96);
    assert_eq!(frames.size(), [8, 3, 96, 128]);
    // The input's frames at their own times, as the server decoded them (the same as this test's decode).
    let input = {
        let rgb = rgb_frames(&std::fs::read(&clip).unwrap(), &dir.path().join("copy.mp4"));
        Tensor::from_slice(&rgb).view([4, 96, 128, 3]).permute([0, 3, 1, 2]).to_kind(Kind::Float) / 255.0
    };
    for k in 0..4 {
        let error = max_abs(&frames.get(2 * k), &input.get(k));
        assert!(error <= 0.5 / 65535.0, "output frame {} is input frame {k}: max abs {error}", 2 * k);
    }
    assert_eq!(max_abs(&frames.get(7), &frames.get(6)), 0.0, "the last frame is held");
    for k in 0..3 {
        let expected = reference_middle(&frames.get(2 * k), &frames.get(2 * k + 2));
        let error = max_abs(&frames.get(2 * k + 1), &expected);
        let motion = max_abs(&frames.get(2 * k + 1), &frames.get(2 * k));
        println!("bikes 128x96 frame {}: max abs vs ECCV2022-RIFE {error:.2e} (vs the frame before: {motion:.2})", 2 * k + 1);
        assert!(error <= PARITY_TOLERANCE, "frame {}: max abs {error}", 2 * k + 1);
        assert!(motion > 0.05, "frame {} is a new picture, not a copy ({motion})", 2 * k + 1);
    }

    // A target rate: 25 → 62.5 fps (2.5 frames per input frame), the length kept.
    let job = run_job(&client, &server, "op=interpolate&fps=62.5&output_format=ffv1&dtype=f32", std::fs::read(&clip).unwrap()).await;
    assert_eq!((job["plan"]["output_fps"].as_str(), job["plan"]["frames"].as_u64()), (Some("125/2"), Some(10)), "{}", job["plan"]);
    let output = dir.path().join("out62.mkv");
    std::fs::write(&output, fetch(&client, &server, &job).await).unwrap();
    assert_eq!((ffprobe(&output).frames, ffprobe(&output).fps.as_str()), (10, "125/2"));
    assert_eq!(job["output"]["file_name"], "input_125-2fps.mkv", "{}", job["output"]);
}

/// Two clips joined: the frame pair across the join is a cut (no blended frame: the earlier frame is held),
/// every other pair is interpolated. The threshold's default sits between what neighbouring frames of one
/// scene and a cut between the test clips measure, on every pair of their first 60 frames.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scene_cut_gets_no_blended_frame() {
    let dir = tempfile::tempdir().unwrap();
    let (first, second, joined) = (dir.path().join("a.mp4"), dir.path().join("b.mp4"), dir.path().join("joined.mp4"));
    small_clip("bikes.mp4", 256, 24, 3, &first);
    small_clip("bigbuckbunny.mp4", 600, 300, 3, &second);
    let list = dir.path().join("list.txt");
    std::fs::write(&list, format!("file '{}'\nfile '{}'\n", first.display(), second.display())).unwrap();
    let status = Command::new("ffmpeg").args(["-nostdin", "-v", "error", "-f", "concat", "-safe", "0", "-i"]).arg(&list).args(["-c", "copy"]).arg(&joined).status().unwrap();
    assert!(status.success());
    let server = Server::start(dir.path(), &[]);
    let client = client();
    let job = run_job(&client, &server, "op=interpolate&output_format=ffv1&dtype=f32", std::fs::read(&joined).unwrap()).await;
    let plan = &job["plan"];
    assert_eq!((plan["scene_cuts"].clone(), plan["interpolated"].as_u64(), plan["frames"].as_u64()), (serde_json::json!([3]), Some(4), Some(12)), "{plan}");
    let output = dir.path().join("out.mkv");
    std::fs::write(&output, fetch(&client, &server, &job).await).unwrap();
    let frames = frames_16bit(&output, 128, 96);
    assert_eq!(max_abs(&frames.get(5), &frames.get(4)), 0.0, "across the cut the earlier frame is held");
    assert!(max_abs(&frames.get(6), &frames.get(4)) > 0.3, "the next scene starts at output frame 6");

}

/// The measure and its default threshold on every pair of neighbouring frames of the three test clips, at
/// their own sizes: the pairs above it are exactly the five cuts of bikes.mp4 (checked by eye: a street, a
/// crossing, a taxi, railings, a cyclist's feet), none in the two single-shot clips.
#[test]
fn the_default_threshold_finds_the_cuts_of_real_clips_and_nothing_else() {
    let scratch = tempfile::tempdir().unwrap();
    let mut found = Vec::new();
    let (mut within, mut cuts) = (0.0f64, f64::MAX);
    for (name, expected) in [("bikes.mp4", &[30u64, 76, 137, 187, 242][..]), ("bigbuckbunny.mp4", &[][..]), ("carphone_pristine.mp4", &[][..])] {
        let probed = ffprobe(&media(name));
        let rgb = rgb_frames(&std::fs::read(media(name)).unwrap(), &scratch.path().join(name));
        let (w, h) = (probed.width as i64, probed.height as i64);
        let frame_bytes = (3 * w * h) as usize;
        let frame = |i: usize| Tensor::from_slice(&rgb[i * frame_bytes..(i + 1) * frame_bytes]).view([1, h, w, 3]).permute([0, 3, 1, 2]).to_kind(Kind::Float) / 255.0;
        let mut cuts_here = Vec::new();
        let mut previous = frame(0);
        for i in 1..rgb.len() / frame_bytes {
            let next = frame(i);
            let change = scene::change(&previous, &next);
            if expected.contains(&(i as u64)) {
                cuts = cuts.min(change);
            } else {
                within = within.max(change);
            }
            if change > scene::DEFAULT_THRESHOLD {
                cuts_here.push(i as u64);
            }
            previous = next;
        }
        found.push((name, cuts_here.clone()));
        assert_eq!(cuts_here, expected, "{name}");
    }
    println!("scene change: within a shot at most {within:.3}, at a cut at least {cuts:.3}; threshold {}", scene::DEFAULT_THRESHOLD);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parameters_that_cannot_run_are_refused_before_queueing() {
    let dir = tempfile::tempdir().unwrap();
    let clip = dir.path().join("clip.mp4");
    small_clip("carphone_pristine.mp4", 0, 0, 4, &clip);
    let server = Server::start(dir.path(), &[("VAEBOX_MAX_FRAMES", "10")]);
    let client = client();
    for (query, status, code, mentions) in [
        ("op=interpolate&factor=5", 400, "invalid-interpolate-parameter", "factor must be 2 to 4"),
        ("op=interpolate&factor=2&fps=60", 400, "invalid-interpolate-parameter", "not both"),
        ("op=interpolate&fps=fast", 400, "invalid-interpolate-parameter", "not a frame rate"),
        ("op=interpolate&scene_threshold=2", 400, "invalid-interpolate-parameter", "scene_threshold"),
        ("op=interpolate&fps=24", 400, "invalid-interpolate-parameter", "not above the input's 30000/1001"),
        ("op=interpolate&tile=64", 400, "parameter-not-for-op", "`tile`"),
        ("op=upscale&factor=2", 400, "parameter-not-for-op", "only interpolate"),
        // 4 frames × 3 = 12 written frames, over the box's max_frames of 10.
        ("op=interpolate&factor=3", 422, "output-too-large", "frames 12 (max 10)"),
    ] {
        let (got, body) = submit(&client, &server, query, &clip).await;
        assert_eq!((got, body["error"]["code"].as_str()), (status, Some(code)), "{query}: {body}");
        assert!(body["error"]["message"].as_str().unwrap().contains(mentions), "{query}: {body}");
    }
    let job = run_job(&client, &server, "op=interpolate", std::fs::read(&clip).unwrap()).await;
    assert_eq!(job["params"]["interpolate"], serde_json::json!({"factor": 2, "scene_threshold": scene::DEFAULT_THRESHOLD}), "{job}");
}

/// `op=upscale&interpolate=2`: one job, one decode and one encode. Its frames at the input's times are the
/// plain upscale's frames exactly, the ones between are new pictures, and it plays at twice the rate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upscale_interpolates_in_the_same_pass() {
    let dir = tempfile::tempdir().unwrap();
    let clip = dir.path().join("bikes.mp4");
    small_clip("bikes.mp4", 256, 24, 3, &clip);
    let server = Server::start(dir.path(), &[]);
    let client = client();
    let query = "op=upscale&model=realesrgan-animevideov3&scale=2&output_format=ffv1&dtype=f32&filename=bikes.mp4";
    let plain = run_job(&client, &server, query, std::fs::read(&clip).unwrap()).await;
    let both = run_job(&client, &server, &format!("{query}&interpolate=2"), std::fs::read(&clip).unwrap()).await;
    let interpolation = &both["plan"]["interpolation"];
    assert_eq!((interpolation["output_fps"].as_str(), interpolation["interpolated"].as_u64(), both["plan"]["frames"].as_u64()), (Some("50/1"), Some(2), Some(6)), "{}", both["plan"]);
    assert!(plain["plan"].get("interpolation").is_none(), "{}", plain["plan"]);
    assert_eq!(both["output"]["file_name"], "bikes_x2_x2fps.mkv", "{}", both["output"]);
    let (plain_file, both_file) = (dir.path().join("plain.mkv"), dir.path().join("both.mkv"));
    std::fs::write(&plain_file, fetch(&client, &server, &plain).await).unwrap();
    std::fs::write(&both_file, fetch(&client, &server, &both).await).unwrap();
    let probed = ffprobe(&both_file);
    assert_eq!((probed.width, probed.height, probed.frames, probed.fps.as_str(), probed.has_audio), (256, 192, 6, "50/1", true), "{probed:?}");
    let (plain, both) = (frames_16bit(&plain_file, 256, 192), frames_16bit(&both_file, 256, 192));
    for k in 0..3 {
        assert_eq!(max_abs(&both.get(2 * k), &plain.get(k)), 0.0, "frame {} is the upscale of input frame {k}", 2 * k);
    }
    for k in 0..2 {
        let (before, between, after) = (both.get(2 * k), both.get(2 * k + 1), both.get(2 * k + 2));
        assert!(max_abs(&between, &before) > 0.05 && max_abs(&between, &after) > 0.05, "frame {} is a new picture", 2 * k + 1);
    }
    let (status, body) = submit(&client, &server, "op=upscale&interpolate=5", &clip).await;
    assert_eq!((status, body["error"]["code"].as_str()), (400, Some("invalid-interpolate-parameter")), "{body}");
}
