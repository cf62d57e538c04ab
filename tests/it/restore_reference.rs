//! SeedVR2 restoration against every end-to-end case the ORIGINAL pipeline recorded in
//! ../shared/reference/seedvr2_dit (`small_*_e2e.safetensors`; the target size comes from the case's own
//! entry in small_config.json): frames in and out (resize, crop, normalise, frame padding, colour fix,
//! bytes) on their own, and the whole one-step pipeline from the LR video to the output bytes given the
//! case's saved noise, with the case's small DiT and the small SeedVR2 VAE.
use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::tensors::{max_abs_diff, read_tensor_map};
use serde_json::Value;
use tch::{Kind, Tensor};
use vaebox::models::restore::colorfix::{adain, to_u8_thwc, wavelet_reconstruction, ColorFix};
use tch::Device;
use vaebox::executor::restore::vae::{StreamSettings, StreamedVae};
use vaebox::models::restore::one_step::{restore, BatchVae, Noise, RestoreModels, RestoreStep, WholeBatches};
use vaebox::models::vae::VideoVae;
use vaebox::tiling::planner::Plan;
use vaebox::models::restore::noise_augment::NoiseScales;
use vaebox::models::restore::prepare::{first_frames_tchw, pad_frames_4n1, prepare_frames, target_size, Fit, TargetSize};
use vaebox::models::restore::restorer::read_text_embedding;
use vaebox::models::seedvr2::{SeedVr2LoadOptions, SeedVr2Vae};
use vaebox::models::seedvr2_dit::{DitLoadOptions, SeedVr2Dit};

/// The reference README's note: an independent rewrite reproduced these with 0.0 difference.
const FLOAT_ATOL: f64 = 1e-5;
/// Off-by-one bytes allowed where a float sits on a rounding half (the README's suggestion: "a few pixels").
const MAX_BYTES_OFF_BY_ONE: i64 = 8;

fn reference_dir() -> PathBuf {
    std::env::var_os("VAEBOX_SEEDVR2_DIT_REFERENCE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/reference/seedvr2_dit")))
}

/// The bounds for the whole pipeline: float output within 1e-3, bytes within ±1.
const PIPELINE_ATOL: f64 = 1e-3;

/// The small SeedVR2 VAE the e2e cases were made with (`VAEBOX_SEEDVR2_VAE_WEIGHTS`, default the VAE
/// reference folder beside this one).
fn vae_weights(dir: &Path) -> PathBuf {
    std::env::var_os("VAEBOX_SEEDVR2_VAE_WEIGHTS").map(PathBuf::from).unwrap_or_else(|| dir.join("../seedvr2/small_weights.safetensors"))
}

fn e2e_cases(dir: &Path) -> Vec<PathBuf> {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{} unreadable: {e}", dir.display()));
    let mut cases: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("small_") && n.ends_with("_e2e.safetensors")))
        .collect();
    cases.sort();
    assert!(!cases.is_empty(), "no small_*_e2e.safetensors in {}", dir.display());
    cases
}

/// The `e2e_*` entry of small_config.json whose `file` is this case.
fn case_config(dir: &Path, case: &Path) -> Value {
    let text = std::fs::read_to_string(dir.join("small_config.json")).expect("small_config.json next to the cases");
    let config: Value = serde_json::from_str(&text).expect("small_config.json is JSON");
    let file = case.file_name().unwrap().to_str().unwrap();
    let entries = config.as_object().unwrap().iter().filter(|(key, _)| key.starts_with("e2e_"));
    let found = entries.map(|(_, v)| v).find(|v| v["file"] == file);
    found.unwrap_or_else(|| panic!("small_config.json has no e2e_* entry with \"file\": \"{file}\"")).clone()
}

fn target_of(config: &Value) -> TargetSize {
    let spec = &config["spec"];
    let side = |key: &str| spec[key].as_u64().unwrap_or_else(|| panic!("small_config.json e2e spec has no integer `{key}`: {spec}"));
    TargetSize::Size { height: side("res_h") as u32, width: side("res_w") as u32 }
}

fn tensor(case: &BTreeMap<String, Tensor>, name: &str) -> Tensor {
    case.get(name).unwrap_or_else(|| panic!("the case has no `{name}`")).shallow_clone()
}

fn check(label: &str, actual: &Tensor, expected: &Tensor) {
    let error = max_abs_diff(actual, expected);
    println!("{label}: max abs error {error:.3e} (bound {FLOAT_ATOL:.0e})");
    assert!(error <= FLOAT_ATOL, "{label}: {error:.3e} > {FLOAT_ATOL:.0e}");
}

