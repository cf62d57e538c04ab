//! The VAE pipelines: video → latent file (`vae_encode`), latent file → video (`vae_decode`), and
//! video → latent → video with PSNR/SSIM (`vae_reconstruct`). All stream: frames go through the
//! model's causal cache chunk by chunk, so memory does not grow with the clip's length.
use std::collections::VecDeque;
use std::time::Instant;

use serde_json::json;
use tch::{Device, Kind, Tensor};

use super::quality::QualityMeter;
use super::{frames, ExecError, Executor, JobHooks, JobSpec};
use crate::jobs::{JobOutcome, Op, OutputFormat, Progress, Timings};
use crate::media::latent::{read_latent, write_latent, LatentError, LatentMeta};
use crate::media::safetensors::{Dtype, TensorFileWriter};
use crate::media::{self, FrameReader, FrameWriter, MediaInfo, ReadConfig, RgbFrames, WriteConfig};
use crate::models::registry::{self, ModelEntry};
use crate::models::vae::VideoVae;

const QUEUE_CHUNKS: usize = 2;
/// Wan and SeedVR2 are trained on 16 fps clips; a latent without an fps decodes at that rate.
const DEFAULT_LATENT_FPS: &str = "16/1";

/// Seconds this thread spent waiting on each stage.
#[derive(Default)]
struct StageClock {
    read: f64,
    compute: f64,
    write: f64,
}

impl StageClock {
    fn time<T>(slot: &mut f64, work: impl FnOnce() -> T) -> T {
        let started = Instant::now();
        let out = work();
        *slot += started.elapsed().as_secs_f64();
        out
    }

    fn record(&self, timings: &mut Timings, frames: u64, since: Instant) {
        timings.read = Some(self.read);
        timings.compute = Some(self.compute);
        timings.write = Some(self.write);
        timings.fps = Some(frames as f64 / since.elapsed().as_secs_f64().max(1e-9));
    }
}

/// What every VAE pipeline needs from the executor for one job.
struct VaeJob<'a> {
    exec: &'a Executor,
    job: &'a JobSpec,
    hooks: &'a JobHooks,
    entry: ModelEntry,
    vae: &'a VideoVae,
    chunk_frames: usize,
}

pub(super) fn run(exec: &mut Executor, job: &JobSpec, hooks: &JobHooks, timings: &mut Timings) -> Result<JobOutcome, ExecError> {
    let entry = registry::find(&exec.config.models_dir, &job.model)
        .filter(|e| e.family.is_vae())
        .ok_or_else(|| ExecError::Invalid(format!("{} is not a VAE on this box", job.model)))?;
    let kind = exec.resolve_kind(job, timings);
    let load_started = Instant::now();
    let (vae, _) = exec.models.vae(&entry, exec.device, kind)?;
    timings.load_model = Some(load_started.elapsed().as_secs_f64());
    let temporal = vae.temporal_factor() as usize;
    // Whole groups of the temporal factor, so each push completes latent frames.
    let chunk_frames = exec.config.chunk_frames.div_ceil(temporal).max(1) * temporal;
    let ctx = VaeJob { exec, job, hooks, entry, vae: &vae, chunk_frames };
    tch::no_grad(|| match job.op {
        Op::VaeEncode => encode(&ctx, timings),
        Op::VaeDecode => decode(&ctx, timings),
        Op::VaeReconstruct => reconstruct(&ctx, timings),
        Op::Upscale => Err(ExecError::Invalid("upscale is not a VAE op".into())),
    })
}

