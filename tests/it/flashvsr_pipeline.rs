//! The FlashVSR pipeline around its models against the original's run (../shared/reference/flashvsr): the
//! input preparation (Pillow's bicubic ×4 on 8-bit frames, then the centre crop to 128-multiples), and the
//! whole pipeline from the prepared LQ clip to bytes — v1.0 and v1.1, Tiny (TCDecoder) and Full (the Wan 2.1
//! VAE), resumed between steps from its saved state — against the original's output frames.
use crate::common;

use common::tensors::read_tensor_map;
use tch::{Kind, Tensor};
use vaebox::models::flashvsr::resize::resize_rgb8;

const REFERENCE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/reference/flashvsr");

#[test]
fn frames_are_upscaled_byte_for_byte_as_pillow_does() {
    let case = read_tensor_map(&std::path::Path::new(REFERENCE).join("e2e_tiny.safetensors"));
    let (lr, lq) = (&case["lr_u8_thwc"], &case["lq_u8_thwc"]);
    let [frames, height, width, _] = lr.size()[..] else { panic!("{:?}", lr.size()) };
    let [_, crop_h, crop_w, _] = lq.size()[..] else { panic!("{:?}", lq.size()) };
    let (out_h, out_w) = (4 * height, 4 * width);
    // The original's centre crop of the upscaled frame to 128-multiples: left (sW − tW) // 2, top (sH − tH) // 2.
    let (top, left) = ((out_h - crop_h) / 2, (out_w - crop_w) / 2);
    let mut differing = 0;
    for t in 0..frames {
        let frame = Vec::<u8>::try_from(lr.get(t).flatten(0, -1)).unwrap();
        let upscaled = resize_rgb8(&frame, height as usize, width as usize, out_h as usize, out_w as usize);
        let ours = Tensor::from_slice(&upscaled).view([out_h, out_w, 3]).narrow(0, top, crop_h).narrow(1, left, crop_w);
        differing += ours.ne_tensor(&lq.get(t)).to_kind(Kind::Int64).sum(Kind::Int64).int64_value(&[]);
    }
    println!("Pillow bicubic ×4 of {frames} frames of {height}×{width}: {differing} bytes differ from the original's");
    assert_eq!(differing, 0, "the upscaled frames differ from Pillow's in {differing} bytes");
}

use std::path::Path;

use super::flashvsr_parts::{case, lq_video, tensor};
use vaebox::models::family::vae::LoadOptions;
use vaebox::models::family::Family;
use vaebox::models::flashvsr::pipeline::{Decoder, FlashVsrParts, FlashVsrRun};
use vaebox::models::flashvsr::schedule::Step;
use vaebox::models::flashvsr::{to_u8_thwc, FlashVsrVersion, LqProjLoadOptions, LqProjection};
use vaebox::models::taehv::{TcDecoder, TcDecoderLoadOptions};
use vaebox::models::vae::VideoVae;
use vaebox::models::wan_dit::{StreamSettings, WanDit, WanDitLoadOptions};

struct Models {
    dit: WanDit,
    lq: LqProjection,
    tiny: TcDecoder,
    full: VideoVae,
}

fn models(version: FlashVsrVersion) -> Models {
    let reference = Path::new(REFERENCE);
    Models {
        dit: WanDit::load(&reference.join("small_dit.safetensors"), &WanDitLoadOptions::default()).unwrap(),
        lq: LqProjection::load(&reference.join("small_LQ_proj_in.safetensors"), &LqProjLoadOptions::for_version(version)).unwrap(),
        tiny: TcDecoder::load(&reference.join("small_TCDecoder.safetensors"), &TcDecoderLoadOptions::default()).unwrap(),
        full: VideoVae::load_file(&reference.join("../wan21_original/weights.safetensors"), Family::Wan21, &LoadOptions { device: tch::Device::Cpu, kind: Kind::Float }).unwrap(),
    }
}

