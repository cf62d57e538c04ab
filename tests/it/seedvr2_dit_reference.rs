//! The SeedVR2 DiT (3B and 7B) against the forward cases produced by the ORIGINAL code with small random
//! weights (`VAEBOX_SEEDVR2_DIT_REFERENCE`, default ../shared/reference/seedvr2_dit): outputs and every
//! intermediate, per sample. Every `small_*_weights.safetensors` there is tested with its own case, so
//! another folder of the same layout (other configs, shapes, seeds) tests the same way.
use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::tensors::{max_abs_diff, read_tensor_map};
use tch::{Kind, Tensor};
use vaebox::models::seedvr2_dit::{BlockPlacement, DitInput, DitLoadOptions, SeedVr2Dit, Trace};

/// The fp32 bound for the forward and its intermediates.
const FP32_ATOL: f64 = 1e-4;
/// q/k/v rounded through bf16 as shipped: the reference README suggests about 5e-3.
const BF16_QKV_ATOL: f64 = 5e-3;

fn reference_dir() -> PathBuf {
    std::env::var_os("VAEBOX_SEEDVR2_DIT_REFERENCE")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/reference/seedvr2_dit"))
}

/// `(weights, case)` file pairs: every `small_<name>_weights.safetensors` with its `small_<name>_case`.
fn cases() -> Vec<(String, PathBuf, PathBuf)> {
    let dir = reference_dir();
    let mut found: Vec<(String, PathBuf, PathBuf)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reference folder {}: {e}", dir.display()))
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            let variant = name.strip_prefix("small_")?.strip_suffix("_weights.safetensors")?.to_string();
            let case = dir.join(format!("small_{variant}_case.safetensors"));
            case.exists().then(|| (variant, entry.path(), case))
        })
        .collect();
    found.sort();
    assert!(!found.is_empty(), "no small_*_weights.safetensors with a matching case in {}", dir.display());
    found
}

fn tensor(case: &BTreeMap<String, Tensor>, name: &str) -> Tensor {
    case.get(name).unwrap_or_else(|| panic!("case has no `{name}`")).shallow_clone()
}

fn check(label: &str, actual: &Tensor, expected: &Tensor, bound: f64) {
    assert_eq!(actual.size(), expected.size(), "{label}: shape");
    let error = max_abs_diff(actual, expected);
    println!("{label}: max abs error {error:.3e} (bound {bound:.1e})");
    assert!(error <= bound, "{label}: max abs error {error:e} > {bound:e}");
}

/// Runs every sample of a case alone and concatenates, as the reference's `out` was made.
fn run_per_sample(model: &SeedVr2Dit, case: &BTreeMap<String, Tensor>, timestep_name: &str) -> (Tensor, Trace) {
    let vid_shape: Vec<Vec<i64>> = Vec::try_from(tensor(case, "vid_shape")).unwrap();
    let txt_shape: Vec<Vec<i64>> = Vec::try_from(tensor(case, "txt_shape")).unwrap();
    let timesteps: Vec<f32> = Vec::try_from(tensor(case, timestep_name).to_kind(Kind::Float)).unwrap();
    let (vid, txt) = (tensor(case, "vid"), tensor(case, "txt"));
    let (mut outputs, mut traces) = (Vec::new(), Vec::new());
    let (mut vid_start, mut txt_start) = (0, 0);
    for (sample, (grid, txt_len)) in vid_shape.iter().zip(&txt_shape).enumerate() {
        let grid = [grid[0], grid[1], grid[2]];
        let tokens = grid.iter().product::<i64>();
        let mut trace = Trace::default();
        let input = DitInput {
            vid: &vid.narrow(0, vid_start, tokens),
            grid,
            txt: &txt.narrow(0, txt_start, txt_len[0]),
            timestep: timesteps[sample] as f64,
        };
        outputs.push(model.forward_traced(&input, Some(&mut trace)).expect("forward"));
        traces.push(trace);
        vid_start += tokens;
        txt_start += txt_len[0];
    }
    assert_eq!((vid_start, txt_start), (vid.size()[0], txt.size()[0]), "samples cover the case's tokens");
    (Tensor::cat(&outputs, 0), concatenated(traces))
}

