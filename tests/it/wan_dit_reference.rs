//! The Wan 2.1 DiT as FlashVSR streams it, against tensors produced by the ORIGINAL code (FlashVSR at
//! ccac0ac and its v1.1 DiT) with small random weights (`VAEBOX_FLASHVSR_REFERENCE`, default
//! ../shared/reference/flashvsr, README §2, §3, §5, §11): noise predictions, every block mask, block 0's
//! output and kernel tensors, over steps that carry the KV cache.
use crate::common;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use common::tensors::{max_abs_diff, read_tensor_map};
use tch::{Kind, Tensor};
use vaebox::models::stop::StopFlag;
use vaebox::models::wan_dit::{AttentionMode, HeadsFrom, StreamSettings, Trace, WanDit, WanDitLoadOptions, WanDitStream};
use vaebox::models::ModelError;

/// README §8: the DiT's noise prediction per step in fp32, with identical masks.
const FP32_ATOL: f64 = 1e-5;

fn reference_dir() -> PathBuf {
    std::env::var_os("VAEBOX_FLASHVSR_REFERENCE")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/reference/flashvsr"))
}

fn case(name: &str) -> BTreeMap<String, Tensor> {
    read_tensor_map(&reference_dir().join(name))
}

fn tensor(case: &BTreeMap<String, Tensor>, name: &str) -> Tensor {
    case.get(name).unwrap_or_else(|| panic!("case has no `{name}`")).shallow_clone()
}

fn small_dit() -> WanDit {
    WanDit::load(&reference_dir().join("small_dit.safetensors"), &WanDitLoadOptions::default()).expect("load small DiT")
}

/// The random text context every case was made with (`e2e_tiny`'s; the v1.1 cases checked it equal).
fn context() -> Tensor {
    tensor(&case("e2e_tiny.safetensors"), "context")
}

fn check(label: &str, actual: &Tensor, expected: &Tensor, bound: f64) -> f64 {
    assert_eq!(actual.size(), expected.size(), "{label}: shape");
    let error = max_abs_diff(actual, expected);
    println!("{label}: max abs error {error:.3e} (bound {bound:.1e})");
    assert!(error <= bound, "{label}: max abs error {error:e} > {bound:e}");
    error
}

fn check_mask(label: &str, actual: &Tensor, expected: &Tensor) {
    assert_eq!(actual.size(), expected.size(), "{label}: shape");
    let differing = actual.to_kind(Kind::Int64).ne_tensor(&expected.to_kind(Kind::Int64)).sum(Kind::Int64).int64_value(&[]);
    let active = expected.to_kind(Kind::Int64).sum(Kind::Int64).int64_value(&[]);
    println!("{label}: {differing} entries differ ({active} of {} active)", expected.numel());
    assert_eq!(differing, 0, "{label}: masks differ");
}

fn stream<'a>(model: &'a WanDit, settings: StreamSettings) -> WanDitStream<'a> {
    model.stream(model.condition(&context()).expect("condition"), settings).expect("stream")
}

fn traced_step(stream: &mut WanDitStream, latent: &Tensor, lq: &Tensor) -> (Tensor, Trace) {
    let mut trace = Trace::default();
    let out = stream.step_traced(latent, lq, Some(&mut trace)).expect("step");
    (out, trace)
}

/// Every `step{s}.block{b}.block_mask_u8` of the case against the trace of step `s`.
fn check_masks(label: &str, case: &BTreeMap<String, Tensor>, step: usize, trace: &Trace) -> usize {
    let prefix = format!("step{step}.");
    let mut checked = 0;
    for (name, expected) in case.iter().filter(|(k, _)| k.starts_with(&prefix) && k.ends_with("block_mask_u8")) {
        let key = name.strip_prefix(&prefix).unwrap();
        let actual = trace.tensors.get(key).unwrap_or_else(|| panic!("{label}: no `{key}` recorded"));
        check_mask(&format!("{label} {name}"), actual, expected);
        checked += 1;
    }
    checked
}

/// `e2e_tiny`'s noise slice of step `s` (README §5.1): frames 0..6, then 4+2s..6+2s.
fn noise_slice(noise: &Tensor, step: i64) -> Tensor {
    if step == 0 { noise.narrow(2, 0, 6) } else { noise.narrow(2, 4 + 2 * step, 2) }
}

