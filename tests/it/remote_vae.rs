//! `/v1/encode` and `/v1/decode` driven by diffusers' own `remote_encode` / `remote_decode` clients,
//! checked against reference tensors from the original Wan 2.1 and SeedVR2 code.
use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use serde_json::Value;

const SHARED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/reference");

fn python() -> PathBuf {
    std::env::var_os("VAEBOX_PYTHON").map(PathBuf::from).unwrap_or_else(|| Path::new(REPO).join(".venv/bin/python"))
}

struct Case {
    model: &'static str,
    weights: &'static str,
    case: &'static str,
    keys: [&'static str; 3],
}

const CASES: [Case; 2] = [
    Case { model: "wan21-tiny", weights: "wan21_original/weights.safetensors", case: "wan21_original/case.safetensors", keys: ["sample", "latent_mu", "decoded"] },
    Case {
        model: "seedvr2-small",
        weights: "seedvr2/small_weights.safetensors",
        case: "seedvr2/small_case.safetensors",
        keys: ["sample", "posterior_mean", "decoded"],
    },
];

#[test]
fn diffusers_remote_clients_get_reference_results() {
    let dir = tempfile::tempdir().unwrap();
    let models = dir.path().join("models");
    std::fs::create_dir_all(models.join("vae")).unwrap();
    for case in &CASES {
        std::fs::copy(Path::new(SHARED).join(case.weights), models.join("vae").join(format!("{}.safetensors", case.model))).unwrap();
    }
    let server = Server::start(dir.path(), &[("VAEBOX_MODELS_DIR", models.to_str().unwrap())]);
    for case in &CASES {
        let out = Command::new(python())
            .arg(Path::new(REPO).join("tests/python/diffusers_remote_client.py"))
            .arg(&server.base)
            .arg(case.model)
            .arg(Path::new(SHARED).join(case.case))
            .args(case.keys)
            .output()
            .expect("run python");
        assert!(out.status.success(), "{}: {}", case.model, String::from_utf8_lossy(&out.stderr));
        let result: Value = serde_json::from_slice(&out.stdout).unwrap();
        println!("{}: {result}", case.model);
        assert_eq!(result["encode_shape"], serde_json::json!([1, 16, 3, 8, 12]), "{result}");
        assert_eq!(result["decode_shape"], serde_json::json!([1, 3, 9, 64, 96]), "{result}");
        assert_eq!(result["decode_dtype"], "torch.float32");
        for key in ["encode_max_abs", "decode_max_abs", "decode_scaled_max_abs"] {
            assert!(result[key].as_f64().unwrap() <= 1e-4, "{}: {key} {result}", case.model);
        }
        // bf16 rounding of the latent itself (≈ 2^-8 relative) is all that separates this one.
        assert!(result["decode_bf16_input_max_abs"].as_f64().unwrap() < 0.1, "{result}");
        assert_eq!(result["mp4_has_ftyp"], true, "{result}");
        let error = &result["wrong_channels_error"]["error"];
        assert_eq!(error["code"], "latent-channel-mismatch", "{result}");
    }
    // Each call was an ordinary job, visible in the list.
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (_, list) = runtime.block_on(get_json(&client(), &server.url("/v1/jobs?limit=100")));
    let jobs = list["jobs"].as_array().unwrap();
    assert_eq!(jobs.iter().filter(|j| j["status"] == "succeeded").count(), 2 * 5, "{list}");
}

/// The `dtype` diffusers' clients append describes the tensor, not the precision: a job runs at the box's
/// `dtype` unless the endpoint URL names its own first (on an H100 the tensor's float32 made a 480p×81
/// remote decode take 53.7 s of f32 instead of about 1.3 s of bf16).
#[tokio::test]
async fn the_tensor_dtype_does_not_choose_the_precision() {
    let dir = tempfile::tempdir().unwrap();
    let models = models_with_small_wan21(dir.path());
    let server = Server::start(dir.path(), &[("VAEBOX_MODELS_DIR", models.to_str().unwrap()), ("VAEBOX_DTYPE", "bf16")]);
    let client = client();
    let latent: Vec<u8> = vec![0u8; 16 * 2 * 2 * 4];
    let shape = "shape=1&shape=16&shape=1&shape=2&shape=2";
    let mut precisions = Vec::new();
    for query in [format!("model=wan21-small&{shape}&dtype=float32"), format!("model=wan21-small&dtype=f32&{shape}&dtype=float32")] {
        let response = client.post(server.url(&format!("/v1/decode?{query}"))).body(latent.clone()).send().await.unwrap();
        assert_eq!(response.status(), 200, "{query}");
        let id = response.headers()["x-vaebox-job"].to_str().unwrap().to_string();
        let (_, job) = get_json(&client, &server.url(&format!("/v1/jobs/{id}"))).await;
        precisions.push(job["timings"]["dtype"].as_str().unwrap_or_default().to_string());
    }
    assert_eq!(precisions, ["bf16", "f32"]);
}
