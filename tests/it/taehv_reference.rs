//! TAEHV (madebyollin's tiny video autoencoders) against tensors made by running the original taehv.py
//! (../shared/reference/taehv, small random models with the real key names): every config's decode and
//! encode in parallel and frame-by-frame mode, batches, per-layer intermediates, preview builds and fp64;
//! the pipeline streams chunked several ways against the whole clip; full-size files built from the real
//! key lists; and files that are not TAEHV.
use crate::common;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use common::tensors::{max_abs_diff, read_tensor_map};
use serde_json::Value;
use tch::{Device, Kind, Tensor};
use vaebox::models::family::vae::{StreamOutput, VaeModel, VaeStream};
use vaebox::models::stop::StopFlag;
use vaebox::models::taehv::{DecoderReduction, DecoderVariant, LatentSpace, Taehv, TaehvLoadOptions, TaehvVideoVae};
use vaebox::models::ModelError;

const REFERENCE_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/reference/taehv");
const CONFIGS: [&str; 4] = ["taew2_1", "taew2_2", "taew2_2_super", "taehv"];
/// The reference README's tolerances for an fp32 port: decoded pixels (the last conv's ×10-144 gain
/// amplifies earlier rounding), encoder latents, and intermediates relative to each tensor's max.
const DECODE_ATOL: f64 = 5e-6;
const ENCODE_ATOL: f64 = 1e-6;
const INTERMEDIATE_RTOL: f64 = 1e-5;
/// The pipelines' [-1, 1] range doubles every pixel difference.
const PIPELINE_DECODE_ATOL: f64 = 2.0 * DECODE_ATOL;

fn reference_path(name: &str) -> PathBuf {
    Path::new(REFERENCE_DIR).join(name)
}

fn reference_config(name: &str) -> Value {
    let text = std::fs::read_to_string(reference_path("config.json")).expect("config.json readable");
    let all: Value = serde_json::from_str(&text).expect("config.json is JSON");
    all["configs"][name].clone()
}

fn case(name: &str) -> BTreeMap<String, Tensor> {
    read_tensor_map(&reference_path(&format!("{name}_case.safetensors")))
}

fn tensor(case: &BTreeMap<String, Tensor>, key: &str) -> Tensor {
    case.get(key).unwrap_or_else(|| panic!("the case file has no `{key}`")).shallow_clone()
}

fn weights_path(name: &str) -> PathBuf {
    reference_path(&format!("{name}_weights.safetensors"))
}

