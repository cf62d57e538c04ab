//! Spatial tiling of the VAEs against untiled runs and against diffusers' own tiled encode/decode
//! (`enable_tiling`) on the same weights, input and tile geometry, run side by side
//! (scripts/bench/diffusers_tiled_decode.py). Errors are printed so `--nocapture` reports them.
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use tch::{Device, Kind, Tensor};
use vaebox::bench::tiling::bench::decode_spec;
use vaebox::bench::tiling::measure::{ChildRunner, ModelSpec, RunSpec};
use vaebox::bench::tiling::synthetic_video;
use vaebox::executor::tiled::streams::{TiledDecoder, TiledEncoder};
use vaebox::executor::tiled::tile_major::{no_checkpoints, plain_push, TileMajorDecode, TileMajorHooks};
use vaebox::models::ModelError;
use vaebox::models::family::Family;
use vaebox::models::family::vae::StreamOutput;
use vaebox::models::vae::VideoVae;
use vaebox::models::wan::{WanLoadOptions, WanVae, WanVideoVae};
use vaebox::tiling::grid::SpatialTiles;
use vaebox::tiling::planner::{plan, MemoryModel, PlanRequest, TiledOp};

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
const TILES: SpatialTiles = SpatialTiles::square(10, 4);

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
    VideoVae::new(WanVideoVae::new(Family::Wan21, model))
}

fn test_video() -> Tensor {
    synthetic_video(FRAMES, HEIGHT, WIDTH)
}

fn untiled_latent(vae: &VideoVae, video: &Tensor) -> Tensor {
    tch::no_grad(|| vae.encoder().push(video).expect("encode").expect("9 frames complete 3 latent frames"))
}

/// Mean and RMS are the verdict; the single worst value is reported. The Wan mid block attends over
/// the whole frame, so a tile's output differs from the untiled one everywhere, not only at seams: the
/// worst cell (one in ~600k) lands anywhere and is noise at the level of both implementations.
struct Difference {
    max_abs: f64,
    mean_abs: f64,
    rms: f64,
}

fn difference(actual: &Tensor, expected: &Tensor) -> Difference {
    assert_eq!(actual.size(), expected.size(), "shape mismatch");
    let d = (actual.to_kind(Kind::Double) - expected.to_kind(Kind::Double)).abs();
    let rms = d.square().mean(Kind::Double).sqrt().double_value(&[]);
    Difference { max_abs: d.max().double_value(&[]), mean_abs: d.mean(Kind::Double).double_value(&[]), rms }
}

fn python() -> PathBuf {
    std::env::var_os("VAEBOX_PYTHON").map(PathBuf::from).unwrap_or_else(|| Path::new(REPO).join(".venv/bin/python"))
}

/// diffusers' (tiled, untiled) outputs of `op` on `input` at our tile geometry.
fn diffusers_tiled(op: &str, input: &Tensor, dir: &Path) -> (Tensor, Tensor) {
    let input_path = dir.join(format!("{op}_input.safetensors"));
    let out_path = dir.join(format!("{op}_diffusers.safetensors"));
    Tensor::write_safetensors(&[("input", input.contiguous())], &input_path).expect("write input");
    let tile_px = (TILES.tile_height_latent * 8).to_string();
    let stride_px = ((TILES.tile_height_latent - TILES.overlap_latent) * 8).to_string();
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

struct Ours<'a> {
    tiled: &'a Tensor,
    untiled: &'a Tensor,
    tiles: usize,
}

