//! The TCDecoder (`taehv::TcDecoder`) against `tcdecoder_case` (README §5.4) in both paces, in pieces with
//! its memory carried (and saved and loaded between them), after the DiT of `e2e_tiny` (its stored noise
//! predictions) through the colour fix to the pipeline's bytes, and at the real size.
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use tch::{Device, Kind, Tensor};
use vaebox::models::flashvsr::{colour_fix, to_u8_thwc};
use vaebox::models::taehv::{is_tc_decoder, Taehv, TaehvLoadOptions, TcDecoder, TcDecoderLoadOptions};
use vaebox::models::stop::StopFlag;
use vaebox::models::ModelError;

use super::{case, check, lq_video, reference_dir, tensor};
use crate::common::tensors::full_keys;

/// README §8: the TCDecoder's output in fp32 (the original's own parallel and sequential modes differ by 3.9e-6).
const TCD_ATOL: f64 = 1e-5;
/// README §8: colour-fixed frames (AdaIN divides by each frame's std).
const COLOUR_ATOL: f64 = 1e-4;

fn small() -> TcDecoder {
    TcDecoder::load(&reference_dir().join("small_TCDecoder.safetensors"), &TcDecoderLoadOptions::default()).expect("load the small TCDecoder")
}

#[test]
fn the_shape_is_read_from_the_weights() {
    let model = small();
    let config = model.config();
    assert_eq!(config.widths, [16, 12, 8, 8], "the reference's small widths (real 512, 256, 128, 128)");
    assert_eq!((config.latent_channels, config.condition_channels), (16, 768));
    assert_eq!(config.time_upscale, [false, true, true]);
    assert_eq!((config.t_upscale(), config.frames_to_trim(), config.decoded_frames(4)), (4, 3, 13));
    assert_eq!(model.parameter_count(), 170_287, "README: 170,287 parameters");
    let refusal = Taehv::load(&reference_dir().join("small_TCDecoder.safetensors"), &TaehvLoadOptions::default()).unwrap_err().to_string();
    assert!(refusal.contains("TCDecoder") && refusal.contains("TcDecoder"), "TAEHV's loader points to the TCDecoder: {refusal}");
}

#[test]
fn decode_matches_the_original_in_both_paces() {
    let (case, model) = (case("tcdecoder_case.safetensors"), small());
    let (latents, cond, expected) = (tensor(&case, "latents_ntchw"), tensor(&case, "cond_bcthw"), tensor(&case, "out_sequential"));
    for (parallel, pace) in [(false, "frame by frame"), (true, "parallel")] {
        let out = model.decode_video(&latents, &cond, parallel).unwrap();
        check(&format!("tcdecoder_case {pace}"), &out, &expected, TCD_ATOL);
    }
}

/// Two calls without `clean_mem()` (latents 0..2 with LR frames 0..5, then 2..4 with 5..13) give 5 + 8
/// frames equal to the one call; a state saved after the first and loaded into a new stream goes on the same.
#[test]
fn two_pushes_equal_one_call_and_a_saved_state_resumes() {
    let (case, model) = (case("tcdecoder_case.safetensors"), small());
    let (latents, cond, expected) = (tensor(&case, "latents_ntchw"), tensor(&case, "cond_bcthw"), tensor(&case, "out_sequential"));
    for (parallel, pace) in [(false, "frame by frame"), (true, "parallel")] {
        let whole = model.decode_video(&latents, &cond, parallel).unwrap();
        let mut stream = model.stream(parallel);
        let first = stream.push(&latents.narrow(1, 0, 2), &cond.narrow(2, 0, 5)).unwrap();
        assert_eq!(first.size()[1], 5, "{pace}: 4·2 − 3 frames");
        let mut saved = Vec::new();
        stream.save_state("job.", &mut saved);
        let second = stream.push(&latents.narrow(1, 2, 2), &cond.narrow(2, 5, 8)).unwrap();
        assert_eq!(second.size()[1], 8, "{pace}: 4·2 frames");
        let pieces = Tensor::cat(&[&first, &second], 1);
        check(&format!("tcdecoder_case two pushes {pace}"), &pieces, &expected, TCD_ATOL);
        check(&format!("tcdecoder_case two pushes vs one call {pace}"), &pieces, &whole, if parallel { TCD_ATOL } else { 0.0 });

        let saved: HashMap<String, Tensor> = saved.into_iter().collect();
        let mut resumed = model.stream(parallel);
        resumed.load_state("job.", &saved).unwrap();
        let again = resumed.push(&latents.narrow(1, 2, 2), &cond.narrow(2, 5, 8)).unwrap();
        assert!(again.equal(&second), "{pace}: a resumed stream continues exactly");

        let mut stopped = model.stream(parallel);
        stopped.set_stop(StopFlag::on(Arc::new(AtomicBool::new(true))));
        assert!(matches!(stopped.push(&latents.narrow(1, 0, 2), &cond.narrow(2, 0, 5)), Err(ModelError::Stopped)));
    }
}