/// Counts the differing bytes; more than `max_differing`, or any off by more than one, fails.
fn check_bytes_within(label: &str, actual: &Tensor, expected: &Tensor, max_differing: i64) {
    assert_eq!(actual.kind(), Kind::Uint8, "{label}");
    let diff = (actual.to_kind(Kind::Int64) - expected.to_kind(Kind::Int64)).abs();
    let (differing, worst) = (diff.ne(0).sum(Kind::Int64).int64_value(&[]), diff.max().int64_value(&[]));
    println!("{label}: {differing} of {} bytes differ, by at most {worst}", diff.numel());
    assert!(worst <= 1 && differing <= max_differing, "{label}: {differing} bytes differ, by at most {worst}");
}

fn check_bytes(label: &str, actual: &Tensor, expected: &Tensor) {
    check_bytes_within(label, actual, expected, MAX_BYTES_OFF_BY_ONE);
}

/// The recorded resize and crop calls of the original, when the config has them.
fn check_recorded_geometry(config: &Value, in_hw: (i64, i64), target: TargetSize) {
    let g = target_size(in_hw.0, in_hw.1, target, Fit::Crop);
    if let Some(call) = config["resize_calls"].as_array().and_then(|calls| calls.first()) {
        assert_eq!(call["size"], serde_json::json!([g.resize_h, g.resize_w]), "resize call");
    }
    if let Some(call) = config["crop_calls"].as_array().and_then(|calls| calls.first()) {
        let ours = serde_json::json!([g.crop_top, g.crop_left, g.crop_h, g.crop_w]);
        assert_eq!(serde_json::json!([call["top"], call["left"], call["height"], call["width"]]), ours, "crop call");
    }
}

#[test]
fn frames_in_match_the_original_vae_input() {
    let dir = reference_dir();
    for path in e2e_cases(&dir) {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let (config, case) = (case_config(&dir, &path), read_tensor_map(&path));
        let lr = tensor(&case, "lr_video_u8_tchw");
        let (frames, h, w) = (lr.size()[0], lr.size()[2], lr.size()[3]);
        check_recorded_geometry(&config, (h, w), target_of(&config));
        let geometry = target_size(h, w, target_of(&config), Fit::Crop);
        let prepared = prepare_frames(&lr, &geometry).unwrap();
        let (padded, original) = pad_frames_4n1(&prepared).unwrap();
        assert_eq!(original, frames);
        check(&format!("{name} vae_encode_input_cthw"), &padded, &tensor(&case, "vae_encode_input_cthw"));
    }
}

#[test]
fn frames_out_match_the_original_colour_fix_and_bytes() {
    let dir = reference_dir();
    for path in e2e_cases(&dir) {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let case = read_tensor_map(&path);
        let frames = tensor(&case, "lr_video_u8_tchw").size()[0];
        let sample = first_frames_tchw(&tensor(&case, "decoded"), frames).unwrap();
        assert_eq!(max_abs_diff(&sample, &tensor(&case, "sample_before_colorfix")), 0.0, "{name}: decoded trimmed to the input");
        let reference = first_frames_tchw(&tensor(&case, "vae_encode_input_cthw"), frames).unwrap();

        let wavelet = wavelet_reconstruction(&sample, &reference).unwrap();
        check(&format!("{name} sample_after_colorfix"), &wavelet, &tensor(&case, "sample_after_colorfix"));
        let via_enum = ColorFix::parse("wavelet").unwrap().apply(&sample, &reference).unwrap();
        assert_eq!(max_abs_diff(&via_enum, &wavelet), 0.0);
        let adain_fixed = adain(&sample, &reference).unwrap();
        check(&format!("{name} sample_after_adain"), &adain_fixed, &tensor(&case, "sample_after_adain"));

        // The conversion alone, on the original's own floats, must give its bytes exactly.
        let exact = to_u8_thwc(&tensor(&case, "sample_after_colorfix")).unwrap();
        assert_eq!(exact, tensor(&case, "final_u8_thwc"), "{name}: to_u8 of the original floats");
        check_bytes(&format!("{name} final_u8_thwc"), &to_u8_thwc(&wavelet).unwrap(), &tensor(&case, "final_u8_thwc"));
        check_bytes(&format!("{name} final_adain_u8_thwc"), &to_u8_thwc(&adain_fixed).unwrap(), &tensor(&case, "final_adain_u8_thwc"));
    }
}