#[test]
fn binding_mask_stream_over_three_steps_with_the_cache_carried() {
    let (model, case) = (small_dit(), case("dit_stream_mask.safetensors"));
    let settings = StreamSettings { local_range: 3, topk_ratio: 0.5, kv_ratio: 3.0, attention: AttentionMode::BlockSparse };
    let mut stream = stream(&model, settings);
    for step in 0..3 {
        let (out, trace) = traced_step(&mut stream, &tensor(&case, &format!("step{step}.x_in")), &tensor(&case, &format!("step{step}.lq_latents")));
        assert_eq!(check_masks("dit_stream_mask", &case, step, &trace), 2);
        check_mask("dit_stream_mask local_attn_mask_u8", &trace.tensors["local_attn_mask_u8"], &tensor(&case, "local_attn_mask_u8"));
        check(&format!("dit_stream_mask step{step}.out"), &out, &tensor(&case, &format!("step{step}.out")), FP32_ATOL);
    }
    assert_eq!(stream.frames_done(), 10);
}

#[test]
fn tiny_pipeline_steps_match_with_official_arguments() {
    let (model, case) = (small_dit(), case("e2e_tiny.safetensors"));
    let cond = model.condition(&tensor(&case, "context")).expect("condition");
    check("e2e_tiny t", cond.t(), &tensor(&case, "t"), FP32_ATOL);
    check("e2e_tiny t_mod", cond.t_mod(), &tensor(&case, "t_mod"), FP32_ATOL);
    let settings = StreamSettings::official([128, 256]);
    assert_eq!((settings.topk_ratio, settings.local_range, settings.kv_ratio), (60.0, 11, 3.0));
    let mut stream = model.stream(cond, settings).expect("stream");
    let noise = tensor(&case, "noise");
    for step in 0..2 {
        let (pred, trace) = traced_step(&mut stream, &noise_slice(&noise, step), &tensor(&case, &format!("step{step}.lq_latents")));
        assert_eq!(check_masks("e2e_tiny", &case, step as usize, &trace), 2);
        check(&format!("e2e_tiny step{step}.block0.out"), &trace.tensors["block0.out"], &tensor(&case, &format!("step{step}.block0.out")), FP32_ATOL);
        check(&format!("e2e_tiny step{step}.noise_pred"), &pred, &tensor(&case, &format!("step{step}.noise_pred")), FP32_ATOL);
        if step == 1 {
            for name in ["q", "k", "v", "out"] {
                let key = format!("block0.kernel_{name}");
                check(&format!("e2e_tiny step1.{key}"), &trace.tensors[&key], &tensor(&case, &format!("step1.{key}")), FP32_ATOL);
            }
        }
    }
}

/// Dense attention is the comparison option, not the original: it matches the original's dense re-run
/// and differs from the sparse result (README §5.1: by 5.6e-3 and 4.8e-3).
#[test]
fn dense_option_matches_the_dense_rerun_and_not_the_sparse_one() {
    let (model, case) = (small_dit(), case("e2e_tiny.safetensors"));
    let settings = StreamSettings { attention: AttentionMode::Dense, ..StreamSettings::official([128, 256]) };
    let mut stream = stream(&model, settings);
    let noise = tensor(&case, "noise");
    for step in 0..2 {
        let pred = stream.step(&noise_slice(&noise, step), &tensor(&case, &format!("step{step}.lq_latents"))).expect("step");
        check(&format!("e2e_tiny dense.step{step}.noise_pred"), &pred, &tensor(&case, &format!("dense.step{step}.noise_pred")), FP32_ATOL);
        let sparse_gap = max_abs_diff(&pred, &tensor(&case, &format!("step{step}.noise_pred")));
        println!("e2e_tiny dense vs sparse step{step}: {sparse_gap:.3e}");
        assert!(sparse_gap > 1e-3, "dense equals sparse: the mask was not applied");
    }
}

#[test]
fn v1_1_tiny_pipeline_steps_match_from_its_own_lq_tokens() {
    let (model, case, noise) = (small_dit(), case("v1_1_e2e_tiny.safetensors"), tensor(&case("e2e_tiny.safetensors"), "noise"));
    let mut stream = stream(&model, StreamSettings::official([128, 256]));
    for step in 0..2 {
        let (pred, trace) = traced_step(&mut stream, &noise_slice(&noise, step), &tensor(&case, &format!("step{step}.lq_latents")));
        assert_eq!(check_masks("v1_1_e2e_tiny", &case, step as usize, &trace), 2);
        check(&format!("v1_1_e2e_tiny step{step}.noise_pred"), &pred, &tensor(&case, &format!("step{step}.noise_pred")), FP32_ATOL);
    }
}

