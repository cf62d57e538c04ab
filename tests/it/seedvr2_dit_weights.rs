//! The SeedVR2 DiT from the files people actually have: fp8 e4m3fn safetensors (kept in fp8, up-cast per
//! layer), fp16, GGUF F16 and Q8_0, and bf16 compute. Fixtures are written from the reference weights by
//! torch and the `gguf` package (scripts/fixtures), expected values from the original's forward case.
use crate::common;

use std::path::{Path, PathBuf};

use common::tensors::{max_abs_diff, read_tensor_map};
use tch::{Kind, Tensor};
use vaebox::models::seedvr2_dit::{DitInput, DitLoadOptions, SeedVr2Dit};

fn reference_dir() -> PathBuf {
    std::env::var_os("VAEBOX_SEEDVR2_DIT_REFERENCE")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/reference/seedvr2_dit"))
}

/// The first sample of the 3B case and its reference output.
struct Sample {
    vid: Tensor,
    grid: [i64; 3],
    txt: Tensor,
    out: Tensor,
}

fn first_sample() -> Sample {
    let case = read_tensor_map(&reference_dir().join("small_3b_case.safetensors"));
    let shape: Vec<i64> = Vec::try_from(case["vid_shape"].get(0)).unwrap();
    let grid = [shape[0], shape[1], shape[2]];
    let tokens = grid.iter().product::<i64>();
    let txt_len = case["txt_shape"].get(0).get(0).int64_value(&[]);
    Sample {
        vid: case["vid"].narrow(0, 0, tokens),
        grid,
        txt: case["txt"].narrow(0, 0, txt_len),
        out: case["out"].narrow(0, 0, tokens),
    }
}

fn forward(path: &Path, kind: Kind, sample: &Sample) -> (Tensor, u64) {
    let model = SeedVr2Dit::load(path, &DitLoadOptions { kind, ..DitLoadOptions::default() }).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let out = model.forward(&DitInput { vid: &sample.vid, grid: sample.grid, txt: &sample.txt, timestep: 1000.0 }).expect("forward");
    (out.to_kind(Kind::Float), model.weight_bytes())
}

fn fixtures() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let weights = reference_dir().join("small_3b_weights.safetensors");
    common::run_python("scripts/fixtures/dit_variants.py", &[weights.as_os_str(), dir.path().as_os_str()]);
    for qtype in ["F16", "Q8_0"] {
        let out = dir.path().join(format!("{qtype}.gguf"));
        common::run_python("scripts/fixtures/to_gguf.py", &[weights.as_os_str(), out.as_os_str(), qtype.as_ref(), "seedvr2_dit".as_ref()]);
    }
    (dir, weights)
}

#[test]
fn community_formats_load_and_compute_as_their_weights_say() {
    let (dir, weights) = fixtures();
    let sample = first_sample();
    let (fp32, fp32_bytes) = forward(&weights, Kind::Float, &sample);
    println!("fp32 vs original: {:.3e}", max_abs_diff(&fp32, &sample.out));

    // fp8: the linear weights stay one byte each, and the result is exactly that of the same weights
    // widened to fp32 up front.
    let (fp8, fp8_bytes) = forward(&dir.path().join("fp8_e4m3fn.safetensors"), Kind::Float, &sample);
    let (widened, _) = forward(&dir.path().join("fp8_as_f32.safetensors"), Kind::Float, &sample);
    assert_eq!(max_abs_diff(&fp8, &widened), 0.0, "fp8 up-cast per layer == fp8 weights widened at load");
    println!("fp8 weights {fp8_bytes} B vs fp32 {fp32_bytes} B; fp8 output vs fp32 reference: {:.3e}", max_abs_diff(&fp8, &sample.out));
    assert!((fp8_bytes as f64) < 0.3 * fp32_bytes as f64, "fp8 weights held at {fp8_bytes} of {fp32_bytes} bytes");
    assert!(max_abs_diff(&fp8, &fp32) > 0.0, "fp8 rounding changed nothing: the fp8 file was not read as fp8");

    // The same fp16 weights from safetensors and from GGUF give the same result.
    let (f16, _) = forward(&dir.path().join("f16.safetensors"), Kind::Float, &sample);
    let (gguf_f16, _) = forward(&dir.path().join("F16.gguf"), Kind::Float, &sample);
    assert_eq!(max_abs_diff(&f16, &gguf_f16), 0.0, "fp16 from safetensors == fp16 from GGUF");

    // Lossy storage and bf16 compute stay near the fp32 reference (reported; bounded far above the
    // measured error so only a broken path fails).
    let (q8, _) = forward(&dir.path().join("Q8_0.gguf"), Kind::Float, &sample);
    let (bf16, bf16_bytes) = forward(&weights, Kind::BFloat16, &sample);
    assert_eq!(bf16_bytes * 2, fp32_bytes, "bf16 compute holds the weights at two bytes");
    let scale = sample.out.abs().max().double_value(&[]);
    for (label, out) in [("f16", &f16), ("Q8_0", &q8), ("bf16 compute", &bf16), ("fp8", &fp8)] {
        let error = max_abs_diff(out, &sample.out);
        println!("{label} vs fp32 reference: max abs {error:.3e} (output max {scale:.2})");
        assert!(error < 0.1 * scale, "{label}: {error:e}");
    }
}
