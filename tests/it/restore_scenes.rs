//! A scene cut in a restore: the batches of one scene end where it ends, the next scene starts a batch of its
//! own, and no batch or cross-fade holds frames of both. Shown exactly: each scene of a two-scene clip comes
//! out as it does restored alone (the same frames, the same noise), while with the detection off the
//! frames around the cut do not.
use crate::common;

use std::path::Path;
use std::process::Command;

use common::*;
use serde_json::Value;

const WIDTH: usize = 64;
const HEIGHT: usize = 48;
/// Frames of each scene.
const SCENE: usize = 6;

/// `SCENE` frames of one real clip, then `SCENE` of another, at 64×48, losslessly.
fn two_scenes(out: &Path) {
    let scene = |clip: &str| format!("[{clip}:v]scale={WIDTH}:{HEIGHT},setsar=1,trim=end_frame={SCENE},setpts=N/(25*TB)[s{clip}]");
    let status = Command::new("ffmpeg")
        .args(["-nostdin", "-v", "error", "-y", "-i"])
        .arg(media("carphone_pristine.mp4"))
        .arg("-i")
        .arg(media("bikes.mp4"))
        .args(["-filter_complex", &format!("{};{};[s0][s1]concat=n=2:v=1:a=0[v]", scene("0"), scene("1")), "-map", "[v]", "-r", "25"])
        .args(["-c:v", "libx264", "-qp", "0", "-preset", "ultrafast", "-pix_fmt", "yuv444p"])
        .arg(out)
        .status()
        .expect("run ffmpeg");
    assert!(status.success(), "ffmpeg could not make the clip");
}

/// Every stored frame of a lossless result, rgb48le bytes, one `Vec` per frame.
fn frames(result: &[u8], path: &Path) -> Vec<Vec<u8>> {
    stored_frames(result, path, "rgb48le").chunks_exact(WIDTH * HEIGHT * 6).map(<[u8]>::to_vec).collect()
}

async fn restored(client: &reqwest::Client, server: &Server, extra: &str, clip: &Path, name: &str) -> (Value, Vec<Vec<u8>>) {
    let query = format!("op=restore&model=seedvr2-3b-small&scale=1&batch_frames=5&batch_overlap=2&output_format=ffv1&filename=clip.mp4&{extra}");
    restored_by(client, server, &query, clip, name).await
}

async fn restored_by(client: &reqwest::Client, server: &Server, query: &str, clip: &Path, name: &str) -> (Value, Vec<Vec<u8>>) {
    let job = run_job(client, server, query, std::fs::read(clip).unwrap()).await;
    let frames = frames(&fetch(client, server, &job).await, &clip.with_file_name(name));
    (job, frames)
}

/// A server with the small SeedVR2, and the two-scene clip in `dir`.
fn server_and_clip(dir: &Path) -> (Server, std::path::PathBuf) {
    let models = models_with_small_seedvr2(dir);
    let server = Server::start(dir, &[("VAEBOX_MODELS_DIR", models.to_str().unwrap())]);
    let clip = dir.join("two_scenes.mp4");
    two_scenes(&clip);
    (server, clip)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_scene_is_restored_as_if_alone() {
    let dir = tempfile::tempdir().unwrap();
    let (server, clip) = server_and_clip(dir.path());
    let client = client();

    let (whole, whole_frames) = restored(&client, &server, "seed=7", &clip, "whole.mkv").await;
    let plan = &whole["plan"];
    assert_eq!((plan["scene_cuts"].clone(), plan["scene_threshold"].as_f64()), (serde_json::json!([SCENE]), Some(0.1)), "{plan}");
    // Each scene of 6 frames in batches of 5 sharing 2: frames 0–4 and 3–5, then 6–10 and 9–11.
    assert_eq!(plan["batches"], 4, "{plan}");
    assert_eq!(whole_frames.len(), 2 * SCENE);

    // The first scene alone draws the same noise (batches 0 and 1); the second alone is given the seed
    // its batches 2 and 3 had (seed + batch index).
    let (_, first) = restored(&client, &server, &format!("seed=7&frames={SCENE}"), &clip, "first.mkv").await;
    let (_, second) = restored(&client, &server, &format!("seed=9&start_frame={SCENE}"), &clip, "second.mkv").await;
    for (index, frame) in whole_frames.iter().enumerate() {
        let alone = if index < SCENE { &first[index] } else { &second[index - SCENE] };
        assert!(frame == alone, "frame {index} is not its scene's frame restored alone");
    }

    // With the detection off, batches span the cut: the frames cross-faded around it are not those of
    // either scene alone.
    let (spanning, spanning_frames) = restored(&client, &server, "seed=7&scene_threshold=0", &clip, "spanning.mkv").await;
    assert_eq!(spanning["plan"]["scene_cuts"], serde_json::json!([]));
    assert!(spanning_frames[SCENE - 1] != first[SCENE - 1], "with no cut found the last frame before it was still restored alone");
}

/// `uniform_batches`: the last, shorter batch (frames 7–11 of 12, in batches of 9 sharing 2) is padded to 9
/// frames instead of the model's 5, so the DiT sees other frames: the last frames change, the first batch's
/// do not, and the count stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uniform_batches_pads_only_the_last_batch() {
    let dir = tempfile::tempdir().unwrap();
    let (server, clip) = server_and_clip(dir.path());
    let client = client();
    let query = "op=restore&model=seedvr2-3b-small&scale=1&batch_frames=9&batch_overlap=2&scene_threshold=0&output_format=ffv1&filename=clip.mp4";
    let (plain, plain_frames) = restored_by(&client, &server, query, &clip, "plain.mkv").await;
    let (uniform, uniform_frames) = restored_by(&client, &server, &format!("{query}&uniform_batches=true"), &clip, "uniform.mkv").await;
    assert_eq!((plain["plan"]["batches"].clone(), uniform["plan"]["batches"].clone()), (2.into(), 2.into()));
    assert_eq!(uniform["plan"]["uniform_batches"], true, "{}", uniform["plan"]);
    assert!(plain["plan"].get("uniform_batches").is_none(), "{}", plain["plan"]);
    assert_eq!((plain_frames.len(), uniform_frames.len()), (2 * SCENE, 2 * SCENE));
    assert!(plain_frames[..7] == uniform_frames[..7], "frames only the first batch made changed");
    assert!(plain_frames[2 * SCENE - 1] != uniform_frames[2 * SCENE - 1], "the padded last batch made the same last frame");
}