/// README §11.2: a call on a 2×3 window grid, then one on 3×2 with the same model: the second builds
/// its own local mask (v1.1), which the v1.0 code did not.
#[test]
fn a_later_call_on_a_transposed_grid_builds_its_own_masks() {
    let (model, case) = (small_dit(), case("v1_1_mask_cache_case.safetensors"));
    let settings = StreamSettings { local_range: 3, topk_ratio: 2.0, kv_ratio: 3.0, attention: AttentionMode::BlockSparse };
    let zeros = |shape: &[i64]| Tensor::zeros(shape, (Kind::Float, tch::Device::Cpu));
    let (_, first) = traced_step(&mut stream(&model, settings), &zeros(&[1, 16, 6, 32, 48]), &zeros(&[1, 6 * 16 * 24, 64]));
    check_mask("mask_cache a.local_attn_mask_u8", &first.tensors["local_attn_mask_u8"], &tensor(&case, "a.local_attn_mask_u8"));
    let (out, trace) = traced_step(&mut stream(&model, settings), &tensor(&case, "b.x_in"), &tensor(&case, "b.lq_latents"));
    check_mask("mask_cache b.local_attn_mask_u8", &trace.tensors["local_attn_mask_u8"], &tensor(&case, "b.local_attn_mask_u8"));
    for block in 0..2 {
        let key = format!("block{block}.block_mask_u8");
        check_mask(&format!("mask_cache v11.b.{key}"), &trace.tensors[&key], &tensor(&case, &format!("v11.b.{key}")));
        let stale = tensor(&case, &format!("v10.b.{key}"));
        assert!(!trace.tensors[&key].equal(&stale), "the v1.0 masks are a different answer, so this check can fail");
    }
    check("mask_cache v11.b_after_a.out", &out, &tensor(&case, "v11.b_after_a.out"), FP32_ATOL);
}

/// The released checkpoint's layout (`full_keys_dit.txt`) loads with the real configuration. Each tensor
/// is one zero broadcast to its shape: nothing of the 1.4 B parameters is allocated.
#[test]
fn released_layout_is_recognised_without_allocating_it() {
    let shapes = common::tensors::full_keys(&reference_dir().join("full_keys_dit.txt"));
    assert_eq!(shapes.len(), 825);
    let zero = Tensor::zeros([1], (Kind::Float, tch::Device::Cpu));
    let tensors: Vec<(String, Tensor)> = shapes.iter().map(|(k, s)| (k.clone(), zero.expand(s.as_slice(), false))).collect();
    let model = WanDit::from_tensors(Path::new("diffusion_pytorch_model_streaming_dmd.safetensors"), tensors, None, &WanDitLoadOptions::default()).expect("released layout loads");
    let cfg = model.config();
    assert_eq!((cfg.dim, cfg.num_layers, cfg.heads, cfg.head_dim, cfg.ffn_dim), (1536, 30, 12, 128, 8960));
    assert_eq!((cfg.in_channels, cfg.out_channels, cfg.text_dim, cfg.freq_dim, cfg.patch), (16, 16, 4096, 256, [1, 2, 2]));
    assert_eq!((cfg.heads_from, cfg.rope_split()), (HeadsFrom::ReleasedHeadDim, [44, 42, 42]));
    // And a step runs at that width (12 heads of 128, RoPE split 44/42/42); two of the blocks are enough
    // for the shapes, and spare copying the other 28 blocks' broadcast weights for their matmuls.
    let two_blocks: Vec<(String, Tensor)> = shapes
        .iter()
        .filter(|(k, _)| !k.starts_with("blocks.") || k.starts_with("blocks.0.") || k.starts_with("blocks.1."))
        .map(|(k, s)| (k.clone(), zero.expand(s.as_slice(), false)))
        .collect();
    let model = WanDit::from_tensors(Path::new("two_released_blocks"), two_blocks, None, &WanDitLoadOptions::default()).expect("two blocks load");
    assert_eq!((model.config().num_layers, model.config().heads), (2, 12));
    let cond = model.condition(&Tensor::zeros([1, 4, 4096], (Kind::Float, tch::Device::Cpu))).expect("condition");
    let mut stream = model.stream(cond, StreamSettings::official([128, 128])).expect("stream");
    let pred = stream.step(&Tensor::zeros([1, 16, 6, 16, 16], (Kind::Float, tch::Device::Cpu)), &Tensor::zeros([1, 384, 1536], (Kind::Float, tch::Device::Cpu))).expect("step");
    assert_eq!(pred.size(), [1, 16, 6, 16, 16]);
    let small = small_dit();
    assert_eq!((small.config().heads, small.config().heads_from, small.config().rope_split()), (2, HeadsFrom::Metadata, [12, 10, 10]));
}

