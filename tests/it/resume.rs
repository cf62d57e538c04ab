//! A job stopped hard (SIGKILL: no shutdown code runs, as in a crash or a power cut) goes on from its last
//! checkpoint when it runs again, on the same box after a restart or on another worker of the queue, and
//! its result equals an uninterrupted run's frame for frame: a restore killed in its third of five
//! batches goes on from the third, an upscale from its last finished segment, the VAE ops from their last
//! checkpoint (a reconstruct with the same PSNR/SSIM).
use crate::common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

pub(crate) const WIDTH: usize = 128;
pub(crate) const HEIGHT: usize = 96;
/// Five batches of 5 frames sharing 2: 5 + 4 × 3.
pub(crate) const RESTORE_FRAMES: u32 = 17;
/// Run whole (`parts=1`): with two workers, a restore would be cut into parts (tests/it/parts.rs).
pub(crate) const RESTORE: &str = "op=restore&model=seedvr2-3b-small&scale=1&batch_frames=5&batch_overlap=2&scene_threshold=0&seed=7&output_format=ffv1&parts=1&filename=clip.mp4";
/// A segment (and a checkpoint) after every restore batch, and after every upscaled frame.
pub(crate) const SETTINGS: [(&str, &str); 2] = [("VAEBOX_CHECKPOINT_S", "0"), ("VAEBOX_CHUNK_FRAMES", "2")];

/// `frames` frames of a real clip at 128×96, losslessly.
pub(crate) fn clip(dir: &Path, frames: u32) -> Vec<u8> {
    let path = dir.join(format!("clip{frames}.mkv"));
    let status = std::process::Command::new("ffmpeg")
        .args(["-nostdin", "-v", "error", "-y", "-i"])
        .arg(media("carphone_pristine.mp4"))
        .args(["-vf", &format!("scale={WIDTH}:{HEIGHT},setsar=1"), "-frames:v", &frames.to_string(), "-c:v", "ffv1"])
        .arg(&path)
        .status()
        .expect("run ffmpeg");
    assert!(status.success());
    std::fs::read(path).unwrap()
}

/// Every stored frame of a lossless result, one `Vec` per frame.
fn frames(result: &[u8], path: &Path, width: usize, height: usize) -> Vec<Vec<u8>> {
    stored_frames(result, path, "rgb48le").chunks_exact(width * height * 6).map(<[u8]>::to_vec).collect()
}

pub(crate) async fn submit(client: &reqwest::Client, server: &Server, query: &str, body: Vec<u8>) -> String {
    let (status, job) = upload_raw(client, server, query, body).await;
    assert_eq!(status, 202, "{job}");
    job["id"].as_str().unwrap().to_string()
}

/// A server with [`SETTINGS`] and the models in `models`.
fn server_with_models(dir: &Path, models: &Path) -> Server {
    let mut settings = SETTINGS.to_vec();
    settings.push(("VAEBOX_MODELS_DIR", models.to_str().unwrap()));
    Server::start(dir, &settings)
}

/// The segments folder a job's checkpoints are in.
pub(crate) fn segments_folder(server: &Server, id: &str) -> Option<std::path::PathBuf> {
    let dir = server.data_dir.join("data/jobs").join(id);
    std::fs::read_dir(dir).ok()?.flatten().map(|e| e.path()).find(|p| p.to_string_lossy().ends_with(".resume"))
}

