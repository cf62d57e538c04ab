//! FlashVSR's parts around its DiT against tensors made by running the ORIGINAL code (FlashVSR at ccac0ac
//! and its v1.1 commits) with small random weights (`VAEBOX_FLASHVSR_REFERENCE`, default
//! ../shared/reference/flashvsr, README §1, §2.5, §4.1, §5, §8, §11): the TCDecoder (`taehv`), the LQ
//! projection of both releases, and the colour fix and byte conversion that end the pipeline.
use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::tensors::max_abs_diff;
use tch::{Kind, Tensor};

mod colour;
mod lq_proj;
mod tc_decoder;

fn reference_dir() -> PathBuf {
    std::env::var_os("VAEBOX_FLASHVSR_REFERENCE")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/reference/flashvsr"))
}

pub(crate) fn case(name: &str) -> BTreeMap<String, Tensor> {
    common::tensors::read_tensor_map(&reference_dir().join(name))
}

pub(crate) fn tensor(case: &BTreeMap<String, Tensor>, name: &str) -> Tensor {
    case.get(name).unwrap_or_else(|| panic!("case has no `{name}`")).shallow_clone()
}

/// The max abs difference, printed and held to `bound`.
fn check(label: &str, actual: &Tensor, expected: &Tensor, bound: f64) -> f64 {
    assert_eq!(actual.size(), expected.size(), "{label}: shape");
    let error = max_abs_diff(actual, expected);
    println!("{label}: max abs diff {error:.3e} (bound {bound:.1e})");
    assert!(error <= bound, "{label}: max abs diff {error:e} > {bound:e}");
    error
}

/// The pipeline's `LQ_video` `[1, 3, F, H, W]` from the case's `lq_u8_thwc` (README §1 item 1): u8/255·2−1 in
/// f32, the frame list padded with 4 copies of the last frame and cut to the largest 8n+1 count.
pub(crate) fn lq_video(case: &BTreeMap<String, Tensor>) -> Tensor {
    let frames = tensor(case, "lq_u8_thwc").to_kind(Kind::Float) / 255.0 * 2.0 - 1.0;
    let count = frames.size()[0];
    let padded_count = (count + 4 - 1) / 8 * 8 + 1;
    let last = frames.narrow(0, count - 1, 1).repeat([4, 1, 1, 1]);
    let padded = Tensor::cat(&[frames, last], 0).narrow(0, 0, padded_count);
    padded.permute([3, 0, 1, 2]).unsqueeze(0).contiguous()
}