/// Per-sample intermediates joined along tokens (`emb_in`: one row per sample), as the reference stores them.
fn concatenated(traces: Vec<Trace>) -> Trace {
    let mut joined = Trace::default();
    for name in traces[0].tensors.keys() {
        let parts: Vec<Tensor> = traces.iter().map(|t| {
            let part = &t.tensors[name];
            if part.dim() == 1 { part.unsqueeze(0) } else { part.shallow_clone() }
        }).collect();
        joined.tensors.insert(name.clone(), Tensor::cat(&parts, 0));
    }
    joined
}

#[test]
fn dit_forward_matches_original_with_every_intermediate() {
    for (variant, weights, case_path) in cases() {
        let case = read_tensor_map(&case_path);
        let model = SeedVr2Dit::load(&weights, &DitLoadOptions::default()).expect("load small DiT");
        let (out, trace) = run_per_sample(&model, &case, "timestep");
        check(&format!("{variant} out"), &out, &tensor(&case, "out"), FP32_ATOL);
        let mut checked = 0;
        for (name, expected) in case.iter().filter_map(|(k, v)| Some((k.strip_prefix("inter.")?, v))) {
            let actual = trace.tensors.get(name).unwrap_or_else(|| panic!("{variant}: no intermediate `{name}` recorded"));
            check(&format!("{variant} inter.{name}"), actual, expected, FP32_ATOL);
            checked += 1;
        }
        assert!(checked >= 5, "{variant}: only {checked} intermediates in the case");
        let (alt, _) = run_per_sample(&model, &case, "timestep_alt");
        check(&format!("{variant} out_timestep_alt"), &alt, &tensor(&case, "out_timestep_alt"), FP32_ATOL);
    }
}

#[test]
fn dit_with_bf16_qkv_matches_the_shipped_precision() {
    for (variant, weights, case_path) in cases() {
        let case = read_tensor_map(&case_path);
        let opts = DitLoadOptions { qkv_bf16: true, ..DitLoadOptions::default() };
        let model = SeedVr2Dit::load(&weights, &opts).expect("load small DiT");
        let (out, _) = run_per_sample(&model, &case, "timestep");
        check(&format!("{variant} out_bf16qkv"), &out, &tensor(&case, "out_bf16qkv"), BF16_QKV_ATOL);
        // And it is a different computation from the fp32 one: the rounding is really applied.
        assert!(max_abs_diff(&out, &tensor(&case, "out")) > 1e-6, "{variant}: bf16 q/k/v made no difference");
    }
}

/// Blocks kept on the host and brought to the device one at a time compute what resident blocks do.
#[test]
fn swapped_blocks_match_the_original_and_the_resident_model() {
    for (variant, weights, case_path) in cases() {
        let case = read_tensor_map(&case_path);
        let swapped = SeedVr2Dit::load(&weights, &DitLoadOptions { placement: BlockPlacement::Swapped, ..DitLoadOptions::default() }).expect("load swapped");
        let resident = SeedVr2Dit::load(&weights, &DitLoadOptions::default()).expect("load resident");
        assert_eq!((swapped.placement(), resident.placement()), (BlockPlacement::Swapped, BlockPlacement::Resident));
        assert!(swapped.host_block_bytes() > 0 && swapped.weight_bytes() < resident.weight_bytes(), "{variant}: the device holds one block at a time");
        let (out, trace) = run_per_sample(&swapped, &case, "timestep");
        check(&format!("{variant} swapped out"), &out, &tensor(&case, "out"), FP32_ATOL);
        let last = trace.tensors.keys().filter(|k| k.starts_with("blocks.")).count();
        assert!(last > 0, "{variant}: the swapped blocks recorded their intermediates");
        let (resident_out, _) = run_per_sample(&resident, &case, "timestep");
        assert_eq!(max_abs_diff(&out, &resident_out), 0.0, "{variant}: swapped vs resident");
    }
}

/// `full_keys_<variant>.txt`: every key of the released checkpoint with its shape.
fn full_checkpoint_shapes(variant: &str) -> Vec<(String, Vec<i64>)> {
    common::tensors::full_keys(&reference_dir().join(format!("full_keys_{variant}.txt")))
}