/// Waits until the job's checkpoint on disk satisfies `reached`, and returns it. The file is polled every
/// 2 ms: unlike the progress the API shows (updated every 250 ms), it is never stale.
pub(crate) async fn wait_for_checkpoint(server: &Server, id: &str, what: &str, reached: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        if let Some(found) = checkpoint(server, id).filter(|c| reached(c)) {
            return found;
        }
        assert!(Instant::now() < deadline, "never saw a checkpoint {what}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Waits until the restore's checkpoint on disk counts `batches` batches (so the next one has begun).
async fn wait_for_checkpoint_after_batch(server: &Server, id: &str, batches: i64) {
    wait_for_checkpoint(server, id, &format!("after batch {batches}"), |c| {
        let written = c["restore"]["batches"].as_i64().unwrap_or(0);
        assert!(written <= batches, "the checkpoint went past batch {batches} ({written}) before it was seen");
        written == batches
    })
    .await;
}

/// The server killed with SIGKILL and started again on the same data; the job `id` then ran to the end,
/// succeeded, in its second attempt.
pub(crate) async fn restarted_and_finished(client: &reqwest::Client, server: Server, id: &str) -> (Server, Value) {
    let server = server.restart_after_kill9();
    let job = wait_for_final(client, &server, id, Duration::from_secs(300)).await;
    assert_eq!(job["status"], "succeeded", "{job}");
    assert_eq!(job["attempts"], 2, "{job}");
    (server, job)
}

/// The job's last checkpoint on disk.
fn checkpoint(server: &Server, id: &str) -> Option<Value> {
    let text = std::fs::read_to_string(segments_folder(server, id)?.join("checkpoint.json")).ok()?;
    serde_json::from_str(&text).ok()
}

pub(crate) async fn result_frames(client: &reqwest::Client, server: &Server, job: &Value, dir: &Path, width: usize, height: usize) -> Vec<Vec<u8>> {
    let name = format!("{}.mkv", job["id"].as_str().unwrap());
    frames(&fetch(client, server, job).await, &dir.join(name), width, height)
}

pub(crate) fn assert_same_frames(resumed: &[Vec<u8>], whole: &[Vec<u8>]) {
    assert_eq!(resumed.len(), whole.len(), "frame count");
    for (index, (a, b)) in resumed.iter().zip(whole).enumerate() {
        assert!(a == b, "frame {index} of the resumed run differs from the uninterrupted run's");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_killed_in_its_third_batch_goes_on_from_it_after_a_restart_and_equals_an_uninterrupted_run() {
    let dir = tempfile::tempdir().unwrap();
    let server = server_with_models(dir.path(), &models_with_small_seedvr2(dir.path()));
    let client = client();
    let input = clip(dir.path(), RESTORE_FRAMES);

    let whole = run_job(&client, &server, RESTORE, input.clone()).await;
    assert_eq!(whole["plan"]["batches"], 5, "{}", whole["plan"]);
    assert!(whole["plan"].get("resumed_from").is_none(), "{}", whole["plan"]);
    let whole_frames = result_frames(&client, &server, &whole, dir.path(), WIDTH, HEIGHT).await;
    assert_eq!(whole_frames.len(), RESTORE_FRAMES as usize);
    assert!(segments_folder(&server, whole["id"].as_str().unwrap()).is_none(), "a finished job keeps no segments");

    let id = submit(&client, &server, RESTORE, input).await;
    // The job's stage is polled, and on a fast machine batch 3's DiT can come and go between two polls;
    // the checkpoint file after batch 2 is there until batch 3 ends.
    wait_for_checkpoint_after_batch(&server, &id, 2).await;
    let (server, job) = restarted_and_finished(&client, server, &id).await;
    let resumed = &job["plan"]["resumed_from"];
    // Batches 1 and 2 wrote 3 frames each; the frames batch 2 held for the blend came from the checkpoint.
    assert_eq!((resumed["batch"].as_i64(), resumed["frame"].as_u64()), (Some(2), Some(6)), "{}", job["plan"]);
    assert!(resumed["saved_s"].as_f64().unwrap() > 0.0, "{resumed}");
    assert_eq!(job["plan"]["batches"], 5);
    assert_same_frames(&result_frames(&client, &server, &job, dir.path(), WIDTH, HEIGHT).await, &whole_frames);
    assert!(segments_folder(&server, &id).is_none(), "the segments are gone once the result is whole");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upscale_killed_mid_clip_goes_on_from_its_last_segment_and_equals_an_uninterrupted_run() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &SETTINGS);
    let client = client();
    let input = clip(dir.path(), 12);
    let query = "op=upscale&model=realesrgan-animevideov3&scale=2&dtype=f32&output_format=ffv1&filename=clip.mkv";

    let whole = run_job(&client, &server, query, input.clone()).await;
    let whole_frames = result_frames(&client, &server, &whole, dir.path(), 2 * WIDTH, 2 * HEIGHT).await;
    assert_eq!(whole_frames.len(), 12);

    let id = submit(&client, &server, query, input).await;
    wait_for_checkpoint(&server, &id, "of 4 to 9 frames", |c| c["frames"].as_u64().is_some_and(|frames| (4..10).contains(&frames))).await;
    let (server, job) = restarted_and_finished(&client, server, &id).await;
    let kept = job["plan"]["resumed_from"]["frame"].as_u64().unwrap_or(0);
    assert!((4..12).contains(&kept), "the rerun kept no finished segment: {}", job["plan"]);
    assert_same_frames(&result_frames(&client, &server, &job, dir.path(), 2 * WIDTH, 2 * HEIGHT).await, &whole_frames);
}

/// The segments are checked against their checkpoint before the job goes on: a segment cut short (the job
/// "succeeded" with 30 of 120 frames), a checkpoint claiming frames it does not hold (a longer result) and a
/// deleted segment (the job failed) each give the uninterrupted run's frames, going on from the last good
/// segment where there is one and starting over where the checkpoint cannot be trusted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upscale_whose_segments_were_damaged_while_stopped_still_equals_an_uninterrupted_run() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path(), &SETTINGS);
    let client = client();
    let input = clip(dir.path(), 12);
    let query = "op=upscale&model=realesrgan-animevideov3&scale=2&dtype=f32&output_format=ffv1&filename=clip.mkv";
    let whole = run_job(&client, &server, query, input.clone()).await;
    let whole_frames = result_frames(&client, &server, &whole, dir.path(), 2 * WIDTH, 2 * HEIGHT).await;

    type Damage = fn(&Path, &mut Value);
    let cut_short: Damage = |folder, _| {
        let path = folder.join("segment_000001.mkv");
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
    };
    let claims_more: Damage = |_, checkpoint| checkpoint["frames"] = Value::from(checkpoint["frames"].as_u64().unwrap() + 30);
    let deleted: Damage = |folder, _| std::fs::remove_file(folder.join("segment_000000.mkv")).unwrap();
    for (what, damage, kept) in [("cut short", cut_short, Some(1)), ("claiming more", claims_more, None), ("deleted", deleted, None)] {
        let id = submit(&client, &server, query, input.clone()).await;
        wait_for_checkpoint(&server, &id, "of 4 to 9 frames", |c| c["frames"].as_u64().is_some_and(|frames| (4..10).contains(&frames))).await;
        server.kill9();
        let folder = segments_folder(&server, &id).unwrap();
        let mut checkpoint = checkpoint(&server, &id).unwrap();
        damage(&folder, &mut checkpoint);
        std::fs::write(folder.join("checkpoint.json"), checkpoint.to_string()).unwrap();
        let (restarted, job) = restarted_and_finished(&client, server, &id).await;
        server = restarted;
        assert_eq!(job["plan"]["resumed_from"]["frame"].as_u64(), kept, "{what}: {}", job["plan"]);
        assert_same_frames(&result_frames(&client, &server, &job, dir.path(), 2 * WIDTH, 2 * HEIGHT).await, &whole_frames);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_whose_worker_is_killed_goes_on_from_its_checkpoint_on_the_other_worker() {
    let dir = tempfile::tempdir().unwrap();
    let models = models_with_small_seedvr2(dir.path());
    let log = dir.path().join("fleet.log");
    let mut settings = SETTINGS.to_vec();
    settings.extend([("VAEBOX_MODELS_DIR", models.to_str().unwrap()), ("VAEBOX_LEASE_S", "3"), ("VAEBOX_THREADS", "1")]);
    let mut api_settings = settings.clone();
    api_settings.push(("VAEBOX_ROLE", "api"));
    let server = Server::start_logged(dir.path(), &api_settings, &log);
    let mut workers: Vec<WorkerProcess> = ["a", "b"].iter().map(|name| WorkerProcess::start(dir.path(), name, &settings, Some(&log))).collect();
    let client = client();
    let input = clip(dir.path(), RESTORE_FRAMES);

    let whole = run_job(&client, &server, RESTORE, input.clone()).await;
    let whole_frames = result_frames(&client, &server, &whole, dir.path(), WIDTH, HEIGHT).await;

    let id = submit(&client, &server, RESTORE, input).await;
    // A worker's progress reaches the API only now and then: the checkpoint on the shared disk says when
    // batch 2 is written, and so batch 3 has begun.
    wait_for_checkpoint_after_batch(&server, &id, 2).await;
    let (_, running) = get_json(&client, &server.url(&format!("/v1/jobs/{id}"))).await;
    let first = running["worker"].as_str().expect("the running job names its worker").to_string();
    workers.iter_mut().find(|w| first.contains(&w.name)).expect("one of the two workers").kill9();
    let job = wait_for_final(&client, &server, &id, Duration::from_secs(300)).await;
    assert_eq!(job["status"], "succeeded", "{job}\n{}", std::fs::read_to_string(&log).unwrap_or_default());
    assert_ne!(job["worker"], running["worker"], "the other worker finished it: {job}");
    assert_eq!(job["plan"]["resumed_from"]["batch"], 2, "{}", job["plan"]);
    assert_same_frames(&result_frames(&client, &server, &job, dir.path(), WIDTH, HEIGHT).await, &whole_frames);
}

/// Latent frames of the decode below: 1 + 4 × 15 = 61 frames out, a push (and a checkpoint) per latent frame.
const LATENT_FRAMES: i64 = 16;

/// A Wan 2.1 latent file of `frames` latent frames of 12 × 16 cells (96 × 128 pixels). Random values:
/// every frame differs from every other.
fn random_latent(dir: &Path, frames: i64) -> Vec<u8> {
    tch::manual_seed(3);
    let latent = tch::Tensor::randn([1, 16, frames, 12, 16], (tch::Kind::Float, tch::Device::Cpu));
    let path = dir.join("latent.safetensors");
    tch::Tensor::write_safetensors(&[("latent", &latent)], &path).unwrap();
    std::fs::read(&path).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vae_decode_killed_mid_latent_goes_on_from_its_checkpoint_and_equals_an_uninterrupted_run() {
    let dir = tempfile::tempdir().unwrap();
    let server = server_with_models(dir.path(), &models_with_small_wan21(dir.path()));
    let client = client();
    let input = random_latent(dir.path(), LATENT_FRAMES);
    let query = "op=vae_decode&model=wan21-small&dtype=f32&output_format=ffv1&filename=latent.safetensors";
    let total = 1 + 4 * (LATENT_FRAMES as usize - 1);

    let whole = run_job(&client, &server, query, input.clone()).await;
    assert!(whole["plan"].get("resumed_from").is_none(), "{}", whole["plan"]);
    let whole_frames = result_frames(&client, &server, &whole, dir.path(), 128, 96).await;
    assert_eq!(whole_frames.len(), total);

    let id = submit(&client, &server, query, input).await;
    // Killed once the decoder's state after 4 to 11 latent frames is on disk.
    let seen = wait_for_checkpoint(&server, &id, "after 4 to 11 latent frames", |c| c["vae"]["inputs"].as_i64().is_some_and(|n| (4..12).contains(&n))).await["frames"].as_u64().unwrap();
    let (server, job) = restarted_and_finished(&client, server, &id).await;
    let resumed = &job["plan"]["resumed_from"];
    let kept = resumed["frame"].as_u64().unwrap_or(0);
    assert!(kept >= seen && kept < total as u64, "kept {kept} frames, the checkpoint seen had {seen}: {}", job["plan"]);
    assert!(resumed["saved_s"].as_f64().unwrap() > 0.0, "{resumed}");
    assert_eq!(job["plan"]["frames"], total);
    assert_same_frames(&result_frames(&client, &server, &job, dir.path(), 128, 96).await, &whole_frames);
    assert!(segments_folder(&server, &id).is_none(), "the segments are gone once the result is whole");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vae_decode_to_a_tensor_killed_mid_latent_goes_on_from_its_checkpoint_and_writes_the_same_file() {
    let dir = tempfile::tempdir().unwrap();
    let server = server_with_models(dir.path(), &models_with_small_wan21(dir.path()));
    let client = client();
    let input = random_latent(dir.path(), LATENT_FRAMES);
    let query = "op=vae_decode&model=wan21-small&dtype=f32&output_format=safetensors&filename=latent.safetensors";
    let total = 1 + 4 * (LATENT_FRAMES as u64 - 1);

    let whole = run_job(&client, &server, query, input.clone()).await;
    assert!(whole["plan"].get("resumed_from").is_none(), "{}", whole["plan"]);
    let whole_tensor = fetch(&client, &server, &whole).await;

    let id = submit(&client, &server, query, input).await;
    let seen = wait_for_checkpoint(&server, &id, "after 4 to 11 latent frames", |c| c["vae"]["inputs"].as_i64().is_some_and(|n| (4..12).contains(&n))).await["frames"].as_u64().unwrap();
    let (server, job) = restarted_and_finished(&client, server, &id).await;
    let kept = job["plan"]["resumed_from"]["frame"].as_u64().unwrap_or(0);
    assert!(kept >= seen && kept < total, "kept {kept} frames, the checkpoint seen had {seen}: {}", job["plan"]);
    let tensor = fetch(&client, &server, &job).await;
    assert_eq!(tensor.len(), whole_tensor.len());
    assert!(tensor == whole_tensor, "the resumed decode's tensor file differs from the uninterrupted run's");
    assert!(segments_folder(&server, &id).is_none(), "the checkpoint folder is gone once the tensor is whole");
}

/// Latent frames of the tile-major decode below (37 frames out), and its query: a budget below one frame of
/// every tile's causal caches, so each tile runs over the whole clip in turn (three tiles here).
const TILE_MAJOR_LATENT_FRAMES: i64 = 10;
const TILE_MAJOR: &str = "op=vae_decode&model=wan21-small&dtype=f32&memory_budget_mib=24&output_format=ffv1&filename=latent.safetensors";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tile_major_decode_killed_in_its_second_tile_and_again_in_its_blends_goes_on_each_time_and_equals_an_uninterrupted_run() {
    let dir = tempfile::tempdir().unwrap();
    let server = server_with_models(dir.path(), &models_with_small_wan21(dir.path()));
    let client = client();
    let input = random_latent(dir.path(), TILE_MAJOR_LATENT_FRAMES);
    let total = 1 + 4 * (TILE_MAJOR_LATENT_FRAMES as u64 - 1);

    let whole = run_job(&client, &server, TILE_MAJOR, input.clone()).await;
    assert_eq!(whole["plan"]["tile_major"], true, "{}", whole["plan"]);
    let whole_frames = result_frames(&client, &server, &whole, dir.path(), 128, 96).await;
    assert_eq!(whole_frames.len() as u64, total);

    let id = submit(&client, &server, TILE_MAJOR, input).await;
    // Killed part-way through the second tile: its stream's state after 3 to 7 of 10 latent frames is on disk.
    let place = |c: &Value, key: &str| c["tile_major"][key].as_u64().unwrap_or(u64::MAX);
    wait_for_checkpoint(&server, &id, "in the second tile", |c| place(c, "tiles_done") == 1 && (3..8).contains(&place(c, "pushes_done"))).await;
    let first_spool = segments_folder(&server, &id).unwrap().join("tile-0.f32");
    let first_tile_written = std::fs::metadata(&first_spool).unwrap().modified().unwrap();
    let server = server.restart_after_kill9();
    // Killed again while the tiles are blended into frames: 3 to 7 of the 10 pushes' frames written.
    let blending = wait_for_checkpoint(&server, &id, "in the blends", |c| c["frames"].as_u64().unwrap_or(0) > 0 && (3..8).contains(&place(c, "pushes_done"))).await;
    assert_eq!(std::fs::metadata(&first_spool).unwrap().modified().unwrap(), first_tile_written, "the first tile was decoded again after the first kill");
    let tiles = place(&blending, "tiles_done");
    assert!(tiles >= 2 && tiles != u64::MAX, "{blending}");
    let server = server.restart_after_kill9();
    let job = wait_for_final(&client, &server, &id, Duration::from_secs(300)).await;
    assert_eq!((job["status"].as_str(), job["attempts"].as_i64()), (Some("succeeded"), Some(3)), "{job}");
    let resumed = &job["plan"]["resumed_from"];
    let kept = resumed["frame"].as_u64().unwrap_or(0);
    assert!(kept >= blending["frames"].as_u64().unwrap() && kept < total, "kept {kept} frames, the checkpoint seen: {blending}; {}", job["plan"]);
    assert_eq!(resumed["tiles"].as_u64(), Some(tiles), "{resumed}");
    assert_same_frames(&result_frames(&client, &server, &job, dir.path(), 128, 96).await, &whole_frames);
    assert!(segments_folder(&server, &id).is_none(), "the spools and segments are gone once the result is whole");
}

/// A cancelled job never runs again: its checkpoints go with it, a tile-major decode's raw spools too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tile_major_decode_cancelled_part_way_leaves_no_spools_behind() {
    let dir = tempfile::tempdir().unwrap();
    let server = server_with_models(dir.path(), &models_with_small_wan21(dir.path()));
    let client = client();
    let id = submit(&client, &server, TILE_MAJOR, random_latent(dir.path(), TILE_MAJOR_LATENT_FRAMES)).await;
    wait_for_checkpoint(&server, &id, "in the first tile", |c| c["tile_major"]["pushes_done"].as_u64().is_some_and(|n| n >= 2)).await;
    let folder = segments_folder(&server, &id).unwrap();
    assert!(folder.join("tile-0.f32").exists(), "no spool in {}", folder.display());
    let cancelled = client.post(server.url(&format!("/v1/jobs/{id}/cancel"))).send().await.unwrap();
    assert!(cancelled.status().is_success(), "{}", cancelled.status());
    let job = wait_for_final(&client, &server, &id, Duration::from_secs(300)).await;
    assert_eq!(job["status"], "cancelled", "{job}");
    assert!(!folder.exists(), "a cancelled job kept its checkpoints: {:?}", std::fs::read_dir(&folder).map(|d| d.count()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vae_encode_killed_mid_clip_goes_on_from_its_checkpoint_and_writes_the_same_latent() {
    let dir = tempfile::tempdir().unwrap();
    let server = server_with_models(dir.path(), &models_with_small_wan21(dir.path()));
    let client = client();
    // 61 frames: 1 + 4 × 15, 16 latent frames, pushed 4 frames at a time with a checkpoint after each push.
    let input = clip(dir.path(), 61);
    let query = "op=vae_encode&model=wan21-small&dtype=f32&filename=clip.mkv";

    let whole = run_job(&client, &server, query, input.clone()).await;
    assert!(whole["plan"].get("resumed_from").is_none(), "{}", whole["plan"]);
    let whole_latent = fetch(&client, &server, &whole).await;

    let id = submit(&client, &server, query, input).await;
    let seen = wait_for_checkpoint(&server, &id, "after 16 to 44 frames", |c| c["vae"]["inputs"].as_i64().is_some_and(|n| (16..45).contains(&n))).await["frames"].as_u64().unwrap();
    let (server, job) = restarted_and_finished(&client, server, &id).await;
    let kept = job["plan"]["resumed_from"]["frame"].as_u64().unwrap_or(0);
    assert!(kept >= seen && kept < 16, "kept {kept} latent frames, the checkpoint seen had {seen}: {}", job["plan"]);
    let latent = fetch(&client, &server, &job).await;
    assert_eq!(latent.len(), whole_latent.len());
    assert!(latent == whole_latent, "the resumed encode's latent file differs from the uninterrupted run's");
    assert!(segments_folder(&server, &id).is_none(), "the checkpoint folder is gone once the latent is whole");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vae_reconstruct_killed_mid_clip_goes_on_from_its_checkpoint_with_the_same_frames_and_figures() {
    let dir = tempfile::tempdir().unwrap();
    let server = server_with_models(dir.path(), &models_with_small_wan21(dir.path()));
    let client = client();
    // 61 frames pushed 4 at a time; a checkpoint after each push that writes frames.
    let input = clip(dir.path(), 61);
    let query = "op=vae_reconstruct&model=wan21-small&dtype=f32&output_format=ffv1&filename=clip.mkv";

    let whole = run_job(&client, &server, query, input.clone()).await;
    assert!(whole["plan"].get("resumed_from").is_none(), "{}", whole["plan"]);
    let whole_frames = result_frames(&client, &server, &whole, dir.path(), WIDTH, HEIGHT).await;
    assert_eq!(whole_frames.len(), 61);
    assert_eq!(whole["metrics"]["frames_compared"], 61, "{}", whole["metrics"]);

    let id = submit(&client, &server, query, input).await;
    // Killed once both streams' state after 16 to 44 input frames is on disk (some of them still waiting
    // for their reconstruction: the encoder holds frames for its next group of 4).
    let seen = wait_for_checkpoint(&server, &id, "after 16 to 44 frames", |c| c["vae"]["inputs"].as_i64().is_some_and(|n| (16..45).contains(&n))).await["frames"].as_u64().unwrap();
    let (server, job) = restarted_and_finished(&client, server, &id).await;
    let resumed = &job["plan"]["resumed_from"];
    let kept = resumed["frame"].as_u64().unwrap_or(0);
    assert!(kept >= seen && kept < 61, "kept {kept} frames, the checkpoint seen had {seen}: {}", job["plan"]);
    assert!(resumed["saved_s"].as_f64().unwrap() > 0.0, "{resumed}");
    assert_eq!(job["plan"]["frames"], 61);
    assert_same_frames(&result_frames(&client, &server, &job, dir.path(), WIDTH, HEIGHT).await, &whole_frames);
    // PSNR and SSIM over the whole clip, from the checkpoint's sums and the rest: to the last bit.
    assert_eq!(job["metrics"], whole["metrics"]);
    assert!(segments_folder(&server, &id).is_none(), "the segments are gone once the result is whole");
}

/// Input frames of the re-timed clip below; bikes.mp4 cuts to another shot at its frame 30.
const CUT_CLIP_FRAMES: u32 = 8;

/// Frames 26 to 33 of bikes.mp4 at 128×96, losslessly: a cut between input frames 3 and 4.
fn cut_clip(dir: &Path) -> Vec<u8> {
    let path = dir.join("cut.mkv");
    let keep = format!("trim=start_frame=26:end_frame={},setpts=PTS-STARTPTS,scale={WIDTH}:{HEIGHT},setsar=1", 26 + CUT_CLIP_FRAMES);
    let status = std::process::Command::new("ffmpeg")
        .args(["-nostdin", "-v", "error", "-y", "-i"])
        .arg(media("bikes.mp4"))
        .args(["-vf", &keep, "-an", "-c:v", "ffv1"])
        .arg(&path)
        .status()
        .expect("run ffmpeg");
    assert!(status.success());
    std::fs::read(path).unwrap()
}

/// Runs `query` (three frames out per input frame) on [`cut_clip`] whole, then again killed once its
/// checkpoint holds 13 to 19 of the 24 frames (past the cut; a pair's frames may be split between the
/// runs) and restarted. The restart goes on from there and writes the uninterrupted run's frames; returns
/// both jobs.
async fn killed_past_the_cut_and_resumed(query: &str, width: usize, height: usize) -> (Value, Value) {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &SETTINGS);
    let client = client();
    let input = cut_clip(dir.path());
    let total = 3 * CUT_CLIP_FRAMES as u64;

    let whole = run_job(&client, &server, query, input.clone()).await;
    assert!(whole["plan"].get("resumed_from").is_none(), "{}", whole["plan"]);
    let whole_frames = result_frames(&client, &server, &whole, dir.path(), width, height).await;
    assert_eq!(whole_frames.len() as u64, total);

    let id = submit(&client, &server, query, input).await;
    let seen = wait_for_checkpoint(&server, &id, "of 13 to 19 frames", |c| c["frames"].as_u64().is_some_and(|frames| (13..20).contains(&frames))).await["frames"].as_u64().unwrap();
    let (server, job) = restarted_and_finished(&client, server, &id).await;
    let resumed = &job["plan"]["resumed_from"];
    let kept = resumed["frame"].as_u64().unwrap_or(0);
    assert!(kept >= seen && kept < total, "kept {kept} frames, the checkpoint seen had {seen}: {}", job["plan"]);
    assert!(resumed["saved_s"].as_f64().unwrap() > 0.0, "{resumed}");
    let compute = |job: &Value| job["timings"]["compute"].as_f64().unwrap_or(f64::NAN);
    println!("{query}: compute {:.2} s whole, {:.2} s going on from frame {kept} of {total}", compute(&whole), compute(&job));
    assert_same_frames(&result_frames(&client, &server, &job, dir.path(), width, height).await, &whole_frames);
    assert!(segments_folder(&server, &id).is_none(), "the segments are gone once the result is whole");
    (whole, job)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interpolate_killed_mid_clip_goes_on_from_its_last_segment_and_equals_an_uninterrupted_run() {
    let query = "op=interpolate&factor=3&dtype=f32&output_format=ffv1&filename=cut.mkv";
    let (whole, job) = killed_past_the_cut_and_resumed(query, WIDTH, HEIGHT).await;
    assert_eq!((whole["plan"]["scene_cuts"].clone(), whole["plan"]["interpolated"].as_u64()), (serde_json::json!([4]), Some(12)), "{}", whole["plan"]);
    // The frames passed over count as an uninterrupted run counts them: made by the model, or across the cut.
    let mut plan = job["plan"].clone();
    plan.as_object_mut().unwrap().remove("resumed_from");
    assert_eq!(plan, whole["plan"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upscale_that_interpolates_goes_on_from_its_last_segment_and_equals_an_uninterrupted_run() {
    let query = "op=upscale&model=realesrgan-animevideov3&scale=2&interpolate=3&dtype=f32&output_format=ffv1&filename=cut.mkv";
    let (whole, job) = killed_past_the_cut_and_resumed(query, 2 * WIDTH, 2 * HEIGHT).await;
    assert_eq!(whole["plan"]["interpolation"]["scene_cuts"], serde_json::json!([4]), "{}", whole["plan"]);
    assert_eq!((&job["plan"]["interpolation"], &job["plan"]["frames"]), (&whole["plan"]["interpolation"], &whole["plan"]["frames"]));
}
