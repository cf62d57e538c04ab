//! The LQ projection (`flashvsr::LqProjection`) of both releases against `v1_1_lq_proj_case` (README §11:
//! `Buffer_LQ4x_Proj` and `Causal_LQ4x_Proj` streamed clip by clip and run whole) and against the LQ tokens
//! of each DiT step of `e2e_tiny` (v1.0) and `v1_1_e2e_tiny` (v1.1) from the pipeline's LR frames on its
//! call schedule (README §2.5); the `.ckpt` pickle, saved states, bad clips, and the real file's shapes.
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use tch::{Device, Kind, Tensor};
use vaebox::models::flashvsr::{FlashVsrVersion, LqProjLoadOptions, LqProjection};
use vaebox::models::stop::StopFlag;
use vaebox::models::ModelError;

use super::{case, check, lq_video, reference_dir, tensor};
use crate::common::tensors::{full_keys, read_tensor_map};

/// README §8: the LQ projection is exact to 1e-6 in fp32.
const LQ_ATOL: f64 = 1e-6;

const RELEASES: [(FlashVsrVersion, &str); 2] = [(FlashVsrVersion::V1_0, "buffer"), (FlashVsrVersion::V1_1, "causal")];

fn weights() -> PathBuf {
    reference_dir().join("small_LQ_proj_in.safetensors")
}