/// Runs diffusers' tiled and untiled `op` on the same input and geometry; our tiling error must be no
/// larger than theirs (mean and RMS), and the two untiled outputs must agree (same computation).
fn compare_with_diffusers(op: &str, input: &Tensor, ours: Ours, dir: &Path) {
    let (diffusers_tiled, diffusers_untiled) = diffusers_tiled(op, input, dir);
    let same_model = difference(ours.untiled, &diffusers_untiled);
    let mine = difference(ours.tiled, ours.untiled);
    let theirs = difference(&diffusers_tiled, &diffusers_untiled);
    println!(
        "{op} {}x{} px, tile {} overlap {} latent ({} tiles): ours mean {:.4e} rms {:.4e} max {:.4e} | diffusers mean {:.4e} rms {:.4e} max {:.4e} | untiled vs diffusers max {:.2e}",
        HEIGHT, WIDTH, TILES.tile_height_latent, TILES.overlap_latent, ours.tiles, mine.mean_abs, mine.rms, mine.max_abs, theirs.mean_abs, theirs.rms, theirs.max_abs, same_model.max_abs
    );
    assert!(same_model.max_abs <= SAME_MODEL_ATOL, "untiled outputs differ by {:e}", same_model.max_abs);
    assert!(mine.mean_abs <= theirs.mean_abs, "mean error {:e} > diffusers' {:e}", mine.mean_abs, theirs.mean_abs);
    assert!(mine.rms <= theirs.rms, "rms error {:e} > diffusers' {:e}", mine.rms, theirs.rms);
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

    compare_with_diffusers("decode", &latent, Ours { tiled: &tiled, untiled: &untiled, tiles: tiled_decoder.tile_count() }, dir.path());
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

    compare_with_diffusers("encode", &video, Ours { tiled: &tiled, untiled: &untiled, tiles: encoder.tile_count() }, dir.path());
}

