//! The TAEHV decoders as the box's VAEs (issue 54): a Wan 2.1 latent decodes with `taew2_1` as it does with
//! the Wan 2.1 VAE, without the client changing anything but the model's name. The box gives and takes the
//! full VAE's raw latent and converts with Wan's published statistics (read here from the Wan reference's
//! own config.json, not from the box); the pictures are the original `taehv.py`'s
//! (../shared/reference/taehv, the small random `taew2_1`).
use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::tensors::{max_abs_diff, read_tensor_map};
use common::*;
use serde_json::Value;
use tch::{Kind, Tensor};

const REFERENCE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/reference");
/// The reference README's bound for a decode in [0, 1], doubled for the box's [-1, 1].
const DECODE_ATOL: f64 = 1e-5;
/// Its bound for latents, through the conversion to the raw space and back (std up to ~3.2).
const LATENT_ATOL: f64 = 1e-5;

fn reference(path: &str) -> PathBuf {
    Path::new(REFERENCE).join(path)
}

/// `vae/taew2_1.safetensors` (the small reference model under its real name, which says its latent space)
/// beside `vae/wan21-small.safetensors` (the small Wan 2.1 VAE, the same 16 latent channels).
fn models_dir(root: &Path) -> PathBuf {
    let dir = root.join("models/vae");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(reference("taehv/taew2_1_weights.safetensors"), dir.join("taew2_1.safetensors")).unwrap();
    std::fs::copy(reference("wan21_original/weights.safetensors"), dir.join("wan21-small.safetensors")).unwrap();
    root.join("models")
}

/// Wan 2.1's published `latents_mean` and `latents_std` as `[1, 16, 1, 1, 1]` columns.
fn wan21_statistics() -> (Tensor, Tensor) {
    let config: Value = serde_json::from_str(&std::fs::read_to_string(reference("wan21_original/config.json")).unwrap()).unwrap();
    let column = |key: &str| {
        let values: Vec<f64> = config[key].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
        Tensor::from_slice(&values).to_kind(Kind::Float).view([1, -1, 1, 1, 1])
    };
    (column("latents_mean"), column("latents_std"))
}

/// NTCHW ↔ NCTHW.
fn swap(x: &Tensor) -> Tensor {
    x.permute([0, 2, 1, 3, 4]).contiguous()
}

fn write_tensor(path: &Path, name: &str, tensor: &Tensor) -> Vec<u8> {
    Tensor::write_safetensors(&[(name, tensor)], path).unwrap();
    std::fs::read(path).unwrap()
}