impl VaeJob<'_> {
    fn input_media(&self, timings: &mut Timings) -> Result<MediaInfo, ExecError> {
        if let Some(info) = &self.job.input_media {
            return Ok(info.clone());
        }
        let started = Instant::now();
        let info = media::probe(&self.exec.config.tools, &self.job.input_path, &self.exec.config.limits)?;
        timings.probe = Some(started.elapsed().as_secs_f64());
        Ok(info)
    }

    fn reader(&self, info: &MediaInfo) -> Result<FrameReader, ExecError> {
        Ok(FrameReader::spawn(
            &self.exec.config.tools,
            ReadConfig {
                input: self.job.input_path.clone(),
                width: info.width,
                height: info.height,
                chunk_frames: self.chunk_frames,
                queue_chunks: QUEUE_CHUNKS,
            },
        )?)
    }

    fn writer(&self, width: u32, height: u32, fps_rational: &str, audio_from: Option<std::path::PathBuf>) -> Result<FrameWriter, ExecError> {
        Ok(FrameWriter::spawn(
            &self.exec.config.tools,
            WriteConfig {
                output: self.job.output_path.clone(),
                width,
                height,
                fps_rational: fps_rational.into(),
                audio_from,
                crf: self.exec.config.output_crf,
                preset: self.exec.config.output_preset.clone(),
                queue_chunks: QUEUE_CHUNKS,
            },
        )?)
    }

    /// Frames in [0, 1] `[n, 3, H, W]` → the model's input `[1, 3, n, H', W']` in [-1, 1].
    fn to_model_input(&self, pixels: &Tensor) -> Tensor {
        self.pad_to_factor(&(pixels * 2.0 - 1.0).permute([1, 0, 2, 3]).unsqueeze(0))
    }

    /// Pads `[1, 3, n, H, W]` by repeating the last row/column up to a multiple of the spatial factor;
    /// decoding crops back to the recorded size.
    fn pad_to_factor(&self, video: &Tensor) -> Tensor {
        let factor = self.vae.spatial_factor();
        let (_, _, _, h, w) = video.size5().expect("[1, 3, n, H, W]");
        let (pad_h, pad_w) = ((factor - h % factor) % factor, (factor - w % factor) % factor);
        if pad_h + pad_w > 0 {
            video.pad([0, pad_w, 0, pad_h, 0, 0], "replicate", None)
        } else {
            video.shallow_clone()
        }
    }

    /// The model's output `[1, 3, n, H', W']` → `[n, 3, height, width]`, still in [-1, 1].
    fn crop_output(decoded: &Tensor, height: i64, width: i64) -> Tensor {
        decoded.squeeze_dim(0).permute([1, 0, 2, 3]).narrow(2, 0, height).narrow(3, 0, width).to_kind(Kind::Float)
    }

    fn to_unit_range(frames: &Tensor) -> Tensor {
        ((frames + 1.0) / 2.0).clamp(0.0, 1.0)
    }

    fn progress(&self, done: u64, total: u64, since: Instant) {
        self.hooks.progress.send_replace(Progress::frames(done, total.max(done), since.elapsed().as_secs_f64()));
    }

    fn frames_needed(&self, frames: i64) -> i64 {
        let t = self.vae.temporal_factor();
        1 + (frames - 1 + t - 1) / t * t
    }

    fn outcome(&self, output_media: Option<MediaInfo>, timings: &Timings, plan: serde_json::Value, metrics: Option<serde_json::Value>) -> JobOutcome {
        let path = &self.job.output_path;
        JobOutcome {
            output_name: path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
            output_path: path.clone(),
            output_bytes: std::fs::metadata(path).map(|m| m.len()).unwrap_or(0),
            output_media,
            timings: timings.clone(),
            plan: Some(plan),
            metrics,
        }
    }

    fn plan(&self, extra: serde_json::Value) -> serde_json::Value {
        let mut plan = json!({
            "chunk_frames": self.chunk_frames,
            "temporal_chunking": "exact (causal cache)",
            "spatial_tiling": "none",
            "spatial_factor": self.vae.spatial_factor(),
            "temporal_factor": self.vae.temporal_factor(),
        });
        if let (Some(plan), Some(extra)) = (plan.as_object_mut(), extra.as_object()) {
            plan.extend(extra.clone());
        }
        plan
    }
}

