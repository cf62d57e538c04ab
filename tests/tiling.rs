//! Spatial tiling of the VAEs against untiled runs and against diffusers' own tiled encode/decode
//! (`enable_tiling`) on the same weights, input and tile geometry, run side by side
//! (scripts/bench/diffusers_tiled_decode.py). Errors are printed so `--nocapture` reports them.
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use tch::{Device, Kind, Tensor};
use vaebox::models::registry::Family;
use vaebox::models::vae::VideoVae;
use vaebox::models::wan::{WanLoadOptions, WanVae};
use vaebox::tiling::grid::SpatialTiles;
use vaebox::tiling::vae_tiles::{TiledDecoder, TiledEncoder};

const REPO: &str = env!("CARGO_MANIFEST_DIR");
const REFERENCE_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/reference/wan21_original");
/// Chunked streaming of a tiled stream must equal one push up to fp32 rounding (as untiled streams).
const STREAMING_ATOL: f64 = 1e-5;
/// Our untiled model against diffusers' untiled model: proof both sides ran the same computation.
const SAME_MODEL_ATOL: f64 = 1e-3;

/// 9 frames of 128×176 pixels = 3 latent frames of 16×22 cells. Tiles of 10 latent cells (80 px) with
/// 4 cells (32 px) of overlap put both our grid and diffusers' tiles at starts 0, 6, 12 (diffusers adds
/// a 4-cell sliver at the right and bottom end), so the geometry is the same on both sides.
const FRAMES: i64 = 9;
const HEIGHT: i64 = 128;
const WIDTH: i64 = 176;
const TILES: SpatialTiles = SpatialTiles { tile_latent: 10, overlap_latent: 4 };

/// Tests here measure whole-model runs on 2 cores; one at a time keeps timings and memory readings clean.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn weights_path() -> PathBuf {
    Path::new(REFERENCE_DIR).join("weights.safetensors")
}

fn load_vae() -> VideoVae {
    let model = WanVae::load(&weights_path(), &WanLoadOptions { device: Device::Cpu, kind: Kind::Float }).expect("reference weights load");
    VideoVae::Wan { family: Family::Wan21, model }
}

/// A smooth moving pattern in [-1, 1] (natural images are smooth; noise would make every tile edge
/// look the same as the interior).
fn test_video() -> Tensor {
    let options = (Kind::Float, Device::Cpu);
    let t = Tensor::arange(FRAMES, options).view([1, 1, FRAMES, 1, 1]);
    let y = Tensor::arange(HEIGHT, options).view([1, 1, 1, HEIGHT, 1]);
    let x = Tensor::arange(WIDTH, options).view([1, 1, 1, 1, WIDTH]);
    let phase = Tensor::from_slice(&[0.0f32, 2.0, 4.0]).view([1, 3, 1, 1, 1]);
    let wave = ((&x * 0.07 + &y * 0.05 + &t * 0.3 + &phase).sin() * 0.6 + ((&x - &y * 0.5) * 0.031 - &t * 0.2).cos() * 0.3) * 1.0;
    wave.clamp(-1.0, 1.0)
}

fn untiled_latent(vae: &VideoVae, video: &Tensor) -> Tensor {
    tch::no_grad(|| vae.encoder().push(video).expect("encode").expect("9 frames complete 3 latent frames"))
}

struct Difference {
    max_abs: f64,
    mean_abs: f64,
}

fn difference(actual: &Tensor, expected: &Tensor) -> Difference {
    assert_eq!(actual.size(), expected.size(), "shape mismatch");
    let d = (actual.to_kind(Kind::Double) - expected.to_kind(Kind::Double)).abs();
    Difference { max_abs: d.max().double_value(&[]), mean_abs: d.mean(Kind::Double).double_value(&[]) }
}

fn python() -> PathBuf {
    std::env::var_os("VAEBOX_PYTHON").map(PathBuf::from).unwrap_or_else(|| Path::new(REPO).join(".venv/bin/python"))
}

