//! The steps of the upscale pipeline's `compute` stage timed one by one on the clip's own frames, next
//! to the bare model on the same frames: u8 frames → float tensor, the (tiled) model, float → u8 frames.
//! `vaebox bench upscale` prints these after its end-to-end runs, per dtype and chunk length.
use std::path::Path;
use std::time::Instant;

use anyhow::Context;
use tch::{Device, Kind, Tensor};

use crate::device::HeapReuse;
use crate::executor::frames;
use crate::executor::tiled::upscale::upscale_tiled;
use crate::executor::ExecutorConfig;
use crate::media::{self, FrameReader, RgbFrames, ReadConfig};
use crate::models::realesrgan::{LoadOptions, RealEsrgan};
use crate::models::registry;
use crate::tiling::spatial::SpatialTiling;

/// Frames read from the clip for the step timings.
const SAMPLE_FRAMES: usize = 16;

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
    pub to_rgb: f64,
}

impl StepTimes {
    pub fn compute(&self) -> f64 {
        self.to_tensor + self.model_tiled + self.to_rgb
    }
}

fn read_chunks(request: &StepRequest) -> anyhow::Result<Vec<RgbFrames>> {
    let info = media::probe(&request.config.tools, request.input, &media::MediaLimits::unlimited())?;
    let read = ReadConfig { input: request.input.to_path_buf(), width: info.width, height: info.height, chunk_frames: request.chunk_frames, queue_chunks: 2 };
    let mut reader = FrameReader::spawn(&request.config.tools, read)?;
    let mut chunks = Vec::new();
    while chunks.len() * request.chunk_frames < SAMPLE_FRAMES {
        match reader.next_chunk()? {
            Some(chunk) => chunks.push(chunk),
            None => break,
        }
    }
    anyhow::ensure!(!chunks.is_empty(), "{}: no frames", request.input.display());
    Ok(chunks)
}

fn seconds(run: impl FnOnce()) -> f64 {
    let started = Instant::now();
    run();
    started.elapsed().as_secs_f64()
}

pub fn measure(request: &StepRequest) -> anyhow::Result<StepTimes> {
    let entry = registry::find(&request.config.models_dir, request.model).with_context(|| format!("no model {}", request.model))?;
    let device = Device::Cpu;
    // As the executor loads it (executor/models.rs).
    let model = RealEsrgan::load(&entry.files[0], &entry.files[1], &LoadOptions { device, kind: request.kind, channels_last: true })?;
    let chunks = read_chunks(request)?;
    let frames: usize = chunks.iter().map(|c| c.count).sum();
    let tiling = SpatialTiling { tile: request.config.upscale_tile, overlap: model.receptive_radius().min(32), blend: true };
    let _heap = HeapReuse::for_call();
    let _guard = tch::no_grad_guard();
    let mut best = StepTimes { to_tensor: f64::MAX, model_tiled: f64::MAX, bare_model: f64::MAX, to_rgb: f64::MAX };
    // The first pass warms kernels and the heap; the best of the next two counts.
    for pass in 0..3 {
        let mut pass_times = StepTimes { to_tensor: 0.0, model_tiled: 0.0, bare_model: 0.0, to_rgb: 0.0 };
        for chunk in &chunks {
            let mut input = Tensor::new();
            pass_times.to_tensor += seconds(|| input = frames::to_tensor(chunk, device));
            let mut output = Tensor::new();
            pass_times.model_tiled += seconds(|| output = upscale_tiled(&model, &input, request.scale, &tiling).expect("the model runs"));
            pass_times.bare_model += seconds(|| drop(model.upscale(&input, request.scale).expect("the model runs")));
            pass_times.to_rgb += seconds(|| drop(frames::to_rgb(&output)));
        }
        if pass > 0 {
            best.to_tensor = best.to_tensor.min(pass_times.to_tensor);
            best.model_tiled = best.model_tiled.min(pass_times.model_tiled);
            best.bare_model = best.bare_model.min(pass_times.bare_model);
            best.to_rgb = best.to_rgb.min(pass_times.to_rgb);
        }
    }
    let per_frame = |s: f64| s / frames as f64;
    Ok(StepTimes { to_tensor: per_frame(best.to_tensor), model_tiled: per_frame(best.model_tiled), bare_model: per_frame(best.bare_model), to_rgb: per_frame(best.to_rgb) })
}
