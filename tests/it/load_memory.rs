//! A checkpoint load holds the model's tensors and little else: each tensor is read from the file as a
//! module takes it, at the module's dtype. Measured in a fresh child process (`vaebox bench load-weights`)
//! on a full-size Wan 2.1 VAE (random weights made by diffusers, 484 MiB at f32), as safetensors and GGUF.
use crate::common;

use std::path::Path;
use std::process::Command;

use common::*;
use serde_json::Value;

fn load_weights(weights: &Path, dtype: &str, cpu_winograd: bool) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_vaebox"))
        .args(["bench", "load-weights", "--family", "wan", "--dtype", dtype, "--cpu-winograd", &cpu_winograd.to_string(), "--weights"])
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
    let f32 = load_weights(&safetensors, "f32", false);
    // The same with Winograd: the model also keeps its 3×3 kernels transformed, made as each is loaded.
    let f32_winograd = load_weights(&safetensors, "f32", true);
    // f32 file at bf16: the model holds half the file; the file is never held.
    let bf16 = load_weights(&safetensors, "bf16", true);
    // GGUF F16 at bf16: as much as the file.
    let from_gguf = load_weights(&gguf, "bf16", true);
    for report in [&f32, &f32_winograd, &bf16, &from_gguf] {
        let (growth, file, held) = (report["peak_growth_bytes"].as_f64().unwrap(), report["file_bytes"].as_f64().unwrap(), report["held_bytes"].as_f64().unwrap());
        let derived = report["derived_bytes"].as_f64().unwrap();
        assert!(held > 0.45 * file, "the model holds its weights: {report}");
        // Transformed kernels are 16/9 of the weights they come from, and only 3×3 weights have them.
        assert!(derived < 16.0 / 9.0 * held, "{report}");
        assert!(growth - derived <= 1.2 * file.max(held), "peak {growth} less what the model keeps by choice above 1.2 × the checkpoint / the model: {report}");
    }
    // Only f32 on the CPU with the switch on has kernels to keep: most of the Wan VAE's weight is in 3×3 convolutions.
    let derived = |report: &Value| report["derived_bytes"].as_f64().unwrap();
    assert_eq!(derived(&f32), 0.0, "{f32}");
    assert!(derived(&f32_winograd) > f32_winograd["held_bytes"].as_f64().unwrap(), "{f32_winograd}");
    assert_eq!(derived(&bf16), 0.0, "{bf16}");
    // Narrowing on the way in: a bf16 load of an f32 file peaks near the bf16 model, not the f32 file.
    let (growth, file) = (bf16["peak_growth_bytes"].as_f64().unwrap(), bf16["file_bytes"].as_f64().unwrap());
    assert!(growth <= 0.7 * file, "{bf16}");
}
