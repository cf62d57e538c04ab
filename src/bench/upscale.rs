//! The steps of the upscale pipeline's `compute` stage timed one by one on the clip's own frames, next
//! to the bare model on the same frames: the frames' bytes to the device, bytes → floats, the (tiled)
//! model, floats → the output's bytes, those bytes back to the host. `vaebox bench upscale` prints these
//! after its end-to-end runs, per dtype and chunk length, on the CPU or a GPU (`--device cuda`: each step
//! is waited for before its clock stops); its last table, our model against the ncnn engine, is
//! `upscale_engines`.
use std::path::Path;

use anyhow::Context;
use tch::{Device, Kind, Tensor};

use super::clip::read_chunks;
use super::timing::seconds;
use crate::device::{cuda, HeapReuse};
use crate::executor::frame_workers::FrameWorkers;
use crate::executor::frames;
use crate::executor::tiled::upscale::upscale_tiled;
use crate::executor::ExecutorConfig;
use crate::media::SampleDepth;
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
    pub device: Device,
}

/// Seconds per frame of each step, best of the passes over the sample.
#[derive(Debug, Clone, Copy)]
pub struct StepTimes {
    /// The chunk's bytes onto the device (on the CPU: into a tensor).
    pub upload: f64,
    /// Bytes → `[n, 3, H, W]` floats, on the device.
    pub to_float: f64,
    /// The model through the pipeline's tiling (one tile when the frame fits `upscale_tile`).
    pub model_tiled: f64,
    /// Floats → the output's 8-bit samples, on the device.
    pub to_samples: f64,
    /// The samples back to the host.
    pub download: f64,
    /// The model's own `upscale` on the whole chunk, nothing around it.
    pub bare_model: f64,
    /// The bare model with the chunk's frames split between worker threads of one intra-op thread each
    /// (the CPU only: a GPU runs one call at a time).
    pub bare_on_workers: Option<f64>,
}

impl StepTimes {
    pub fn compute(&self) -> f64 {
        self.upload + self.to_float + self.model_tiled + self.to_samples + self.download
    }

    /// Nothing yet: the sums a pass starts from.
    const NONE: StepTimes = StepTimes { upload: 0.0, to_float: 0.0, model_tiled: 0.0, to_samples: 0.0, download: 0.0, bare_model: 0.0, bare_on_workers: None };

    fn min(self, other: StepTimes) -> StepTimes {
        StepTimes {
            upload: self.upload.min(other.upload),
            to_float: self.to_float.min(other.to_float),
            model_tiled: self.model_tiled.min(other.model_tiled),
            to_samples: self.to_samples.min(other.to_samples),
            download: self.download.min(other.download),
            bare_model: self.bare_model.min(other.bare_model),
            bare_on_workers: self.bare_on_workers.zip(other.bare_on_workers).map(|(a, b)| a.min(b)),
        }
    }

    fn per_frame(self, frames: usize) -> StepTimes {
        let f = |s: f64| s / frames as f64;
        StepTimes {
            upload: f(self.upload),
            to_float: f(self.to_float),
            model_tiled: f(self.model_tiled),
            to_samples: f(self.to_samples),
            download: f(self.download),
            bare_model: f(self.bare_model),
            bare_on_workers: self.bare_on_workers.map(f),
        }
    }
}

pub fn measure(request: &StepRequest) -> anyhow::Result<StepTimes> {
    let entry = registry::find(&request.config.models_dir, request.model).with_context(|| format!("no model {}", request.model))?;
    let device = request.device;
    // As the executor loads it (executor/models.rs): through its family's loader.
    let family = registry::upscaler_family(entry.family).with_context(|| format!("{} is not an upscaler", entry.name))?;
    let model = (family.load)(&entry.files, &UpscalerLoadOptions { device, kind: request.kind })?;
    let chunks = read_chunks(request.config, request.input, request.chunk_frames, SAMPLE_FRAMES)?;
    let frames: usize = chunks.iter().map(|c| c.count).sum();
    let tiling = SpatialTiling { tile: request.config.upscale_tile, overlap: model.receptive_radius().min(32), blend: true };
    let _heap = HeapReuse::for_call();
    let _guard = tch::no_grad_guard();
    let workers = (device == Device::Cpu).then(|| FrameWorkers { workers: tch::get_num_threads().max(1) as usize });
    // Each step's clock stops when the device has done it, not when its launch returned.
    let timed = |run: &mut dyn FnMut()| {
        seconds(|| {
            run();
            cuda::synchronize(device);
        })
    };
    let mut best: Option<StepTimes> = None;
    // The first pass warms kernels and the heap (and cuDNN's choices); the best of the next two counts.
    for pass in 0..3 {
        let mut sums = StepTimes { bare_on_workers: workers.as_ref().map(|_| 0.0), ..StepTimes::NONE };
        for chunk in &chunks {
            let (mut bytes, mut input, mut output, mut samples) = (Tensor::new(), Tensor::new(), Tensor::new(), Tensor::new());
            sums.upload += timed(&mut || bytes = frames::upload(chunk, device));
            sums.to_float += timed(&mut || input = frames::samples_to_float(&bytes));
            sums.model_tiled += timed(&mut || output = upscale_tiled(model.as_ref(), &input, request.scale, &tiling).expect("the model runs"));
            sums.to_samples += timed(&mut || samples = frames::to_samples(&output, SampleDepth::Eight));
            let mut host = vec![0u8; samples.numel()];
            sums.download += timed(&mut || frames::download_into(&samples, SampleDepth::Eight, &mut host).expect("the samples come back"));
            sums.bare_model += timed(&mut || drop(model.upscale(&input, request.scale).expect("the model runs")));
            if let (Some(workers), Some(sum)) = (&workers, sums.bare_on_workers.as_mut()) {
                *sum += timed(&mut || drop(workers.run(model.as_ref(), &input, |m, x| m.upscale(x, request.scale)).expect("the model runs")));
            }
        }
        if pass > 0 {
            best = Some(best.map_or(sums, |best| best.min(sums)));
        }
    }
    Ok(best.expect("two passes count").per_frame(frames))
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
