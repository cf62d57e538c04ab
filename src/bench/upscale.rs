//! The steps of the upscale pipeline's `compute` stage timed one by one on the clip's own frames, next
//! to the bare model on the same frames: u8 frames → float tensor, the (tiled) model, float → u8 frames.
//! `vaebox bench upscale` prints these after its end-to-end runs, per dtype and chunk length; its last
//! table, our model against the ncnn engine, is `upscale_engines`.
use std::path::Path;

use anyhow::Context;
use tch::{Device, Kind, Tensor};

use super::clip::read_chunks;
use super::timing::seconds;
use crate::device::HeapReuse;
use crate::executor::frame_workers::FrameWorkers;
use crate::executor::frames;
use crate::executor::tiled::upscale::upscale_tiled;
use crate::executor::ExecutorConfig;
use crate::models::family::upscaler::UpscalerLoadOptions;
use crate::models::registry;
use crate::tiling::spatial::SpatialTiling;

/// Frames read from the clip for the step timings: the pipeline's own frames (the test clip has 120).
const SAMPLE_FRAMES: usize = 120;

pub struct StepRequest<'a> {
    pub config: &'a ExecutorConfig,
    pub input: &'a Path,
    pub model: &'a str,
    pub kind: Kind,
    pub scale: i64,
    pub chunk_frames: usize,
}

/// Seconds per frame of each step, best of the passes over the sample.
#[derive(Debug, Clone, Copy)]
pub struct StepTimes {
    pub to_tensor: f64,
    /// The model through the pipeline's tiling (one tile when the frame fits `upscale_tile`).
    pub model_tiled: f64,
    /// The model's own `upscale` on the whole chunk, nothing around it.
    pub bare_model: f64,
    /// The bare model with the chunk's frames split between worker threads of one intra-op thread each.
    pub bare_on_workers: f64,
    pub to_rgb: f64,
}

impl StepTimes {
    pub fn compute(&self) -> f64 {
        self.to_tensor + self.model_tiled + self.to_rgb
    }
}

pub fn measure(request: &StepRequest) -> anyhow::Result<StepTimes> {
    let entry = registry::find(&request.config.models_dir, request.model).with_context(|| format!("no model {}", request.model))?;
    let device = Device::Cpu;
    // As the executor loads it (executor/models.rs): through its family's loader.
    let family = registry::upscaler_family(entry.family).with_context(|| format!("{} is not an upscaler", entry.name))?;
    let model = (family.load)(&entry.files, &UpscalerLoadOptions { device, kind: request.kind })?;
    let chunks = read_chunks(request.config, request.input, request.chunk_frames, SAMPLE_FRAMES)?;
    let frames: usize = chunks.iter().map(|c| c.count).sum();
    let tiling = SpatialTiling { tile: request.config.upscale_tile, overlap: model.receptive_radius().min(32), blend: true };
    let _heap = HeapReuse::for_call();
    let _guard = tch::no_grad_guard();
    let workers = FrameWorkers { workers: tch::get_num_threads().max(1) as usize };
    let mut best = StepTimes { to_tensor: f64::MAX, model_tiled: f64::MAX, bare_model: f64::MAX, bare_on_workers: f64::MAX, to_rgb: f64::MAX };
    // The first pass warms kernels and the heap; the best of the next two counts.
    for pass in 0..3 {
        let mut pass_times = StepTimes { to_tensor: 0.0, model_tiled: 0.0, bare_model: 0.0, bare_on_workers: 0.0, to_rgb: 0.0 };
        for chunk in &chunks {
            let mut input = Tensor::new();
            pass_times.to_tensor += seconds(|| input = frames::to_tensor(chunk, device));
            let mut output = Tensor::new();
            pass_times.model_tiled += seconds(|| output = upscale_tiled(model.as_ref(), &input, request.scale, &tiling).expect("the model runs"));
            pass_times.bare_model += seconds(|| drop(model.upscale(&input, request.scale).expect("the model runs")));
            pass_times.bare_on_workers += seconds(|| drop(workers.run(model.as_ref(), &input, |m, x| m.upscale(x, request.scale)).expect("the model runs")));
            pass_times.to_rgb += seconds(|| drop(frames::to_rgb(&output, crate::media::SampleDepth::Eight)));
        }
        if pass > 0 {
            best.to_tensor = best.to_tensor.min(pass_times.to_tensor);
            best.model_tiled = best.model_tiled.min(pass_times.model_tiled);
            best.bare_model = best.bare_model.min(pass_times.bare_model);
            best.bare_on_workers = best.bare_on_workers.min(pass_times.bare_on_workers);
            best.to_rgb = best.to_rgb.min(pass_times.to_rgb);
        }
    }
    let per_frame = |s: f64| s / frames as f64;
    Ok(StepTimes { to_tensor: per_frame(best.to_tensor), model_tiled: per_frame(best.model_tiled), bare_model: per_frame(best.bare_model), bare_on_workers: per_frame(best.bare_on_workers), to_rgb: per_frame(best.to_rgb) })
}

/// CPU seconds (user + system) of this process's children that have ended and been reaped: the
/// ffmpeg processes of the jobs run so far.
pub fn ended_children_cpu_seconds() -> f64 {
    // SAFETY: getrusage fills the struct it is given and reads nothing else.
    let usage = unsafe {
        let mut usage = std::mem::zeroed::<libc::rusage>();
        libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage);
        usage
    };
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    seconds(usage.ru_utime) + seconds(usage.ru_stime)
}