/// Where `vae_encode` gets its frames: a video through ffmpeg, or a raw tensor sent to `/v1/encode`.
enum EncodeSource {
    Video { reader: FrameReader, info: MediaInfo },
    Tensor { video: Tensor, next: i64 },
}

impl EncodeSource {
    fn open(ctx: &VaeJob, timings: &mut Timings) -> Result<EncodeSource, ExecError> {
        if ctx.job.input_path.extension().is_some_and(|e| e == "safetensors") {
            let video = read_sample_tensor(&ctx.job.input_path)?.to_device(ctx.exec.device);
            return Ok(EncodeSource::Tensor { video, next: 0 });
        }
        let info = ctx.input_media(timings)?;
        Ok(EncodeSource::Video { reader: ctx.reader(&info)?, info })
    }

    /// The next chunk as model input `[1, 3, n, H', W']` in [-1, 1], and its frame count.
    fn next(&mut self, ctx: &VaeJob, clock: &mut StageClock) -> Result<Option<(Tensor, u64)>, ExecError> {
        match self {
            EncodeSource::Video { reader, .. } => {
                let Some(chunk) = StageClock::time(&mut clock.read, || reader.next_chunk())? else { return Ok(None) };
                Ok(Some((ctx.to_model_input(&frames::to_tensor(&chunk, ctx.exec.device)), chunk.count as u64)))
            }
            EncodeSource::Tensor { video, next } => {
                let total = video.size()[2];
                if *next >= total {
                    return Ok(None);
                }
                let n = (ctx.chunk_frames as i64).min(total - *next);
                let chunk = ctx.pad_to_factor(&video.narrow(2, *next, n));
                *next += n;
                Ok(Some((chunk, n as u64)))
            }
        }
    }

    fn total_frames(&self) -> u64 {
        match self {
            EncodeSource::Video { info, .. } => info.frames,
            EncodeSource::Tensor { video, .. } => video.size()[2] as u64,
        }
    }

    /// (width, height, fps) of the source, recorded with the latent.
    fn describe(&self) -> (u32, u32, Option<String>) {
        match self {
            EncodeSource::Video { info, .. } => (info.width, info.height, Some(info.fps_rational.clone())),
            EncodeSource::Tensor { video, .. } => {
                let size = video.size();
                (size[4] as u32, size[3] as u32, None)
            }
        }
    }
}

/// A pixel tensor sent to `/v1/encode`: `[1, 3, T, H, W]` in [-1, 1], any float dtype.
fn read_sample_tensor(path: &std::path::Path) -> Result<Tensor, ExecError> {
    let tensors = Tensor::read_safetensors(path).map_err(|e| ExecError::Invalid(format!("cannot read the input tensor: {e}")))?;
    let (_, video) = tensors.into_iter().next().ok_or_else(|| ExecError::Invalid("the input has no tensor".into()))?;
    match video.size().as_slice() {
        [1, 3, t, h, w] if *t > 0 && *h > 0 && *w > 0 => Ok(video.to_kind(Kind::Float)),
        other => Err(ExecError::Invalid(format!("expected pixels [1, 3, T, H, W], got {other:?}"))),
    }
}