fn load(path: &Path, version: FlashVsrVersion) -> LqProjection {
    LqProjection::load(path, &LqProjLoadOptions::for_version(version)).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The clips as the pipeline slices them: frame 0 alone, then 1..5, 5..9, … (whole clips only).
fn clips(video: &Tensor, from_clip: i64, count: i64) -> Vec<Tensor> {
    (from_clip..from_clip + count).map(|k| if k == 0 { video.narrow(2, 0, 1) } else { video.narrow(2, 1 + 4 * (k - 1), 4) }).collect()
}

fn streamed(model: &LqProjection, video: &Tensor) -> Tensor {
    let mut stream = model.stream();
    let clip_count = 1 + (video.size()[2] - 1) / 4;
    let mut tokens = Vec::new();
    for (k, clip) in clips(video, 0, clip_count).iter().enumerate() {
        let out = stream.push(clip).unwrap();
        assert_eq!(out.is_none(), k == 0, "only the first push gives nothing");
        tokens.extend(out);
    }
    Tensor::cat(&tokens, 1)
}

#[test]
fn both_releases_match_the_original_streamed_and_whole() {
    let case = case("v1_1_lq_proj_case.safetensors");
    let video = tensor(&case, "video_bcthw");
    let mut outputs = Vec::new();
    for (version, name) in RELEASES {
        let model = load(&weights(), version);
        assert_eq!((model.config().in_channels, model.config().hidden, model.config().out_dim), (3, [8, 12], 64));
        assert_eq!(model.parameter_count(), 225_512, "README: 225,512 parameters");
        let stream = streamed(&model, &video);
        check(&format!("{name} stream vs stream_out"), &stream, &tensor(&case, &format!("{name}.stream_out")), LQ_ATOL);
        check(&format!("{name} stream vs forward_out"), &stream, &tensor(&case, &format!("{name}.forward_out")), LQ_ATOL);
        let whole = model.project_video(&video).unwrap();
        check(&format!("{name} project_video vs forward_out"), &whole, &tensor(&case, &format!("{name}.forward_out")), LQ_ATOL);
        outputs.push(stream);
    }
    let apart = (&outputs[0] - &outputs[1]).abs().max().double_value(&[]);
    println!("v1.0 vs v1.1 stream: {apart:.3} apart (README: 2.6)");
    assert!(apart > 1.0, "the releases differ");
}

/// The pipeline's schedule: step 0 pushes frame 0 and clips 1..6, step s ≥ 1 two more clips; the v1.1
/// history carries from step to step (here through a saved state, loaded into a new stream).
#[test]
fn the_pipeline_steps_give_the_original_lq_latents() {
    for (version, file) in [(FlashVsrVersion::V1_0, "e2e_tiny.safetensors"), (FlashVsrVersion::V1_1, "v1_1_e2e_tiny.safetensors")] {
        // v1.1's inputs were checked equal to e2e_tiny's (README §11.2), which holds them.
        let (expected, video) = (case(file), lq_video(&case("e2e_tiny.safetensors")));
        assert_eq!(video.size(), vec![1, 3, 33, 128, 256]);
        let model = load(&weights(), version);
        let mut stream = model.stream();
        let step0: Vec<Tensor> = clips(&video, 0, 7).iter().filter_map(|clip| stream.push(clip).unwrap()).collect();
        check(&format!("{file} step0.lq_latents"), &Tensor::cat(&step0, 1), &tensor(&expected, "step0.lq_latents"), LQ_ATOL);

        let mut saved = Vec::new();
        stream.save_state("job.", &mut saved);
        let saved: HashMap<String, Tensor> = saved.into_iter().collect();
        let mut resumed = model.stream();
        resumed.load_state("job.", &saved).unwrap();
        assert_eq!(resumed.clips_done(), 7);
        let step1: Vec<Tensor> = clips(&video, 7, 2).iter().map(|clip| resumed.push(clip).unwrap().expect("tokens")).collect();
        check(&format!("{file} step1.lq_latents (resumed)"), &Tensor::cat(&step1, 1), &tensor(&expected, "step1.lq_latents"), LQ_ATOL);
        let direct: Vec<Tensor> = clips(&video, 7, 2).iter().map(|clip| stream.push(clip).unwrap().expect("tokens")).collect();
        assert!(Tensor::cat(&direct, 1).equal(&Tensor::cat(&step1, 1)), "{file}: the resumed stream equals the one that went on");

        let other = match version {
            FlashVsrVersion::V1_0 => load(&weights(), FlashVsrVersion::V1_1),
            FlashVsrVersion::V1_1 => load(&weights(), FlashVsrVersion::V1_0),
        };
        assert!(other.stream().load_state("job.", &saved).is_err(), "{file}: a state resumes only with its release");
    }
}

/// `LQ_proj_in.ckpt` is a torch pickle: the same weights saved so load to the same model (fp32 exactly,
/// bf16 cast to the f32 compute kind close to it).
#[test]
fn the_ckpt_pickle_loads() {
    let dir = tempfile::tempdir().unwrap();
    let video = tensor(&case("v1_1_lq_proj_case.safetensors"), "video_bcthw");
    for (version, _) in RELEASES {
        let reference = load(&weights(), version).project_video(&video).unwrap();
        for (dtype, bound) in [("float32", 0.0), ("bfloat16", 5e-2)] {
            let ckpt = dir.path().join(format!("LQ_proj_in_{dtype}.ckpt"));
            crate::taehv_reference::torch_save(&weights(), &ckpt, dtype);
            let out = load(&ckpt, version).project_video(&video).unwrap();
            check(&format!("{} from a {dtype} .ckpt", version.as_str()), &out, &reference, bound);
        }
    }
}

#[test]
fn bad_clips_are_refused() {
    let video = tensor(&case("v1_1_lq_proj_case.safetensors"), "video_bcthw");
    for (version, name) in RELEASES {
        let model = load(&weights(), version);
        let refused = |result: Result<Option<Tensor>, ModelError>| match result {
            Err(ModelError::Unsupported { what, .. }) => what,
            other => panic!("{name}: not refused: {:?}", other.map(|t| t.map(|t| t.size()))),
        };
        let mut stream = model.stream();
        assert!(refused(stream.push(&video.narrow(2, 0, 4))).contains("the first clip"));
        assert!(stream.push(&video.narrow(2, 0, 1)).unwrap().is_none());
        assert!(refused(stream.push(&video.narrow(2, 1, 3))).contains("a clip after the first"));
        assert!(refused(stream.push(&video.narrow(2, 1, 4).narrow(3, 0, 24))).contains("multiples of 16"));
        assert!(stream.push(&video.narrow(2, 1, 4)).unwrap().is_some(), "{name}: a refused clip leaves the stream as it was");
        assert!(model.project_video(&video.narrow(2, 0, 4)).is_err());
    }
}

/// A file with the real LQ projection's keys and shapes (288 M parameters) is recognised with the released
/// widths; its tensors are zeros broadcast from one value, so nothing of that size is allocated.
#[test]
fn the_real_shapes_are_recognised() {
    let keys = full_keys(&reference_dir().join("full_keys_LQ_proj_in.txt"));
    assert_eq!(keys.len(), 8);
    let tensors = keys.iter().map(|(key, shape)| (key.clone(), Tensor::zeros([1], (Kind::Float, Device::Cpu)).expand(shape.as_slice(), false))).collect();
    let model = LqProjection::from_tensors(Path::new("LQ_proj_in.ckpt"), tensors, &LqProjLoadOptions::for_version(FlashVsrVersion::V1_1)).unwrap();
    let config = model.config();
    assert_eq!((config.in_channels, config.hidden, config.out_dim), (3, [2048, 3072], 1536));
    assert_eq!(model.parameter_count(), 287_845_888);
    println!("real LQ projection: {config:?}, {} parameters", model.parameter_count());

    let small: Vec<(String, Tensor)> = read_tensor_map(&weights()).into_iter().collect();
    let mut extra = small.iter().map(|(k, t)| (k.clone(), t.shallow_clone())).collect::<Vec<_>>();
    extra.push(("linear_layers.1.weight".into(), Tensor::zeros([64, 12], (Kind::Float, Device::Cpu))));
    extra.push(("linear_layers.1.bias".into(), Tensor::zeros([64], (Kind::Float, Device::Cpu))));
    let refusal = LqProjection::from_tensors(Path::new("two_layers.ckpt"), extra, &LqProjLoadOptions::for_version(FlashVsrVersion::V1_0)).unwrap_err().to_string();
    assert!(refusal.contains("linear_layers.1"), "{refusal}");
    let dit = LqProjection::load(&reference_dir().join("small_dit.safetensors"), &LqProjLoadOptions::for_version(FlashVsrVersion::V1_0)).unwrap_err().to_string();
    assert!(dit.contains("not FlashVSR's LQ projection"), "{dit}");
}

#[test]
fn a_raised_stop_ends_a_push() {
    let video = tensor(&case("v1_1_lq_proj_case.safetensors"), "video_bcthw");
    let model = load(&weights(), FlashVsrVersion::V1_1);
    let mut stream = model.stream();
    stream.set_stop(StopFlag::on(Arc::new(AtomicBool::new(true))));
    assert!(matches!(stream.push(&video.narrow(2, 0, 1)), Err(ModelError::Stopped)));
    assert_eq!(stream.clips_done(), 0, "a stopped push counts no clip");
}
