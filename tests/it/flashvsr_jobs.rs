//! FlashVSR as a `restore` model over HTTP (issue 55): a folder of the authors' files under their own names
//! (the small reference weights; the `.ckpt` and `.pth` files written by torch.save as the authors' are), a
//! real clip (the reference's LR frames, stored losslessly), and the result against the original's frames
//! (../shared/reference/flashvsr/e2e_tiny).
use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::tensors::read_tensor_map;
use common::*;
use tch::{Kind, Tensor};

pub(crate) const REFERENCE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/reference/flashvsr");

/// `models/flashvsr/<name>/` with the four files of a FlashVSR-Tiny model.
pub(crate) fn model_folder(models: &Path, name: &str, context: &Tensor) -> PathBuf {
    let dir = models.join("flashvsr").join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let reference = Path::new(REFERENCE);
    std::fs::copy(reference.join("small_dit.safetensors"), dir.join("diffusion_pytorch_model_streaming_dmd.safetensors")).unwrap();
    super::taehv_reference::torch_save(&reference.join("small_LQ_proj_in.safetensors"), &dir.join("LQ_proj_in.ckpt"), "float32");
    super::taehv_reference::torch_save(&reference.join("small_TCDecoder.safetensors"), &dir.join("TCDecoder.ckpt"), "float32");
    // posi_prompt.pth is one tensor, torch.save'd.
    let context_file = dir.join("context.safetensors");
    Tensor::write_safetensors(&[("context", context)], &context_file).unwrap();
    let script = "import sys, torch\nfrom safetensors.torch import load_file\ntorch.save(load_file(sys.argv[1])['context'], sys.argv[2])\n";
    let status = Command::new(python()).arg("-c").arg(script).arg(&context_file).arg(dir.join("posi_prompt.pth")).status().unwrap();
    assert!(status.success());
    std::fs::remove_file(context_file).unwrap();
    dir
}

/// A box serving the small FlashVSR model folder `name` (with `settings` beside its models dir), and the
/// reference case its folder's context came from (`e2e_tiny`: the LR frames, the original's output).
pub(crate) fn box_with_model(dir: &Path, name: &str, settings: &[(&str, &str)]) -> (Server, BTreeMap<String, Tensor>) {
    let case = read_tensor_map(&Path::new(REFERENCE).join("e2e_tiny.safetensors"));
    let models = dir.join("models");
    model_folder(&models, name, &case["context"]);
    let mut settings = settings.to_vec();
    settings.push(("VAEBOX_MODELS_DIR", models.to_str().unwrap()));
    (Server::start(dir, &settings), case)
}

/// Frames `[T, H, W, 3]` u8 as a lossless FFV1 clip (planar RGB, exact through the box's rgb24 reader).
pub(crate) fn lossless_clip(frames: &Tensor, path: &Path) -> Vec<u8> {
    let [_, height, width, _] = frames.size()[..] else { unreachable!() };
    let mut ffmpeg = Command::new("ffmpeg")
        .args(["-nostdin", "-v", "error", "-y", "-f", "rawvideo", "-pix_fmt", "rgb24", "-s", &format!("{width}x{height}"), "-r", "16", "-i", "-"])
        .args(["-c:v", "ffv1", "-pix_fmt", "gbrp"])
        .arg(path)
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    let bytes = Vec::<u8>::try_from(frames.flatten(0, -1)).unwrap();
    std::io::Write::write_all(ffmpeg.stdin.as_mut().unwrap(), &bytes).unwrap();
    drop(ffmpeg.stdin.take());
    assert!(ffmpeg.wait().unwrap().success());
    std::fs::read(path).unwrap()
}

/// A 16-bit lossless result's frames as bytes `[T, H, W, 3]` (8-bit values stored ×257).
fn result_bytes(result: &[u8], dir: &Path, height: i64, width: i64) -> Tensor {
    let raw = stored_frames(result, &dir.join("result.mkv"), "rgb48le");
    let samples: Vec<u16> = raw.chunks_exact(2).map(|b| u16::from_le_bytes([b[0], b[1]])).collect();
    assert!(samples.iter().all(|s| s % 257 == 0), "the 16-bit samples hold 8-bit values");
    let bytes: Vec<u8> = samples.iter().map(|s| (s / 257) as u8).collect();
    Tensor::from_slice(&bytes).view([-1, height, width, 3])
}

