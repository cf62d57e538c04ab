//! Real-ESRGAN loaded from the shipped ncnn files, checked against the real ncnn engine
//! (scripts/ncnn_reference.py, PyPI `ncnn`, fp32 on the CPU) on crops of a real photo.

use std::path::{Path, PathBuf};
use std::process::Command;

use tch::{Device, Kind, Tensor};
use vaebox::models::nn::placement::Placement2d;
use vaebox::models::realesrgan::{RealEsrgan, RealEsrganArch};
use vaebox::models::ModelError;
use vaebox::executor::tiled::upscale::upscale_tiled;
use vaebox::tiling::spatial::SpatialTiling;

const ANIMEVIDEO_X4: &str = "REALESRGAN_ANIMAVIDEOV3_UP4X";
const ANIMEVIDEO_X2: &str = "REALESRGAN_ANIMAVIDEOV3_UP2X";
const X4PLUS: &str = "REALESRGAN_X4PLUS_UP4X";
const PARITY_TOLERANCE: f64 = 1e-3;
const TILING_TOLERANCE: f64 = 1e-4;

fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn model_files(name: &str) -> (PathBuf, PathBuf) {
    let dir = manifest_dir().join("models/realesrgan");
    (dir.join(format!("{name}.param")), dir.join(format!("{name}.bin")))
}

fn load(name: &str, options: Placement2d) -> RealEsrgan {
    let (param, bin) = model_files(name);
    RealEsrgan::load(&param, &bin, &options).unwrap_or_else(|e| panic!("loading {name}: {e}"))
}

fn fp32() -> Placement2d {
    Placement2d { device: Device::Cpu, kind: Kind::Float, channels_last: false }
}

#[derive(Clone, Copy, Debug)]
struct Crop {
    x: i64,
    y: i64,
    width: i64,
    height: i64,
}

/// What the ncnn engine was fed and what it produced, both `[1,3,H,W]` Float.
struct NcnnReference {
    input: Tensor,
    output: Tensor,
}

fn read_f32(path: &Path, shape: &[i64]) -> Tensor {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let values: Vec<f32> = bytes.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect();
    assert_eq!(values.len() as i64, shape.iter().product::<i64>(), "{} has the wrong size", path.display());
    Tensor::from_slice(&values).reshape(shape)
}

fn run_ncnn(model: &str, crop: Crop) -> NcnnReference {
    let python = std::env::var("VAEBOX_PYTHON").map(PathBuf::from).unwrap_or_else(|_| manifest_dir().join(".venv/bin/python"));
    let scratch = tempfile::tempdir().unwrap();
    let (input_path, output_path) = (scratch.path().join("input.f32"), scratch.path().join("output.f32"));
    let (param, bin) = model_files(model);
    let result = Command::new(&python)
        .arg(manifest_dir().join("scripts/ncnn_reference.py"))
        .args(["--param".as_ref(), param.as_os_str(), "--bin".as_ref(), bin.as_os_str()])
        .arg("--image")
        .arg(manifest_dir().join("tests/media/astronaut.png"))
        .args(["--crop", &format!("{},{},{},{}", crop.x, crop.y, crop.width, crop.height)])
        .arg("--input-out")
        .arg(&input_path)
        .arg("--output-out")
        .arg(&output_path)
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", python.display()));
    assert!(result.status.success(), "ncnn_reference.py failed: {}", String::from_utf8_lossy(&result.stderr));
    let report: serde_json::Value = serde_json::from_slice(&result.stdout).expect("ncnn_reference.py prints one JSON line");
    let shape = |key: &str| -> Vec<i64> {
        let dims: Vec<i64> = report[key].as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).collect();
        [vec![1], dims].concat()
    };
    NcnnReference {
        input: read_f32(&input_path, &shape("input_shape")),
        output: read_f32(&output_path, &shape("output_shape")),
    }
}

fn max_abs_diff(a: &Tensor, b: &Tensor) -> f64 {
    assert_eq!(a.size(), b.size(), "shapes differ");
    (a - b).abs().max().double_value(&[])
}

/// Our forward pass against the engine's output, both clamped to the displayable [0, 1].
fn parity_error(model: &RealEsrgan, reference: &NcnnReference) -> f64 {
    max_abs_diff(&model.forward(&reference.input), &reference.output.clamp(0.0, 1.0))
}

const SQUARE_CROP: Crop = Crop { x: 180, y: 60, width: 64, height: 64 };
const WIDE_CROP: Crop = Crop { x: 300, y: 250, width: 56, height: 40 };
/// 288×384 at the output: x4plus's last convolutions run there in two bands of rows (more than 2^16
/// pixels), the path that lets a cancel in between.
const BANDED_CROP: Crop = Crop { x: 120, y: 100, width: 72, height: 96 };

