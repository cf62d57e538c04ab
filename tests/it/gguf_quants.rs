//! `TensorFile` against outside references: GGUF K-quants (Q4_K, Q5_K, Q6_K) and Q8_0 written by
//! llama.cpp's `gguf` package and dequantised by its `gguf.quants.dequantize`; fp8 safetensors written
//! by torch and up-cast by torch. Fixtures come from scripts/fixtures/make_gguf_quants.py.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use tch::{Device, Kind, Tensor};
use vaebox::models::formats::tensor_file::{LoadAs, TensorFile};
use vaebox::models::{formats::checkpoint, ModelError};

const REPO: &str = env!("CARGO_MANIFEST_DIR");

/// Made once per run of this test binary, shared by its tests.
fn fixtures() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("gguf_quants");
        let python = std::env::var_os("VAEBOX_PYTHON").map(PathBuf::from).unwrap_or_else(|| Path::new(REPO).join(".venv/bin/python"));
        let output = Command::new(python)
            .arg(Path::new(REPO).join("scripts/fixtures/make_gguf_quants.py"))
            .arg(&dir)
            .output()
            .expect("python runs (set VAEBOX_PYTHON)");
        assert!(output.status.success(), "make_gguf_quants.py failed: {}", String::from_utf8_lossy(&output.stderr));
        dir
    })
}

fn expected(name: &str) -> BTreeMap<String, Tensor> {
    Tensor::read_safetensors(fixtures().join(name)).expect("expected values read").into_iter().collect()
}

/// Largest difference in f64, so the comparison adds no rounding of its own.
fn max_abs_diff(actual: &Tensor, expected: &Tensor) -> f64 {
    assert_eq!(actual.size(), expected.size(), "shape mismatch");
    (actual.to_kind(Kind::Double) - expected.to_kind(Kind::Double)).abs().max().double_value(&[])
}

#[test]
fn k_quants_and_q8_0_dequantise_exactly_as_gguf_py() {
    let file = TensorFile::open(&fixtures().join("quants.gguf")).expect("GGUF header reads");
    let expected = expected("quants_expected.safetensors");
    let stored: BTreeMap<&str, String> = file.tensors().iter().map(|t| (t.name.as_str(), t.stored.name())).collect();
    assert_eq!(stored["blocks.0.q4_k"], "Q4_K");
    assert_eq!(stored["blocks.0.q5_k"], "Q5_K");
    assert_eq!(stored["blocks.0.q6_k"], "Q6_K");
    assert_eq!(stored["blocks.0.q3_k"], "Q3_K (ggml type 11)");
    for (name, want) in &expected {
        assert_eq!(file.get(name).expect("listed").shape, want.size(), "{name}: listed shape");
        let got = file.load(name, Device::Cpu, LoadAs::Stored).expect("loads");
        assert_eq!(got.kind(), Kind::Float, "{name}");
        let diff = max_abs_diff(&got, want);
        println!("{name} ({}): max abs diff {diff:e} over {} values", stored[name.as_str()], want.numel());
        assert_eq!(diff, 0.0, "{name}: dequantised values differ from gguf-py's");
        assert!(got.equal(want), "{name}: not bit-identical");
        let bf16 = file.load(name, Device::Cpu, LoadAs::Kind(Kind::BFloat16)).expect("loads as bf16");
        assert!(bf16.kind() == Kind::BFloat16 && bf16.equal(&want.to_kind(Kind::BFloat16)), "{name}: bf16 conversion");
    }
    // The 5-D tensor keeps its PyTorch shape from `comfy.gguf.orig_shape`.
    assert_eq!(file.get("blocks.0.conv5d_q4_k").unwrap().shape, [2, 4, 2, 4, 16]);
}

#[test]
fn other_quantisations_are_refused_naming_the_tensor_and_type() {
    let path = fixtures().join("quants.gguf");
    let file = TensorFile::open(&path).expect("a header with unread types still lists");
    for (name, type_name) in [("blocks.0.q4_0", "Q4_0"), ("blocks.0.q3_k", "Q3_K")] {
        let err = file.load(name, Device::Cpu, LoadAs::Kind(Kind::Float)).expect_err("refused");
        let message = err.to_string();
        assert_eq!(err.code(), "unsupported-quantization", "{message}");
        assert!(message.contains(name) && message.contains(type_name), "{message}");
        println!("{name}: {message}");
    }
    // Reading a whole checkpoint stops at the first such tensor, by name.
    match checkpoint::read_tensors(&path) {
        Err(ModelError::UnsupportedQuantization { tensor, ggml_type, .. }) => {
            assert_eq!((tensor.as_str(), ggml_type.as_str()), ("blocks.0.q4_0", "Q4_0 (ggml type 2)"))
        }
        other => panic!("expected unsupported-quantization, got {:?}", other.map(|t| t.len())),
    }
    // Listing needs only the header, so it still works.
    let shapes: BTreeMap<String, Vec<i64>> = checkpoint::tensor_shapes(&path).expect("shapes").into_iter().collect();
    assert_eq!((shapes.len(), &shapes["blocks.0.q3_k"]), (8, &vec![2, 256]));
    let missing = file.load("blocks.0.nope", Device::Cpu, LoadAs::Stored).expect_err("no such tensor");
    assert_eq!(missing.code(), "model-format");
}

#[test]
fn fp8_safetensors_stay_fp8_or_convert() {
    let file = TensorFile::open(&fixtures().join("fp8.safetensors")).expect("fp8 header reads");
    let expected = expected("fp8_expected.safetensors");
    let stored: Vec<(String, String)> = file.tensors().iter().map(|t| (t.name.clone(), t.stored.name())).collect();
    let stored: BTreeMap<&str, &str> = stored.iter().map(|(n, s)| (n.as_str(), s.as_str())).collect();
    assert_eq!(stored, BTreeMap::from([("blocks.0.w_bf16", "BF16"), ("blocks.0.w_e4m3", "F8_E4M3"), ("blocks.0.w_e5m2", "F8_E5M2")]));

    let kept = file.load("blocks.0.w_e4m3", Device::Cpu, LoadAs::KeepFp8(Kind::BFloat16)).expect("loads");
    assert_eq!(kept.kind(), Kind::Float8e4m3fn);
    let up_cast = kept.to_kind(Kind::Float);
    let diff = max_abs_diff(&up_cast, &expected["blocks.0.w_e4m3"]);
    println!("w_e4m3 kept as fp8, up-cast on the CPU: max abs diff {diff:e}");
    assert!(diff == 0.0 && up_cast.equal(&expected["blocks.0.w_e4m3"]), "e4m3 up-cast differs from torch's");
    let other = file.load("blocks.0.w_bf16", Device::Cpu, LoadAs::KeepFp8(Kind::Float)).expect("loads");
    assert_eq!(other.kind(), Kind::Float, "non-fp8 tensors take the target kind");
    assert_eq!(file.load("blocks.0.w_e5m2", Device::Cpu, LoadAs::Stored).unwrap().kind(), Kind::Float8e5m2);

    for (name, want) in &expected {
        let got = file.load(name, Device::Cpu, LoadAs::Kind(Kind::Float)).expect("loads as f32");
        let diff = max_abs_diff(&got, want);
        println!("{name} ({}) as f32: max abs diff {diff:e}", stored[name.as_str()]);
        assert!(got.kind() == Kind::Float && got.equal(want), "{name}: differs from torch's up-cast");
    }
}
