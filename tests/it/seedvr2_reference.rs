//! SeedVR2 VAE against the reference case produced by the original SeedVR2 code
//! (../shared/reference/seedvr2, small random weights), plus temporal slicing, the full-size
//! checkpoint layout, naming and bad-checkpoint checks.
use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::tensors::{max_abs_diff, read_tensor_map};
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
    read_tensor_map(&reference_path(name))
}

fn case_tensor(case: &BTreeMap<String, Tensor>, name: &str) -> Tensor {
    case.get(name).unwrap_or_else(|| panic!("small_case.safetensors has no `{name}`")).shallow_clone()
}

fn load_reference_vae() -> SeedVr2Vae {
    SeedVr2Vae::load(&reference_path("small_weights.safetensors"), &SeedVr2LoadOptions::default()).expect("reference weights load")
}


/// Measures, prints and bounds one difference.
fn check(label: &str, actual: &Tensor, expected: &Tensor, bound: f64) -> f64 {
    let error = max_abs_diff(actual, expected);
    println!("{label}: max abs error {error:.3e} (bound {bound:.3e})");
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
/// (On this machine both of our paths are bit-identical to the original's, so the gaps are equal.)
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
        check(&format!("{} sliced vs whole (reference's own gap {reference_gap:.2e})", name(what)), ours_sliced, ours_whole, STREAMING_ATOL.max(reference_gap));
    }

    let whole = vae.decode(&reference_mean).expect("whole decode");
    let sliced = vae.decode_sliced(&reference_mean, 1).expect("sliced decode");
    check(&name("decoded_sliced"), &sliced, &case_tensor(&case, &name("decoded_sliced")), REFERENCE_ATOL);
    let reference_gap = max_abs_diff(&case_tensor(&case, &name("decoded_sliced")), &case_tensor(&case, &name("decoded")));
    check(&format!("{} sliced vs whole (reference's own gap {reference_gap:.2e})", name("decoded")), &sliced, &whole, STREAMING_ATOL.max(reference_gap));
}

#[test]
fn main_case_sliced_matches_reference_and_whole_clip() {
    check_sliced_case("");
}

#[test]
fn long_case_sliced_matches_reference_and_whole_clip() {
    check_sliced_case("long_");
}

/// Any push sizes give the whole-clip result up to fp32 rounding of differently sized convolutions.
const STREAMING_ATOL: f64 = 1e-5;

#[test]
fn streams_accept_any_push_sizes() {
    let case = reference_tensors("small_case.safetensors");
    let vae = load_reference_vae();
    let sample = case_tensor(&case, "long_sample");
    let whole = vae.encode(&sample).expect("whole encode");

    // 13 frames in uneven pushes: the stream buffers until it has 1 + 4a frames, then groups of 4.
    let mut stream = vae.encoder_stream();
    let (mut means, mut logvars, mut start) = (Vec::new(), Vec::new(), 0);
    for len in [2, 3, 1, 6, 1] {
        if let Some(posterior) = stream.push(&sample.narrow(2, start, len)).expect("push") {
            means.push(posterior.mean);
            logvars.push(posterior.logvar);
        }
        start += len;
    }
    assert_eq!((start, stream.pending_frames()), (13, 0));
    check("streamed posterior_mean vs whole", &Tensor::cat(&means, 2), &whole.mean, STREAMING_ATOL);
    check("streamed posterior_logvar vs whole", &Tensor::cat(&logvars, 2), &whole.logvar, STREAMING_ATOL);

    let latent = case_tensor(&case, "long_posterior_mean");
    let whole = vae.decode(&latent).expect("whole decode");
    let mut stream = vae.decoder_stream();
    let (mut chunks, mut start) = (Vec::new(), 0);
    for len in [1, 2, 1] {
        let chunk = stream.push(&latent.narrow(2, start, len)).expect("push");
        assert_eq!(chunk.size()[2], if start == 0 { 4 * len - 3 } else { 4 * len }, "frames out of a push of {len}");
        chunks.push(chunk);
        start += len;
    }
    check("streamed decoded vs whole", &Tensor::cat(&chunks, 2), &whole, STREAMING_ATOL);
}