fn load(name: &str) -> Taehv {
    Taehv::load(&weights_path(name), &TaehvLoadOptions::default()).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn assert_close(label: &str, actual: &Tensor, expected: &Tensor, atol: f64) -> f64 {
    let diff = max_abs_diff(actual, expected);
    println!("{label}: max abs diff {diff:e}");
    assert!(diff <= atol, "{label}: max abs diff {diff:e} > {atol:e}");
    diff
}

fn bools(value: &Value) -> Vec<bool> {
    value.as_array().expect("a list of flags").iter().map(|v| v.as_bool().expect("a flag")).collect()
}

fn flags3(value: &Value) -> [bool; 3] {
    match bools(value).as_slice() {
        &[a, b] => DecoderReduction::time_pair(a, b),
        &[a, b, c] => [a, b, c],
        other => panic!("flags {other:?}"),
    }
}

fn int(value: &Value) -> i64 {
    value.as_i64().expect("an integer")
}

/// `[N, T, C, H, W]` ↔ `[N, C, T, H, W]`.
fn swap(x: &Tensor) -> Tensor {
    x.permute([0, 2, 1, 3, 4]).contiguous()
}

#[test]
fn configs_are_read_from_the_weights() {
    for name in CONFIGS {
        let expected = reference_config(name);
        let model = load(name);
        let config = model.config();
        assert_eq!(config.patch_size, int(&expected["patch_size"]), "{name}");
        assert_eq!(config.latent_channels, int(&expected["latent_channels"]), "{name}");
        let variant = if expected["arch_variant"].as_str() == Some("super") { DecoderVariant::Super } else { DecoderVariant::Base };
        assert_eq!(config.decoder, variant, "{name}");
        assert_eq!(config.encoder_time_downscale, flags3(&expected["encoder_time_downscale"]), "{name}");
        assert_eq!(config.decoder_time_upscale, flags3(&expected["decoder_time_upscale"]), "{name}");
        assert_eq!(config.decoder_space_upscale, flags3(&expected["decoder_space_upscale"]), "{name}");
        assert_eq!(config.t_downscale(), int(&expected["t_downscale"]), "{name}");
        assert_eq!(config.t_upscale(), int(&expected["t_upscale"]), "{name}");
        assert_eq!(config.frames_to_trim(), int(&expected["frames_to_trim"]), "{name}");
        let div = int(&expected["width_div"]);
        let released = if variant == DecoderVariant::Super { [512, 256, 128, 64] } else { [256, 128, 64, 64] };
        assert_eq!(config.decoder_widths, released.map(|w| w / div), "{name}");
        assert_eq!(config.encoder_width, 64 / div, "{name}");
        let small: i64 = expected["small_shapes"].as_object().unwrap().values().map(|s| s.as_array().unwrap().iter().map(int).product::<i64>()).sum();
        assert_eq!(model.parameter_count(), small, "{name}");
        let space = match name {
            "taew2_1" => LatentSpace::Wan21,
            "taew2_2" | "taew2_2_super" => LatentSpace::Wan22,
            _ => LatentSpace::HunyuanVideo,
        };
        assert_eq!(model.latent_space(), space, "{name}");
        println!("{name}: {config:?}, {} parameters", model.parameter_count());
    }
}

#[test]
fn decode_matches_the_original_in_both_modes() {
    let mut checked = 0;
    for name in CONFIGS {
        let (case, model) = (case(name), load(name));
        for label in ["dec_a", "dec_b"].into_iter().filter(|label| case.contains_key(&format!("{label}.latent"))) {
            let latent = tensor(&case, &format!("{label}.latent"));
            for (parallel, mode) in [(true, "parallel"), (false, "streaming")] {
                let out = model.decode_video(&latent, parallel).unwrap();
                assert_close(&format!("{name} {label} decode {mode}"), &out, &tensor(&case, &format!("{label}.out_{mode}")), DECODE_ATOL);
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 2 * (2 + 2 + 2 + 1), "every decode case of every config");
}

#[test]
fn encode_matches_the_original_in_both_modes() {
    let mut checked = 0;
    for name in CONFIGS {
        let (case, model) = (case(name), load(name));
        for label in ["enc_a", "enc_b"].into_iter().filter(|label| case.contains_key(&format!("{label}.video"))) {
            let video = tensor(&case, &format!("{label}.video"));
            for (parallel, mode) in [(true, "parallel"), (false, "streaming")] {
                let latent = model.encode_video(&video, parallel).unwrap();
                assert_close(&format!("{name} {label} encode {mode}"), &latent, &tensor(&case, &format!("{label}.latent_{mode}")), ENCODE_ATOL);
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 2 * (2 + 2 + 2 + 1), "every encode case of every config");
}

/// `<chain>.<index>.…` keys in the network's order, so the first mismatch named is the first layer off.
fn layer_order(key: &str) -> (usize, String) {
    let index = key.split('.').nth(1).and_then(|i| i.parse().ok()).unwrap_or(usize::MAX);
    (index, key.to_string())
}

/// Every reference intermediate `<case>.<chain>.…` against the traced `<chain>.…`; returns how many.
fn compare_intermediates(name: &str, case: &BTreeMap<String, Tensor>, case_prefix: &str, chain: &str, trace: Vec<(String, Tensor)>) -> usize {
    let traced: HashMap<String, Tensor> = trace.into_iter().collect();
    let mut keys: Vec<(&str, &Tensor)> = case
        .iter()
        .filter_map(|(key, tensor)| key.strip_prefix(case_prefix).filter(|short| short.starts_with(chain)).map(|short| (short, tensor)))
        .collect();
    keys.sort_by_key(|(short, _)| layer_order(short));
    let mut worst = 0f64;
    for (short, expected) in &keys {
        let actual = traced.get(*short).unwrap_or_else(|| panic!("{name}: no traced `{short}`"));
        let scale = expected.abs().max().double_value(&[]).max(1e-30);
        let relative = max_abs_diff(actual, expected) / scale;
        worst = worst.max(relative);
        assert!(relative <= INTERMEDIATE_RTOL, "{name}: first mismatch at `{short}`: max abs diff / max = {relative:e}");
    }
    println!("{name} {case_prefix}{chain}*: {} intermediates, worst relative diff {worst:e}", keys.len());
    keys.len()
}

#[test]
fn intermediates_match_the_original() {
    for name in CONFIGS {
        let (case, model) = (case(name), load(name));
        if !case.contains_key("dec_i.latent") {
            continue;
        }
        let (out, trace) = model.decode_video_traced(&tensor(&case, "dec_i.latent")).unwrap();
        assert_close(&format!("{name} dec_i out"), &out, &tensor(&case, "dec_i.out"), DECODE_ATOL);
        let compared = compare_intermediates(name, &case, "dec_i.", "decoder.", trace);
        assert!(compared >= 30, "{name}: only {compared} decoder intermediates");
        let (latent, trace) = model.encode_video_traced(&tensor(&case, "enc_i.video")).unwrap();
        assert_close(&format!("{name} enc_i latent"), &latent, &tensor(&case, "enc_i.latent"), ENCODE_ATOL);
        let compared = compare_intermediates(name, &case, "enc_i.", "encoder.", trace);
        assert!(compared >= 30, "{name}: only {compared} encoder intermediates");
    }
}

#[test]
fn preview_builds_match_the_original() {
    let mut checked = 0;
    for name in CONFIGS {
        let case = case(name);
        if !case.contains_key("preview.out_parallel") {
            continue;
        }
        let preview = &reference_config(name)["cases"]["preview"];
        let kwargs = &preview["kwargs"];
        let reduction = DecoderReduction {
            time_upscale: Some(flags3(&kwargs["decoder_time_upscale"])),
            space_upscale: kwargs.get("decoder_space_upscale").map(flags3),
        };
        let model = Taehv::load(&weights_path(name), &TaehvLoadOptions { reduction, ..TaehvLoadOptions::default() }).unwrap();
        assert_eq!(model.config().t_upscale(), int(&preview["t_upscale"]), "{name}");
        assert_eq!(model.config().frames_to_trim(), int(&preview["frames_to_trim"]), "{name}");
        let latent = tensor(&case, preview["latent"].as_str().unwrap());
        for (parallel, mode) in [(true, "parallel"), (false, "streaming")] {
            let out = model.decode_video(&latent, parallel).unwrap();
            assert_close(&format!("{name} preview {mode}"), &out, &tensor(&case, &format!("preview.out_{mode}")), DECODE_ATOL);
            checked += 1;
        }
    }
    assert_eq!(checked, 4, "taew2_1 and taew2_2_super have preview cases");
    // As in the original: the super decoder's widths fix its space upscale, and no build adds a stage.
    let refused = |name: &str, reduction: DecoderReduction| match Taehv::load(&weights_path(name), &TaehvLoadOptions { reduction, ..TaehvLoadOptions::default() }) {
        Err(ModelError::Format { reason, .. }) => reason,
        other => panic!("{name} {reduction:?}: {:?}", other.map(|m| m.config().clone())),
    };
    let reason = refused("taew2_2_super", DecoderReduction { time_upscale: None, space_upscale: Some([true, true, false]) });
    assert!(reason.contains("fixed by its conv widths"), "{reason}");
    let reason = refused("taew2_1", DecoderReduction { time_upscale: Some([true, true, true]), space_upscale: None });
    assert!(reason.contains("no time upscale"), "{reason}");
}

#[test]
fn fp64_decode_matches_the_original() {
    let case = case("taew2_1");
    let model = Taehv::load(&weights_path("taew2_1"), &TaehvLoadOptions { kind: Kind::Double, ..TaehvLoadOptions::default() }).unwrap();
    let out = model.decode_video(&tensor(&case, "dec_a.latent").to_kind(Kind::Double), true).unwrap();
    assert_eq!(out.kind(), Kind::Double);
    let expected = tensor(&case, "dec_a.out_fp64");
    assert_eq!(expected.kind(), Kind::Double);
    assert_close("taew2_1 dec_a fp64", &out, &expected, 1e-12);
}

/// Pushes `sizes` frames at a time along dim 2 of `input` (NCTHW); each push's output frame count.
fn push_all(stream: &mut dyn VaeStream<'_>, input: &Tensor, sizes: &[i64]) -> (Vec<Tensor>, Vec<i64>) {
    assert_eq!(sizes.iter().sum::<i64>(), input.size()[2], "{sizes:?}");
    let (mut outputs, mut counts, mut start) = (Vec::new(), Vec::new(), 0);
    for &size in sizes {
        let out = stream.push(&input.narrow(2, start, size)).unwrap();
        counts.push(out.as_ref().map_or(0, |o| o.size()[2]));
        outputs.extend(out);
        start += size;
    }
    (outputs, counts)
}

#[test]
fn pipeline_streams_equal_the_whole_clip() {
    for name in CONFIGS {
        let case = case(name);
        let vae = TaehvVideoVae::new(load(name));
        assert_eq!(vae.temporal_factor(), 4, "{name}");
        assert_eq!(vae.spatial_factor(), 8 * vae.model().config().patch_size, "{name}");
        let latent = tensor(&case, "dec_a.latent");
        let whole = swap(&vae.model().decode_video(&latent, true).unwrap()) * 2.0 - 1.0;
        for sizes in [vec![1, 1, 1, 1], vec![2, 2], vec![1, 3], vec![3, 1], vec![4]] {
            let mut stream = vae.decode_stream(StreamOutput::Pipeline);
            let (pieces, counts) = push_all(stream.as_mut(), &swap(&latent), &sizes);
            let expected_counts: Vec<i64> = sizes.iter().enumerate().map(|(i, &t)| if i == 0 { 4 * t - 3 } else { 4 * t }).collect();
            assert_eq!(counts, expected_counts, "{name} decode pushes {sizes:?}");
            assert_close(&format!("{name} decode stream {sizes:?}"), &Tensor::cat(&pieces, 2), &whole, PIPELINE_DECODE_ATOL);
        }
        let video = tensor(&case, "enc_a.video");
        let whole = swap(&vae.model().encode_video(&video, true).unwrap());
        let pixels = swap(&video) * 2.0 - 1.0;
        for sizes in [vec![1; 10], vec![3, 4, 3], vec![10], vec![5, 5], vec![4, 4, 2], vec![2, 8]] {
            let mut stream = vae.pipeline_encoder();
            let (mut pieces, counts) = push_all(&mut stream, &pixels, &sizes);
            let mut pushed = 0;
            let expected_counts: Vec<i64> = sizes.iter().map(|&n| { pushed += n; pushed / 4 - (pushed - n) / 4 }).collect();
            assert_eq!(counts, expected_counts, "{name} encode pushes {sizes:?}");
            pieces.extend(stream.finish().unwrap());
            assert!(stream.finish().unwrap().is_none(), "a second finish adds nothing");
            assert_close(&format!("{name} encode stream {sizes:?}"), &Tensor::cat(&pieces, 2), &whole, ENCODE_ATOL);
        }
    }
}

#[test]
fn streams_go_on_from_snapshots_and_saved_state() {
    let case = case("taew2_2");
    let vae = TaehvVideoVae::new(load("taew2_2"));
    let latent = swap(&tensor(&case, "dec_a.latent"));
    let whole = swap(&vae.model().decode_video(&tensor(&case, "dec_a.latent"), true).unwrap()) * 2.0 - 1.0;
    // A snapshot taken after the first push; a bad second push is thrown away and the snapshot goes on.
    let mut stream = vae.decode_stream(StreamOutput::Pipeline);
    let first = stream.push_some(&latent.narrow(2, 0, 1)).unwrap();
    let mut resumed = stream.snapshot();
    let _discarded = stream.push_some(&latent.narrow(2, 1, 3).zeros_like()).unwrap();
    let rest = resumed.push_some(&latent.narrow(2, 1, 3)).unwrap();
    assert_close("decode from a snapshot", &Tensor::cat(&[first.shallow_clone(), rest], 2), &whole, PIPELINE_DECODE_ATOL);
    // The saved state taken into a fresh stream.
    let mut saved = Vec::new();
    resumed = vae.decode_stream(StreamOutput::Pipeline);
    let _first_frames = resumed.push_some(&latent.narrow(2, 0, 2)).unwrap();
    resumed.save_state("job.", &mut saved);
    assert!(saved.iter().any(|(name, _)| name.starts_with("job.decoder.memory.")), "{:?}", saved.iter().map(|(n, _)| n).collect::<Vec<_>>());
    let saved: HashMap<String, Tensor> = saved.into_iter().collect();
    let mut fresh = vae.decode_stream(StreamOutput::Pipeline);
    fresh.load_state("job.", &saved).unwrap();
    let rest = fresh.push_some(&latent.narrow(2, 2, 2)).unwrap();
    assert_close("decode from a saved state", &rest, &whole.narrow(2, 5, 8), PIPELINE_DECODE_ATOL);

    let video = tensor(&case, "enc_a.video");
    let expected = swap(&vae.model().encode_video(&video, true).unwrap());
    let pixels = swap(&video) * 2.0 - 1.0;
    let mut encoder = vae.pipeline_encoder();
    let first = encoder.push(&pixels.narrow(2, 0, 5)).unwrap().expect("one whole group");
    let mut saved = Vec::new();
    encoder.save_state("job.", &mut saved);
    let saved: HashMap<String, Tensor> = saved.into_iter().collect();
    assert!(saved.keys().any(|name| name.starts_with("job.encoder.memory.")) && saved.contains_key("job.encoder.last_frame"), "{:?}", saved.keys());
    let mut fresh = vae.pipeline_encoder();
    fresh.load_state("job.", &saved).unwrap();
    let mut pieces = vec![first];
    pieces.extend(fresh.push(&pixels.narrow(2, 5, 5)).unwrap());
    pieces.extend(fresh.finish().unwrap());
    assert_close("encode from a saved state", &Tensor::cat(&pieces, 2), &expected, ENCODE_ATOL);
    // A saved state of the other direction does not fit.
    assert!(vae.decode_stream(StreamOutput::Pipeline).load_state("job.", &saved).is_err());
}

#[test]
fn a_raised_stop_ends_a_push() {
    let vae = TaehvVideoVae::new(load("taew2_1"));
    let mut decoder = vae.decode_stream(StreamOutput::Pipeline);
    decoder.set_stop(StopFlag::on(Arc::new(AtomicBool::new(true))));
    assert!(matches!(decoder.push(&Tensor::zeros([1, 16, 1, 2, 2], (Kind::Float, Device::Cpu))), Err(ModelError::Stopped)));
    let mut encoder = vae.encode_stream(StreamOutput::Pipeline);
    encoder.set_stop(StopFlag::on(Arc::new(AtomicBool::new(true))));
    assert!(matches!(encoder.push(&Tensor::zeros([1, 3, 4, 16, 16], (Kind::Float, Device::Cpu))), Err(ModelError::Stopped)));
}

/// A `keys_*.txt` listing: `key<TAB>64x12x3x3<TAB>dtype<TAB>numel`, `#` comments.
fn key_list(name: &str) -> Vec<(String, Vec<i64>)> {
    let text = std::fs::read_to_string(reference_path(&format!("keys_{name}.txt"))).unwrap();
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
        .map(|line| {
            let fields: Vec<&str> = line.split('\t').collect();
            let shape: Vec<i64> = fields[1].split('x').map(|d| d.parse().expect("dimension")).collect();
            assert_eq!(shape.iter().product::<i64>(), fields[3].parse::<i64>().unwrap(), "{line}");
            (fields[0].to_string(), shape)
        })
        .collect()
}

#[test]
fn full_size_files_from_the_real_key_lists_are_recognised() {
    let dir = tempfile::tempdir().unwrap();
    tch::manual_seed(7);
    for name in CONFIGS {
        let expected = reference_config(name);
        let keys = key_list(name);
        assert_eq!(keys.len() as i64, int(&expected["real_key_count"]), "{name}");
        let tensors: Vec<(String, Tensor)> = keys.iter().map(|(key, shape)| (key.clone(), Tensor::randn(shape.as_slice(), (Kind::Float, Device::Cpu)) * 0.02)).collect();
        let path = dir.path().join(format!("{name}.safetensors"));
        Tensor::write_safetensors(&tensors, &path).unwrap();
        drop(tensors);
        let model = Taehv::load(&path, &TaehvLoadOptions::default()).unwrap_or_else(|e| panic!("{name}: {e}"));
        let config = model.config();
        let patch = int(&expected["patch_size"]);
        assert_eq!((config.patch_size, config.latent_channels), (patch, int(&expected["latent_channels"])), "{name}");
        let super_decoder = expected["arch_variant"].as_str() == Some("super");
        assert_eq!(config.decoder == DecoderVariant::Super, super_decoder, "{name}");
        let released = if super_decoder { [512, 256, 128, 64] } else { [256, 128, 64, 64] };
        assert_eq!((config.encoder_width, config.decoder_widths), (64, released), "{name}");
        assert_eq!(model.parameter_count(), int(&expected["real_param_count"]), "{name}");
        assert_eq!(model.held_bytes().weights, 4 * model.parameter_count() as u64, "{name}: fp32 weights held once");
        let latent = Tensor::randn([1, 1, config.latent_channels, 2, 2], (Kind::Float, Device::Cpu));
        let out = model.decode_video(&latent, false).unwrap();
        assert_eq!(out.size(), vec![1, 1, 3, 16 * patch, 16 * patch], "{name}");
        assert!(out.min().double_value(&[]) >= 0.0 && out.max().double_value(&[]) <= 1.0, "{name}: clamped to [0, 1]");
        println!("{name}: {} keys, {} parameters, decodes one latent frame to {:?}", keys.len(), model.parameter_count(), out.size());
        std::fs::remove_file(&path).unwrap();
    }
}

fn refusal(path: &Path) -> String {
    match Taehv::load(path, &TaehvLoadOptions::default()) {
        Err(ModelError::Format { reason, .. }) => reason,
        Err(other) => panic!("{}: not a format error: {other}", path.display()),
        Ok(model) => panic!("{} loaded as {:?}", path.display(), model.config()),
    }
}

#[test]
fn files_that_are_not_taehv_are_refused() {
    let wan = Path::new(REFERENCE_DIR).join("../wan21_original/weights.safetensors");
    let reason = refusal(&wan);
    assert!(reason.contains("not a TAEHV model"), "{reason}");

    let dir = tempfile::tempdir().unwrap();
    let small: Vec<(String, Tensor)> = read_tensor_map(&weights_path("taew2_1")).into_iter().collect();
    let copy = || -> Vec<(String, Tensor)> { small.iter().map(|(k, t)| (k.clone(), t.shallow_clone())).collect() };
    let write = |file: &str, tensors: &[(String, Tensor)]| {
        let path = dir.path().join(file);
        Tensor::write_safetensors(tensors, &path).unwrap();
        path
    };
    let reason = refusal(&write("taew2_2.safetensors", &small));
    assert!(reason.contains("stands for patch size 2, 48 latent channels"), "a name that disagrees with the shapes: {reason}");
    assert!(Taehv::load(&write("my_tiny_vae.safetensors", &small), &TaehvLoadOptions::default()).is_ok(), "an unknown name is read by its shapes");

    let mut extra = copy();
    extra.push(("decoder.3.skip.weight".into(), Tensor::zeros([32, 32, 1, 1], (Kind::Float, Device::Cpu))));
    let reason = refusal(&write("taew2_1_extra.safetensors", &extra));
    assert!(reason.contains("unexpected tensor `decoder.3.skip.weight`"), "{reason}");

    let missing: Vec<(String, Tensor)> = small.iter().filter(|(k, _)| k != "decoder.9.conv.2.bias").map(|(k, t)| (k.clone(), t.shallow_clone())).collect();
    let reason = refusal(&write("taew2_1_missing.safetensors", &missing));
    assert!(reason.contains("missing tensor `decoder.9.conv.2.bias`"), "{reason}");

    let mut four_channels = copy();
    let first = four_channels.iter_mut().find(|(k, _)| k == "encoder.0.weight").unwrap();
    first.1 = Tensor::zeros([8, 4, 3, 3], (Kind::Float, Device::Cpu));
    let reason = refusal(&write("taew2_1_rgba.safetensors", &four_channels));
    assert!(reason.contains("not 3·p²"), "{reason}");
}

fn python() -> PathBuf {
    std::env::var_os("VAEBOX_PYTHON").map(PathBuf::from).unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python"))
}

/// The safetensors file re-saved by torch.save as a plain state dict (the released `.pth` form) in `dtype`.
pub(crate) fn torch_save(from: &Path, to: &Path, dtype: &str) {
    let script = "import sys, torch\nfrom safetensors.torch import load_file\n\
                  sd = load_file(sys.argv[1])\ntorch.save({k: v.to(getattr(torch, sys.argv[3])) for k, v in sd.items()}, sys.argv[2])\n";
    let output = Command::new(python()).arg("-c").arg(script).arg(from).arg(to).arg(dtype).output().expect("python runs (set VAEBOX_PYTHON)");
    assert!(output.status.success(), "torch.save failed: {}", String::from_utf8_lossy(&output.stderr));
}

#[test]
fn pth_and_half_precision_checkpoints_load() {
    let dir = tempfile::tempdir().unwrap();
    let case = case("taew2_2");
    let latent = tensor(&case, "dec_a.latent");
    let reference = tensor(&case, "dec_a.out_parallel");
    let small: Vec<(String, Tensor)> = read_tensor_map(&weights_path("taew2_2")).into_iter().collect();
    for (dtype, kind, atol) in [("float32", Kind::Float, DECODE_ATOL), ("float16", Kind::Half, 1e-2), ("bfloat16", Kind::BFloat16, 5e-2)] {
        let stored: Vec<(String, Tensor)> = small.iter().map(|(k, t)| (k.clone(), t.to_kind(kind))).collect();
        let safetensors = dir.path().join(format!("taew2_2_{dtype}.safetensors"));
        Tensor::write_safetensors(&stored, &safetensors).unwrap();
        let pth = dir.path().join(format!("taew2_2_{dtype}.pth"));
        torch_save(&weights_path("taew2_2"), &pth, dtype);
        let from_safetensors = Taehv::load(&safetensors, &TaehvLoadOptions::default()).unwrap().decode_video(&latent, true).unwrap();
        let from_pth = Taehv::load(&pth, &TaehvLoadOptions::default()).unwrap().decode_video(&latent, true).unwrap();
        assert!(from_pth.equal(&from_safetensors), "{dtype}: .pth and safetensors give the same model");
        assert_close(&format!("taew2_2 from {dtype} weights"), &from_pth, &reference, atol);
    }
    // bf16 compute (the pipelines' half precision on CPU): the same frames, roughly.
    let model = Taehv::load(&weights_path("taew2_2"), &TaehvLoadOptions { kind: Kind::BFloat16, ..TaehvLoadOptions::default() }).unwrap();
    let out = model.decode_video(&latent, true).unwrap();
    assert_eq!(out.kind(), Kind::BFloat16);
    let mean_error = (out.to_kind(Kind::Float) - &reference).abs().mean(Kind::Float).double_value(&[]);
    println!("taew2_2 bf16 compute: mean abs error {mean_error:e}");
    assert!(mean_error < 2e-2, "bf16 compute mean abs error {mean_error}");
}