fn encode(ctx: &VaeJob, timings: &mut Timings) -> Result<JobOutcome, ExecError> {
    let mut source = EncodeSource::open(ctx, timings)?;
    let mut encoder = ctx.vae.encoder();
    let mut clock = StageClock::default();
    let started = Instant::now();
    let (mut latents, mut last_frame, mut done) = (Vec::new(), None::<Tensor>, 0u64);
    loop {
        ctx.hooks.check_cancelled()?;
        let Some((x, count)) = source.next(ctx, &mut clock)? else { break };
        StageClock::time(&mut clock.compute, || -> Result<(), ExecError> {
            last_frame = Some(x.narrow(2, x.size()[2] - 1, 1));
            if let Some(z) = encoder.push(&x)? {
                latents.push(z.to_device(Device::Cpu).to_kind(Kind::Float));
            }
            Ok(())
        })?;
        done += count;
        ctx.progress(done, source.total_frames(), started);
    }
    if done == 0 {
        return Err(ExecError::Invalid("the input has no frames".into()));
    }
    // The encoder takes 1 + 4k frames; repeat the last frame up to that, decode trims it back.
    let missing = ctx.frames_needed(done as i64) - done as i64;
    if let (Some(last), true) = (last_frame, missing > 0) {
        StageClock::time(&mut clock.compute, || -> Result<(), ExecError> {
            if let Some(z) = encoder.push(&last.repeat([1, 1, missing, 1, 1]))? {
                latents.push(z.to_device(Device::Cpu).to_kind(Kind::Float));
            }
            Ok(())
        })?;
    }
    let raw = Tensor::cat(&latents, 2);
    let normalized = ctx.job.params.normalize.unwrap_or(false);
    let mut latent = if normalized { ctx.vae.normalize(&raw)? } else { raw };
    let params = &ctx.job.params;
    if let (Some(scaling), shift) = (params.latent_scaling, params.latent_shift.unwrap_or(0.0)) {
        latent = (latent - shift) * scaling;
    }
    let (width, height, fps_rational) = source.describe();
    let meta = LatentMeta {
        model: Some(ctx.entry.name.clone()),
        family: Some(ctx.entry.family.as_str().into()),
        normalized,
        fps_rational,
        source_frames: Some(done),
        width: Some(width),
        height: Some(height),
    };
    let shape = latent.size();
    StageClock::time(&mut clock.write, || write_latent(&ctx.job.output_path, &latent, &meta))
        .map_err(|e| ExecError::Latent(LatentError::Io(e)))?;
    clock.record(timings, done, started);
    let plan = ctx.plan(json!({ "latent_shape": shape, "padded_frames": missing.max(0), "normalized": normalized }));
    Ok(ctx.outcome(None, timings, plan, None))
}

/// Where decoded frames go: an MP4 through ffmpeg, or a float32 `sample` tensor for `/v1/decode`.
enum DecodeSink {
    Video(FrameWriter),
    Tensor { writer: TensorFileWriter, frames: u64, plane: u64 },
}

impl DecodeSink {
    fn open(ctx: &VaeJob, frames: u64, height: i64, width: i64, fps: &str) -> Result<DecodeSink, ExecError> {
        if ctx.job.params.output == Some(OutputFormat::Tensor) {
            let shape = [1, 3, frames as i64, height, width];
            let writer = TensorFileWriter::create(&ctx.job.output_path, "sample", Dtype::F32, &shape, &Default::default())
                .map_err(|e| ExecError::Latent(LatentError::Io(e)))?;
            return Ok(DecodeSink::Tensor { writer, frames, plane: (height * width) as u64 });
        }
        Ok(DecodeSink::Video(ctx.writer(width as u32, height as u32, fps, None)?))
    }

    /// `frames`: `[n, 3, h, w]` in [-1, 1], the `first`-th frame onwards.
    fn write(&mut self, frames: &Tensor, first: u64) -> Result<(), ExecError> {
        match self {
            DecodeSink::Video(writer) => Ok(writer.write(frames::to_rgb(&VaeJob::to_unit_range(frames)))?),
            DecodeSink::Tensor { writer, frames: total, plane } => {
                // The tensor is [1, 3, T, H, W]: each channel's frames are contiguous, so a chunk is 3 runs.
                for channel in 0..3 {
                    let values = frames.select(1, channel).contiguous().to_device(Device::Cpu);
                    let numel = values.numel();
                    let mut floats = vec![0f32; numel];
                    values.copy_data(&mut floats, numel);
                    let bytes: Vec<u8> = floats.iter().flat_map(|v| v.to_le_bytes()).collect();
                    let offset = ((channel as u64 * *total + first) * *plane) * 4;
                    writer.write_at(offset, &bytes).map_err(|e| ExecError::Latent(LatentError::Io(e)))?;
                }
                Ok(())
            }
        }
    }