#[test]
fn frame_and_size_rules() {
    let case = reference_tensors("small_case.safetensors");
    let vae = load_reference_vae();
    let sample = case_tensor(&case, "long_sample");
    // Frames beyond 1 + 4k are dropped, as in the original (10..12 frames encode like 9).
    let nine = vae.encode(&sample.narrow(2, 0, 9)).expect("encode 9");
    let twelve = vae.encode(&sample.narrow(2, 0, 12)).expect("encode 12");
    assert_eq!(max_abs_diff(&twelve.mean, &nine.mean), 0.0);
    // Causal: a prefix of the input gives the matching prefix of the latent.
    check("encode prefix (5 of 13 frames) vs latent prefix", &vae.encode(&sample.narrow(2, 0, 5)).unwrap().mean, &case_tensor(&case, "long_posterior_mean").narrow(2, 0, 2), LATENT_ATOL);
    // Space: floor(H/8) × floor(W/8), decoded back to 8× that.
    let odd = Tensor::rand([1, 3, 1, 20, 30], (Kind::Float, Device::Cpu)) * 2.0 - 1.0;
    let posterior = vae.encode(&odd).expect("encode 20×30");
    assert_eq!(posterior.mean.size(), [1, 16, 1, 2, 3]);
    assert_eq!(vae.decode(&posterior.mean).expect("decode").size(), [1, 3, 1, 16, 24]);
    // The stream only accepts frames shaped like video.
    let wrong = vae.encoder_stream().push(&Tensor::zeros([1, 4, 1, 16, 16], (Kind::Float, Device::Cpu)));
    assert!(matches!(wrong, Err(ModelError::Unsupported { .. })));
}

#[test]
fn scaling_factor_applies_in_the_documented_direction() {
    assert_eq!(SEEDVR2_SCALING_FACTOR, 0.9152);
    let z = Tensor::from_slice(&[1.0f32, -2.0, 0.5]);
    // Encoder side multiplies (latent = z · 0.9152), decoder side divides.
    let scaled = scale_latent(&z).unwrap();
    assert!(max_abs_diff(&scaled, &Tensor::from_slice(&[0.9152f32, -1.8304, 0.4576])) < 1e-6);
    assert!(max_abs_diff(&unscale_latent(&scaled).unwrap(), &z) < 1e-6);
}

#[test]
fn bf16_compute_stays_close_to_fp32() {
    let case = reference_tensors("small_case.safetensors");
    let opts = SeedVr2LoadOptions { kind: Kind::BFloat16, ..SeedVr2LoadOptions::default() };
    let vae = SeedVr2Vae::load(&reference_path("small_weights.safetensors"), &opts).expect("bf16 load");
    let posterior = vae.encode(&case_tensor(&case, "long_sample")).expect("bf16 encode");
    assert_eq!(posterior.mean.kind(), Kind::BFloat16);
    let error = max_abs_diff(&posterior.mean, &case_tensor(&case, "long_posterior_mean"));
    println!("bf16 posterior_mean vs fp32 reference: max abs error {error:.3e}");
    assert!(error < 0.1, "bf16 mean off by {error}");
    let decoded = vae.decode(&case_tensor(&case, "long_posterior_mean")).expect("bf16 decode");
    let error = max_abs_diff(&decoded, &case_tensor(&case, "long_decoded"));
    println!("bf16 decoded vs fp32 reference: max abs error {error:.3e}");
    assert!(error < 0.25, "bf16 decoded off by {error}");
}

/// `full_keys.txt`: every key of the released checkpoint with its shape.
fn full_checkpoint_shapes() -> Vec<(String, Vec<i64>)> {
    common::tensors::full_keys(&reference_path("full_keys.txt"))
}

