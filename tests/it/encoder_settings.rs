//! A job's own x264/x265 settings (issue 53, item 17): `crf` and `encoder_preset` reach the encoder (x264
//! writes the options it ran with into the stream: read back there), change the result, and are refused
//! where no x264 or x265 writes the result.
use crate::common;

use common::*;
use serde_json::Value;

/// x264's own record of its options, in the SEI it writes into the stream (`… crf=40.0 …`).
fn x264_options(mp4: &[u8]) -> String {
    let text = String::from_utf8_lossy(mp4);
    let start = text.find("x264 - core").expect("x264's options in the stream");
    text[start..].split('\0').next().unwrap_or_default().to_string()
}

async fn upscaled(client: &reqwest::Client, server: &Server, clip: &[u8], extra: &str) -> (Value, Vec<u8>) {
    let job = run_job(client, server, &format!("op=upscale&scale=2&filename=clip.mp4{extra}"), clip.to_vec()).await;
    let bytes = fetch(client, server, &job).await;
    (job, bytes)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jobs_crf_and_preset_reach_the_encoder_and_are_refused_elsewhere() {
    let dir = tempfile::tempdir().unwrap();
    let clip = dir.path().join("clip.mp4");
    make_clip(&media("carphone_pristine.mp4"), 6, false, &clip);
    let clip = std::fs::read(&clip).unwrap();
    let server = Server::start(dir.path(), &[]);
    let client = client();

    let (_, boxed) = upscaled(&client, &server, &clip, "").await;
    let (job, own) = upscaled(&client, &server, &clip, "&crf=40&encoder_preset=medium").await;
    assert_eq!((job["params"]["crf"].as_i64(), job["params"]["encoder_preset"].as_str()), (Some(40), Some("medium")), "{}", job["params"]);
    let (boxed_options, own_options) = (x264_options(&boxed), x264_options(&own));
    println!("box's settings: {} bytes; crf=40, medium: {} bytes\n{own_options}", boxed.len(), own.len());
    assert!(boxed_options.contains(" crf=18.0 ") && own_options.contains(" crf=40.0 "), "{boxed_options}\n{own_options}");
    // veryfast searches 1 reference frame and subme 2; medium 3 and 7 (x264's preset table).
    assert!(boxed_options.contains(" ref=1 ") && own_options.contains(" ref=3 ") && own_options.contains(" subme=7 "), "{own_options}");
    assert!(own.len() < boxed.len(), "crf 40 ({} bytes) is not smaller than crf 18 ({} bytes)", own.len(), boxed.len());

    for (extra, code) in [
        ("&crf=60", "invalid-encoder-setting"),
        ("&crf=high", "invalid-encoder-setting"),
        ("&encoder_preset=quick", "invalid-encoder-setting"),
        ("&crf=20&output_format=ffv1", "parameter-not-for-output-format"),
        ("&encoder_preset=slow&output_format=prores", "parameter-not-for-output-format"),
    ] {
        let (status, answer) = upload_raw(&client, &server, &format!("op=upscale&scale=2&filename=clip.mp4{extra}"), clip.clone()).await;
        assert_eq!((status, answer["error"]["code"].as_str()), (400, Some(code)), "{extra}: {answer}");
    }
    // A still is written as png: no x264 runs.
    let png = dir.path().join("face.png");
    crop_of_astronaut(&png, 180, 60);
    let (status, answer) = upload_raw(&client, &server, "op=upscale&scale=2&crf=20&filename=face.png", std::fs::read(&png).unwrap()).await;
    assert_eq!((status, answer["error"]["code"].as_str()), (400, Some("parameter-not-for-output-format")), "{answer}");
    // A VAE encode writes a latent: the op does not take them.
    let (status, answer) = upload_raw(&client, &server, "op=vae_encode&crf=20&filename=clip.mp4", clip.clone()).await;
    assert_eq!((status, answer["error"]["code"].as_str()), (400, Some("parameter-not-for-op")), "{answer}");
}