/// Every step of a run over the case's LQ clip with its noise and context, the frames as bytes `[T, H, W, 3]`;
/// `resume_after_first`: the run's state saved after step 0 and loaded into a fresh run for the rest.
fn run(parts: &FlashVsrParts, resume_after_first: bool) -> Tensor {
    let case = case("e2e_tiny.safetensors");
    let (lq, noise, context) = (lq_video(&case), tensor(&case, "noise"), tensor(&case, "context"));
    let [_, _, _, height, width] = lq.size()[..] else { unreachable!() };
    let settings = StreamSettings::official([height, width]);
    let steps = (noise.size()[2] - 6) / 2 + 1;
    let mut frames = Vec::new();
    let mut run: FlashVsrRun = parts.start(&context, settings).unwrap();
    for s in 0..steps {
        let Step { latents, .. } = run.next_step();
        frames.push(run.step(&lq, &noise.narrow(2, latents.start, latents.end - latents.start)).unwrap());
        if s == 0 && resume_after_first {
            let mut saved = Vec::new();
            run.save_state(&mut saved);
            run = parts.start(&context, settings).unwrap();
            run.load_state(&saved.into_iter().collect()).unwrap();
        }
    }
    to_u8_thwc(&Tensor::cat(&frames, 0)).unwrap()
}

/// Bytes against the original's: off by one on at most 0.1% (the truncating conversion flips values a 1e-5
/// difference away from an integer; the original's own fp64 rerun flips 0.012%, README §6 and §8).
fn check_bytes(label: &str, ours: &Tensor, expected: &Tensor) {
    assert_eq!(ours.size(), expected.size(), "{label}");
    let off = (ours.to_kind(Kind::Int16) - expected.to_kind(Kind::Int16)).abs();
    let (differing, worst) = (off.gt(0).sum(Kind::Int64).int64_value(&[]), off.max().int64_value(&[]));
    println!("{label}: {differing} of {} bytes differ from the original's, by at most {worst}", expected.numel());
    assert!(worst <= 1 && differing * 1_000 <= expected.numel() as i64, "{label}: {differing} bytes differ, by up to {worst}");
}

fn frames(bytes: &Tensor, keep: &Tensor) -> Tensor {
    bytes.index_select(0, &keep.to_kind(Kind::Int64))
}

#[test]
fn flashvsr_tiny_and_full_make_the_originals_frames() {
    let m = models(FlashVsrVersion::V1_0);
    let tiny = FlashVsrParts { dit: &m.dit, lq: &m.lq, decoder: Decoder::Tiny { model: &m.tiny, parallel: false } };
    let bytes = run(&tiny, false);
    check_bytes("FlashVSR-Tiny 1.0, 29 frames", &bytes, &tensor(&case("e2e_tiny.safetensors"), "final_u8_thwc"));
    // Resumed after its first step from the streams' saved state: the same bytes.
    assert!(run(&tiny, true).equal(&bytes), "a run resumed after step 0 differs");
    // Decoded a step at once instead of frame by frame: the same up to rounding.
    check_bytes("FlashVSR-Tiny 1.0, parallel decode", &run(&FlashVsrParts { decoder: Decoder::Tiny { model: &m.tiny, parallel: true }, ..tiny }, false), &bytes);

    let full = FlashVsrParts { dit: &m.dit, lq: &m.lq, decoder: Decoder::Full(&m.full) };
    let case_full = case("e2e_full.safetensors");
    let keep = Tensor::from_slice(&[0i64, 28]);
    check_bytes("FlashVSR-Full 1.0, frames 0 and 28", &frames(&run(&full, false), &keep), &tensor(&case_full, "final_u8_thwc.keep_frames"));
}

#[test]
fn flashvsr_1_1_makes_its_own_originals_frames() {
    let m = models(FlashVsrVersion::V1_1);
    let tiny = FlashVsrParts { dit: &m.dit, lq: &m.lq, decoder: Decoder::Tiny { model: &m.tiny, parallel: false } };
    let case_tiny = case("v1_1_e2e_tiny.safetensors");
    let bytes = run(&tiny, true);
    let keep = tensor(&case_tiny, "keep_frames");
    check_bytes("FlashVSR-Tiny 1.1 (resumed after step 0), frames 0, 10, 20, 21, 28", &frames(&bytes, &keep), &tensor(&case_tiny, "final_u8_thwc.keep_frames"));
    let full = FlashVsrParts { decoder: Decoder::Full(&m.full), ..tiny };
    let case_full = case("v1_1_e2e_full.safetensors");
    let keep = tensor(&case_full, "keep_frames");
    check_bytes("FlashVSR-Full 1.1, frames 0 and 28", &frames(&run(&full, false), &keep), &tensor(&case_full, "final_u8_thwc.keep_frames"));
}