#[test]
fn full_size_layout_loads_and_runs() {
    let shapes = full_checkpoint_shapes();
    assert_eq!(shapes.len(), 250);
    // An fp16 file like `ema_vae_fp16.safetensors`, zero-filled: only the layout is under test.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ema_vae_fp16.safetensors");
    {
        let tensors: Vec<(String, Tensor)> = shapes.iter().map(|(k, s)| (k.clone(), Tensor::zeros(s.as_slice(), (Kind::Half, Device::Cpu)))).collect();
        Tensor::write_safetensors(&tensors, &path).unwrap();
    }
    let opts = SeedVr2LoadOptions { kind: Kind::BFloat16, ..SeedVr2LoadOptions::default() };
    let vae = SeedVr2Vae::load(&path, &opts).expect("the released layout loads");
    assert_eq!(vae.config(), &SeedVr2Config::seedvr2());

    let video = Tensor::zeros([1, 3, 5, 16, 16], (Kind::Float, Device::Cpu));
    let posterior = vae.encode(&video).expect("encode");
    assert_eq!(posterior.mean.size(), [1, 16, 2, 2, 2]);
    assert_eq!(posterior.logvar.size(), [1, 16, 2, 2, 2]);
    let decoded = vae.decode(&posterior.mean).expect("decode");
    assert_eq!(decoded.size(), [1, 3, 5, 16, 16]);
    assert_eq!(decoded.kind(), Kind::BFloat16);
}

/// Loads the reference weights after an edit and returns the error message.
fn load_error_after_edit(edit: impl FnOnce(&mut Vec<(String, Tensor)>)) -> String {
    let mut weights = Tensor::read_safetensors(reference_path("small_weights.safetensors")).unwrap();
    edit(&mut weights);
    match SeedVr2Vae::from_tensors("edited.safetensors", weights, &SeedVr2LoadOptions::default()) {
        Ok(_) => panic!("an edited checkpoint loaded without error"),
        Err(e @ ModelError::Format { .. }) => {
            println!("load error: {e}");
            e.to_string()
        }
        Err(other) => panic!("expected a format error, got {other}"),
    }
}

#[test]
fn first_missing_key_is_named() {
    // Two keys missing: the error names the one that comes first in the checkpoint's own order.
    let first = "decoder.up_blocks.1.upsamplers.0.upscale_conv.bias";
    let later = "decoder.mid_block.attentions.0.to_v.weight";
    let message = load_error_after_edit(|w| w.retain(|(k, _)| k != first && k != later));
    assert!(message.contains(first) && message.contains("missing"), "{message}");
}

#[test]
fn misshaped_key_is_named() {
    let key = "decoder.up_blocks.0.upsamplers.0.upscale_conv.weight";
    let message = load_error_after_edit(|w| {
        let entry = w.iter_mut().find(|(k, _)| k == key).unwrap();
        entry.1 = entry.1.narrow(0, 0, 256).copy();
    });
    assert!(message.contains(key) && message.contains("shape"), "{message}");

    let key = "encoder.mid_block.attentions.0.to_q.weight";
    let message = load_error_after_edit(|w| {
        let entry = w.iter_mut().find(|(k, _)| k == key).unwrap();
        entry.1 = entry.1.reshape([64, 64, 1, 1]);
    });
    assert!(message.contains(key) && message.contains("shape"), "{message}");
}

#[test]
fn unexpected_key_is_named() {
    let message = load_error_after_edit(|w| w.push(("decoder.extra.weight".into(), Tensor::zeros([1], (Kind::Float, Device::Cpu)))));
    assert!(message.contains("decoder.extra.weight"), "{message}");
}

#[test]
fn not_a_seedvr2_checkpoint_is_rejected() {
    let message = load_error_after_edit(|w| w.retain(|(k, _)| !k.starts_with("encoder.conv_in.")));
    assert!(message.contains("encoder.conv_in.weight"), "{message}");
}

#[test]
fn deprecated_attention_names_load_identically() {
    let renames = [(".to_q.", ".query."), (".to_k.", ".key."), (".to_v.", ".value."), (".to_out.0.", ".proj_attn.")];
    let weights = Tensor::read_safetensors(reference_path("small_weights.safetensors")).unwrap();
    let old_style: Vec<(String, Tensor)> = weights
        .into_iter()
        .map(|(k, t)| (renames.iter().fold(k, |k, (new, old)| k.replace(new, old)), t))
        .collect();
    assert!(old_style.iter().any(|(k, _)| k == "decoder.mid_block.attentions.0.proj_attn.weight"));
    let vae = SeedVr2Vae::from_tensors("old_names.safetensors", old_style, &SeedVr2LoadOptions::default()).expect("old attention names load");
    let case = reference_tensors("small_case.safetensors");
    let posterior = vae.encode(&case_tensor(&case, "long_sample")).expect("encode");
    check("old attention names: long_posterior_mean", &posterior.mean, &case_tensor(&case, "long_posterior_mean"), LATENT_ATOL);
    let decoded = vae.decode(&case_tensor(&case, "long_posterior_mean")).expect("decode");
    check("old attention names: long_decoded", &decoded, &case_tensor(&case, "long_decoded"), REFERENCE_ATOL);
}


