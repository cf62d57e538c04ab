//! `restore` with a FlashVSR model: frames stream from ffmpeg, each upscaled ×4 as the original does
//! (Pillow's bicubic on bytes), fitted to 128-multiples (padded by default, so the whole picture comes back;
//! or the original's centre crop), and fed to the model's streaming run a DiT step at a time; each step's
//! frames are decoded, colour-fixed, converted to bytes by truncation (the original's) and written. Only the
//! LQ frames the next steps read are held, so memory is flat in the clip's length. Every input frame comes
//! back: the end is padded with copies of the last frame (`FramePlan::keeping_every_frame`).
pub mod geometry;
pub mod settings;

use std::time::Instant;

use tch::{Device, Kind, Tensor};

use super::context::{Executor, JobHooks, JobSpec};
use super::error::ExecError;
use super::frames;
use super::media_io::{finish_output, input_media, read_frames, write_output, OutputVideo};
use super::stage_clock::StageClock;
use crate::jobs::{JobOutcome, Progress, Timings};
use crate::media::{RgbFrames, SampleDepth};
use crate::models::flashvsr::frames::FramePlan;
use crate::models::flashvsr::pipeline::{Decoder, FlashVsrParts};
use crate::models::flashvsr::resize::resize_rgb8;
use crate::models::flashvsr::schedule::Step;
use crate::models::flashvsr::{to_u8_thwc, LqProjLoadOptions, LqProjection};
use crate::models::taehv::{TcDecoder, TcDecoderLoadOptions};
use crate::models::wan_dit::{StreamSettings, WanDit, WanDitLoadOptions};
use geometry::FlashVsrGeometry;
use settings::{flashvsr_files, FlashVsrDecoder, FlashVsrSettings};

/// Whether `model` is a FlashVSR model of this box (its `restore` runs here, not SeedVR2's).
pub fn is_flashvsr(models_dir: &std::path::Path, model: &str) -> bool {
    crate::models::flashvsr::folder::folders(models_dir).iter().any(|f| f.name == model)
}

pub(super) fn run(exec: &mut Executor, job: &JobSpec, hooks: &JobHooks, timings: &mut Timings) -> Result<JobOutcome, ExecError> {
    let restore = job.params.restore.as_ref();
    // The queue filled in the restore default scale; the client's own was checked before queueing.
    let settings = FlashVsrSettings::resolve(None, restore).map_err(ExecError::Invalid)?;
    let vae = restore.and_then(|p| p.vae.as_deref());
    let (folder, decoder) = match flashvsr_files(&exec.config.models_dir, &job.model, vae) {
        Some(found) => found.map_err(|(_, why)| ExecError::Invalid(why))?,
        None => return Err(ExecError::Invalid(format!("{} is not a FlashVSR model on this box", job.model))),
    };
    let info = input_media(exec, job, timings)?;
    let geometry = FlashVsrGeometry::new(info.height as i64, info.width as i64, settings.fit);
    let plan = FramePlan::keeping_every_frame(info.frames);
    let (device, kind) = (exec.device, exec.resolve_kind(job, timings));
    let load_started = Instant::now();
    let dit = WanDit::load(&folder.dit(), &WanDitLoadOptions { device, kind })?;
    let lq = LqProjection::load(&folder.lq_proj(), &LqProjLoadOptions { device, kind, version: folder.version })?;
    let context = crate::models::formats::torch_file::read_tensor(&folder.prompt())?.to_device(device).to_kind(kind);
    let tiny = match &decoder {
        FlashVsrDecoder::Tiny(path) => Some(TcDecoder::load(path, &TcDecoderLoadOptions { device, kind })?),
        FlashVsrDecoder::Full(_) => None,
    };
    let full = match &decoder {
        FlashVsrDecoder::Full(entry) => Some(exec.models.vae(entry, device, kind)?.0),
        FlashVsrDecoder::Tiny(_) => None,
    };
    timings.load_model = Some(load_started.elapsed().as_secs_f64());
    let parts = FlashVsrParts {
        dit: &dit,
        lq: &lq,
        decoder: match (&tiny, &full) {
            (Some(model), _) => Decoder::Tiny { model, parallel: true },
            (None, Some(vae)) => Decoder::Full(vae),
            (None, None) => unreachable!("one decoder is loaded"),
        },
    };
    let [height, width] = geometry.model_size();
    // The original draws the whole run's noise at once from its seed (so every step's slice depends on
    // the run's length): [1, 16, latent frames, H/8, W/8], on the CPU in f32.
    tch::manual_seed(settings.seed);
    let noise = Tensor::randn([1, 16, plan.latent_frames() as i64, height / 8, width / 8], (Kind::Float, Device::Cpu));
    tch::no_grad(|| {
        let mut run = parts.start(&context, StreamSettings::official([height, width]))?;
        if !settings.colour_fix {
            run = run.without_colour_fix();
        }
        run.set_stop(hooks.stop_flag());
        let mut reader = read_frames(exec, job, &info, exec.config.chunk_frames)?;
        let video = OutputVideo::like(&info, geometry.out_w as u32, geometry.out_h as u32);
        let segments = exec.config.data_dir.join("flashvsr").join(job.id.to_string());
        let mut writer = write_output(exec, job, &info, video, &segments, Default::default())?;
        let mut window = LqWindow::default();
        let (mut clock, mut compute, mut done) = (StageClock::default(), 0.0, 0u64);
        let started = Instant::now();
        for index in 0..plan.steps() as i64 {
            hooks.between_chunks()?;
            let step = Step::new(index);
            let needed = step.lq_clips.last().map_or(0, |c| c.end).max(step.frames.end);
            while window.end() < needed {
                let waited = Instant::now();
                let chunk = if window.input_ended { None } else { reader.next_chunk()? };
                clock.read += waited.elapsed().as_secs_f64();
                match chunk {
                    Some(chunk) => window.push_chunk(&chunk, &geometry, device)?,
                    None => window.repeat_last()?,
                }
            }
            // Step s ≥ 1 reads from frame 8s + 13 on (its frames), step 0 from frame 0.
            window.drop_before(step.frames.start.min(step.lq_clips[0].start));
            let computing = Instant::now();
            let latents = step.latents.clone();
            let slice = noise.narrow(2, latents.start, latents.end - latents.start).to_device(device).to_kind(kind);
            let out = run.step_from(&window.clip()?, window.first, &slice)?;
            let bytes = to_u8_thwc(&geometry.cut_back(&out)?)?;
            compute += computing.elapsed().as_secs_f64();
            // The frames past the input's own are the padding's: not written.
            let keep = (plan.output as i64 - step.frames.start).clamp(0, bytes.size()[0]);
            if keep > 0 {
                let waited = Instant::now();
                writer.write(rgb_frames(&bytes.narrow(0, 0, keep), writer.depth())?)?;
                clock.write += waited.elapsed().as_secs_f64();
                done += keep as u64;
            }
            let fraction = (index + 1) as f64 / plan.steps() as f64;
            let progress = Progress::frames(done, plan.output, started.elapsed().as_secs_f64()).with_fraction(fraction, started.elapsed().as_secs_f64());
            hooks.progress.send_replace(progress.at(format!("step {}/{}", index + 1, plan.steps())));
        }
        let flushed = Instant::now();
        let output_media = finish_output(exec, job, writer)?;
        clock.write += flushed.elapsed().as_secs_f64();
        let _ = std::fs::remove_dir_all(&segments);
        timings.read = Some(clock.read);
        timings.write = Some(clock.write);
        timings.compute = Some(compute);
        timings.fps = Some(done as f64 / started.elapsed().as_secs_f64().max(1e-9));
        Ok(JobOutcome {
            output_name: job.output_path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
            output_path: job.output_path.clone(),
            output_bytes: std::fs::metadata(&job.output_path).map(|m| m.len()).unwrap_or(0),
            output_media,
            timings: timings.clone(),
            plan: None,
            metrics: None,
        })
    })
}

