//! The VAE ops over HTTP with a small random-weight Wan 2.1 checkpoint (the reference case's weights,
//! original naming): encode → latent file, decode → video, reconstruct → video with PSNR/SSIM;
//! and latent uploads that cannot be decoded are refused with their codes.
use crate::common;

use std::path::{Path, PathBuf};

use common::*;
use serde_json::{json, Value};
use vaebox::models::wan::{WAN22_LATENTS_MEAN, WAN22_LATENTS_STD};

const WAN21_WEIGHTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/reference/wan21_original/weights.safetensors");
const MODEL: &str = "wan21-tiny";

/// A models folder with the shipped upscalers and the tiny Wan checkpoint under `vae/`.
fn models_dir(root: &Path) -> PathBuf {
    let dir = root.join("models");
    std::fs::create_dir_all(dir.join("vae")).unwrap();
    std::os::unix::fs::symlink(Path::new(REPO).join("models/realesrgan"), dir.join("realesrgan")).unwrap();
    std::fs::copy(WAN21_WEIGHTS, dir.join("vae").join(format!("{MODEL}.safetensors"))).unwrap();
    // The same weights as GGUF, written by the `gguf` package during set-up.
    std::fs::copy(Path::new(REPO).join(".cache/fixtures/wan21_gguf/F16.gguf"), dir.join("vae/wan21-gguf.gguf")).unwrap();
    dir
}