/// A GGUF file the way ComfyUI-GGUF writes one: tensors over 4-D stored flattened to 2-D, with their
/// real shape in `comfy.gguf.orig_shape.<name>` (INT32 array); fp32 data, 32-byte alignment.
/// (The reader was also checked against files written by the `gguf` Python package, F16/Q8_0 included.)
fn write_gguf(path: &Path, tensors: &[(String, Tensor)], ggml_type_of: impl Fn(&str) -> u32) {
    fn string(out: &mut Vec<u8>, s: &str) {
        out.extend_from_slice(&(s.len() as u64).to_le_bytes());
        out.extend_from_slice(s.as_bytes());
    }
    let align = |n: usize| n.div_ceil(32) * 32;
    let reshaped: Vec<&(String, Tensor)> = tensors.iter().filter(|(_, t)| t.dim() > 4).collect();
    let mut out = b"GGUF".to_vec();
    out.extend_from_slice(&3u32.to_le_bytes());
    out.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
    out.extend_from_slice(&(reshaped.len() as u64).to_le_bytes());
    for (name, tensor) in &reshaped {
        string(&mut out, &format!("comfy.gguf.orig_shape.{name}"));
        out.extend_from_slice(&9u32.to_le_bytes()); // array
        out.extend_from_slice(&5u32.to_le_bytes()); // of INT32
        out.extend_from_slice(&(tensor.dim() as u64).to_le_bytes());
        for d in tensor.size() {
            out.extend_from_slice(&(d as i32).to_le_bytes());
        }
    }
    let mut data = Vec::new();
    for (name, tensor) in tensors {
        let size = tensor.size();
        let stored = if size.len() > 4 { vec![size[0], size[1..].iter().product()] } else { size };
        string(&mut out, name);
        out.extend_from_slice(&(stored.len() as u32).to_le_bytes());
        for d in stored.iter().rev() {
            out.extend_from_slice(&(*d as u64).to_le_bytes());
        }
        out.extend_from_slice(&ggml_type_of(name).to_le_bytes());
        out.extend_from_slice(&(data.len() as u64).to_le_bytes());
        let values = Vec::<f32>::try_from(tensor.flatten(0, -1)).unwrap();
        data.extend(values.iter().flat_map(|v| v.to_le_bytes()));
        data.resize(align(data.len()), 0);
    }
    out.resize(align(out.len()), 0);
    out.extend_from_slice(&data);
    std::fs::write(path, out).unwrap();
}

#[test]
fn gguf_checkpoint_matches_reference() {
    let weights = Tensor::read_safetensors(reference_path("small_weights.safetensors")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("seedvr2_vae.gguf");
    write_gguf(&path, &weights, |_| 0);
    let vae = SeedVr2Vae::load(&path, &SeedVr2LoadOptions::default()).expect("gguf loads");
    let case = reference_tensors("small_case.safetensors");
    let posterior = vae.encode(&case_tensor(&case, "long_sample")).expect("encode");
    check("gguf: long_posterior_mean", &posterior.mean, &case_tensor(&case, "long_posterior_mean"), LATENT_ATOL);
    let decoded = vae.decode(&case_tensor(&case, "long_posterior_mean")).expect("decode");
    check("gguf: long_decoded", &decoded, &case_tensor(&case, "long_decoded"), REFERENCE_ATOL);

    // A quantisation the loader does not dequantise is refused by tensor name (12 = Q4_K).
    let quantised = "decoder.conv_out.bias";
    write_gguf(&path, &weights, |name| if name == quantised { 12 } else { 0 });
    match SeedVr2Vae::load(&path, &SeedVr2LoadOptions::default()) {
        Err(e @ ModelError::Format { .. }) => assert!(e.to_string().contains(quantised), "{e}"),
        other => panic!("expected a format error naming `{quantised}`, got {other:?}"),
    }
}