/// Bytes against the original's: within 2 codes, at most 0.5 % of them different (issue 55).
fn check_bytes(label: &str, ours: &Tensor, expected: &Tensor) {
    assert_eq!(ours.size(), expected.size(), "{label}");
    let off = (ours.to_kind(Kind::Int16) - expected.to_kind(Kind::Int16)).abs();
    let (differing, worst) = (off.gt(0).sum(Kind::Int64).int64_value(&[]), off.max().int64_value(&[]));
    println!("{label}: {differing} of {} bytes differ from the original's, by at most {worst}", expected.numel());
    assert!(worst <= 2 && differing * 200 <= expected.numel() as i64, "{label}: {differing} bytes differ, by up to {worst}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flashvsr_restore_makes_the_originals_frames_and_keeps_the_whole_picture() {
    let dir = tempfile::tempdir().unwrap();
    let (server, case) = box_with_model(dir.path(), "FlashVSR", &[]);
    let client = client();
    let (_, listing) = get_json(&client, &server.url("/v1/models")).await;
    let model = listing["models"].as_array().unwrap().iter().find(|m| m["name"] == "FlashVSR").unwrap_or_else(|| panic!("{listing}"));
    assert_eq!((model["family"].as_str(), model["variant"].as_str(), model["present"].as_bool()), (Some("flashvsr"), Some("1.0"), Some(true)), "{model}");
    assert_eq!(model["ops"], serde_json::json!(["restore"]), "{model}");
    let clip = lossless_clip(&case["lr_u8_thwc"], &dir.path().join("lr.mkv"));
    // The original's centre crop to 128-multiples: its 29 frames of 128×256.
    let query = "op=restore&model=FlashVSR&fit=crop&dtype=f32&output_format=ffv1&filename=lr.mkv";
    let job = run_job(&client, &server, query, clip.clone()).await;
    let ours = result_bytes(&fetch(&client, &server, &job).await, dir.path(), 128, 256);
    check_bytes("FlashVSR 1.0 Tiny over HTTP, fit=crop", &ours, &case["final_u8_thwc"]);
    // The default keeps the whole picture: 4× the input, every frame.
    let job = run_job(&client, &server, "op=restore&model=FlashVSR&dtype=f32&output_format=ffv1&filename=lr.mkv", clip).await;
    let whole = result_bytes(&fetch(&client, &server, &job).await, dir.path(), 160, 256);
    assert_eq!(whole.size(), vec![29, 160, 256, 3]);
    // FlashVSR-Full: the same DiT's latents through a Wan 2.1 VAE of the box, named with vae=.
    let vae_dir = dir.path().join("models/vae");
    std::fs::create_dir_all(&vae_dir).unwrap();
    std::fs::copy(Path::new(REFERENCE).join("../wan21_original/weights.safetensors"), vae_dir.join("wan21-small.safetensors")).unwrap();
    let full_case = read_tensor_map(&Path::new(REFERENCE).join("e2e_full.safetensors"));
    let job = run_job(&client, &server, &format!("{query}&vae=wan21-small"), lossless_clip(&case["lr_u8_thwc"], &dir.path().join("lr.mkv"))).await;
    let full = result_bytes(&fetch(&client, &server, &job).await, dir.path(), 128, 256).index_select(0, &full_case["keep_frames"]);
    check_bytes("FlashVSR 1.0 Full over HTTP, fit=crop, the reference's frames 0 and 28", &full, &full_case["final_u8_thwc.keep_frames"]);
    let (status, body) = upload_raw(&client, &server, "op=restore&model=FlashVSR&vae=nothing&filename=lr.mkv", vec![0u8; 16]).await;
    assert_eq!((status, body["error"]["code"].as_str()), (400, Some("unknown-model")), "{body}");
    // SeedVR2's parameters are refused for it, not ignored.
    let (status, body) = upload_raw(&client, &server, "op=restore&model=FlashVSR&batch_frames=21&filename=lr.mkv", vec![0u8; 16]).await;
    assert_eq!((status, body["error"]["code"].as_str()), (400, Some("invalid-restore-parameter")), "{body}");
}

/// v1.1 weights run with v1.1's code (its LQ projection carries its caches from clip to clip) when the
/// folder is named as the authors name that release: the original v1.1's frames
/// (../shared/reference/flashvsr/v1_1_e2e_tiny: frames 0, 10, 20, 21, 28, across the first step's end).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flashvsr_v1_1_folder_runs_the_v1_1_code_over_http() {
    let dir = tempfile::tempdir().unwrap();
    let (server, case) = box_with_model(dir.path(), "FlashVSR-v1.1", &[]);
    let v1_1 = read_tensor_map(&Path::new(REFERENCE).join("v1_1_e2e_tiny.safetensors"));
    let client = client();
    let (_, listing) = get_json(&client, &server.url("/v1/models")).await;
    let model = listing["models"].as_array().unwrap().iter().find(|m| m["name"] == "FlashVSR-v1.1").unwrap_or_else(|| panic!("{listing}"));
    assert_eq!(model["variant"], "1.1", "{model}");
    let clip = lossless_clip(&case["lr_u8_thwc"], &dir.path().join("lr.mkv"));
    let job = run_job(&client, &server, "op=restore&model=FlashVSR-v1.1&fit=crop&dtype=f32&output_format=ffv1&filename=lr.mkv", clip).await;
    assert_eq!(job["plan"]["flashvsr_release"], "1.1", "{}", job["plan"]);
    let ours = result_bytes(&fetch(&client, &server, &job).await, dir.path(), 128, 256).index_select(0, &v1_1["keep_frames"]);
    check_bytes("FlashVSR 1.1 Tiny over HTTP, fit=crop, the reference's kept frames", &ours, &v1_1["final_u8_thwc.keep_frames"]);
}