fn read_safetensors_header(bytes: &[u8]) -> Value {
    let len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    serde_json::from_slice(&bytes[8..8 + len]).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn encode_decode_and_reconstruct_a_real_clip() {
    let dir = tempfile::tempdir().unwrap();
    let models = models_dir(dir.path());
    // 10 frames: not 1 + 4k, so the encoder pads to 13 and decoding trims back to 10.
    let clip = dir.path().join("carphone10.mp4");
    make_clip(&media("carphone_pristine.mp4"), 10, false, &clip);
    let server = Server::start(dir.path(), &[("VAEBOX_MODELS_DIR", models.to_str().unwrap())]);
    let client = client();

    let (_, listed) = get_json(&client, &server.url("/v1/models")).await;
    let wan = listed["models"].as_array().unwrap().iter().find(|m| m["name"] == MODEL).expect("the VAE is listed").clone();
    assert_eq!(wan["family"], "wan21");
    assert_eq!(wan["latent_channels"], 16);
    assert_eq!(wan["kind"], "vae");
    let gguf = listed["models"].as_array().unwrap().iter().find(|m| m["name"] == "wan21-gguf").expect("the GGUF VAE is listed");
    assert_eq!((gguf["family"].as_str(), gguf["latent_channels"].as_i64()), (Some("wan21"), Some(16)), "{gguf}");

    let body = std::fs::read(&clip).unwrap();
    let encoded = run_job(&client, &server, &format!("op=vae_encode&model={MODEL}&dtype=f32&filename=phone.mp4"), body.clone()).await;
    let latent = fetch(&client, &server, &encoded).await;
    let header = read_safetensors_header(&latent);
    // 10 frames → 13 (1 + 4·3) → 4 latent frames; 144×176 / 8.
    assert_eq!(header["latent"]["shape"], json!([1, 16, 4, 18, 22]), "{header}");
    assert_eq!(header["latent"]["dtype"], "F32");
    let meta = &header["__metadata__"];
    assert_eq!(meta["model"], MODEL);
    assert_eq!(meta["family"], "wan21");
    assert_eq!(meta["normalized"], "false");
    assert_eq!(meta["source_frames"], "10");
    assert_eq!(meta["fps"], "30000/1001");

    let decoded = run_job(&client, &server, &format!("op=vae_decode&model={MODEL}&dtype=f32&filename=phone.safetensors"), latent.clone()).await;
    assert!(decoded["plan"]["spatial_tiles"].is_null(), "no budget, no tiles: {}", decoded["plan"]);
    // The model's own memory, beside the working memory planned: its f32 weights (the file less its
    // header) and, on the CPU at f32, the Winograd kernels made at load (16/9 of the 3×3 weights).
    let model_bytes = |key: &str| decoded["plan"][key].as_u64().unwrap_or_else(|| panic!("plan.{key}: {}", decoded["plan"]));
    let file_bytes = std::fs::metadata(WAN21_WEIGHTS).unwrap().len();
    assert!(model_bytes("model_weight_bytes") <= file_bytes && model_bytes("model_weight_bytes") > file_bytes * 9 / 10, "{}", decoded["plan"]);
    assert!(model_bytes("model_derived_bytes") > 0 && model_bytes("model_derived_bytes") < model_bytes("model_weight_bytes") * 16 / 9, "{}", decoded["plan"]);
    // A budget too small for whole frames makes the planner tile; the job still succeeds, same shape.
    let tiled = run_job(&client, &server, &format!("op=vae_decode&model={MODEL}&dtype=f32&memory_budget_mib=40"), latent.clone()).await;
    let plan = &tiled["plan"];
    assert!(plan["spatial_tiles"]["tile_width_latent"].as_i64().is_some(), "{plan}");
    assert_eq!(plan["latent_frames_per_chunk"], 1, "{plan}");
    let path = dir.path().join("tiled.mp4");
    std::fs::write(&path, fetch(&client, &server, &tiled).await).unwrap();
    let probed = ffprobe(&path);
    assert_eq!((probed.width, probed.height, probed.frames), (176, 144, 10));
    // Below one frame of causal caches (≈ 31 MiB here) only tile-major decoding fits.
    let tile_major = run_job(&client, &server, &format!("op=vae_decode&model={MODEL}&dtype=f32&memory_budget_mib=24"), latent.clone()).await;
    let plan = &tile_major["plan"];
    assert_eq!((plan["tile_major"].as_bool(), plan["fits_budget"].as_bool()), (Some(true), Some(true)), "{plan}");
    let path = dir.path().join("tile_major.mp4");
    std::fs::write(&path, fetch(&client, &server, &tile_major).await).unwrap();
    let probed = ffprobe(&path);
    assert_eq!((probed.width, probed.height, probed.frames), (176, 144, 10));
    assert_eq!(tile_major["progress"]["done"], 10);
    // The spools are in the job's resume folder, gone with it.
    let spools = dirs_under(&server.data_dir).into_iter().filter(|d| d.file_name().unwrap().to_string_lossy().ends_with(".resume")).collect::<Vec<_>>();
    assert!(spools.is_empty(), "tile-major spool left behind: {spools:?}");
    let path = dir.path().join("decoded.mp4");
    std::fs::write(&path, fetch(&client, &server, &decoded).await).unwrap();
    let probed = ffprobe(&path);
    assert_eq!((probed.width, probed.height, probed.frames), (176, 144, 10));
    assert_eq!(probed.fps, "30000/1001");
    assert_eq!(decoded["progress"]["done"], 10);

    let rebuilt = run_job(&client, &server, &format!("op=vae_reconstruct&model={MODEL}&dtype=f32"), body).await;
    let path = dir.path().join("rebuilt.mp4");
    std::fs::write(&path, fetch(&client, &server, &rebuilt).await).unwrap();
    let probed = ffprobe(&path);
    assert_eq!((probed.width, probed.height, probed.frames), (176, 144, 10));
    let metrics = &rebuilt["metrics"];
    assert_eq!(metrics["frames_compared"], 10, "{metrics}");
    // Random weights reconstruct badly, but they do reconstruct something: finite, in range.
    let (psnr, ssim) = (metrics["psnr_db"].as_f64().unwrap(), metrics["ssim"].as_f64().unwrap());
    assert!(psnr > 0.0 && psnr < 60.0, "{metrics}");
    assert!(ssim > -1.0 && ssim < 1.0, "{metrics}");
    for stage in ["load_model", "read", "compute", "write", "total"] {
        assert!(rebuilt["timings"][stage].as_f64().is_some(), "{}", rebuilt["timings"]);
    }
    // Without an out-of-memory retry: no fallbacks, whole-row convolutions (a reconstruct has two halves).
    assert_eq!((encoded["plan"]["fallbacks"].clone(), encoded["plan"]["row_split"].clone()), (json!([]), Value::Null));
    assert_eq!(rebuilt["plan"]["row_split"], json!({"encoder": null, "decoder": null}), "{}", rebuilt["plan"]);
    assert!(rebuilt["timings"].get("peak_device_bytes").is_some_and(Value::is_null), "no CUDA here: {}", rebuilt["timings"]);

    // What these jobs carry is what /openapi.json describes, down to the reconstruct's row split halves.
    let (_, openapi) = get_json(&client, &server.url("/openapi.json")).await;
    for job in [&encoded, &decoded, &tiled, &rebuilt] {
        assert_eq!(undescribed_keys(&openapi, job), Vec::<String>::new(), "{}", job["op"]);
    }
    let schemas = &openapi["components"]["schemas"];
    assert_eq!(schemas["VaeReconstructPlan"]["properties"]["row_split"]["$ref"], "#/components/schemas/RowSplitHalves");
    let halves = &schemas["RowSplitHalves"]["properties"];
    assert!(["encoder", "decoder"].iter().all(|k| halves[k].is_object()), "{halves}");
    assert_eq!(openapi["components"]["schemas"]["RowSplit"]["required"], json!(["max_band_bytes"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn normalised_latents_and_comfyui_latents_decode() {
    let dir = tempfile::tempdir().unwrap();
    let models = models_dir(dir.path());
    let clip = dir.path().join("carphone5.mp4");
    make_clip(&media("carphone_pristine.mp4"), 5, false, &clip);
    let server = Server::start(dir.path(), &[("VAEBOX_MODELS_DIR", models.to_str().unwrap())]);
    let client = client();
    let body = std::fs::read(&clip).unwrap();
    let raw = fetch(&client, &server, &run_job(&client, &server, &format!("op=vae_encode&model={MODEL}&dtype=f32"), body.clone()).await).await;
    let normalized =
        fetch(&client, &server, &run_job(&client, &server, &format!("op=vae_encode&model={MODEL}&dtype=f32&normalize=true"), body).await).await;
    assert_eq!(read_safetensors_header(&normalized)["__metadata__"]["normalized"], "true");
    // The published statistics, from the reference config (not from our code): normalized = (raw − mean) / std.
    let config: Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/reference/wan21_original/config.json")).unwrap(),
    )
    .unwrap();
    let floats = |bytes: &[u8]| -> Vec<f32> {
        let len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
        bytes[8 + len..].chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
    };
    let (raw_values, norm_values) = (floats(&raw), floats(&normalized));
    let per_channel = raw_values.len() / 16;
    for (i, (r, n)) in raw_values.iter().zip(&norm_values).enumerate() {
        let c = i / per_channel;
        let (mean, std) = (config["latents_mean"][c].as_f64().unwrap(), config["latents_std"][c].as_f64().unwrap());
        assert!(((*r as f64 - mean) / std - *n as f64).abs() < 1e-5, "channel {c}");
    }
    // Both decode to the same video (the server undoes the normalisation it recorded), up to the float
    // rounding of (x − mean) / std · std + mean: compared as the decoder's floats, not as encoded video,
    // where a rounding difference can flip a pixel and the encoder's choices after it.
    let decode = format!("op=vae_decode&model={MODEL}&dtype=f32&output_format=safetensors");
    let a = run_job(&client, &server, &decode, raw).await;
    let b = run_job(&client, &server, &decode, normalized).await;
    let (a, b) = (floats(&fetch(&client, &server, &a).await), floats(&fetch(&client, &server, &b).await));
    assert_eq!(a.len(), b.len());
    let largest = a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0.0f32, f32::max);
    assert!(largest < 1e-3, "the two decodes differ by up to {largest}");

    // A ComfyUI latent: tensor `latent_tensor`, no metadata; decodes at the default fps with 1 + 4(t−1) frames.
    let comfy = dir.path().join("x.latent");
    let values: Vec<f32> = (0..16 * 2 * 4 * 6).map(|i| ((i % 13) as f32 - 6.0) / 6.0).collect();
    write_safetensors(&comfy, "latent_tensor", &[1, 16, 2, 4, 6], &values, Value::Null);
    let job = run_job(&client, &server, &format!("op=vae_decode&model={MODEL}&filename=x.latent&dtype=f16"), std::fs::read(&comfy).unwrap()).await;
    assert_eq!(job["timings"]["dtype"], "f16", "the precision that ran is recorded");
    let path = dir.path().join("comfy.mp4");
    std::fs::write(&path, fetch(&client, &server, &job).await).unwrap();
    let probed = ffprobe(&path);
    assert_eq!((probed.width, probed.height, probed.frames), (48, 32, 5));
    assert_eq!(probed.fps, "16/1");
}

/// A Wan 2.2 checkpoint with the released latent width (48 channels) on a narrow network, made here by
/// diffusers (tests/python/make_wan22_z48.py): the diffusers fixtures in .cache are narrower in z as well.
fn make_wan22_z48(dir: &Path) -> PathBuf {
    let python = std::env::var_os("VAEBOX_PYTHON").map(PathBuf::from).unwrap_or_else(|| Path::new(REPO).join(".venv/bin/python"));
    let out = dir.join("wan22_z48");
    let status = std::process::Command::new(python)
        .arg(Path::new(REPO).join("tests/python/make_wan22_z48.py"))
        .arg(&out)
        .status()
        .expect("python runs (set VAEBOX_PYTHON)");
    assert!(status.success(), "make_wan22_z48.py failed");
    out.join("weights.safetensors")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wan22_normalised_latents_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let models = dir.path().join("models");
    std::fs::create_dir_all(models.join("vae")).unwrap();
    std::fs::copy(make_wan22_z48(dir.path()), models.join("vae/wan22-z48.safetensors")).unwrap();
    // 176×144 is a whole number of Wan 2.2's 16-pixel latent cells.
    let clip = dir.path().join("carphone5.mp4");
    make_clip(&media("carphone_pristine.mp4"), 5, false, &clip);
    let server = Server::start(dir.path(), &[("VAEBOX_MODELS_DIR", models.to_str().unwrap())]);
    let client = client();
    let (_, listed) = get_json(&client, &server.url("/v1/models")).await;
    let model = listed["models"].as_array().unwrap().iter().find(|m| m["name"] == "wan22-z48").expect("listed").clone();
    assert_eq!((model["family"].as_str(), model["latent_channels"].as_i64()), (Some("wan22"), Some(48)), "{model}");

    let body = std::fs::read(&clip).unwrap();
    let raw = fetch(&client, &server, &run_job(&client, &server, "op=vae_encode&model=wan22-z48&dtype=f32", body.clone()).await).await;
    let normalized =
        fetch(&client, &server, &run_job(&client, &server, "op=vae_encode&model=wan22-z48&dtype=f32&normalize=true", body.clone()).await).await;
    let header = read_safetensors_header(&normalized);
    assert_eq!(header["latent"]["shape"], json!([1, 48, 2, 9, 11]), "{header}");
    assert_eq!(header["__metadata__"]["normalized"], "true");
    // normalized = (raw − mean) / std per channel. The statistics are the crate's transcription of the original
    // Wan 2.2 code, which the unit test in src/models/wan/config.rs holds against diffusers' copy.
    let floats = |bytes: &[u8]| -> Vec<f32> {
        let len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
        bytes[8 + len..].chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
    };
    let (raw_values, norm_values) = (floats(&raw), floats(&normalized));
    assert_eq!(raw_values.len(), norm_values.len());
    let per_channel = raw_values.len() / 48;
    for (i, (r, n)) in raw_values.iter().zip(&norm_values).enumerate() {
        let c = i / per_channel;
        let (mean, std) = (WAN22_LATENTS_MEAN[c], WAN22_LATENTS_STD[c]);
        assert!(((*r as f64 - mean) / std - *n as f64).abs() < 1e-5, "channel {c}: raw {r}, normalized {n}");
    }
    // The server undoes the normalisation it recorded, so both decode to the same video. Not to the same
    // bytes: (raw − mean) / std · std + mean is raw only up to f32 rounding, which flips a few 8-bit pixels
    // that x264 then spreads a little (measured: 174 of 380160 samples, by at most 5). Decoding without
    // undoing it moves nearly every sample.
    let a = run_job(&client, &server, "op=vae_decode&model=wan22-z48&dtype=f32", raw).await;
    let b = run_job(&client, &server, "op=vae_decode&model=wan22-z48&dtype=f32", normalized).await;
    let a = rgb_frames(&fetch(&client, &server, &a).await, &dir.path().join("from_raw.mp4"));
    let b = rgb_frames(&fetch(&client, &server, &b).await, &dir.path().join("from_normalized.mp4"));
    assert_eq!(a.len(), 176 * 144 * 3 * 5);
    let differing: Vec<u8> = a.iter().zip(&b).map(|(x, y)| x.abs_diff(*y)).filter(|d| *d > 0).collect();
    assert!(differing.len() * 1000 < a.len() && differing.iter().all(|d| *d <= 8), "{} samples differ, by up to {:?}", differing.len(), differing.iter().max());
}

/// Latent sizes without published statistics (a narrow Wan 2.2 and a narrow Wan 2.1, diffusers fixtures)
/// cannot normalise: refused at submission, from the checkpoint's header, before anything is queued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn normalisation_without_published_statistics_is_refused_at_submission() {
    let dir = tempfile::tempdir().unwrap();
    let models = dir.path().join("models");
    std::fs::create_dir_all(models.join("vae")).unwrap();
    let fixture = |case: &str| Path::new(REPO).join(format!(".cache/fixtures/wan_cases/{case}/weights.safetensors"));
    std::fs::copy(fixture("wan22_r2_t9_48x80"), models.join("vae/wan22-z8.safetensors")).unwrap();
    std::fs::copy(fixture("wan21_z4_r1_b2_t5_40x56"), models.join("vae/wan21-z4.safetensors")).unwrap();
    let clip = dir.path().join("carphone5.mp4");
    make_clip(&media("carphone_pristine.mp4"), 5, false, &clip);
    let server = Server::start(dir.path(), &[("VAEBOX_MODELS_DIR", models.to_str().unwrap())]);
    let client = client();
    let body = std::fs::read(&clip).unwrap();
    let refused = |status: u16, body: &Value, want: (u16, &str), names: &[&str]| {
        assert_eq!((status, body["error"]["code"].as_str()), (want.0, Some(want.1)), "{body}");
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert!(names.iter().all(|n| message.contains(n)), "the message should name {names:?}: {message}");
    };

    let (s, b) = upload_raw(&client, &server, "op=vae_encode&model=wan22-z8&normalize=true", body.clone()).await;
    refused(s, &b, (400, "normalize-unsupported"), &["wan22-z8", "8 latent channels"]);
    let (s, b) = upload_raw(&client, &server, "op=vae_encode&model=wan21-z4&normalize=1", body.clone()).await;
    refused(s, &b, (400, "normalize-unsupported"), &["wan21-z4", "4 latent channels"]);
    let form = reqwest::multipart::Form::new()
        .text("op", "vae_encode")
        .text("model", "wan22-z8")
        .text("normalize", "true")
        .part("file", reqwest::multipart::Part::bytes(body.clone()).file_name("clip.mp4"));
    let (status, refusal) = send_json(client.post(server.url("/v1/jobs")).multipart(form)).await;
    refused(status, &refusal, (400, "normalize-unsupported"), &["wan22-z8"]);

    // A latent of the right size marked `normalized` cannot be undone; the same latent unmarked decodes.
    let latent = dir.path().join("z8.safetensors");
    let values: Vec<f32> = (0..8 * 2 * 3 * 5).map(|i| ((i % 7) as f32 - 3.0) / 3.0).collect();
    write_safetensors(&latent, "latent", &[1, 8, 2, 3, 5], &values, json!({"family": "wan22", "normalized": "true"}));
    let (s, b) = upload_raw(&client, &server, "op=vae_decode&model=wan22-z8", std::fs::read(&latent).unwrap()).await;
    refused(s, &b, (422, "latent-normalize-unsupported"), &["wan22-z8", "normalized"]);
    write_safetensors(&latent, "latent", &[1, 8, 2, 3, 5], &values, json!({"family": "wan22", "normalized": "false"}));
    let decoded = run_job(&client, &server, "op=vae_decode&model=wan22-z8&dtype=f32", std::fs::read(&latent).unwrap()).await;
    // Without normalize the same model encodes.
    let encoded = run_job(&client, &server, "op=vae_encode&model=wan21-z4&dtype=f32", body).await;

    let (_, list) = get_json(&client, &server.url("/v1/jobs")).await;
    let mut ids: Vec<&str> = list["jobs"].as_array().unwrap().iter().filter_map(|j| j["id"].as_str()).collect();
    let mut accepted = vec![decoded["id"].as_str().unwrap(), encoded["id"].as_str().unwrap()];
    ids.sort();
    accepted.sort();
    assert_eq!(ids, accepted, "refused requests must not become jobs: {list}");
    let uploads = files_under(&server.data_dir.join("data/uploads"));
    assert!(uploads.is_empty(), "refused uploads left files behind: {uploads:?}");
    assert_eq!(std::fs::read_dir(server.data_dir.join("data/jobs")).unwrap().count(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latents_that_cannot_be_decoded_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let models = models_dir(dir.path());
    let server = Server::start(dir.path(), &[("VAEBOX_MODELS_DIR", models.to_str().unwrap())]);
    let client = client();
    let query = format!("op=vae_decode&model={MODEL}");
    let path = dir.path().join("bad.safetensors");
    let cases: Vec<(&str, Vec<usize>, f32, Value, &str)> = vec![
        ("latent", vec![1, 8, 2, 4, 4], 0.5, Value::Null, "latent-channel-mismatch"),
        ("latent", vec![1, 16, 4, 4], 0.5, Value::Null, "latent-bad-shape"),
        ("latent", vec![1, 16, 2, 4, 4], f32::NAN, Value::Null, "latent-not-finite"),
        ("latent", vec![1, 16, 2, 4, 4], f32::INFINITY, Value::Null, "latent-not-finite"),
        ("latent", vec![1, 16, 2, 4, 4], 0.5, json!({"model": "seedvr2-ema", "family": "seedvr2"}), "latent-model-mismatch"),
        ("weights", vec![1, 16, 2, 4, 4], 0.5, Value::Null, "not-a-latent"),
        ("latent", vec![1, 16, 2, 4, 4], 0.5, json!({"fps": "0/0"}), "latent-bad-metadata"),
        ("latent", vec![1, 16, 2, 4, 4], 0.5, json!({"fps": "-5/1"}), "latent-bad-metadata"),
        // Past any rate a player or ffmpeg takes (the decoded video was written at a million frames a second).
        ("latent", vec![1, 16, 2, 4, 4], 0.5, json!({"fps": "1000000/1"}), "latent-bad-metadata"),
    ];
    for (name, shape, value, metadata, code) in cases {
        let values = vec![value; shape.iter().product()];
        write_safetensors(&path, name, &shape, &values, metadata);
        let (status, body) = upload_raw(&client, &server, &query, std::fs::read(&path).unwrap()).await;
        assert_eq!(status, 422, "{code}: {body}");
        assert_eq!(body["error"]["code"], code, "{body}");
    }
    let clip = dir.path().join("c.mp4");
    make_clip(&media("carphone_pristine.mp4"), 2, false, &clip);
    let (status, body) = upload_raw(&client, &server, &query, std::fs::read(&clip).unwrap()).await;
    assert_eq!((status, body["error"]["code"].as_str()), (422, Some("not-a-latent")), "{body}");
    // Each names the op its input is for: a video to vae_decode, a latent to vae_encode.
    assert!(body["error"]["message"].as_str().unwrap().contains("vae_encode, vae_reconstruct, upscale and restore take those"), "{body}");
    write_safetensors(&path, "latent", &[1, 16, 2, 4, 4], &[0.5; 16 * 2 * 4 * 4], Value::Null);
    let (status, body) = upload_raw(&client, &server, &format!("op=vae_encode&model={MODEL}"), std::fs::read(&path).unwrap()).await;
    assert_eq!((status, body["error"]["code"].as_str()), (422, Some("not-a-video")), "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("vae_decode takes latents"), "{body}");
    let (status, body) = upload_raw(&client, &server, &format!("op=upscale&model={MODEL}"), std::fs::read(&clip).unwrap()).await;
    assert_eq!((status, body["error"]["code"].as_str()), (400, Some("unsupported-op")), "{body}");
    let (_, list) = get_json(&client, &server.url("/v1/jobs")).await;
    assert!(list["jobs"].as_array().unwrap().is_empty(), "{list}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seedvr2_runs_the_same_ops() {
    // Below one whole frame of this small model's estimated working memory at 144×176 (≈ 270 MiB).
    const SEEDVR2_TILED_BUDGET_MIB: u64 = 120;
    let dir = tempfile::tempdir().unwrap();
    let models = dir.path().join("models");
    std::fs::create_dir_all(models.join("vae")).unwrap();
    let weights = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/reference/seedvr2/small_weights.safetensors");
    std::fs::copy(weights, models.join("vae/seedvr2-small.safetensors")).unwrap();
    let clip = dir.path().join("carphone5.mp4");
    make_clip(&media("carphone_pristine.mp4"), 5, false, &clip);
    let server = Server::start(dir.path(), &[("VAEBOX_MODELS_DIR", models.to_str().unwrap())]);
    let client = client();
    let (_, listed) = get_json(&client, &server.url("/v1/models")).await;
    let model = listed["models"].as_array().unwrap().iter().find(|m| m["name"] == "seedvr2-small").expect("listed").clone();
    assert_eq!((model["family"].as_str(), model["latent_channels"].as_i64()), (Some("seedvr2"), Some(16)), "{model}");

    let body = std::fs::read(&clip).unwrap();
    let encoded = run_job(&client, &server, "op=vae_encode&model=seedvr2-small&dtype=f32&normalize=true", body.clone()).await;
    let latent = fetch(&client, &server, &encoded).await;
    let header = read_safetensors_header(&latent);
    assert_eq!(header["latent"]["shape"], json!([1, 16, 2, 18, 22]), "{header}");
    assert_eq!(header["__metadata__"]["family"], "seedvr2");
    let decoded = run_job(&client, &server, "op=vae_decode&model=seedvr2-small&dtype=f32", latent.clone()).await;
    let path = dir.path().join("decoded.mp4");
    std::fs::write(&path, fetch(&client, &server, &decoded).await).unwrap();
    assert_eq!(ffprobe(&path).frames, 5);
    // SeedVR2 has its own measured memory rows, so a budget tiles its decode too.
    let tiled = run_job(&client, &server, &format!("op=vae_decode&model=seedvr2-small&dtype=f32&memory_budget_mib={SEEDVR2_TILED_BUDGET_MIB}"), latent.clone()).await;
    let plan = &tiled["plan"];
    println!("seedvr2 decode at {SEEDVR2_TILED_BUDGET_MIB} MiB: {plan}");
    assert!(plan["spatial_tiles"]["tile_width_latent"].as_i64().is_some() && plan["fits_budget"] == true, "{plan}");
    let path = dir.path().join("tiled.mp4");
    std::fs::write(&path, fetch(&client, &server, &tiled).await).unwrap();
    let probed = ffprobe(&path);
    assert_eq!((probed.width, probed.height, probed.frames), (176, 144, 5));
    // bf16 on a 32 × 32 crop: CPUs without native bf16 (no AVX512-BF16/AMX) run its convolutions 20–80×
    // slower than f32.
    let small = dir.path().join("small5.mp4");
    let status = std::process::Command::new("ffmpeg")
        .args(["-nostdin", "-v", "error", "-y", "-i"])
        .arg(&clip)
        .args(["-vf", "crop=32:32", "-c:v", "libx264", "-crf", "10"])
        .arg(&small)
        .status()
        .unwrap();
    assert!(status.success());
    let rebuilt = run_job(&client, &server, "op=vae_reconstruct&model=seedvr2-small&dtype=bf16", std::fs::read(&small).unwrap()).await;
    assert_eq!(rebuilt["metrics"]["frames_compared"], 5, "{}", rebuilt["metrics"]);
    assert_eq!(rebuilt["timings"]["dtype"], "bf16");
    // A latent made by a Wan model is refused by the SeedVR2 decoder before it is queued.
    let wan_latent = dir.path().join("wan.safetensors");
    write_safetensors(&wan_latent, "latent", &[1, 16, 2, 4, 4], &[0.5; 16 * 2 * 16], json!({"model": "wan21-tiny", "family": "wan21"}));
    let (status, body) = upload_raw(&client, &server, "op=vae_decode&model=seedvr2-small", std::fs::read(&wan_latent).unwrap()).await;
    assert_eq!((status, body["error"]["code"].as_str()), (422, Some("latent-model-mismatch")), "{body}");
}