#[test]
fn animevideov3_matches_ncnn_engine() {
    let model = load(ANIMEVIDEO_X4, fp32());
    assert_eq!((model.arch(), model.native_scale()), (RealEsrganArch::Compact, 4));
    for crop in [SQUARE_CROP, WIDE_CROP] {
        let reference = run_ncnn(ANIMEVIDEO_X4, crop);
        let error = parity_error(&model, &reference);
        println!("animevideov3 x4 {}x{} crop: max abs vs ncnn = {error:.2e}", crop.width, crop.height);
        assert!(error <= PARITY_TOLERANCE, "{crop:?}: max abs {error}");
    }
}

#[test]
fn x4plus_matches_ncnn_engine() {
    let model = load(X4PLUS, fp32());
    assert_eq!((model.arch(), model.native_scale()), (RealEsrganArch::Rrdb, 4));
    for crop in [SQUARE_CROP, WIDE_CROP, BANDED_CROP] {
        let reference = run_ncnn(X4PLUS, crop);
        let error = parity_error(&model, &reference);
        println!("x4plus {}x{} crop: max abs vs ncnn = {error:.2e}", crop.width, crop.height);
        assert!(error <= PARITY_TOLERANCE, "{crop:?}: max abs {error}");
    }
}

#[test]
fn x4plus_anime_6b_matches_ncnn_engine() {
    let name = "REALESRGAN_X4PLUSANIME_UP4X";
    let model = load(name, fp32());
    assert_eq!((model.arch(), model.native_scale()), (RealEsrganArch::Rrdb, 4));
    let reference = run_ncnn(name, WIDE_CROP);
    let error = parity_error(&model, &reference);
    println!("x4plus_anime_6B 56x40 crop: max abs vs ncnn = {error:.2e}");
    assert!(error <= PARITY_TOLERANCE, "max abs {error}");
}

/// The fast CPU paths: channels-last must not change fp32 results; bf16 rounds activations to
/// 8 mantissa bits, so it is held to a few 8-bit levels.
#[test]
fn channels_last_and_bf16_stay_close_to_ncnn() {
    let reference = run_ncnn(ANIMEVIDEO_X4, WIDE_CROP);
    for (kind, channels_last, tolerance) in [(Kind::Float, true, PARITY_TOLERANCE), (Kind::BFloat16, false, 2e-2), (Kind::BFloat16, true, 2e-2)] {
        let model = load(ANIMEVIDEO_X4, Placement2d { device: Device::Cpu, kind, channels_last });
        let output = model.forward(&reference.input);
        assert_eq!(output.kind(), Kind::Float);
        let error = max_abs_diff(&output, &reference.output.clamp(0.0, 1.0));
        println!("animevideov3 {kind:?} channels_last={channels_last}: max abs vs ncnn = {error:.2e}");
        assert!(error <= tolerance, "{kind:?} channels_last={channels_last}: {error}");
    }
}

/// `upscale(x, 2)` on the x4 file must equal the engine running the shipped UP2X file
/// (same weights plus its bicubic shrink), and so must our load of that UP2X file.
#[test]
fn upscale_by_two_matches_ncnn_up2x_file() {
    let reference = run_ncnn(ANIMEVIDEO_X2, WIDE_CROP);
    let expected = reference.output.clamp(0.0, 1.0);
    let x4_model = load(ANIMEVIDEO_X4, fp32());
    let via_x4 = max_abs_diff(&x4_model.upscale(&reference.input, 2).unwrap(), &expected);
    let x2_model = load(ANIMEVIDEO_X2, fp32());
    assert_eq!(x2_model.native_scale(), 2);
    let via_x2_file = max_abs_diff(&x2_model.forward(&reference.input), &expected);
    println!("animevideov3 x2: upscale(x4, 2) vs ncnn UP2X = {via_x4:.2e}, UP2X file vs ncnn = {via_x2_file:.2e}");
    assert!(via_x4 <= PARITY_TOLERANCE && via_x2_file <= PARITY_TOLERANCE);
    assert!(x4_model.upscale(&reference.input, 3).is_err());
}

/// A real photo crop, as the engine reads it (so no image decoder is needed here).
fn photo_crop(crop: Crop) -> Tensor {
    run_ncnn(ANIMEVIDEO_X4, crop).input
}

#[test]
fn compact_tiled_equals_untiled_with_receptive_overlap() {
    let model = load(ANIMEVIDEO_X4, fp32());
    let radius = model.receptive_radius();
    assert!(radius >= 18, "16 body convs + first + last 3x3 convs reach at least 18 px, got {radius}");
    let frame = photo_crop(Crop { x: 150, y: 40, width: 96, height: 80 });
    for scale in [4, 2] {
        let whole = model.upscale(&frame, scale).unwrap();
        let exact = upscale_tiled(&model, &frame, scale, &SpatialTiling { tile: 32, overlap: radius, blend: false }).unwrap();
        let exact_error = max_abs_diff(&exact, &whole);
        let seamed = upscale_tiled(&model, &frame, scale, &SpatialTiling { tile: 32, overlap: 2, blend: false }).unwrap();
        let seamed_error = max_abs_diff(&seamed, &whole);
        println!("animevideov3 x{scale} tiled (tile 32): overlap {radius} -> {exact_error:.2e}, overlap 2 -> {seamed_error:.2e}");
        assert!(exact_error <= TILING_TOLERANCE, "x{scale}: {exact_error}");
        // Proves the frame really was tiled: too little context must show.
        assert!(seamed_error > 1e-3, "x{scale}: overlap 2 should leave seams, got {seamed_error}");
    }
}