/// The released 3B and 7B layouts load: every key used, configuration detected. The tensors are one zero
/// broadcast to each shape, so nothing is allocated (a forward would copy each weight: ~47 GB of writes).
#[test]
fn released_layouts_load_and_run() {
    use vaebox::models::seedvr2_dit::{DitVariant, MlpKind};
    let expected = [
        ("3b", DitVariant::ThreeB, MlpKind::SwiGlu, 2560, 20, 32, 10, 6912, 21),
        ("7b", DitVariant::SevenB, MlpKind::GeluTanh, 3072, 24, 36, 36, 12288, 10),
    ];
    for (name, variant, mlp, dim, heads, blocks, mm_layers, mlp_hidden, rope_freqs) in expected {
        let shapes = full_checkpoint_shapes(name);
        let tensors: Vec<(String, Tensor)> =
            shapes.iter().map(|(k, s)| (k.clone(), Tensor::zeros([1], (Kind::Float, tch::Device::Cpu)).expand(s.as_slice(), false))).collect();
        let model = SeedVr2Dit::from_tensors(Path::new(name), tensors, None, &DitLoadOptions::default()).expect("released layout loads");
        let cfg = model.config();
        assert_eq!(
            (cfg.variant, cfg.mlp, cfg.dim, cfg.heads, cfg.head_dim, cfg.num_blocks, cfg.mm_layers, cfg.mlp_hidden, cfg.rope_freqs),
            (variant, mlp, dim, heads, 128, blocks, mm_layers, mlp_hidden, rope_freqs),
            "{name}"
        );
        assert_eq!((cfg.txt_in_dim, cfg.vid_in_channels, cfg.vid_out_channels, cfg.emb_hidden), (5120, 33, 16, dim));
        assert!(cfg.windows.iter().enumerate().all(|(i, w)| *w == ([4, 3, 3], i % 2 == 1)), "{name}: released windows");
    }
}

/// A checkpoint that does not fit names the first key that does not.
#[test]
fn bad_checkpoints_name_the_offending_key() {
    let (_, weights, _) = cases().into_iter().next().unwrap();
    let tensors = Tensor::read_safetensors(&weights).unwrap();
    // Either placement checks every key at load.
    for placement in [BlockPlacement::Resident, BlockPlacement::Swapped] {
    let opts = DitLoadOptions { placement, ..DitLoadOptions::default() };
    let load = |tensors: Vec<(String, Tensor)>| SeedVr2Dit::from_tensors(&weights, tensors, None, &opts).err().expect("refused").to_string();
    let without = |key: &str| tensors.iter().filter(|(k, _)| k != key).map(|(k, t)| (k.clone(), t.shallow_clone())).collect::<Vec<_>>();
    // Keys of the checkpoint in hand, so that the test holds for any layout of the reference folder (which
    // blocks have separate video and text weights depends on its `mm_layers`).
    let last_block_key = tensors.iter().map(|(k, _)| k.as_str()).filter(|k| k.starts_with("blocks.")).max().expect("block keys");
    let message = load(without(last_block_key));
    assert!(message.contains(last_block_key), "{message}");
    let mut extra = without("");
    extra.push(("blocks.0.extra.weight".into(), Tensor::zeros([2], (Kind::Float, tch::Device::Cpu))));
    let message = load(extra);
    assert!(message.contains("unexpected tensor `blocks.0.extra.weight`"), "{message}");
    let (matrix, _) = tensors.iter().find(|(k, t)| k.starts_with("blocks.0.") && t.dim() == 2 && t.size()[1] > 8).expect("a weight matrix in block 0");
    let reshaped: Vec<(String, Tensor)> =
        without("").into_iter().map(|(k, t)| if &k == matrix { (k, t.narrow(1, 0, 8)) } else { (k, t) }).collect();
    let message = load(reshaped);
    assert!(message.contains(matrix.as_str()) && message.contains("expected"), "{message}");
    let message = load(vec![("encoder.conv_in.weight".into(), Tensor::zeros([1], (Kind::Float, tch::Device::Cpu)))]);
    assert!(message.contains("not a SeedVR2 DiT"), "{message}");
    }
}
