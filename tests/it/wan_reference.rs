//! Wan 2.1 VAE against the reference case produced by the original Wan code (../shared/reference/wan21_original,
//! cross-checked bit-exact against diffusers), plus chunked-streaming, naming and bad-checkpoint checks; and
//! Wan 2.1 / 2.2 layouts against cases computed by diffusers (.cache/fixtures/wan_cases), in both namings.
use crate::common;

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
    load_error_after_editing(&reference_path("weights.safetensors"), edit)
}

fn load_error_after_editing(source: &Path, edit: impl FnOnce(&mut BTreeMap<String, Tensor>)) -> String {
    let mut weights = read_tensor_map(source);
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

/// Parity cases made by diffusers' `AutoencoderKLWan` with small random weights (scripts/fixtures/make_wan_cases.py,
/// run by `scripts/setup.sh --test`): Wan 2.1 and Wan 2.2 layouts of several widths and depths, frame counts
/// that are not 1 + 4k and sizes that are not multiples of 64 (one not even of 8). Each folder holds the
/// diffusers weights, `meta.json` with diffusers' resolved config, and `sample` → `latent_mu` (encoder mean)
/// → `decoded` (clamped) as diffusers computed them.
const DIFFUSERS_CASES_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/.cache/fixtures/wan_cases");

struct DiffusersCase {
    name: &'static str,
    dir: PathBuf,
    meta: serde_json::Value,
    tensors: BTreeMap<String, Tensor>,
}

impl DiffusersCase {
    fn open(name: &'static str) -> Self {
        let dir = Path::new(DIFFUSERS_CASES_DIR).join(name);
        let meta_path = dir.join("meta.json");
        assert!(meta_path.exists(), "missing fixture {} (run scripts/setup.sh --test: it makes it with diffusers)", meta_path.display());
        let meta = serde_json::from_str(&std::fs::read_to_string(&meta_path).unwrap()).expect("meta.json is JSON");
        let tensors = read_tensor_map(&dir.join("case.safetensors"));
        Self { name, dir, meta, tensors }
    }

    fn tensor(&self, name: &str) -> Tensor {
        case_tensor(&self.tensors, name)
    }

    fn load(&self, file: &str) -> WanVae {
        WanVae::load(&self.dir.join(file), &WanLoadOptions::default()).unwrap_or_else(|e| panic!("{}: {file} does not load: {e}", self.name))
    }

    /// The layout diffusers built, in our terms.
    fn expected_config(&self) -> WanConfig {
        let resolved = &self.meta["resolved"];
        let int = |key: &str| resolved[key].as_i64().unwrap_or_else(|| panic!("meta.json: resolved.{key}"));
        let list = |key: &str| resolved[key].as_array().unwrap_or_else(|| panic!("meta.json: resolved.{key}")).clone();
        let patch_size = int("patch_size");
        WanConfig {
            image_channels: int("in_channels") / (patch_size * patch_size),
            base_dim: int("base_dim"),
            decoder_base_dim: int("decoder_base_dim"),
            z_dim: int("z_dim"),
            dim_mult: list("dim_mult").iter().map(|m| m.as_i64().unwrap()).collect(),
            num_res_blocks: int("num_res_blocks") as usize,
            temporal_downsample: list("temperal_downsample").iter().map(|t| t.as_bool().unwrap()).collect(),
            is_residual: resolved["is_residual"].as_bool().unwrap(),
            patch_size,
        }
    }
}

/// Max abs errors of the encoder mean and the decoded video against diffusers.
#[derive(Debug, Clone, Copy)]
struct ParityErrors {
    mean: f64,
    decoded: f64,
}

impl ParityErrors {
    fn assert_within(&self, what: &str) {
        assert!(self.mean <= REFERENCE_ATOL && self.decoded <= REFERENCE_ATOL, "{what}: {self:?} exceeds {REFERENCE_ATOL:e}");
    }
}

/// Our whole-clip encode of diffusers' sample (trailing frames beyond 1 + 4k dropped, as diffusers does)
/// and decode of diffusers' latent.
fn whole_clip_errors(vae: &WanVae, case: &DiffusersCase) -> ParityErrors {
    let mean = vae.encode(&case.tensor("sample")).expect("encode");
    let decoded = vae.decode(&case.tensor("latent_mu")).expect("decode");
    ParityErrors { mean: max_abs_diff(&mean, &case.tensor("latent_mu")), decoded: max_abs_diff(&decoded, &case.tensor("decoded")) }
}

/// Frames per encoder call after the first in diffusers' `_encode` (and the original Wan code).
const DIFFUSERS_ENCODE_CHUNK: i64 = 4;

/// The same through the streams with diffusers' own chunking: the first frame alone, then one group of 4
/// frames (encoder) or one latent frame (decoder) per push.
fn streamed_errors(vae: &WanVae, case: &DiffusersCase) -> ParityErrors {
    let sample = case.tensor("sample");
    let frames = sample.size()[2];
    let mut encoder = vae.encoder_stream();
    let mut means = Vec::new();
    let mut start = 0;
    while start < frames {
        let len = if start == 0 { 1 } else { DIFFUSERS_ENCODE_CHUNK.min(frames - start) };
        means.extend(encoder.push(&sample.narrow(2, start, len)).expect("encoder push"));
        start += len;
    }
    assert_eq!(encoder.pending_frames(), (frames - 1) % DIFFUSERS_ENCODE_CHUNK, "{}: frames past 1 + 4k wait in the stream", case.name);

    let latent = case.tensor("latent_mu");
    let mut decoder = vae.decoder_stream();
    let videos: Vec<Tensor> = (0..latent.size()[2]).map(|i| decoder.push(&latent.narrow(2, i, 1)).expect("decoder push")).collect();
    ParityErrors {
        mean: max_abs_diff(&Tensor::cat(&means, 2), &case.tensor("latent_mu")),
        decoded: max_abs_diff(&Tensor::cat(&videos, 2), &case.tensor("decoded")),
    }
}

/// Loads the case's diffusers weights with our loader, checks the detected layout against diffusers'
/// config, and requires our encoder mean and decoder output, whole-clip and streamed, to match.
fn check_diffusers_case(name: &'static str) {
    let case = DiffusersCase::open(name);
    let vae = case.load("weights.safetensors");
    assert_eq!(vae.config(), &case.expected_config(), "{name}: detected config");
    let whole = whole_clip_errors(&vae, &case);
    let streamed = streamed_errors(&vae, &case);
    println!("{name}: max abs error vs diffusers: encoder mean {:.2e}, decoded {:.2e}; streamed {:.2e}, {:.2e}", whole.mean, whole.decoded, streamed.mean, streamed.decoded);
    whole.assert_within(name);
    streamed.assert_within(&format!("{name} (streamed)"));
}

#[test]
fn diffusers_wan21_z4_r1_b2_t5_40x56() {
    check_diffusers_case("wan21_z4_r1_b2_t5_40x56");
}

#[test]
fn diffusers_wan21_image_t1_56x40() {
    check_diffusers_case("wan21_image_t1_56x40");
}

#[test]
fn diffusers_wan21_z16_r2_t7_72x88() {
    check_diffusers_case("wan21_z16_r2_t7_72x88");
}

#[test]
fn diffusers_wan21_3lvl_dec12_t10_36x52() {
    check_diffusers_case("wan21_3lvl_dec12_t10_36x52");
}

#[test]
fn diffusers_wan21_odd_size_t13_42x61() {
    check_diffusers_case("wan21_odd_size_t13_42x61");
}

#[test]
fn diffusers_wan22_r2_t9_48x80() {
    check_diffusers_case("wan22_r2_t9_48x80");
}

#[test]
fn diffusers_wan22_r1_b2_t7_32x48() {
    check_diffusers_case("wan22_r1_b2_t7_32x48");
}

#[test]
fn diffusers_wan22_image_t1_32x64() {
    check_diffusers_case("wan22_image_t1_32x64");
}

#[test]
fn diffusers_wan22_3lvl_t12_40x24() {
    check_diffusers_case("wan22_3lvl_t12_40x24");
}

/// The released-topology Wan 2.2 case once more, from a copy of its weights under the original Wan 2.2 /
/// ComfyUI names. The fixture script renames with the inverse of diffusers' converter (`convert_vae_22`); our
/// loader renames back with its own map, written from the original module definitions, so a mistake on
/// either side fails here.
#[test]
fn wan22_original_naming_matches_diffusers() {
    let case = DiffusersCase::open("wan22_r2_t9_48x80");
    let file = case.meta["original_naming"].as_str().expect("meta.json: original_naming");
    let names: Vec<String> = read_tensor_map(&case.dir.join(file)).into_keys().collect();
    assert!(names.iter().any(|k| k == "encoder.conv1.weight") && !names.iter().any(|k| k.contains("down_blocks")), "{file} is not in original naming");

    let vae = case.load(file);
    assert_eq!(vae.config(), &case.expected_config());
    let errors = whole_clip_errors(&vae, &case);
    println!("wan 2.2 from original naming: max abs error vs diffusers: encoder mean {:.2e}, decoded {:.2e}", errors.mean, errors.decoded);
    errors.assert_within("original naming");

    // Errors name keys as the file spells them, resamplers included.
    let key = "decoder.upsamples.1.upsamples.3.time_conv.weight";
    let message = load_error_after_editing(&case.dir.join(file), |w| {
        let _removed = w.remove(key).unwrap_or_else(|| panic!("{file} has no `{key}`"));
    });
    assert!(message.contains(key) && message.contains("missing"), "{message}");
}

/// diffusers rejects Wan 2.2 frames whose size is not a multiple of 16 (its average-down shortcuts cannot
/// fold them); so do we, before any work, with the size in the message.
#[test]
fn wan22_rejects_sizes_that_are_not_multiples_of_16() {
    let vae = DiffusersCase::open("wan22_r1_b2_t7_32x48").load("weights.safetensors");
    let frames = Tensor::zeros([1, 3, 1, 40, 56], (Kind::Float, Device::Cpu));
    let message = vae.encode(&frames).expect_err("a 40×56 frame encoded").to_string();
    assert!(message.contains("16") && message.contains("40"), "{message}");
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