/// Bytes `[n, H, W, 3]` as the writer's samples (16-bit ones hold the same values, ×257).
fn rgb_frames(bytes: &Tensor, depth: SampleDepth) -> Result<RgbFrames, ExecError> {
    let frames_01 = bytes.to_kind(Kind::Float).permute([0, 3, 1, 2]) / 255.0;
    Ok(frames::to_rgb(&frames_01, depth)?)
}

/// The prepared LQ frames the coming steps read (`[3, H, W]` each, in [-1, 1]) and the index of the first.
#[derive(Default)]
struct LqWindow {
    frames: Vec<Tensor>,
    first: i64,
    input_ended: bool,
}

impl LqWindow {
    fn end(&self) -> i64 {
        self.first + self.frames.len() as i64
    }

    fn push_chunk(&mut self, chunk: &RgbFrames, geometry: &FlashVsrGeometry, device: Device) -> Result<(), ExecError> {
        let bytes = frames::upload(chunk, Device::Cpu);
        let bytes = match chunk.depth {
            SampleDepth::Eight => bytes,
            // Pillow resizes 8-bit frames: a deeper input is rounded to 8 bits first.
            SampleDepth::Sixteen => (frames::to_tensor(chunk, Device::Cpu) * 255.0).round().clamp(0.0, 255.0).to_kind(Kind::Uint8),
        };
        let (h, w) = (chunk.height as usize, chunk.width as usize);
        for i in 0..chunk.count as i64 {
            let frame = Vec::<u8>::try_from(bytes.get(i).flatten(0, -1)).map_err(|e| ExecError::Invalid(e.to_string()))?;
            let upscaled = resize_rgb8(&frame, h, w, 4 * h, 4 * w);
            let upscaled = Tensor::from_slice(&upscaled).view([4 * h as i64, 4 * w as i64, 3]);
            self.frames.push(geometry.fit(&upscaled)?.to_device(device));
        }
        if chunk.count == 0 {
            self.input_ended = true;
        }
        Ok(())
    }

    /// The input has ended: its last frame again (the original pads the clip with copies of it).
    fn repeat_last(&mut self) -> Result<(), ExecError> {
        self.input_ended = true;
        let last = self.frames.last().ok_or_else(|| ExecError::Invalid("the input has no frames".into()))?;
        self.frames.push(last.shallow_clone());
        Ok(())
    }

    fn drop_before(&mut self, index: i64) {
        let drop = (index - self.first).clamp(0, self.frames.len() as i64);
        self.frames.drain(..drop as usize);
        self.first += drop;
    }

    /// `[1, 3, n, H, W]`.
    fn clip(&self) -> Result<Tensor, ExecError> {
        Ok(Tensor::f_stack(&self.frames, 1)?.f_unsqueeze(0)?)
    }
}