/// A job stopped between steps resumes from the saved KV cache in a fresh stream; a stop raised during a
/// step ends it and leaves the cache as it was.
#[test]
fn a_stream_resumes_from_its_saved_state_and_a_stop_changes_nothing() {
    let (model, case) = (small_dit(), case("dit_stream_mask.safetensors"));
    let settings = StreamSettings { local_range: 3, topk_ratio: 0.5, kv_ratio: 3.0, attention: AttentionMode::BlockSparse };
    let input = |step: usize, name: &str| tensor(&case, &format!("step{step}.{name}"));
    let mut first = stream(&model, settings);
    let _ = first.step(&input(0, "x_in"), &input(0, "lq_latents")).expect("step 0");
    let mut saved = Vec::new();
    first.save_state("dit.", &mut saved);
    drop(first);
    let saved: HashMap<String, Tensor> = saved.into_iter().collect();
    let mut resumed = stream(&model, settings);
    resumed.load_state("dit.", &saved).expect("load state");
    let flag = Arc::new(AtomicBool::new(true));
    resumed.set_stop(StopFlag::on(flag.clone()));
    let stopped = resumed.step(&input(1, "x_in"), &input(1, "lq_latents"));
    assert!(matches!(stopped, Err(ModelError::Stopped)), "a raised stop ends the step");
    flag.store(false, std::sync::atomic::Ordering::Relaxed);
    for step in 1..3 {
        let out = resumed.step(&input(step, "x_in"), &input(step, "lq_latents")).expect("resumed step");
        check(&format!("resumed step{step}.out"), &out, &input(step, "out"), FP32_ATOL);
    }
    // A state that does not fit the model is refused, not half loaded.
    let mut broken: HashMap<String, Tensor> = saved.iter().map(|(k, t)| (k.clone(), t.shallow_clone())).collect();
    broken.insert("dit.block1.k".into(), Tensor::zeros([9, 128, 8], (Kind::Float, tch::Device::Cpu)));
    let error = stream(&model, settings).load_state("dit.", &broken).err().expect("refused").to_string();
    assert!(error.contains("block 1"), "{error}");
}

#[test]
fn inputs_that_do_not_fit_the_stream_are_refused() {
    let model = small_dit();
    let mut stream = stream(&model, StreamSettings::official([128, 256]));
    let latent = |f: i64, h: i64, w: i64| Tensor::zeros([1, 16, f, h, w], (Kind::Float, tch::Device::Cpu));
    let lq = |tokens: i64| Tensor::zeros([1, tokens, 64], (Kind::Float, tch::Device::Cpu));
    let refused = |result: Result<Tensor, ModelError>| result.err().expect("refused").to_string();
    assert!(refused(stream.step(&latent(2, 16, 32), &lq(256))).contains("[1, 16, 6, H, W]"));
    assert!(refused(stream.step(&latent(6, 16, 24), &lq(576))).contains("multiples of 16"));
    assert!(refused(stream.step(&latent(6, 16, 32), &lq(100))).contains("LQ tokens"));
    let _ = stream.step(&latent(6, 16, 32), &lq(768)).expect("a fitting first step");
    assert!(refused(stream.step(&latent(2, 32, 32), &lq(512))).contains("another size"));
    assert!(model.stream(model.condition(&context()).unwrap(), StreamSettings { kv_ratio: 0.5, ..StreamSettings::official([128, 256]) }).is_err());
    assert!(model.condition(&Tensor::zeros([1, 4, 32], (Kind::Float, tch::Device::Cpu))).is_err());
}

/// fp16 and bf16 files are read and cast to the compute dtype: in fp32 they compute exactly what their
/// rounded weights widened to fp32 compute; bf16 compute runs the same stream near the fp32 reference.
#[test]
fn half_precision_files_and_bf16_compute() {
    let dir = tempfile::tempdir().unwrap();
    let weights = reference_dir().join("small_dit.safetensors");
    common::run_python("scripts/fixtures/wan_dit_dtypes.py", &[weights.as_os_str(), dir.path().as_os_str()]);
    let case = case("e2e_tiny.safetensors");
    let run = |path: &Path, kind: Kind| -> Tensor {
        let model = WanDit::load(path, &WanDitLoadOptions { kind, ..WanDitLoadOptions::default() }).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let mut stream = model.stream(model.condition(&tensor(&case, "context")).unwrap(), StreamSettings::official([128, 256])).unwrap();
        stream.step(&noise_slice(&tensor(&case, "noise"), 0), &tensor(&case, "step0.lq_latents")).expect("step").to_kind(Kind::Float)
    };
    let expected = tensor(&case, "step0.noise_pred");
    for name in ["f16", "bf16"] {
        let narrow = run(&dir.path().join(format!("{name}.safetensors")), Kind::Float);
        let widened = run(&dir.path().join(format!("{name}_as_f32.safetensors")), Kind::Float);
        assert_eq!(max_abs_diff(&narrow, &widened), 0.0, "{name} file read as its values");
        println!("{name} weights, fp32 compute vs original: {:.3e}", max_abs_diff(&narrow, &expected));
    }
    let bf16 = run(&weights, Kind::BFloat16);
    let error = max_abs_diff(&bf16, &expected);
    println!("bf16 compute vs fp32 original: {error:.3e}");
    assert!(error.is_finite() && error < 0.5, "bf16 compute strays {error}");
}
