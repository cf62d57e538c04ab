//! A checkpoint load holds the model's tensors and little else: each tensor is read from the file as a
//! module takes it, at the module's dtype. Measured in a fresh child process (`vaebox bench load-weights`)
//! on a full-size Wan 2.1 VAE (random weights made by diffusers, 484 MiB at f32), as safetensors and GGUF.
mod common;

use std::path::Path;
use std::process::Command;

use common::*;
use serde_json::Value;

fn load_weights(weights: &Path, dtype: &str) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_vaebox"))
        .args(["bench", "load-weights", "--family", "wan", "--dtype", dtype, "--weights"])
        .arg(weights)
        .output()
        .expect("run vaebox bench load-weights");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    println!("{report}");
    report
}

fn run_python(args: &[&std::ffi::OsStr]) {
    let out = Command::new(python()).args(args).output().expect("run python");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn a_load_peaks_at_the_model_not_the_model_plus_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let safetensors = dir.path().join("wan21_full.safetensors");
    let gguf = dir.path().join("wan21_full_f16.gguf");
    let script = Path::new(REPO).join("scripts/bench/diffusers_vae.py");
    run_python(&[script.as_os_str(), "--preset".as_ref(), "wan2.1".as_ref(), "--make-weights".as_ref(), safetensors.as_os_str()]);
    let to_gguf = Path::new(REPO).join("scripts/fixtures/to_gguf.py");
    run_python(&[to_gguf.as_os_str(), safetensors.as_os_str(), gguf.as_os_str(), "F16".as_ref()]);

    // f32 file at f32: the model holds as much as the file.
    let f32 = load_weights(&safetensors, "f32");
    // f32 file at bf16: the model holds half the file; the file is never held.
    let bf16 = load_weights(&safetensors, "bf16");
    // GGUF F16 at bf16: as much as the file.
    let from_gguf = load_weights(&gguf, "bf16");
    for report in [&f32, &bf16, &from_gguf] {
        let (growth, file, held) = (report["peak_growth_bytes"].as_f64().unwrap(), report["file_bytes"].as_f64().unwrap(), report["held_bytes"].as_f64().unwrap());
        assert!(held > 0.45 * file, "the model holds its weights: {report}");
        assert!(growth <= 1.2 * file.max(held), "peak {growth} above 1.2 × the checkpoint / the model: {report}");
    }
    // Narrowing on the way in: a bf16 load of an f32 file peaks near the bf16 model, not the f32 file.
    let (growth, file) = (bf16["peak_growth_bytes"].as_f64().unwrap(), bf16["file_bytes"].as_f64().unwrap());
    assert!(growth <= 0.7 * file, "{bf16}");
}