/// Tiles that fit the whole frame are the untiled stream: same output bit for bit.
#[test]
fn decode_that_fits_is_not_tiled() {
    let _serial = serial();
    let vae = load_vae();
    let latent = untiled_latent(&vae, &test_video());
    let plain = tch::no_grad(|| {
        let mut decoder = vae.decoder();
        Tensor::cat(&[decoder.push_some(&latent.narrow(2, 0, 1)).unwrap(), decoder.push_some(&latent.narrow(2, 1, 2)).unwrap()], 2)
    });
    for tiles in [None, Some(SpatialTiles::square(22, 4)), Some(SpatialTiles::square(64, 8))] {
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

fn runner() -> ChildRunner {
    ChildRunner::new(env!("CARGO_BIN_EXE_vaebox"))
}

fn model_spec() -> ModelSpec {
    ModelSpec { weights: weights_path(), family: "wan21".into(), dtype: "f32".into(), threads: 2, device: "cpu".into(), cpu_winograd: true }
}

/// The test clip's latent: frames, height, width.
const LATENT_SHAPE: [i64; 3] = [3, HEIGHT / 8, WIDTH / 8];

/// A decode of the test clip's latent under `budget_bytes`, at most 2 latent frames per push.
fn decode_request(memory: MemoryModel, budget_bytes: u64) -> PlanRequest {
    PlanRequest {
        op: TiledOp::Decode,
        latent_frames: LATENT_SHAPE[0],
        latent_height: LATENT_SHAPE[1],
        latent_width: LATENT_SHAPE[2],
        spatial_factor: 8,
        temporal_factor: 4,
        budget_bytes,
        max_latent_frames_per_chunk: 2,
        memory,
        frame_by_frame: false,
    }
}

fn mib(bytes: f64) -> f64 {
    bytes / 1048576.0
}

/// The planner with the calibrated memory model of src/tiling/memory.rs keeps the measured peak of
/// each decode (RSS growth of a fresh child process, as `vaebox calibrate` measures) within the
/// budget + 10%: at 75% of the untiled plan's estimate (the chunk shortens), at 60% (one latent
/// frame per push no longer fits whole frames: spatial tiles) and at 35%, where every time-major
/// tiling holds too many causal caches (one frame's alone are a third of the estimate): tile-major.
#[test]
fn tiled_decode_honours_the_budget() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let vae = load_vae();
    let memory = MemoryModel::for_vae(&vae, Kind::Float, tch::Device::Cpu).expect("a calibrated row for Wan 2.1 f32");
    let latent = untiled_latent(&vae, &test_video());
    let input = dir.path().join("latent.safetensors");
    Tensor::write_safetensors(&[("input", &latent)], &input).unwrap();
    let shape = LATENT_SHAPE;
    let request = |budget_bytes: u64| decode_request(memory, budget_bytes);
    let whole = plan(&request(u64::MAX / 4));
    let untiled = runner().run(&decode_spec(&model_spec(), &input, shape, &whole, None)).expect("untiled run");
    println!("untiled: {whole:?}, measured peak {:.1} MiB", mib(untiled.peak_bytes));
    for (share, must_tile) in [(0.75, false), (0.6, true), (0.35, true)] {
        let budget = (whole.estimated_peak_bytes as f64 * share) as u64;
        let chosen = plan(&request(budget));
        assert!(chosen.fits, "{share}: {chosen:?}");
        assert!(chosen.spatial.is_some() || !must_tile, "{share}: a budget that forces tiles, got {chosen:?}");
        let run = runner().run(&decode_spec(&model_spec(), &input, shape, &chosen, None)).expect("decode run");
        if share < 0.5 {
            assert!(chosen.tile_major, "{share}: {chosen:?}");
        }
        println!(
            "budget {:.0}% = {:.1} MiB: {chosen:?} ({} tiles), estimate {:.1} MiB, measured peak {:.1} MiB ({:+.1}% of the budget)",
            share * 100.0,
            mib(budget as f64),
            run.tile_count,
            mib(chosen.estimated_peak_bytes as f64),
            mib(run.peak_bytes),
            (run.peak_bytes / budget as f64 - 1.0) * 100.0
        );
        assert!(run.peak_bytes <= budget as f64 * 1.1, "{share}: peak {:.1} MiB > budget {:.1} MiB + 10%", mib(run.peak_bytes), mib(budget as f64));
        // The planner may leave slack under the budget; the model itself must not under-estimate either.
        let estimate = chosen.estimated_peak_bytes as f64;
        assert!(run.peak_bytes <= estimate * 1.1, "{share}: peak {:.1} MiB > estimate {:.1} MiB + 10%", mib(run.peak_bytes), mib(estimate));
    }
}

/// Below one frame of causal caches no time-major plan fits; tile-major decoding — one tile's cache
/// alive at a time, tiles spooled to disk — does, and equals the time-major tiled decode of the same
/// tiles and pushes.
#[test]
fn tile_major_decode_goes_below_the_cache_floor() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let vae = load_vae();
    let memory = MemoryModel::for_vae(&vae, Kind::Float, Device::Cpu).expect("a calibrated row for Wan 2.1 f32");
    let latent = untiled_latent(&vae, &test_video());
    let whole = plan(&decode_request(memory, u64::MAX / 4));
    let budget = (whole.estimated_peak_bytes as f64 * 0.35) as u64;
    let chosen = plan(&decode_request(memory, budget));
    assert!(chosen.fits && chosen.tile_major, "{chosen:?}");
    let tiles = chosen.spatial.expect("tiles");

    let spool = tempfile::tempdir_in(dir.path()).unwrap();
    let decode = TileMajorDecode { vae: &vae, tiles, latent_frames_per_push: chosen.latent_frames_per_chunk, output: StreamOutput::Pipeline, checkpoint_frames: 0 };
    let mut chunks = Vec::new();
    let tile_count = tch::no_grad(|| {
        let hooks = TileMajorHooks {
            step: &mut |_, _| Ok(()),
            push: &mut plain_push::<ModelError>,
            emit: &mut |chunk, _| {
                chunks.push(chunk);
                Ok(())
            },
            checkpoint: &mut no_checkpoints,
        };
        decode.run(&latent, spool.path(), None, hooks)
    })
    .expect("tile-major decode")
    .0;
    assert!(tile_count >= 2, "{tile_count} tiles");
    assert_eq!(std::fs::read_dir(spool.path()).unwrap().count(), 0, "spool files left behind");
    let k = chosen.latent_frames_per_chunk;
    let pushes: Vec<i64> = (0..LATENT_SHAPE[0]).step_by(k as usize).map(|start| k.min(LATENT_SHAPE[0] - start)).collect();
    let time_major = decode_all(&mut TiledDecoder::new(&vae, Some(tiles)), &latent, &pushes);
    let error = difference(&Tensor::cat(&chunks, 2), &time_major.to_kind(Kind::Float)).max_abs;
    println!("tile-major vs time-major, {tile_count} tiles {tiles:?}, {k} latent frames per push: max abs {error:e}");
    assert!(error <= 1e-6, "{error:e}");
    // The same order blended in memory (what a restoration batch uses): the same frames.
    let in_memory = tch::no_grad(|| decode.run_in_memory(&latent, &mut plain_push::<ModelError>)).expect("in-memory tile-major decode");
    let error = difference(&in_memory, &Tensor::cat(&chunks, 2)).max_abs;
    assert!(error <= 1e-6, "in memory vs spooled: {error:e}");

    // Its measured peak: `tiled_decode_honours_the_budget` at 35%.
}

