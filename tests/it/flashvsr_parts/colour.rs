//! The colour fix and bytes of FlashVSR-Full (`e2e_full`, README §5.2): the Wan VAE's frame 28 fixed against
//! LR frame 28 and turned into the pipeline's bytes. (The Tiny pipeline's are checked after its TCDecoder.)
use tch::Kind;
use vaebox::models::flashvsr::{colour_fix, to_u8_thwc};

use super::{case, check, lq_video, tensor};

/// README §8: colour-fixed frames.
const COLOUR_ATOL: f64 = 1e-4;

#[test]
fn the_full_pipelines_last_frame_is_reproduced() {
    let full = case("e2e_full.safetensors");
    assert_eq!(Vec::<i64>::try_from(tensor(&full, "keep_frames")).unwrap(), vec![0, 28]);
    let lq = lq_video(&case("e2e_tiny.safetensors"));
    let reference = lq.narrow(2, 28, 1).squeeze_dim(0).permute([1, 0, 2, 3]);
    let decoded = tensor(&full, "vae_out_bcthw.last_frame").squeeze_dim(0).permute([1, 0, 2, 3]);
    let fixed = colour_fix(&decoded, &reference).unwrap();
    let as_bcthw = fixed.permute([1, 0, 2, 3]).unsqueeze(0);
    check("e2e_full colour-fixed frame 28", &as_bcthw, &tensor(&full, "colorfix_out_bcthw.last_frame"), COLOUR_ATOL);
    let bytes = to_u8_thwc(&fixed).unwrap();
    let expected = tensor(&full, "final_u8_thwc.keep_frames").narrow(0, 1, 1);
    let off = (bytes.to_kind(Kind::Int16) - expected.to_kind(Kind::Int16)).abs();
    let differing = off.gt(0).sum(Kind::Int64).int64_value(&[]);
    println!("e2e_full frame 28 bytes: {differing} of {} differ, by at most {}", expected.numel(), off.max().int64_value(&[]));
    assert!(off.max().int64_value(&[]) <= 1 && differing * 1_000 <= expected.numel() as i64);
    // Rounding instead of truncating would move about half the values by one.
    let rounded = (fixed.shallow_clone() + 1.0) * 127.5;
    let rounded = rounded.round().clamp(0.0, 255.0).to_kind(Kind::Uint8).permute([0, 2, 3, 1]);
    assert!(rounded.ne_tensor(&expected).sum(Kind::Int64).int64_value(&[]) > expected.numel() as i64 / 10);
}
