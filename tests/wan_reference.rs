//! Wan 2.1 VAE against the reference case produced by the original Wan code (../shared/reference/wan21_original,
//! cross-checked bit-exact against diffusers), plus chunked-streaming, naming and bad-checkpoint checks.
mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::tensors::{max_abs_diff, read_tensor_map};
use tch::{Device, Kind, Tensor};
use vaebox::models::wan::keymap::{self, DecoderLayout, OriginalLayout};
use vaebox::models::wan::{WanConfig, WanLoadOptions, WanVae, WAN21_LATENTS_MEAN, WAN21_LATENTS_STD};
use vaebox::models::ModelError;

const REFERENCE_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/reference/wan21_original");
/// The reference README's guidance for an independent fp32 implementation.
const REFERENCE_ATOL: f64 = 1e-4;
/// Chunked streaming must equal the whole clip up to fp32 rounding of differently sized convolutions.
const STREAMING_ATOL: f64 = 1e-5;

fn reference_path(name: &str) -> PathBuf {
    Path::new(REFERENCE_DIR).join(name)
}

fn reference_tensors(name: &str) -> BTreeMap<String, Tensor> {
    read_tensor_map(&reference_path(name))
}

fn case_tensor(case: &BTreeMap<String, Tensor>, name: &str) -> Tensor {
    case.get(name).unwrap_or_else(|| panic!("case.safetensors has no `{name}`")).shallow_clone()
}

fn load_reference_vae() -> WanVae {
    WanVae::load(&reference_path("weights.safetensors"), &WanLoadOptions::default()).expect("reference weights load")
}


fn reference_keymap() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(reference_path("keymap_original_to_diffusers.json")).expect("keymap readable");
    let map: BTreeMap<String, String> = serde_json::from_str(&text).expect("keymap is a JSON object of strings");
    map.into_iter().collect()
}

#[test]
fn detects_reference_config() {
    let vae = load_reference_vae();
    let expected = WanConfig {
        image_channels: 3,
        base_dim: 12,
        decoder_base_dim: 12,
        z_dim: 16,
        dim_mult: vec![1, 2, 4, 4],
        num_res_blocks: 2,
        temporal_downsample: vec![false, true, true],
        is_residual: false,
        patch_size: 1,
    };
    assert_eq!(vae.config(), &expected);
}

#[test]
fn encoder_mean_matches_reference() {
    let case = reference_tensors("case.safetensors");
    let vae = load_reference_vae();
    let mu = vae.encode(&case_tensor(&case, "sample")).expect("encode");
    let error = max_abs_diff(&mu, &case_tensor(&case, "latent_mu"));
    println!("encode: max abs error vs latent_mu = {error:e}");
    assert!(error <= REFERENCE_ATOL, "latent_mu max abs error {error:e}");

    let mean = Tensor::from_slice(&WAN21_LATENTS_MEAN).to_kind(Kind::Float).reshape([1, 16, 1, 1, 1]);
    let std = Tensor::from_slice(&WAN21_LATENTS_STD).to_kind(Kind::Float).reshape([1, 16, 1, 1, 1]);
    let normalized = (mu - mean) * std.reciprocal();
    let error = max_abs_diff(&normalized, &case_tensor(&case, "latent_mu_normalized"));
    println!("encode: max abs error vs latent_mu_normalized = {error:e}");
    assert!(error <= REFERENCE_ATOL, "latent_mu_normalized max abs error {error:e}");
}

#[test]
fn decoder_output_matches_reference() {
    let case = reference_tensors("case.safetensors");
    let vae = load_reference_vae();
    let latent = case_tensor(&case, "latent_mu");
    let unclamped = vae.decode_unclamped(&latent).expect("decode");
    let error = max_abs_diff(&unclamped, &case_tensor(&case, "decoded_unclamped"));
    println!("decode: max abs error vs decoded_unclamped = {error:e}");
    assert!(error <= REFERENCE_ATOL, "decoded_unclamped max abs error {error:e}");

    let decoded = vae.decode(&latent).expect("decode");
    let error = max_abs_diff(&decoded, &case_tensor(&case, "decoded"));
    println!("decode: max abs error vs decoded = {error:e}");
    assert!(error <= REFERENCE_ATOL, "decoded max abs error {error:e}");
}

#[test]
fn keymap_matches_reference_and_round_trips() {
    let pairs = reference_keymap();
    assert_eq!(pairs.len(), 194);
    let decoder = DecoderLayout::from_original_keys(pairs.iter().map(|(o, _)| o.as_str())).expect("original layout");
    assert_eq!(DecoderLayout::from_diffusers_keys(pairs.iter().map(|(_, d)| d.as_str())), Some(decoder));
    let keys: Vec<&str> = pairs.iter().map(|(o, _)| o.as_str()).collect();
    let layout = OriginalLayout::detect(&keys).expect("original layout");
    assert_eq!(layout, OriginalLayout::Flat(decoder));
    for (original, diffusers) in &pairs {
        assert_eq!(&keymap::original_to_diffusers(original, layout), diffusers, "original → diffusers of `{original}`");
        assert_eq!(&keymap::diffusers_to_original(diffusers, layout), original, "diffusers → original of `{diffusers}`");
    }
}