/// diffusers' `AutoencoderKLWan.decode` peak memory on a random latent of this shape, measured as our
/// child runs measure theirs (scripts/bench/diffusers_decode_memory.py).
fn diffusers_decode_peak(latent_shape: [i64; 3]) -> serde_json::Value {
    let keymap = Path::new(REFERENCE_DIR).join("keymap_original_to_diffusers.json");
    let [frames, height, width] = latent_shape.map(|n| n.to_string());
    let output = Command::new(python())
        .arg(Path::new(REPO).join("scripts/bench/diffusers_decode_memory.py"))
        .args(["--weights", weights_path().to_str().unwrap(), "--keymap", keymap.to_str().unwrap()])
        .args(["--config-json", r#"{"base_dim": 12}"#, "--latent-frames", &frames, "--latent-height", &height, "--latent-width", &width])
        .output()
        .expect("python runs (set VAEBOX_PYTHON)");
    assert!(output.status.success(), "diffusers memory script failed: {}", String::from_utf8_lossy(&output.stderr));
    let stdout = String::from_utf8_lossy(&output.stdout);
    serde_json::from_str(stdout.lines().last().unwrap_or_default()).expect("one JSON line")
}

/// Decoding a clip 4× longer at the same resolution raises our peak memory by at most 10%: the
/// causal caches are a fixed number of frames, and the executor hands every chunk on. diffusers'
/// own decode of the same shapes is measured the same way and reported (not asserted).
#[test]
fn decode_memory_is_flat_in_clip_length() {
    let _serial = serial();
    let vae = load_vae();
    let memory = MemoryModel::for_vae(&vae, Kind::Float, tch::Device::Cpu).expect("a calibrated row for Wan 2.1 f32");
    let (short, long) = ([3, HEIGHT / 8, WIDTH / 8], [12, HEIGHT / 8, WIDTH / 8]);
    let measure = |[latent_frames, latent_height, latent_width]: [i64; 3]| {
        // The executor's default: one latent frame (4 pixel frames) per push, no budget.
        let request = PlanRequest {
            op: TiledOp::Decode,
            latent_frames,
            latent_height,
            latent_width,
            spatial_factor: 8,
            temporal_factor: 4,
            budget_bytes: u64::MAX / 4,
            max_latent_frames_per_chunk: 1,
            memory,
            frame_by_frame: false,
        };
        let chosen = plan(&request);
        let spec = RunSpec {
            model: model_spec(),
            op: TiledOp::Decode,
            latent_frames,
            latent_height,
            latent_width,
            latent_frames_per_push: chosen.latent_frames_per_chunk,
            tiles: chosen.spatial,
            row_split: None,
            tile_major: false,
            checkpointed: true,
            input: None,
            output: None,
        };
        runner().run(&spec).expect("decode run").peak_bytes
    };
    let (ours_short, ours_long) = (measure(short), measure(long));
    let theirs_short = diffusers_decode_peak(short);
    let theirs_long = diffusers_decode_peak(long);
    let peak = |v: &serde_json::Value| v["peak_bytes"].as_f64().expect("peak_bytes");
    let growth = ours_long / ours_short - 1.0;
    println!(
        "decode peak, {} → {} latent frames of {}×{}: ours {:.1} → {:.1} MiB ({:+.1}%) | diffusers {:.1} → {:.1} MiB ({:+.1}%; its output {:.1} → {:.1} MiB)",
        short[0],
        long[0],
        short[1],
        short[2],
        mib(ours_short),
        mib(ours_long),
        growth * 100.0,
        mib(peak(&theirs_short)),
        mib(peak(&theirs_long)),
        (peak(&theirs_long) / peak(&theirs_short) - 1.0) * 100.0,
        mib(theirs_short["output_bytes"].as_f64().unwrap_or(0.0)),
        mib(theirs_long["output_bytes"].as_f64().unwrap_or(0.0)),
    );
    assert!(growth <= 0.10, "ours grows {:.1}% for a 4× longer clip", growth * 100.0);
}