#[test]
fn x4plus_tiled_error_at_practical_overlap() {
    let model = load(X4PLUS, fp32());
    let frame = photo_crop(Crop { x: 180, y: 60, width: 64, height: 64 });
    let whole = model.forward(&frame);
    let errors = |tiling: SpatialTiling| {
        let tiled = upscale_tiled(&model, &frame, 4, &tiling).unwrap();
        (max_abs_diff(&tiled, &whole), (&tiled - &whole).abs().mean(Kind::Float).double_value(&[]))
    };
    for overlap in [4, 8, 16] {
        let (crop_max, crop_mean) = errors(SpatialTiling { tile: 32, overlap, blend: false });
        let (blend_max, blend_mean) = errors(SpatialTiling { tile: 32, overlap, blend: true });
        println!(
            "x4plus tiled (tile 32, overlap {overlap}; receptive radius {}): cores kept max {crop_max:.2e} mean {crop_mean:.2e} | blended max {blend_max:.2e} mean {blend_mean:.2e}",
            model.receptive_radius()
        );
        // Same tiles, same work: blending the whole outputs across the shared context beats keeping
        // each core, in the mean and at the worst pixel.
        assert!(blend_mean <= crop_mean && blend_max <= crop_max, "overlap {overlap}: blended {blend_mean:e}/{blend_max:e} vs cores {crop_mean:e}/{crop_max:e}");
        if overlap == 16 {
            // Not exact (the radius is 349 px), but far below one 8-bit level on average.
            assert!(blend_mean < 1e-2, "overlap 16 mean abs error {blend_mean}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Broken files.

fn load_error(param: &Path, bin: &Path) -> String {
    match RealEsrgan::load(param, bin, &fp32()) {
        Ok(_) => panic!("{} + {} loaded", param.display(), bin.display()),
        Err(e @ ModelError::Format { .. }) => e.to_string(),
        Err(other) => panic!("expected a format error, got {other:?}"),
    }
}

#[test]
fn truncated_bin_names_the_layer() {
    let (param, bin) = model_files(ANIMEVIDEO_X4);
    let scratch = tempfile::tempdir().unwrap();
    let truncated = scratch.path().join("truncated.bin");
    let bytes = std::fs::read(&bin).unwrap();
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    let message = load_error(&param, &truncated);
    assert!(message.contains("truncated.bin") && message.contains("truncated") && message.contains("Conv_"), "{message}");

    let extended = scratch.path().join("extended.bin");
    std::fs::write(&extended, [bytes.as_slice(), &[0u8; 8]].concat()).unwrap();
    let message = load_error(&param, &extended);
    assert!(message.contains("8 bytes left over"), "{message}");
}

#[test]
fn corrupted_weight_tag_is_reported() {
    let (param, bin) = model_files(ANIMEVIDEO_X4);
    let scratch = tempfile::tempdir().unwrap();
    let corrupted = scratch.path().join("corrupted.bin");
    let mut bytes = std::fs::read(&bin).unwrap();
    bytes[..4].copy_from_slice(&0xDEAD_BEEFu32.to_le_bytes());
    std::fs::write(&corrupted, &bytes).unwrap();
    let message = load_error(&param, &corrupted);
    assert!(message.contains("Conv_0") && message.contains("0xDEADBEEF"), "{message}");
}

#[test]
fn garbage_param_is_reported() {
    let (_, bin) = model_files(ANIMEVIDEO_X4);
    let scratch = tempfile::tempdir().unwrap();
    let garbage = scratch.path().join("garbage.param");
    std::fs::write(&garbage, "this is not an ncnn graph\n").unwrap();
    let message = load_error(&garbage, &bin);
    assert!(message.contains("garbage.param") && message.contains("magic"), "{message}");
}

#[test]
fn miswired_graph_is_rejected() {
    let (param, bin) = model_files(ANIMEVIDEO_X4);
    let scratch = tempfile::tempdir().unwrap();
    let miswired = scratch.path().join("miswired.param");
    // Conv_4 reads the output of PRelu_3 (blob 59); point it at PRelu_1's output instead.
    let text = std::fs::read_to_string(&param).unwrap().replace("1 1 59 60", "1 1 56 60");
    std::fs::write(&miswired, text).unwrap();
    let message = load_error(&miswired, &bin);
    assert!(message.contains("Conv_4") && message.contains("56"), "{message}");

    // x4plus_anime's graph (6 blocks) with x4plus's weights (23 blocks) must not load.
    let (anime_param, _) = model_files("REALESRGAN_X4PLUSANIME_UP4X");
    let (_, x4plus_bin) = model_files(X4PLUS);
    let message = load_error(&anime_param, &x4plus_bin);
    assert!(message.contains("REALESRGAN_X4PLUS_UP4X.bin") && message.contains("Conv_"), "{message}");
}
