//! A FlashVSR restore stopped hard goes on from its last checkpoint (every stream's state after a DiT step:
//! the KV cache, the LQ projection's and the decoder's causal caches) and equals an uninterrupted run frame
//! for frame; a cancel lands inside a step (issue 55). The small reference weights, a real clip.
use crate::common;

use std::time::Duration;

use common::*;
use tch::Tensor;

use super::flashvsr_jobs::{box_with_model, lossless_clip};
use super::resume::{assert_same_frames, restarted_and_finished, result_frames, segments_folder, submit, wait_for_checkpoint, SETTINGS};

/// The reference's 29 LR frames and 16 of them again backwards: 45 frames, four DiT steps (21 frames, then
/// 8, 8, 8, the last step's last 3 the padding's).
fn longer_clip(lr: &Tensor) -> Tensor {
    Tensor::cat(&[lr.shallow_clone(), lr.flip([0]).narrow(0, 1, 16)], 0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flashvsr_restore_killed_mid_clip_goes_on_from_its_last_step_and_equals_an_uninterrupted_run() {
    let dir = tempfile::tempdir().unwrap();
    let (server, case) = box_with_model(dir.path(), "FlashVSR", &SETTINGS);
    let client = client();
    let clip = lossless_clip(&longer_clip(&case["lr_u8_thwc"]), &dir.path().join("lr.mkv"));
    let query = "op=restore&model=FlashVSR&fit=crop&dtype=f32&output_format=ffv1&filename=lr.mkv";
    let (width, height) = (256, 128);

    let whole = run_job(&client, &server, query, clip.clone()).await;
    assert_eq!((whole["plan"]["steps"].as_u64(), whole["plan"]["frames"].as_u64()), (Some(4), Some(45)), "{}", whole["plan"]);
    assert!(whole["plan"].get("resumed_from").is_none(), "{}", whole["plan"]);
    let whole_frames = result_frames(&client, &server, &whole, dir.path(), width, height).await;
    assert_eq!(whole_frames.len(), 45);
    assert!(segments_folder(&server, whole["id"].as_str().unwrap()).is_none(), "a finished job keeps no segments");

    let id = submit(&client, &server, query, clip).await;
    // Killed in its third step, once the checkpoint after the second is on disk (21 + 8 frames).
    let seen = wait_for_checkpoint(&server, &id, "after step 2", |c| {
        let steps = c["vae"]["inputs"].as_i64().unwrap_or(0);
        assert!(steps <= 2, "the checkpoint went past step 2 ({steps}) before it was seen");
        steps == 2
    })
    .await;
    assert_eq!(seen["frames"], 29, "{seen}");
    let (server, job) = restarted_and_finished(&client, server, &id).await;
    let resumed = &job["plan"]["resumed_from"];
    assert_eq!((resumed["batch"].as_i64(), resumed["frame"].as_u64()), (Some(2), Some(29)), "{}", job["plan"]);
    assert!(resumed["saved_s"].as_f64().unwrap() > 0.0, "{resumed}");
    assert_same_frames(&result_frames(&client, &server, &job, dir.path(), width, height).await, &whole_frames);
    assert!(segments_folder(&server, &id).is_none(), "the segments are gone once the result is whole");
}

/// A cancel in the middle of the first DiT step (21 frames of 320×512 out: seconds of CPU) ends the job
/// within a second of the cancel's answer: the stop flag is asked inside the DiT, the LQ projection and the
/// decoder, not only between steps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_lands_inside_a_flashvsr_step() {
    let dir = tempfile::tempdir().unwrap();
    let (server, case) = box_with_model(dir.path(), "FlashVSR", &[]);
    let client = client();
    // The LR frames at twice their size (each pixel four times).
    let larger = case["lr_u8_thwc"].repeat_interleave_self_int(2, 1, None).repeat_interleave_self_int(2, 2, None);
    let clip = lossless_clip(&larger, &dir.path().join("lr.mkv"));
    let id = submit(&client, &server, "op=restore&model=FlashVSR&dtype=f32&filename=lr.mkv", clip).await;
    let (job, took) = super::cancel_mid_push::cancel_under_way(&client, &server, &id, |job| job["status"] == "running", Duration::from_millis(800)).await;
    println!("FlashVSR: cancelled {took:?} after the cancel's answer");
    assert_eq!((job["status"].as_str(), job["progress"]["done"].as_u64()), (Some("cancelled"), Some(0)), "the cancel did not land in the first step: {job}");
    assert!(took < Duration::from_secs(1), "the cancel took {took:?}: the step ran on to its end");
}

/// A budget a step on the whole frame does not fit: the frame runs in tiles (each a run of its own,
/// cross-faded), the result keeps its size and frames and stays close to the untiled one, and a tiled job
/// killed mid-clip goes on from its checkpoint (every tile's streams) and equals an uninterrupted tiled run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_too_small_for_the_whole_frame_runs_flashvsr_in_tiles_that_resume() {
    let dir = tempfile::tempdir().unwrap();
    let (server, case) = box_with_model(dir.path(), "FlashVSR", &SETTINGS);
    let client = client();
    // 45 frames of 64×40: 256×160 out, 256×256 for the model (the padding cut off after).
    let clip = lossless_clip(&longer_clip(&case["lr_u8_thwc"]), &dir.path().join("lr.mkv"));
    let (width, height) = (256, 160);
    let whole = run_job(&client, &server, "op=restore&model=FlashVSR&dtype=f32&output_format=ffv1&filename=lr.mkv", clip.clone()).await;
    assert!(whole["plan"].get("tiles").is_none(), "{}", whole["plan"]);
    let whole_frames = result_frames(&client, &server, &whole, dir.path(), width, height).await;

    let estimate = whole["plan"]["estimated_peak_bytes"].as_u64().unwrap();
    let budget = (estimate >> 20) * 2 / 3;
    let query = format!("op=restore&model=FlashVSR&dtype=f32&memory_budget_mib={budget}&output_format=ffv1&filename=lr.mkv");
    let tiled = run_job(&client, &server, &query, clip.clone()).await;
    let plan = &tiled["plan"];
    let tiles = (plan["tiles"]["rows"].as_i64().unwrap_or(0), plan["tiles"]["cols"].as_i64().unwrap_or(0));
    assert!(tiles.0 * tiles.1 > 1, "no tiles under a budget of {budget} MiB: {plan}");
    assert!(plan["estimated_peak_bytes"].as_u64().unwrap() <= budget << 20 && plan["fits_budget"] == true, "{plan}");
    let tiled_frames = result_frames(&client, &server, &tiled, dir.path(), width, height).await;
    assert_eq!(tiled_frames.len(), whole_frames.len());
    // Close to the untiled frames: nearer than the untiled run with other noise is.
    let other_seed = run_job(&client, &server, "op=restore&model=FlashVSR&dtype=f32&seed=1&output_format=ffv1&filename=lr.mkv", clip.clone()).await;
    let other_seed = result_frames(&client, &server, &other_seed, dir.path(), width, height).await;
    let (tiled_off, seed_off) = (mean_codes_apart(&tiled_frames, &whole_frames), mean_codes_apart(&other_seed, &whole_frames));
    println!("FlashVSR in {}×{} tiles: {tiled_off:.2} codes from the untiled frames on average (another seed: {seed_off:.2})", tiles.0, tiles.1);
    assert!(tiled_off > 0.0 && tiled_off < seed_off / 2.0, "tiled frames {tiled_off:.2} codes from the untiled ones on average, another seed's {seed_off:.2}");

    let id = submit(&client, &server, &query, clip).await;
    wait_for_checkpoint(&server, &id, "after step 2", |c| c["vae"]["inputs"].as_i64() == Some(2)).await;
    let (server, job) = restarted_and_finished(&client, server, &id).await;
    assert_eq!(job["plan"]["resumed_from"]["batch"], 2, "{}", job["plan"]);
    assert_same_frames(&result_frames(&client, &server, &job, dir.path(), width, height).await, &tiled_frames);
}

/// The mean difference of two 16-bit results, in 8-bit codes.
fn mean_codes_apart(a: &[Vec<u8>], b: &[Vec<u8>]) -> f64 {
    assert_eq!(a.len(), b.len());
    let (mut sum, mut count) = (0.0f64, 0usize);
    for (x, y) in a.iter().zip(b) {
        for (p, q) in x.chunks_exact(2).zip(y.chunks_exact(2)) {
            sum += (u16::from_le_bytes([p[0], p[1]]) as f64 - u16::from_le_bytes([q[0], q[1]]) as f64).abs() / 257.0;
            count += 1;
        }
    }
    sum / count as f64
}
