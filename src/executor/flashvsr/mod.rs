//! `restore` with a FlashVSR model: frames stream from ffmpeg, each upscaled ×4 as the original does
//! (Pillow's bicubic on bytes), fitted to 128-multiples (padded by default, so the whole picture comes back;
//! or the original's centre crop), and fed to the model's streaming run a DiT step at a time; each step's
//! frames are decoded, colour-fixed, converted to bytes by truncation (the original's) and written. Only the
//! LQ frames the next steps read are held, so memory is flat in the clip's length. Every input frame comes
//! back: the end is padded with copies of the last frame (`FramePlan::keeping_every_frame`). A checkpoint after
//! each finished segment holds every stream's state (the DiT's KV cache, the LQ projection's and the
//! decoder's causal caches): a stopped job goes on from its next step, equal to an uninterrupted run.
pub mod geometry;
mod memory;
pub mod settings;
mod tiled_run;
mod window;

use std::time::Instant;

use tch::{Device, Kind, Tensor};

use super::context::{Executor, JobHooks, JobSpec};
use super::error::ExecError;
use super::frames;
use super::media_io::{finish_output, input_media, read_frames, video_outcome, write_output, OutputVideo};
use super::resume::{Checkpoints, Mark};
use super::stage_clock::StageClock;
use crate::jobs::plan::{FlashVsrPlan, JobPlan, ResumedFrom};
use crate::jobs::{JobOutcome, Progress, Timings};
use crate::media::{RgbFrames, SampleDepth};
use crate::models::flashvsr::frames::FramePlan;
use crate::models::flashvsr::schedule::Step;
use crate::models::nn::causal_cache::SavedTensors;
use crate::models::restore::colorfix::ColorFix;
use crate::models::flashvsr::to_u8_thwc;
use geometry::FlashVsrGeometry;
use settings::{flashvsr_files, FlashVsrDecoder, FlashVsrSettings};
use tiled_run::TiledRun;
use window::LqWindow;

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
    let frame_plan = FramePlan::keeping_every_frame(info.frames);
    let (device, kind) = (exec.device, exec.resolve_kind(job, timings));
    let load_started = Instant::now();
    let vae_entry = match &decoder {
        FlashVsrDecoder::Tiny(_) => None,
        FlashVsrDecoder::Full(entry) => Some(entry),
    };
    let (models, _) = exec.models.flashvsr(&folder, vae_entry, device, kind)?;
    timings.load_model = Some(load_started.elapsed().as_secs_f64());
    let parts = models.parts();
    let [height, width] = geometry.model_size();
    let memory = memory::plan(models.dit.config(), kind.elt_size_in_bytes(), [height, width], exec.working_budget_mib(job));
    // The tiles decide the frames too. A still is written whole: it starts over.
    let resume_settings = serde_json::json!({ "kind": format!("{kind:?}"), "flashvsr": format!("{settings:?}"), "release": folder.version.as_str(), "tiles": memory.tiles });
    let mut checkpoints = Checkpoints::open(exec, job, hooks, resume_settings, info.fps, !info.still);
    // The original draws the whole run's noise at once from its seed (so every step's slice depends on
    // the run's length): [1, 16, latent frames, H/8, W/8], on the CPU in f32.
    tch::manual_seed(settings.seed);
    let noise = Tensor::randn([1, 16, frame_plan.latent_frames() as i64, height / 8, width / 8], (Kind::Float, Device::Cpu));
    tch::no_grad(|| {
        let stop = hooks.stop_flag();
        let mut run = TiledRun::start(&parts, &models.context, [height, width], memory.tiles.as_ref(), settings.colour_fix, &stop)?;
        let mut done = go_on_from_checkpoint(&mut checkpoints, &mut run, device)?;
        let resumed_at = run.next_step();
        let mut reader = read_frames(exec, job, &info, exec.config.chunk_frames)?;
        let video = OutputVideo::like(&info, geometry.out_w as u32, geometry.out_h as u32);
        let mut writer = write_output(exec, job, &info, video, &checkpoints.folder.dir, checkpoints.finished())?;
        let mut window = LqWindow::for_step(&resumed_at, geometry, device);
        let (mut clock, mut compute) = (StageClock::default(), 0.0);
        let started = Instant::now();
        let steps = frame_plan.steps() as i64;
        for index in resumed_at.index..steps {
            hooks.between_chunks()?;
            let step = Step::new(index);
            while window.end() < step.lq_reads().end {
                let waited = Instant::now();
                let chunk = if window.input_ended { None } else { reader.next_chunk()? };
                clock.read += waited.elapsed().as_secs_f64();
                match chunk {
                    Some(chunk) => window.push_chunk(&chunk, &stop)?,
                    None => window.repeat_last()?,
                }
            }
            window.keep_from(&step);
            let computing = Instant::now();
            let latents = step.latents.clone();
            let slice = noise.narrow(2, latents.start, latents.end - latents.start).to_device(device).to_kind(kind);
            let out = run.step(&window.clip()?, window.first(), &slice)?;
            let bytes = to_u8_thwc(&geometry.cut_back(&out)?)?;
            compute += computing.elapsed().as_secs_f64();
            // The frames past the input's own are the padding's: not written.
            let keep = (frame_plan.output as i64 - step.frames.start).clamp(0, bytes.size()[0]);
            if keep > 0 {
                let waited = Instant::now();
                writer.write(rgb_frames(&bytes.narrow(0, 0, keep), writer.depth())?)?;
                clock.write += waited.elapsed().as_secs_f64();
                done += keep as u64;
            }
            if index + 1 < steps && checkpoints.segment_full(writer.frames_in_segment().unwrap_or(0)) {
                let waited = Instant::now();
                let mut state = SavedTensors::new();
                run.save_state(&mut state);
                checkpoints.save(&mut writer, Mark::Vae { inputs: index + 1, state, row_split: None, fallbacks: &[] }, None)?;
                clock.write += waited.elapsed().as_secs_f64();
            }
            let elapsed = started.elapsed().as_secs_f64();
            let fraction = (index + 1 - resumed_at.index) as f64 / (steps - resumed_at.index) as f64;
            let progress = Progress::frames(done, frame_plan.output, elapsed).with_fraction(fraction, elapsed);
            hooks.progress.send_replace(progress.at(format!("step {}/{steps}", index + 1)));
        }
        hooks.between_chunks()?;
        let flushed = Instant::now();
        let output_media = finish_output(exec, job, writer)?;
        clock.write += flushed.elapsed().as_secs_f64();
        checkpoints.folder.remove();
        timings.read = Some(clock.read);
        timings.write = Some(clock.write);
        timings.compute = Some(compute);
        timings.fps = Some(done.saturating_sub(checkpoints.finished().frames) as f64 / started.elapsed().as_secs_f64().max(1e-9));
        let plan = FlashVsrPlan {
            flashvsr_release: folder.version.as_str().into(),
            decoder: match decoder {
                FlashVsrDecoder::Tiny(_) => "tiny".into(),
                FlashVsrDecoder::Full(_) => "full".into(),
            },
            vae: vae.map(str::to_string),
            model_weight_bytes: models.weight_bytes(),
            dit_weight_bytes: models.dit.weight_bytes(),
            attention: "block-sparse".into(),
            input_frames: frame_plan.input,
            frames: done,
            padded_frames: frame_plan.padded - frame_plan.input,
            steps: frame_plan.steps(),
            output: [geometry.out_h, geometry.out_w],
            model_size: geometry.model_size(),
            fit: settings.fit,
            seed: settings.seed,
            color_fix: if settings.colour_fix { ColorFix::Adain } else { ColorFix::None },
            tiles: memory.tiles,
            estimated_peak_bytes: memory.estimated_bytes,
            memory_budget_mib: memory.budget_mib,
            fits_budget: memory.fits,
            resumed_from: checkpoints.resumed_from().map(|from| ResumedFrom { batch: Some(resumed_at.index), ..from }),
        };
        Ok(video_outcome(job, output_media, timings, JobPlan::FlashVsr(plan), None))
    })
}

/// Puts `run` where the checkpoint the job goes on from left it (its streams after the steps done) and
/// returns the frames written then; 0 for a fresh start.
fn go_on_from_checkpoint(checkpoints: &mut Checkpoints, run: &mut TiledRun, device: Device) -> Result<u64, ExecError> {
    let Some(checkpoint) = &checkpoints.resumed else { return Ok(0) };
    let Some(mark) = &checkpoint.vae else {
        checkpoints.discard();
        return Ok(0);
    };
    run.load_state(&checkpoints.folder.tensors(&mark.state, device)?)?;
    Ok(checkpoint.frames)
}

/// Bytes `[n, H, W, 3]` as the writer's samples (16-bit ones hold the same values, ×257).
fn rgb_frames(bytes: &Tensor, depth: SampleDepth) -> Result<RgbFrames, ExecError> {
    let frames_01 = bytes.to_kind(Kind::Float).permute([0, 3, 1, 2]) / 255.0;
    Ok(frames::to_rgb(&frames_01, depth)?)
}
