//! SeedVR2 VAE against the reference case produced by the original SeedVR2 code
//! (../shared/reference/seedvr2, small random weights), plus temporal slicing, the full-size
//! checkpoint layout, naming and bad-checkpoint checks.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use tch::{Device, Kind, Tensor};
use vaebox::models::seedvr2::{scale_latent, unscale_latent, SeedVr2Config, SeedVr2LoadOptions, SeedVr2Vae, SEEDVR2_SCALING_FACTOR};
use vaebox::models::ModelError;

const REFERENCE_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/reference/seedvr2");
/// The fp32 parity bound for everything.
const REFERENCE_ATOL: f64 = 1e-4;
/// The reference README's tighter suggestion for the latents.
const LATENT_ATOL: f64 = 1e-5;

fn reference_path(name: &str) -> PathBuf {
    Path::new(REFERENCE_DIR).join(name)
}

fn reference_tensors(name: &str) -> BTreeMap<String, Tensor> {
    Tensor::read_safetensors(reference_path(name)).expect("reference file readable").into_iter().collect()
}

fn case_tensor(case: &BTreeMap<String, Tensor>, name: &str) -> Tensor {
    case.get(name).unwrap_or_else(|| panic!("small_case.safetensors has no `{name}`")).shallow_clone()
}

fn load_reference_vae() -> SeedVr2Vae {
    SeedVr2Vae::load(&reference_path("small_weights.safetensors"), &SeedVr2LoadOptions::default()).expect("reference weights load")
}

fn max_abs_diff(actual: &Tensor, expected: &Tensor) -> f64 {
    assert_eq!(actual.size(), expected.size(), "shape mismatch");
    (actual.to_kind(Kind::Double) - expected.to_kind(Kind::Double)).abs().max().double_value(&[])
}

/// Measures, prints and bounds one difference.
fn check(label: &str, actual: &Tensor, expected: &Tensor, bound: f64) -> f64 {
    let error = max_abs_diff(actual, expected);
    println!("{label}: max abs error {error:.3e} (bound {bound:.1e})");
    assert!(error <= bound, "{label}: max abs error {error:e} > {bound:e}");
    error
}

#[test]
fn detects_small_config() {
    let vae = load_reference_vae();
    let expected = SeedVr2Config { block_out_channels: vec![32, 64, 64, 64], ..SeedVr2Config::seedvr2() };
    assert_eq!(vae.config(), &expected);
}

/// Whole-clip encode and decode of one case (`prefix` = "", "image_" or "long_") against the reference.
fn check_whole_clip_case(prefix: &str) {
    let case = reference_tensors("small_case.safetensors");
    let vae = load_reference_vae();
    let posterior = vae.encode(&case_tensor(&case, &format!("{prefix}sample"))).expect("encode");
    check(&format!("{prefix}posterior_mean"), &posterior.mean, &case_tensor(&case, &format!("{prefix}posterior_mean")), LATENT_ATOL);
    check(&format!("{prefix}posterior_logvar"), &posterior.logvar, &case_tensor(&case, &format!("{prefix}posterior_logvar")), LATENT_ATOL);
    // Decoded from the reference mean, so the decoder is checked on its own.
    let decoded = vae.decode(&case_tensor(&case, &format!("{prefix}posterior_mean"))).expect("decode");
    check(&format!("{prefix}decoded"), &decoded, &case_tensor(&case, &format!("{prefix}decoded")), REFERENCE_ATOL);
}

#[test]
fn main_case_matches_reference() {
    check_whole_clip_case("");
}

#[test]
fn image_case_matches_reference() {
    check_whole_clip_case("image_");
}

#[test]
fn long_case_matches_reference() {
    check_whole_clip_case("long_");
}

/// The original's sliced path (`set_causal_slicing(split_size=4)`: pixel chunks of 5 then 4 frames,
/// latent chunks of 2 then 1) against its own sliced outputs, and our sliced result against our whole
/// clip: no further from it than the reference's sliced result is from the reference's whole clip.
fn check_sliced_case(prefix: &str) {
    let case = reference_tensors("small_case.safetensors");
    let name = |tensor: &str| format!("{prefix}{tensor}");
    let vae = load_reference_vae();
    let sample = case_tensor(&case, &name("sample"));
    let reference_mean = case_tensor(&case, &name("posterior_mean"));

    let whole = vae.encode(&sample).expect("whole encode");
    let sliced = vae.encode_sliced(&sample, 4).expect("sliced encode");
    check(&name("posterior_mean_sliced"), &sliced.mean, &case_tensor(&case, &name("posterior_mean_sliced")), LATENT_ATOL);
    check(&name("posterior_logvar_sliced"), &sliced.logvar, &case_tensor(&case, &name("posterior_logvar_sliced")), LATENT_ATOL);
    for (what, ours_sliced, ours_whole) in [("posterior_mean", &sliced.mean, &whole.mean), ("posterior_logvar", &sliced.logvar, &whole.logvar)] {
        let reference_gap = max_abs_diff(&case_tensor(&case, &name(&format!("{what}_sliced"))), &case_tensor(&case, &name(what)));
        check(&format!("{} sliced vs whole (reference's own gap {reference_gap:.2e})", name(what)), ours_sliced, ours_whole, reference_gap);
    }

    let whole = vae.decode(&reference_mean).expect("whole decode");
    let sliced = vae.decode_sliced(&reference_mean, 1).expect("sliced decode");
    check(&name("decoded_sliced"), &sliced, &case_tensor(&case, &name("decoded_sliced")), REFERENCE_ATOL);
    let reference_gap = max_abs_diff(&case_tensor(&case, &name("decoded_sliced")), &case_tensor(&case, &name("decoded")));
    check(&format!("{} sliced vs whole (reference's own gap {reference_gap:.2e})", name("decoded")), &sliced, &whole, reference_gap);
}

#[test]
fn main_case_sliced_matches_reference_and_whole_clip() {
    check_sliced_case("");
}

#[test]
fn long_case_sliced_matches_reference_and_whole_clip() {
    check_sliced_case("long_");
}
