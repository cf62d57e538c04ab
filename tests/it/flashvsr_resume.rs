//! A FlashVSR restore stopped hard goes on from its last checkpoint (every stream's state after a DiT step:
//! the KV cache, the LQ projection's and the decoder's causal caches) and equals an uninterrupted run frame
//! for frame; a cancel lands inside a step (issue 55). The small reference weights, a real clip.
use crate::common;

use std::path::Path;
use std::time::Duration;

use common::tensors::read_tensor_map;
use common::*;
use tch::Tensor;

use super::flashvsr_jobs::{lossless_clip, model_folder, REFERENCE};
use super::resume::{assert_same_frames, restarted_and_finished, result_frames, segments_folder, submit, wait_for_checkpoint, SETTINGS};

/// The reference's 29 LR frames and 16 of them again backwards: 45 frames, four DiT steps (21 frames, then
/// 8, 8, 8, the last step's last 3 the padding's).
fn longer_clip(lr: &Tensor) -> Tensor {
    Tensor::cat(&[lr.shallow_clone(), lr.flip([0]).narrow(0, 1, 16)], 0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flashvsr_restore_killed_mid_clip_goes_on_from_its_last_step_and_equals_an_uninterrupted_run() {
    let dir = tempfile::tempdir().unwrap();
    let case = read_tensor_map(&Path::new(REFERENCE).join("e2e_tiny.safetensors"));
    let models = dir.path().join("models");
    model_folder(&models, "FlashVSR", &case["context"]);
    let mut settings = SETTINGS.to_vec();
    settings.push(("VAEBOX_MODELS_DIR", models.to_str().unwrap()));
    let server = Server::start(dir.path(), &settings);
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
    let case = read_tensor_map(&Path::new(REFERENCE).join("e2e_tiny.safetensors"));
    let models = dir.path().join("models");
    model_folder(&models, "FlashVSR", &case["context"]);
    let server = Server::start(dir.path(), &[("VAEBOX_MODELS_DIR", models.to_str().unwrap())]);
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