    fn finish(self) -> Result<(), ExecError> {
        match self {
            DecodeSink::Video(writer) => Ok(writer.finish()?),
            DecodeSink::Tensor { writer, .. } => writer.finish().map_err(|e| ExecError::Latent(LatentError::Io(e))),
        }
    }
}

fn decode(ctx: &VaeJob, timings: &mut Timings) -> Result<JobOutcome, ExecError> {
    let mut clock = StageClock::default();
    let started = Instant::now();
    let file = StageClock::time(&mut clock.read, || read_latent(&ctx.job.input_path))?;
    check_latent_fits(ctx, &file.latent, &file.meta)?;
    let mut latent = if file.meta.normalized { ctx.vae.denormalize(&file.latent)? } else { file.latent.shallow_clone() };
    if let (Some(scaling), shift) = (ctx.job.params.latent_scaling, ctx.job.params.latent_shift.unwrap_or(0.0)) {
        latent = latent / scaling + shift;
    }
    let (_, _, latent_frames, latent_h, latent_w) = latent.size5().expect("checked rank");
    let factor = ctx.vae.spatial_factor();
    let full = (latent_h * factor, latent_w * factor);
    let height = file.meta.height.map(|h| (h as i64).min(full.0)).unwrap_or(full.0);
    let width = file.meta.width.map(|w| (w as i64).min(full.1)).unwrap_or(full.1);
    let produced = 1 + (latent_frames - 1) * ctx.vae.temporal_factor();
    let total = file.meta.source_frames.map(|n| (n as i64).min(produced)).unwrap_or(produced) as u64;
    let fps = file.meta.fps_rational.clone().unwrap_or_else(|| DEFAULT_LATENT_FPS.into());
    let mut sink = DecodeSink::open(ctx, total, height, width, &fps)?;
    let mut decoder = ctx.vae.decoder();
    let latents_per_push = (ctx.chunk_frames as i64 / ctx.vae.temporal_factor()).max(1);
    let mut done = 0u64;
    let mut start = 0;
    while start < latent_frames && done < total {
        ctx.hooks.check_cancelled()?;
        let count = latents_per_push.min(latent_frames - start);
        let slice = latent.narrow(2, start, count).to_device(ctx.exec.device);
        start += count;
        let frames = StageClock::time(&mut clock.compute, || -> Result<Tensor, ExecError> {
            let frames = VaeJob::crop_output(&decoder.push(&slice)?, height, width);
            let keep = (frames.size()[0] as u64).min(total - done) as i64;
            Ok(frames.narrow(0, 0, keep))
        })?;
        StageClock::time(&mut clock.write, || sink.write(&frames, done))?;
        done += frames.size()[0] as u64;
        ctx.progress(done, total, started);
    }
    ctx.hooks.check_cancelled()?;
    let is_video = matches!(sink, DecodeSink::Video(_));
    StageClock::time(&mut clock.write, || sink.finish())?;
    let output_media = is_video
        .then(|| media::probe(&ctx.exec.config.tools, &ctx.job.output_path, &media::MediaLimits::unlimited()).ok())
        .flatten();
    clock.record(timings, done, started);
    let plan = ctx.plan(json!({ "latent_shape": latent.size(), "latent_frames_per_push": latents_per_push, "frames": done }));
    Ok(ctx.outcome(output_media, timings, plan, None))
}

fn check_latent_fits(ctx: &VaeJob, latent: &Tensor, meta: &LatentMeta) -> Result<(), ExecError> {
    let channels = latent.size()[1];
    if channels != ctx.vae.latent_channels() {
        return Err(LatentError::ChannelMismatch { model: ctx.entry.name.clone(), got: channels, expected: ctx.vae.latent_channels() }.into());
    }
    if let Some(family) = &meta.family {
        if family != ctx.entry.family.as_str() {
            return Err(LatentError::ModelMismatch {
                made_by: meta.model.clone().unwrap_or_default(),
                family: family.clone(),
                model: ctx.entry.name.clone(),
                model_family: ctx.entry.family.as_str().into(),
            }
            .into());
        }
    }
    Ok(())
}