/// diffusers' (tiled, untiled) outputs of `op` on `input` at our tile geometry.
fn diffusers_tiled(op: &str, input: &Tensor, dir: &Path) -> (Tensor, Tensor) {
    let input_path = dir.join(format!("{op}_input.safetensors"));
    let out_path = dir.join(format!("{op}_diffusers.safetensors"));
    Tensor::write_safetensors(&[("input", input.contiguous())], &input_path).expect("write input");
    let tile_px = (TILES.tile_latent * 8).to_string();
    let stride_px = ((TILES.tile_latent - TILES.overlap_latent) * 8).to_string();
    let keymap = Path::new(REFERENCE_DIR).join("keymap_original_to_diffusers.json");
    let output = Command::new(python())
        .arg(Path::new(REPO).join("scripts/bench/diffusers_tiled_decode.py"))
        .args(["--weights", weights_path().to_str().unwrap(), "--keymap", keymap.to_str().unwrap()])
        .args(["--config-json", r#"{"base_dim": 12}"#, "--op", op, "--input-key", "input"])
        .args(["--input", input_path.to_str().unwrap(), "--out", out_path.to_str().unwrap()])
        .args(["--tile-sample-min-height", &tile_px, "--tile-sample-min-width", &tile_px])
        .args(["--tile-sample-stride-height", &stride_px, "--tile-sample-stride-width", &stride_px])
        .output()
        .expect("python runs (set VAEBOX_PYTHON)");
    assert!(output.status.success(), "diffusers script failed: {}", String::from_utf8_lossy(&output.stderr));
    println!("diffusers: {}", String::from_utf8_lossy(&output.stdout).trim());
    let tensors: std::collections::BTreeMap<String, Tensor> = Tensor::read_safetensors(&out_path).expect("read outputs").into_iter().collect();
    (tensors["tiled"].shallow_clone(), tensors["untiled"].shallow_clone())
}

fn decode_all(decoder: &mut TiledDecoder, latent: &Tensor, pushes: &[i64]) -> Tensor {
    let mut start = 0;
    let chunks: Vec<Tensor> = pushes
        .iter()
        .map(|&n| {
            let chunk = tch::no_grad(|| decoder.push(&latent.narrow(2, start, n)).expect("decode"));
            start += n;
            chunk
        })
        .collect();
    Tensor::cat(&chunks, 2)
}

#[test]
fn tiled_decode_error_is_no_larger_than_diffusers_tiled_decode() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let vae = load_vae();
    let latent = untiled_latent(&vae, &test_video());
    let untiled = decode_all(&mut TiledDecoder::new(&vae, None), &latent, &[3]);
    let mut tiled_decoder = TiledDecoder::new(&vae, Some(TILES));
    let tiled = decode_all(&mut tiled_decoder, &latent, &[1, 2]);
    assert!(tiled_decoder.tile_count() >= 4, "the clip must need at least 2×2 tiles, got {}", tiled_decoder.tile_count());

    let (diffusers_tiled, diffusers_untiled) = diffusers_tiled("decode", &latent, dir.path());
    let same_model = difference(&untiled, &diffusers_untiled);
    let ours = difference(&tiled, &untiled);
    let theirs = difference(&diffusers_tiled, &diffusers_untiled);
    println!(
        "decode {}x{} px, tile {} overlap {} latent ({} tiles): ours max {:.4e} mean {:.4e} | diffusers max {:.4e} mean {:.4e} | untiled vs diffusers max {:.2e}",
        HEIGHT, WIDTH, TILES.tile_latent, TILES.overlap_latent, tiled_decoder.tile_count(), ours.max_abs, ours.mean_abs, theirs.max_abs, theirs.mean_abs, same_model.max_abs
    );
    assert!(same_model.max_abs <= SAME_MODEL_ATOL, "untiled outputs differ by {:e}", same_model.max_abs);
    assert!(ours.mean_abs <= theirs.mean_abs, "mean error {:e} > diffusers' {:e}", ours.mean_abs, theirs.mean_abs);
    assert!(ours.max_abs <= theirs.max_abs, "max error {:e} > diffusers' {:e}", ours.max_abs, theirs.max_abs);
}

#[test]
fn tiled_encode_error_is_no_larger_than_diffusers_tiled_encode() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let vae = load_vae();
    let video = test_video();
    let untiled = untiled_latent(&vae, &video);
    let mut encoder = TiledEncoder::new(&vae, Some(TILES));
    // Uneven pushes: every tile buffers the same frames and completes latent frames on the same push.
    let chunks: Vec<Tensor> = tch::no_grad(|| {
        [(0, 3), (3, 4), (7, 2)].iter().filter_map(|&(start, n)| encoder.push(&video.narrow(2, start, n)).expect("encode")).collect()
    });
    let tiled = Tensor::cat(&chunks, 2);
    assert!(encoder.tile_count() >= 4, "got {} tiles", encoder.tile_count());

    let (diffusers_tiled, diffusers_untiled) = diffusers_tiled("encode", &video, dir.path());
    let same_model = difference(&untiled, &diffusers_untiled);
    let ours = difference(&tiled, &untiled);
    let theirs = difference(&diffusers_tiled, &diffusers_untiled);
    println!(
        "encode {}x{} px, tile {} overlap {} latent ({} tiles): ours max {:.4e} mean {:.4e} | diffusers max {:.4e} mean {:.4e} | untiled vs diffusers max {:.2e}",
        HEIGHT, WIDTH, TILES.tile_latent, TILES.overlap_latent, encoder.tile_count(), ours.max_abs, ours.mean_abs, theirs.max_abs, theirs.mean_abs, same_model.max_abs
    );
    assert!(same_model.max_abs <= SAME_MODEL_ATOL, "untiled outputs differ by {:e}", same_model.max_abs);
    assert!(ours.mean_abs <= theirs.mean_abs, "mean error {:e} > diffusers' {:e}", ours.mean_abs, theirs.mean_abs);
    assert!(ours.max_abs <= theirs.max_abs, "max error {:e} > diffusers' {:e}", ours.max_abs, theirs.max_abs);
}