fn tensor_of(bytes: &[u8], dir: &Path) -> Tensor {
    let path = dir.join("answer.safetensors");
    std::fs::write(&path, bytes).unwrap();
    let tensors: BTreeMap<String, Tensor> = read_tensor_map(&path);
    tensors.into_values().next().expect("one tensor")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wan_latent_decodes_with_taew2_1_as_the_original_decodes_it() {
    let dir = tempfile::tempdir().unwrap();
    let models = models_dir(dir.path());
    let server = Server::start(dir.path(), &[("VAEBOX_MODELS_DIR", models.to_str().unwrap())]);
    let client = client();
    let (_, listing) = get_json(&client, &server.url("/v1/models")).await;
    let taew = listing["models"].as_array().unwrap().iter().find(|m| m["name"] == "taew2_1").unwrap_or_else(|| panic!("{listing}"));
    assert_eq!((taew["family"].as_str(), taew["latent_channels"].as_i64()), (Some("taehv"), Some(16)), "{taew}");

    let case = read_tensor_map(&reference("taehv/taew2_1_case.safetensors"));
    let (mean, std) = wan21_statistics();
    // The diffusion model's latent (what TAEHV takes) as the Wan 2.1 VAE's raw latent, which the box takes.
    let raw = swap(&case["dec_a.latent"]) * &std + &mean;
    let upload = write_tensor(&dir.path().join("latent.safetensors"), "latent", &raw);
    let expected = swap(&case["dec_a.out_parallel"]) * 2.0 - 1.0;

    let query = |model: &str| format!("op=vae_decode&model={model}&dtype=f32&output_format=safetensors&filename=latent.safetensors");
    let job = run_job(&client, &server, &query("taew2_1"), upload.clone()).await;
    let frames = tensor_of(&fetch(&client, &server, &job).await, dir.path());
    assert_eq!(frames.size(), vec![1, 3, 13, 24, 32], "4 latent frames make 4·4 − 3 frames");
    let diff = max_abs_diff(&frames, &expected);
    println!("taew2_1 decode of a Wan 2.1 latent: max abs {diff:.2e} against taehv.py");
    assert!(diff <= DECODE_ATOL, "the decode differs from the original by {diff}");
    // The same upload through the Wan 2.1 VAE: taken alike, the same frames and size.
    let job = run_job(&client, &server, &query("wan21-small"), upload).await;
    let wan = tensor_of(&fetch(&client, &server, &job).await, dir.path());
    assert_eq!(wan.size(), frames.size(), "the Wan 2.1 VAE and taew2_1 give other shapes for one latent");

    // A pixel tensor sent to /v1/encode (the remote protocol) comes back as the Wan 2.1 VAE's raw latent: the
    // original's latent, converted.
    let video = swap(&case["enc_a.video"]) * 2.0 - 1.0;
    let shape: Vec<String> = video.size().iter().map(|d| format!("shape={d}")).collect();
    let body: Vec<u8> = Vec::<f32>::try_from(video.flatten(0, -1)).unwrap().iter().flat_map(|v| v.to_le_bytes()).collect();
    let response = client.post(server.url(&format!("/v1/encode?model=taew2_1&dtype=f32&{}&dtype=float32", shape.join("&")))).body(body).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let answer_shape: Vec<i64> = serde_json::from_str(response.headers()["shape"].to_str().unwrap()).unwrap();
    let values: Vec<f32> = response.bytes().await.unwrap().chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
    let latent = Tensor::from_slice(&values).view(answer_shape.as_slice());
    let original = swap(&case["enc_a.latent_parallel"]) * &std + &mean;
    // 10 frames: the original pads them to 12 and gives 3 latents; the box counts latents as the Wan VAE does
    // (1 + ⌈9 / 4⌉ = 4), the last of copies of the last frame, which its decode crops away again.
    let [_, _, _, h, w] = original.size()[..] else { unreachable!() };
    assert_eq!(latent.size(), vec![1, 16, 4, h, w], "the encoded latent's shape");
    let diff = max_abs_diff(&latent.narrow(2, 0, 3), &original);
    println!("taew2_1 encode: max abs {diff:.2e} against taehv.py");
    assert!(diff <= LATENT_ATOL, "the encode differs from the original by {diff}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_clip_encodes_decodes_and_reconstructs_with_taew2_1() {
    let dir = tempfile::tempdir().unwrap();
    let models = models_dir(dir.path());
    let server = Server::start(dir.path(), &[("VAEBOX_MODELS_DIR", models.to_str().unwrap())]);
    let client = client();
    let clip = dir.path().join("clip.mp4");
    make_clip(&media("carphone_pristine.mp4"), 9, false, &clip);
    let clip = std::fs::read(&clip).unwrap();

    let encoded = run_job(&client, &server, "op=vae_encode&model=taew2_1&filename=clip.mp4", clip.clone()).await;
    assert_eq!(encoded["plan"]["latent_shape"], serde_json::json!([1, 16, 3, 18, 22]), "{}", encoded["plan"]);
    let latent = fetch(&client, &server, &encoded).await;
    // The latent file (it records the model that made it) decodes with either model of its latent space.
    for model in ["taew2_1", "wan21-small"] {
        let query = format!("op=vae_decode&model={model}&filename=clip.latent.safetensors");
        let decoded = run_job(&client, &server, &query, latent.clone()).await;
        let media = &decoded["output"]["media"];
        assert_eq!((media["frames"].as_u64(), media["width"].as_u64(), media["height"].as_u64()), (Some(9), Some(176), Some(144)), "{model}: {media}");
    }
    let by_wan = run_job(&client, &server, "op=vae_encode&model=wan21-small&filename=clip.mp4", clip.clone()).await;
    let query = "op=vae_decode&model=taew2_1&filename=clip.latent.safetensors";
    let decoded = run_job(&client, &server, query, fetch(&client, &server, &by_wan).await).await;
    assert_eq!(decoded["output"]["media"]["frames"].as_u64(), Some(9), "{}", decoded["output"]);

    let rebuilt = run_job(&client, &server, "op=vae_reconstruct&model=taew2_1&filename=clip.mp4", clip).await;
    assert_eq!(rebuilt["output"]["media"]["frames"].as_u64(), Some(9), "{}", rebuilt["output"]);
    assert_eq!(rebuilt["metrics"]["frames_compared"].as_u64(), Some(9), "{}", rebuilt["metrics"]);
    println!("taew2_1 (small random weights) reconstruction: {}", rebuilt["metrics"]);
}

/// A released-style `.pth` (torch.save of the state dict, here fp16) is listed under its name and runs: the
/// small `taew2_2` (patch 2, 48 channels, Wan 2.2's latent) decodes a latent to 4T − 3 frames at 16× the cells.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pth_file_is_listed_and_decodes() {
    let dir = tempfile::tempdir().unwrap();
    let models = models_dir(dir.path());
    super::taehv_reference::torch_save(&reference("taehv/taew2_2_weights.safetensors"), &models.join("vae/taew2_2.pth"), "float16");
    let server = Server::start(dir.path(), &[("VAEBOX_MODELS_DIR", models.to_str().unwrap()), ("VAEBOX_MAX_WIDTH", "600")]);
    let client = client();
    let (_, listing) = get_json(&client, &server.url("/v1/models")).await;
    let taew = listing["models"].as_array().unwrap().iter().find(|m| m["name"] == "taew2_2").unwrap_or_else(|| panic!("{listing}"));
    assert_eq!((taew["family"].as_str(), taew["latent_channels"].as_i64(), taew["present"].as_bool()), (Some("taehv"), Some(48), Some(true)), "{taew}");
    let latent = Tensor::randn([1, 48, 2, 2, 3], (Kind::Float, tch::Device::Cpu));
    let upload = write_tensor(&dir.path().join("latent.safetensors"), "latent", &latent);
    let job = run_job(&client, &server, "op=vae_decode&model=taew2_2&dtype=f32&output_format=safetensors&filename=latent.safetensors", upload).await;
    let frames = tensor_of(&fetch(&client, &server, &job).await, dir.path());
    assert_eq!(frames.size(), vec![1, 3, 5, 32, 48], "2 latent frames of 2×3 cells");
    // Its output is sized by its own factor before queueing: 40 cells are 640 pixels (Wan's 8 would give 320).
    let (status, body) = send_json(client.post(server.url("/v1/decode?model=taew2_2&shape=1&shape=48&shape=1&shape=8&shape=40")).body(vec![0u8; 16])).await;
    assert_eq!((status, body["error"]["code"].as_str()), (422, Some("output-too-large")), "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("width 640 (max 600)"), "{body}");
}

/// Under a budget a whole push does not fit, TAEHV decodes frame by frame (one frame's activations alive)
/// instead of cutting the frame into tiles: the plan says so, the frames are the same as without a budget,
/// and the job's peak memory is lower.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tight_budget_decodes_frame_by_frame_to_the_same_frames() {
    let dir = tempfile::tempdir().unwrap();
    let models = models_dir(dir.path());
    let server = Server::start(dir.path(), &[("VAEBOX_MODELS_DIR", models.to_str().unwrap())]);
    let client = client();
    tch::manual_seed(3);
    let latent = Tensor::randn([1, 16, 5, 48, 48], (Kind::Float, tch::Device::Cpu));
    let upload = write_tensor(&dir.path().join("latent.safetensors"), "latent", &latent);
    let query = |budget: &str| format!("op=vae_decode&model=taew2_1&dtype=f32&output_format=safetensors&filename=latent.safetensors{budget}");
    let whole = run_job(&client, &server, &query(""), upload.clone()).await;
    assert_eq!(whole["plan"]["frame_by_frame"], false, "{}", whole["plan"]);
    let budgeted = run_job(&client, &server, &query("&memory_budget_mib=40"), upload).await;
    let plan = &budgeted["plan"];
    assert_eq!((plan["frame_by_frame"].as_bool(), plan["spatial_tiles"].is_null(), plan["fits_budget"].as_bool()), (Some(true), true, Some(true)), "{plan}");
    assert!(plan["estimated_peak_bytes"].as_u64().unwrap() <= 40 << 20, "{plan}");
    let (a, b) = (tensor_of(&fetch(&client, &server, &whole).await, dir.path()), tensor_of(&fetch(&client, &server, &budgeted).await, dir.path()));
    assert_eq!(a.size(), vec![1, 3, 17, 384, 384]);
    let diff = max_abs_diff(&a, &b);
    assert!(diff <= 1e-5, "frame by frame differs from the whole push by {diff}");
    let peak = |job: &Value| job["timings"]["peak_host_bytes"].as_f64().unwrap_or_else(|| panic!("{}", job["timings"])) / 1048576.0;
    println!("taew2_1 decode of 17 frames of 384²: whole pushes peak {:.0} MiB, frame by frame {:.0} MiB ({plan})", peak(&whole), peak(&budgeted));
    assert!(peak(&budgeted) < peak(&whole), "frame by frame peaked at {:.0} MiB, whole pushes at {:.0}", peak(&budgeted), peak(&whole));
}

/// diffusers' own `remote_decode` and `remote_encode` against taew2_1, as a Wan pipeline would call the box with
/// its Wan 2.1 latents (tests/python/diffusers_taehv_check.py): the original's pictures and latents.
#[test]
fn diffusers_remote_clients_get_the_originals_results_from_taew2_1() {
    let dir = tempfile::tempdir().unwrap();
    let models = models_dir(dir.path());
    let server = Server::start(dir.path(), &[("VAEBOX_MODELS_DIR", models.to_str().unwrap())]);
    let case = reference("taehv/taew2_1_case.safetensors");
    let config = reference("wan21_original/config.json");
    let output = run_python("tests/python/diffusers_taehv_check.py", &[std::ffi::OsStr::new(&server.base), case.as_os_str(), config.as_os_str()]);
    let result: Value = serde_json::from_str(&output).unwrap_or_else(|e| panic!("{e}: {output}"));
    println!("diffusers against taew2_1: {result}");
    assert_eq!(result["decode_shape"], serde_json::json!([1, 3, 13, 24, 32]), "{result}");
    assert!(result["decode_max_abs"].as_f64().unwrap() <= DECODE_ATOL, "{result}");
    assert_eq!(result["encode_shape"].as_array().map(|s| s[..3].to_vec()), Some(vec![2.into(), 16.into(), 1.into()]), "{result}");
    assert!(result["encode_max_abs"].as_f64().unwrap() <= LATENT_ATOL, "{result}");
}