fn reconstruct(ctx: &VaeJob, timings: &mut Timings) -> Result<JobOutcome, ExecError> {
    let info = ctx.input_media(timings)?;
    let device = ctx.exec.device;
    let (height, width) = (info.height as i64, info.width as i64);
    let mut reader = ctx.reader(&info)?;
    let mut writer = ctx.writer(info.width, info.height, &info.fps_rational, info.has_audio.then(|| ctx.job.input_path.clone()))?;
    let mut encoder = ctx.vae.encoder();
    let mut decoder = ctx.vae.decoder();
    let mut quality = QualityMeter::default();
    let mut clock = StageClock::default();
    let started = Instant::now();
    // Source frames wait here until their reconstruction comes out (at most a chunk plus one latent's worth).
    let mut waiting: VecDeque<Tensor> = VecDeque::new();
    let (mut read_frames, mut done, mut last_frame) = (0u64, 0u64, None::<Tensor>);
    let mut finished_input = false;
    while !finished_input || !waiting.is_empty() {
        ctx.hooks.check_cancelled()?;
        let x = match StageClock::time(&mut clock.read, || reader.next_chunk())? {
            Some(chunk) => {
                let pixels = frames::to_tensor(&chunk, device);
                for i in 0..pixels.size()[0] {
                    waiting.push_back(pixels.narrow(0, i, 1));
                }
                read_frames += chunk.count as u64;
                let x = ctx.to_model_input(&pixels);
                last_frame = Some(x.narrow(2, x.size()[2] - 1, 1));
                x
            }
            None if !finished_input => {
                finished_input = true;
                let missing = ctx.frames_needed(read_frames.max(1) as i64) - read_frames as i64;
                match (&last_frame, missing > 0) {
                    (Some(last), true) => last.repeat([1, 1, missing, 1, 1]),
                    _ if waiting.is_empty() => break,
                    _ => return Err(ExecError::Invalid("the encoder kept frames it could not complete".into())),
                }
            }
            None => break,
        };
        let out = StageClock::time(&mut clock.compute, || -> Result<Option<RgbFrames>, ExecError> {
            let Some(z) = encoder.push(&x)? else { return Ok(None) };
            let decoded = decoder.push(&z)?;
            let frames = VaeJob::to_unit_range(&VaeJob::crop_output(&decoded, height, width));
            let keep = (frames.size()[0] as usize).min(waiting.len()) as i64;
            let frames = frames.narrow(0, 0, keep);
            let sources: Vec<Tensor> = waiting.drain(..keep as usize).collect();
            quality.add(&Tensor::cat(&sources, 0), &frames);
            Ok(Some(frames::to_rgb(&frames)))
        })?;
        if let Some(out) = out {
            done += out.count as u64;
            StageClock::time(&mut clock.write, || writer.write(out))?;
            ctx.progress(done, info.frames, started);
        }
    }
    ctx.hooks.check_cancelled()?;
    StageClock::time(&mut clock.write, || writer.finish())?;
    let output_media = media::probe(&ctx.exec.config.tools, &ctx.job.output_path, &media::MediaLimits::unlimited()).ok();
    clock.record(timings, done, started);
    let metrics = json!({ "psnr_db": finite_or_null(quality.psnr_db()), "ssim": quality.ssim(), "frames_compared": quality.frames() });
    let plan = ctx.plan(json!({ "frames": done }));
    Ok(ctx.outcome(output_media, timings, plan, Some(metrics)))
}

/// JSON has no infinity; identical frames report a null PSNR.
fn finite_or_null(value: f64) -> serde_json::Value {
    if value.is_finite() {
        json!(value)
    } else {
        serde_json::Value::Null
    }
}
