//! `cpu_winograd` against the reference case of the original Wan code (../shared/reference/wan21_original).
//! Its own test binary: it flips the process-wide switch, which would race the exact-equality checks of
//! tests/wan_reference.rs running beside it.
mod common;

use common::tensors::{max_abs_diff, read_tensor_map};
use vaebox::models::wan::{WanLoadOptions, WanVae};

const REFERENCE_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/reference/wan21_original");
/// The reference README's guidance for an independent fp32 implementation.
const REFERENCE_ATOL: f64 = 1e-4;

/// Winograd (on by default) and the direct convolutions both match the reference. They are different
/// arithmetic, so their outputs differ slightly: that shows the Winograd path ran (the reference model's
/// 24- and 48-channel convolutions take it; its 12-channel ones stay direct).
#[test]
fn winograd_and_direct_convolutions_both_match_the_reference() {
    let case = read_tensor_map(&std::path::Path::new(REFERENCE_DIR).join("case.safetensors"));
    let tensor = |name: &str| case.get(name).unwrap_or_else(|| panic!("case.safetensors has no `{name}`")).shallow_clone();
    let vae = WanVae::load(&std::path::Path::new(REFERENCE_DIR).join("weights.safetensors"), &WanLoadOptions::default()).expect("reference weights load");
    let run = |winograd: bool| {
        vaebox::models::winograd::set_enabled(winograd);
        let mu = vae.encode(&tensor("sample")).expect("encode");
        let video = vae.decode_unclamped(&tensor("latent_mu")).expect("decode");
        (mu, video)
    };
    let (direct_mu, direct_video) = run(false);
    let (winograd_mu, winograd_video) = run(true);
    for (what, mu, video) in [("direct", &direct_mu, &direct_video), ("winograd", &winograd_mu, &winograd_video)] {
        let (mu_error, video_error) = (max_abs_diff(mu, &tensor("latent_mu")), max_abs_diff(video, &tensor("decoded_unclamped")));
        println!("{what}: latent_mu {mu_error:e}, decoded_unclamped {video_error:e}");
        assert!(mu_error <= REFERENCE_ATOL && video_error <= REFERENCE_ATOL, "{what}: {mu_error:e} / {video_error:e}");
    }
    let apart = max_abs_diff(&winograd_video, &direct_video);
    assert!(apart > 0.0, "the Winograd and direct decodes are identical: the Winograd path did not run");
}