#[test]
fn mismatched_inputs_are_refused() {
    let (case, model) = (case("tcdecoder_case.safetensors"), small());
    let (latents, cond) = (tensor(&case, "latents_ntchw"), tensor(&case, "cond_bcthw"));
    let refused = |latents: &Tensor, cond: &Tensor| match model.decode_video(latents, cond, false) {
        Err(ModelError::Unsupported { what, .. }) => what,
        other => panic!("not refused: {other:?}"),
    };
    assert!(refused(&latents, &cond.narrow(2, 0, 9)).contains("9 condition frames for 4 latent frames"));
    assert!(refused(&latents, &cond.narrow(3, 0, 40)).contains("BCTHW"));
    assert!(refused(&latents.narrow(2, 0, 8), &cond).contains("NTCHW"));
    assert!(refused(&latents, &cond.permute([0, 2, 1, 3, 4])).contains("condition of shape"));
}

/// `e2e_tiny` after its DiT: the latents are each step's noise slice minus its stored noise prediction
/// (README §5.1), the condition the LR frames 0..F−4. The decoded frames 0 and 28 against the original's,
/// then every frame through `*2−1`, the colour fix and the bytes against the pipeline's output.
#[test]
fn after_the_dit_the_pipeline_output_is_reproduced() {
    let (case, model) = (case("e2e_tiny.safetensors"), small());
    let noise = tensor(&case, "noise");
    let x0 = Tensor::cat(&[noise.narrow(2, 0, 6) - tensor(&case, "step0.noise_pred"), noise.narrow(2, 6, 2) - tensor(&case, "step1.noise_pred")], 2);
    let latents = x0.permute([0, 2, 1, 3, 4]);
    let lq = lq_video(&case);
    let frames = lq.size()[2] - 4;
    let cond = lq.narrow(2, 0, frames);
    let decoded = model.decode_video(&latents, &cond, false).unwrap();
    assert_eq!(decoded.size(), vec![1, frames, 3, 128, 256]);
    let keep = Tensor::from_slice(&[0i64, 28]);
    check("e2e_tiny tcd_out frames 0, 28", &decoded.index_select(1, &keep), &tensor(&case, "tcd_out_ntchw.keep_frames"), TCD_ATOL);

    let signed = decoded.squeeze_dim(0) * 2.0 - 1.0;
    let reference = cond.squeeze_dim(0).permute([1, 0, 2, 3]);
    let fixed = colour_fix(&signed, &reference).unwrap();
    let last = fixed.narrow(0, frames - 1, 1).permute([1, 0, 2, 3]).unsqueeze(0);
    check("e2e_tiny colour-fixed frame 28", &last, &tensor(&case, "colorfix_out_bcthw.last_frame"), COLOUR_ATOL);

    let bytes = to_u8_thwc(&fixed).unwrap();
    let expected = tensor(&case, "final_u8_thwc");
    let off = (bytes.to_kind(Kind::Int16) - expected.to_kind(Kind::Int16)).abs();
    let (differing, worst) = (off.gt(0).sum(Kind::Int64).int64_value(&[]), off.max().int64_value(&[]));
    println!("e2e_tiny final bytes: {differing} of {} differ, by at most {worst}", expected.numel());
    // The original's fp64 rerun flips 0.012% (README §6); a 1e-5 difference in the frames flips about as many.
    assert!(worst <= 1 && differing * 1_000 <= expected.numel() as i64, "README §8: off by one on a small fraction at most");
}

/// A file with the real TCDecoder's 66 keys and shapes (random values) loads with the released widths and
/// decodes one latent frame; the registry's key test tells it from TAEHV.
#[test]
fn a_full_size_file_is_recognised_and_decodes() {
    let keys = full_keys(&reference_dir().join("full_keys_TCDecoder.txt"));
    assert_eq!(keys.len(), 66);
    let shapes: BTreeMap<String, Vec<i64>> = keys.iter().cloned().collect();
    assert!(is_tc_decoder(&shapes), "the real key list is a TCDecoder's");
    let taehv_keys = crate::common::tensors::read_tensor_map(&reference_dir().join("../taehv/taew2_1_weights.safetensors"));
    assert!(!is_tc_decoder(&taehv_keys.iter().map(|(k, t)| (k.clone(), t.size())).collect()), "a TAEHV autoencoder is not");
    tch::manual_seed(3);
    let tensors = keys
        .iter()
        .map(|(key, shape)| {
            let fan_in: i64 = shape.iter().skip(1).product::<i64>().max(1);
            (key.clone(), Tensor::randn(shape.as_slice(), (Kind::Float, Device::Cpu)) / (fan_in as f64).sqrt())
        })
        .collect();
    let model = TcDecoder::from_tensors(Path::new("TCDecoder.ckpt"), tensors, &TcDecoderLoadOptions::default()).unwrap();
    assert_eq!(model.config().widths, [512, 256, 128, 128]);
    assert_eq!((model.config().latent_channels, model.config().condition_channels), (16, 768));
    assert_eq!(model.parameter_count(), 45_338_371);
    let latent = Tensor::randn([1, 1, 16, 2, 2], (Kind::Float, Device::Cpu));
    let cond = Tensor::rand([1, 3, 1, 16, 16], (Kind::Float, Device::Cpu)) * 2.0 - 1.0;
    let out = model.decode_video(&latent, &cond, false).unwrap();
    assert_eq!(out.size(), vec![1, 1, 3, 16, 16]);
    assert!(out.isfinite().all().int64_value(&[]) == 1);
    println!("full-size TCDecoder: {} parameters, one latent frame to {:?}, output range [{:.3}, {:.3}]", model.parameter_count(), out.size(), out.min().double_value(&[]), out.max().double_value(&[]));
}