/// Tiles that fit the whole frame are the untiled stream: same output bit for bit.
#[test]
fn decode_that_fits_is_not_tiled() {
    let _serial = serial();
    let vae = load_vae();
    let latent = untiled_latent(&vae, &test_video());
    let plain = tch::no_grad(|| {
        let mut decoder = vae.decoder();
        Tensor::cat(&[decoder.push(&latent.narrow(2, 0, 1)).unwrap(), decoder.push(&latent.narrow(2, 1, 2)).unwrap()], 2)
    });
    for tiles in [None, Some(SpatialTiles { tile_latent: 22, overlap_latent: 4 }), Some(SpatialTiles { tile_latent: 64, overlap_latent: 8 })] {
        let mut decoder = TiledDecoder::new(&vae, tiles);
        let out = decode_all(&mut decoder, &latent, &[1, 2]);
        assert_eq!(decoder.tile_count(), 1, "{tiles:?}");
        assert_eq!(difference(&out, &plain).max_abs, 0.0, "{tiles:?}");
    }
}

/// Each tile carries its own causal cache, so pushing latent frames one by one equals one push.
#[test]
fn tiled_decode_streams_exactly_across_time_chunks() {
    let _serial = serial();
    let vae = load_vae();
    let latent = untiled_latent(&vae, &test_video());
    let whole = decode_all(&mut TiledDecoder::new(&vae, Some(TILES)), &latent, &[3]);
    let chunked = decode_all(&mut TiledDecoder::new(&vae, Some(TILES)), &latent, &[1, 1, 1]);
    let error = difference(&chunked, &whole).max_abs;
    println!("tiled decode, one push vs frame by frame: max abs {error:e}");
    assert!(error <= STREAMING_ATOL, "{error:e}");
}