/// A still comes back as a still, 4× and whole: the one frame run as a clip of its copies (the original
/// needs 21 frames or more), so it equals the first frame of the restore of a 21-frame clip of its copies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_still_restored_by_flashvsr_is_the_first_frame_of_a_clip_of_its_copies() {
    let dir = tempfile::tempdir().unwrap();
    let (server, case) = box_with_model(dir.path(), "FlashVSR", &[]);
    let client = client();
    let frame = case["lr_u8_thwc"].narrow(0, 3, 1);
    let still = dir.path().join("frame.png");
    lossless_clip(&frame, &dir.path().join("frame.mkv"));
    let status = Command::new("ffmpeg").args(["-nostdin", "-v", "error", "-y", "-i"]).arg(dir.path().join("frame.mkv")).arg(&still).status().unwrap();
    assert!(status.success());
    let job = run_job(&client, &server, "op=restore&model=FlashVSR&dtype=f32&filename=frame.png", std::fs::read(&still).unwrap()).await;
    assert_eq!(job["output"]["content_type"], "image/png", "{job}");
    let png = fetch(&client, &server, &job).await;
    let restored = Tensor::from_slice(&stored_frames(&png, &dir.path().join("out.png"), "rgb24")).view([-1, 160, 256, 3]);
    assert_eq!(restored.size(), vec![1, 160, 256, 3]);
    let copies = lossless_clip(&frame.expand([21, 40, 64, 3], false).contiguous(), &dir.path().join("copies.mkv"));
    let job = run_job(&client, &server, "op=restore&model=FlashVSR&dtype=f32&output_format=ffv1&filename=copies.mkv", copies).await;
    let first = result_bytes(&fetch(&client, &server, &job).await, dir.path(), 160, 256).narrow(0, 0, 1);
    check_bytes("a still against the first frame of a clip of its copies", &restored, &first);
}

/// A DiT file in fp8 e4m3fn (2-D weights one byte each, as the community ships the big DiTs; written by
/// torch) runs with its linear weights kept in fp8 and up-cast per layer: the frames equal those of the same
/// fp8 values widened to f32 at load, and the DiT's weights are held in well under half the bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_fp8_dit_runs_from_its_one_byte_weights() {
    let dir = tempfile::tempdir().unwrap();
    let case = read_tensor_map(&Path::new(REFERENCE).join("e2e_tiny.safetensors"));
    let models = dir.path().join("models");
    let variants = dir.path().join("variants");
    let dit = Path::new(REFERENCE).join("small_dit.safetensors");
    common::run_python("scripts/fixtures/dit_variants.py", &[dit.as_os_str(), variants.as_os_str()]);
    for (name, file) in [("FlashVSR-fp8", "fp8_e4m3fn.safetensors"), ("FlashVSR-widened", "fp8_as_f32.safetensors")] {
        let folder = model_folder(&models, name, &case["context"]);
        std::fs::copy(variants.join(file), folder.join("diffusion_pytorch_model_streaming_dmd.safetensors")).unwrap();
    }
    let server = Server::start(dir.path(), &[("VAEBOX_MODELS_DIR", models.to_str().unwrap())]);
    let client = client();
    let clip = lossless_clip(&case["lr_u8_thwc"], &dir.path().join("lr.mkv"));
    let mut results = Vec::new();
    for model in ["FlashVSR-fp8", "FlashVSR-widened"] {
        let job = run_job(&client, &server, &format!("op=restore&model={model}&fit=crop&dtype=f32&output_format=ffv1&filename=lr.mkv"), clip.clone()).await;
        let bytes = result_bytes(&fetch(&client, &server, &job).await, dir.path(), 128, 256);
        results.push((job["plan"]["dit_weight_bytes"].as_u64().unwrap(), bytes));
    }
    let [(fp8_bytes, fp8), (widened_bytes, widened)] = &results[..] else { unreachable!() };
    assert!(fp8.equal(widened), "the fp8 DiT's frames differ from those of its values widened to f32");
    assert!(!fp8.equal(&case["final_u8_thwc"]), "fp8 rounding changed nothing: the fp8 file was not read as fp8");
    println!("DiT weights held: fp8 {fp8_bytes} B, widened {widened_bytes} B");
    assert!((*fp8_bytes as f64) < 0.4 * *widened_bytes as f64, "fp8 DiT weights held at {fp8_bytes} of {widened_bytes} bytes");
}