/// The whole one-step pipeline from the LR video: prepare, pad, VAE encode with the case's posterior ε,
/// one DiT step with its noise, VAE decode, wavelet colour fix, bytes. The VAE runs on whole batches as
/// the original does.
#[test]
fn whole_pipeline_matches_the_original_given_its_noise() {
    let dir = reference_dir();
    let vae = SeedVr2Vae::load(&vae_weights(&dir), &SeedVr2LoadOptions::default()).expect("small SeedVR2 VAE");
    check_whole_pipeline(&dir, &mut WholeBatches(&vae));
}

/// The same, with the VAE as the server runs it: the executor's streams, one latent frame per push
/// (the causal caches carry the rest), so the bounds hold for streamed batches too.
#[test]
fn whole_pipeline_through_the_executors_streamed_vae_matches_the_original() {
    let dir = reference_dir();
    let vae = VideoVae::new(SeedVr2Vae::load(&vae_weights(&dir), &SeedVr2LoadOptions::default()).expect("small SeedVR2 VAE"));
    let settings = StreamSettings { budget_mib: 0, max_latent_frames: 1, kind: Kind::Float, device: Device::Cpu };
    let mut streamed = StreamedVae::new(&vae, settings).expect("the SeedVR2 VAE streams raw moments");
    check_whole_pipeline(&dir, &mut streamed);
    let pushes = |plan: &Option<Plan>| plan.as_ref().map(|p| (p.latent_frames_per_chunk, p.spatial));
    assert_eq!(pushes(&streamed.plans.encode), Some((1, None)), "one latent frame per encode push, whole frames");
    assert_eq!(pushes(&streamed.plans.decode), Some((1, None)), "one latent frame per decode push, whole frames");
    let fallbacks = streamed.take_fallbacks();
    assert!(fallbacks.is_empty(), "{fallbacks:?}");
}

fn check_whole_pipeline<V: BatchVae>(dir: &Path, vae: &mut V)
where
    V::Error: std::fmt::Debug,
{
    let dir = dir.to_path_buf();
    let text = read_text_embedding(&dir.join("text_embeds.safetensors")).expect("pos_emb").to_kind(Kind::Float);
    for path in e2e_cases(&dir) {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let variant = name.strip_prefix("small_").and_then(|n| n.strip_suffix("_e2e.safetensors")).unwrap();
        let dit = SeedVr2Dit::load(&dir.join(format!("small_{variant}_weights.safetensors")), &DitLoadOptions::default()).expect("small DiT");
        let (config, case) = (case_config(&dir, &path), read_tensor_map(&path));
        assert_eq!(max_abs_diff(&text, &tensor(&case, "dit_txt")), 0.0, "{name}: the prompt is pos_emb");
        let lr = tensor(&case, "lr_video_u8_tchw");
        let geometry = target_size(lr.size()[2], lr.size()[3], target_of(&config), Fit::Crop);
        let (padded, keep) = pad_frames_4n1(&prepare_frames(&lr, &geometry).unwrap()).unwrap();
        let noise = Noise::Given { posterior_eps: tensor(&case, "posterior_eps"), noise: tensor(&case, "noise") };
        let step = RestoreStep { input: &padded, keep, keep_size: None, color_fix: ColorFix::Wavelet, noise, noise_scales: NoiseScales::default() };
        let out = restore(vae, &RestoreModels { dit: &dit, text: &text }, step).expect("restore");
        let check_pipeline = |label: &str, actual: &Tensor, expected: &Tensor| {
            let error = max_abs_diff(actual, expected);
            println!("{name} {label}: max abs error {error:.3e} (bound {PIPELINE_ATOL:.0e})");
            assert!(error <= PIPELINE_ATOL, "{name} {label}: {error:.3e} > {PIPELINE_ATOL:.0e}");
        };
        check_pipeline("decoded", &out.decoded, &tensor(&case, "decoded"));
        check_pipeline("sample_after_colorfix", &out.frames, &tensor(&case, "sample_after_colorfix"));
        // The bound is ±1 per byte; floats ~1e-5 apart round differently where they sit on a half,
        // so a few bytes do (13 of 110,592 for the 3B case). More than 1% would mean a real difference.
        let final_u8 = tensor(&case, "final_u8_thwc");
        check_bytes_within(&format!("{name} final_u8_thwc (whole pipeline)"), &to_u8_thwc(&out.frames).unwrap(), &final_u8, final_u8.numel() as i64 / 100);
    }
}
