//! `cpu_winograd` against the reference case of the original Wan code (../shared/reference/wan21_original).
//! Its own test binary: it flips the process-wide switch, which would race the exact-equality checks of
//! tests/it/wan_reference.rs running beside it.
mod common;

use std::sync::Mutex;

use common::tensors::{max_abs_diff, read_tensor_map};
use vaebox::models::wan::{WanLoadOptions, WanVae};
use vaebox::models::nn::winograd;

const REFERENCE_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/reference/wan21_original");
/// The reference README's guidance for an independent fp32 implementation.
const REFERENCE_ATOL: f64 = 1e-4;
/// The tests here set the process-wide switch; each holds it for its whole run.
static SWITCH: Mutex<()> = Mutex::new(());

/// Winograd (on by default) and the direct convolutions both match the reference. They are different
/// arithmetic, so their outputs differ slightly: that shows the Winograd path ran (the reference model's
/// 24- and 48-channel convolutions take it; its 12-channel ones stay direct).
#[test]
fn winograd_and_direct_convolutions_both_match_the_reference() {
    let _switch = SWITCH.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let case = read_tensor_map(&std::path::Path::new(REFERENCE_DIR).join("case.safetensors"));
    let tensor = |name: &str| case.get(name).unwrap_or_else(|| panic!("case.safetensors has no `{name}`")).shallow_clone();
    let vae = WanVae::load(&std::path::Path::new(REFERENCE_DIR).join("weights.safetensors"), &WanLoadOptions::default()).expect("reference weights load");
    let run = |winograd: bool| {
        winograd::set_enabled(winograd);
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

/// With the switch on, every kernel is made with its weight at load, so it is the model's memory and
/// never a job's: the model's derived bytes are 16/9 of the 3×3 weights that take the path (counted here
/// from the file's shapes: at least 16 input channels, stride 1; the encoder's downsampling `resample.1`
/// convolutions have stride 2), and encoding and decoding afterwards make no kernel on first use.
#[test]
fn kernels_are_made_at_load_and_none_on_first_use() {
    let _switch = SWITCH.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    winograd::set_enabled(true);
    let path = std::path::Path::new(REFERENCE_DIR).join("weights.safetensors");
    let eligible_weight_bytes: i64 = read_tensor_map(&path)
        .iter()
        .filter(|(name, weight)| {
            let size = weight.size();
            let three_by_three = size.len() >= 4 && size[size.len() - 2..] == [3, 3];
            let strided = name.starts_with("encoder.") && name.contains("resample.1");
            name.ends_with(".weight") && three_by_three && size[1] >= 16 && !strided
        })
        .map(|(_, weight)| weight.numel() as i64 * 4)
        .sum();
    assert!(eligible_weight_bytes > 0, "the reference model has 3×3 convolutions of 16 inputs or more");

    let vae = WanVae::load(&path, &WanLoadOptions::default()).expect("reference weights load");
    assert_eq!(vae.held_bytes().derived as i64, eligible_weight_bytes / 9 * 16);

    let case = read_tensor_map(&std::path::Path::new(REFERENCE_DIR).join("case.safetensors"));
    let before = winograd::kernel_bytes_made_on_first_use();
    let mu = vae.encode(&case["sample"]).expect("encode");
    let video = vae.decode_unclamped(&case["latent_mu"]).expect("decode");
    assert_eq!((mu.size(), video.size()), (case["latent_mu"].size(), case["decoded_unclamped"].size()));
    assert_eq!(winograd::kernel_bytes_made_on_first_use(), before, "a kernel was made by a call, not at load");
}