#[test]
fn diffusers_named_checkpoint_matches_reference() {
    let weights = reference_tensors("weights.safetensors");
    let renamed: BTreeMap<String, String> = reference_keymap().into_iter().collect();
    let diffusers: Vec<(String, Tensor)> = weights.iter().map(|(k, t)| (renamed[k].clone(), t.shallow_clone())).collect();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("diffusers_vae.safetensors");
    Tensor::write_safetensors(&diffusers, &path).unwrap();

    let vae = WanVae::load(&path, &WanLoadOptions::default()).expect("diffusers-named weights load");
    let case = reference_tensors("case.safetensors");
    let mu = vae.encode(&case_tensor(&case, "sample")).expect("encode");
    let error = max_abs_diff(&mu, &case_tensor(&case, "latent_mu"));
    println!("diffusers naming: encode max abs error vs latent_mu = {error:e}");
    assert!(error <= REFERENCE_ATOL, "latent_mu max abs error {error:e}");
}

#[test]
fn streamed_encode_equals_whole_clip() {
    let vae = load_reference_vae();
    tch::manual_seed(7);
    // 97 frames = 25 latent frames, at the smallest size the ×8 encoder accepts with some spatial extent.
    let video = Tensor::rand([1, 3, 97, 16, 24], (Kind::Float, Device::Cpu)) * 2.0 - 1.0;
    let whole = vae.encode(&video).expect("whole encode");
    assert_eq!(whole.size(), [1, 16, 25, 2, 3]);

    // Uneven pushes: the stream buffers frames until they form the next valid encoder chunk.
    let mut stream = vae.encoder_stream();
    let mut latents = Vec::new();
    let mut start = 0;
    for len in [3, 6, 1, 8, 12, 4, 20, 43] {
        latents.extend(stream.push(&video.narrow(2, start, len)).expect("push"));
        start += len;
    }
    assert_eq!(start, 97);
    assert_eq!(stream.pending_frames(), 0);
    let streamed = Tensor::cat(&latents, 2);
    let error = max_abs_diff(&streamed, &whole);
    println!("encode: streamed vs whole max abs difference = {error:e}");
    assert!(error <= STREAMING_ATOL, "streamed encode differs by {error:e}");

    // Frames beyond 1 + 4k are dropped, as in the original.
    let padded = Tensor::cat(&[&video, &video.narrow(2, 0, 3)], 2);
    let error = max_abs_diff(&vae.encode(&padded).expect("encode"), &whole);
    assert_eq!(error, 0.0, "trailing frames changed the latent");
}

#[test]
fn streamed_decode_equals_whole_clip() {
    let vae = load_reference_vae();
    tch::manual_seed(11);
    let latent = Tensor::randn([1, 16, 25, 2, 3], (Kind::Float, Device::Cpu)) * 2.0;
    let whole = vae.decode_unclamped(&latent).expect("whole decode");
    assert_eq!(whole.size(), [1, 3, 97, 16, 24]);

    let mut stream = vae.decoder_stream().unclamped();
    let mut chunks = Vec::new();
    let mut start = 0;
    // The first push carries several frames; the stream splits off the first one itself.
    for len in [3, 1, 5, 7, 9] {
        let chunk = stream.push(&latent.narrow(2, start, len)).expect("push");
        let expected_frames = if start == 0 { 1 + 4 * (len - 1) } else { 4 * len };
        assert_eq!(chunk.size()[2], expected_frames);
        chunks.push(chunk);
        start += len;
    }
    assert_eq!(start, 25);
    let streamed = Tensor::cat(&chunks, 2);
    let error = max_abs_diff(&streamed, &whole);
    println!("decode: streamed vs whole max abs difference = {error:e}");
    assert!(error <= STREAMING_ATOL, "streamed decode differs by {error:e}");
}

/// Writes the reference weights, edited, to a temporary file and returns the load error.
fn load_error_after_edit(edit: impl FnOnce(&mut BTreeMap<String, Tensor>)) -> String {
    let mut weights = reference_tensors("weights.safetensors");
    edit(&mut weights);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("edited.safetensors");
    let tensors: Vec<(String, Tensor)> = weights.into_iter().collect();
    Tensor::write_safetensors(&tensors, &path).unwrap();
    match WanVae::load(&path, &WanLoadOptions::default()) {
        Ok(_) => panic!("an edited checkpoint loaded without error"),
        Err(e @ ModelError::Format { .. }) => {
            println!("load error: {e}");
            e.to_string()
        }
        Err(other) => panic!("expected a format error, got {other}"),
    }
}

#[test]
fn missing_key_is_named() {
    let key = "decoder.upsamples.7.time_conv.weight";
    let message = load_error_after_edit(|w| {
        let _removed = w.remove(key).unwrap();
    });
    assert!(message.contains(key), "{message}");
    assert!(message.contains("missing"), "{message}");
}

#[test]
fn misshaped_key_is_named() {
    let key = "decoder.middle.1.to_qkv.weight";
    let message = load_error_after_edit(|w| {
        let wrong = w[key].narrow(0, 0, 12).copy();
        w.insert(key.to_string(), wrong);
    });
    assert!(message.contains(key) && message.contains("shape"), "{message}");

    let key = "encoder.head.0.gamma";
    let message = load_error_after_edit(|w| {
        let wrong = w[key].reshape([-1, 1, 1]);
        w.insert(key.to_string(), wrong);
    });
    assert!(message.contains(key) && message.contains("shape"), "{message}");
}

#[test]
fn unexpected_key_is_named() {
    let message = load_error_after_edit(|w| {
        w.insert("decoder.extra.weight".to_string(), Tensor::zeros([1], (Kind::Float, Device::Cpu)));
    });
    assert!(message.contains("decoder.extra.weight"), "{message}");
}

#[test]
fn not_a_wan_checkpoint_is_rejected() {
    let message = load_error_after_edit(|w| {
        let conv = w.remove("encoder.conv1.weight").unwrap();
        w.insert("encoder.stem.weight".to_string(), conv);
    });
    assert!(message.contains("encoder.conv1.weight"), "{message}");
}

/// Wan 2.2 layout (residual levels, 2×2 patchify, decoder width ≠ encoder width) against diffusers
/// `AutoencoderKLWan(is_residual=True, patch_size=2)` with small random weights, made by scripts/fixtures/make_wan22_case.py (diffusers) during `scripts/setup.sh --test`.
const WAN22_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/.cache/fixtures/wan22_diffusers");

#[test]
fn wan22_layout_matches_diffusers() {
    let dir = Path::new(WAN22_DIR);
    assert!(dir.is_dir(), "missing fixture {WAN22_DIR} (run scripts/setup.sh --test: it makes it with diffusers)");
    let vae = WanVae::load(&dir.join("weights.safetensors"), &WanLoadOptions::default()).expect("wan 2.2 weights load");
    let cfg = vae.config();
    assert!(cfg.is_residual);
    assert_eq!((cfg.patch_size, cfg.base_dim, cfg.decoder_base_dim, cfg.z_dim), (2, 8, 12, 8));
    assert_eq!(cfg.temporal_downsample, vec![false, true, true]);

    let case: BTreeMap<String, Tensor> = Tensor::read_safetensors(dir.join("case.safetensors")).expect("case").into_iter().collect();
    let mu = vae.encode(&case_tensor(&case, "sample")).expect("encode");
    let error = max_abs_diff(&mu, &case_tensor(&case, "latent_mu"));
    println!("wan 2.2: encode max abs error vs diffusers = {error:e}");
    assert!(error <= REFERENCE_ATOL, "latent_mu max abs error {error:e}");

    let decoded = vae.decode(&case_tensor(&case, "latent_mu")).expect("decode");
    let error = max_abs_diff(&decoded, &case_tensor(&case, "decoded"));
    println!("wan 2.2: decode max abs error vs diffusers = {error:e}");
    assert!(error <= REFERENCE_ATOL, "decoded max abs error {error:e}");

    // Streaming: a multi-frame first push and uneven later pushes equal the one-frame-per-call decode.
    tch::manual_seed(3);
    let latent = Tensor::randn([1, 8, 9, 2, 2], (Kind::Float, Device::Cpu));
    let whole = vae.decode_unclamped(&latent).expect("whole decode");
    let mut stream = vae.decoder_stream().unclamped();
    let chunks: Vec<Tensor> = [(0, 3), (3, 2), (5, 4)].iter().map(|&(s, l)| stream.push(&latent.narrow(2, s, l)).expect("push")).collect();
    let error = max_abs_diff(&Tensor::cat(&chunks, 2), &whole);
    println!("wan 2.2: streamed vs whole decode max abs difference = {error:e}");
    assert!(error <= STREAMING_ATOL, "streamed decode differs by {error:e}");
}

/// GGUF files written by the `gguf` package (llama.cpp's writer) from the reference weights, made by
/// scripts/fixtures/to_gguf.py during `scripts/setup.sh --test`.
const GGUF_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/.cache/fixtures/wan21_gguf");

#[test]
fn gguf_checkpoints_load_and_match_reference() {
    let case = reference_tensors("case.safetensors");
    let sample = case_tensor(&case, "sample");
    let expected = case_tensor(&case, "latent_mu");
    // F32 is lossless; F16/BF16 storage rounds the weights (≈ 2^-11 / 2^-8 relative), fp32 compute.
    for (storage, tolerance) in [("F32", REFERENCE_ATOL), ("F16", 5e-3), ("BF16", 5e-2)] {
        let path = Path::new(GGUF_DIR).join(format!("{storage}.gguf"));
        assert!(path.exists(), "missing {} (run scripts/setup.sh --test)", path.display());
        let vae = WanVae::load(&path, &WanLoadOptions::default()).expect("GGUF loads");
        let error = max_abs_diff(&vae.encode(&sample).unwrap(), &expected);
        println!("wan 2.1 from {storage} GGUF: encode max abs error vs reference = {error:e}");
        assert!(error <= tolerance, "{storage}: {error:e}");
    }
}
