//! `vae_decode`: a latent file → an MP4 (or a float tensor for `/v1/decode`).
use std::cell::{Cell, RefCell};
use std::time::Instant;

use tch::Tensor;

use crate::executor::resilient::{self, OomFallbacks};
use super::job::{VaeJob, DEFAULT_LATENT_FPS};
use crate::executor::stage_clock::StageClock;
use crate::executor::error::ExecError;
use crate::executor::frames::{self, VideoTensorWriter};
use crate::executor::tiled::tile_major::{TileMajorDecode, TileMajorHooks, TileMajorResume};
use crate::jobs::plan::{VaeDecodePlan, VaeOpPlan};
use crate::jobs::{JobOutcome, OutputFormat, Timings};
use crate::media::latent::{read_latent, LatentError, LatentMeta};
use crate::executor::media_io::{finish_output, write_segments, FrameSink, OutputVideo};
use crate::executor::resume::{Checkpoints, Mark};
use crate::executor::tiled::streams::TiledDecoder;
use crate::media::{Colour, MediaInfo};
use crate::models::ModelError;
use crate::models::family::vae::StreamOutput;
use crate::models::nn::causal_cache::RowSplit;

/// Where decoded frames go: the video, in segments a stopped job goes on from, or a float32 `sample`
/// tensor for `/v1/decode` (written in place, synced before each checkpoint that counts its frames).
enum DecodeSink {
    Video(FrameSink),
    /// The tensor and its frames at the last checkpoint.
    Tensor { writer: VideoTensorWriter, checkpointed: u64 },
}

impl DecodeSink {
    /// A tensor file a checkpoint counted frames in but that is not there as it was written: the
    /// checkpoint is discarded (start over).
    fn open(ctx: &VaeJob, frames: u64, height: i64, width: i64, fps: &str, checkpoints: &mut Checkpoints) -> Result<DecodeSink, ExecError> {
        if ctx.job.params.output_format == Some(OutputFormat::Safetensors) {
            let shape = [1, 3, frames as i64, height, width];
            let counted = checkpoints.resumed.as_ref().map(|c| c.frames);
            let (writer, continued) = VideoTensorWriter::resume_or_create(&ctx.job.output_path, "sample", shape, &Default::default(), counted, checkpoints.can_resume())?;
            if !continued && counted.is_some_and(|n| n > 0) {
                checkpoints.discard();
            }
            let checkpointed = writer.written();
            return Ok(DecodeSink::Tensor { writer, checkpointed });
        }
        // A latent says nothing of the colour it came from: the defaults for the size, written explicitly.
        let video = OutputVideo {
            width: width as u32,
            height: height as u32,
            fps_rational: fps.into(),
            colour: Colour::default_for_height(height as u32),
            from_input_video: false,
            sample_aspect_ratio: None,
            span: None,
        };
        Ok(DecodeSink::Video(write_segments(ctx.exec, ctx.job, video, &checkpoints.folder.dir, checkpoints.finished())?))
    }

    /// `frames`: `[n, 3, h, w]` in [-1, 1], the next ones.
    fn write(&mut self, frames: &Tensor) -> Result<(), ExecError> {
        match self {
            DecodeSink::Video(sink) => {
                let depth = sink.depth();
                Ok(sink.write(frames::to_rgb(&VaeJob::to_unit_range(frames), depth)?)?)
            }
            DecodeSink::Tensor { writer, .. } => writer.append(&frames.permute([1, 0, 2, 3]).unsqueeze(0)),
        }
    }

    /// Frames written since the last checkpoint.
    fn frames_in_segment(&self) -> u64 {
        match self {
            DecodeSink::Video(sink) => sink.frames_in_segment().unwrap_or(0),
            DecodeSink::Tensor { writer, checkpointed } => writer.written() - checkpointed,
        }
    }

    /// Ends the video's segment (or syncs the tensor) and records how to go on after it (`mark`).
    fn checkpoint(&mut self, checkpoints: &Checkpoints, mark: Mark) -> Result<(), ExecError> {
        match self {
            DecodeSink::Video(sink) => checkpoints.save(sink, mark, None),
            DecodeSink::Tensor { writer, checkpointed } => {
                writer.sync()?;
                checkpoints.save_written(writer.written(), mark)?;
                *checkpointed = writer.written();
                Ok(())
            }
        }
    }

    /// Finishes the output: the video joined and probed (its `output.media`), or the tensor file.
    fn finish(self, ctx: &VaeJob) -> Result<Option<MediaInfo>, ExecError> {
        match self {
            DecodeSink::Video(sink) => finish_output(ctx.exec, ctx.job, sink),
            DecodeSink::Tensor { writer, .. } => writer.finish().map(|()| None),
        }
    }
}

/// The decode's checkpoints, a segment's worth of frames apart (at the latent's rate for a tensor too).
fn decode_checkpoints(ctx: &VaeJob, fps: &str) -> Checkpoints {
    let rate = crate::media::parse_rate(fps).map_or(16.0, |(_, rate)| rate);
    ctx.checkpoints(rate, true)
}

/// Puts `decoder` where the checkpoint the job goes on from left it: the latent frames pushed and the
/// frames written then, `(0, 0)` for a fresh start.
fn resume_decoder(ctx: &VaeJob, checkpoints: &Checkpoints, decoder: &mut TiledDecoder, fallbacks: &mut OomFallbacks) -> Result<(i64, u64), ExecError> {
    let Some(checkpoint) = &checkpoints.resumed else { return Ok((0, 0)) };
    let mark = checkpoint.vae.as_ref().ok_or_else(|| ExecError::Invalid("a decode checkpoint without the decoder's state".into()))?;
    decoder.set_row_split(mark.row_split);
    decoder.load_state(&checkpoints.folder.tensors(&mark.state, ctx.exec.device)?, ctx.exec.device)?;
    fallbacks.log.clone_from(&mark.fallbacks);
    Ok((mark.inputs, checkpoint.frames))
}

pub(super) fn run(ctx: &VaeJob, timings: &mut Timings) -> Result<JobOutcome, ExecError> {
    let mut clock = StageClock::default();
    let started = Instant::now();
    let file = StageClock::time(&mut clock.read, || read_latent(&ctx.job.input_path))?;
    check_latent_fits(ctx, &file.latent, &file.meta)?;
    // The inverse of encode's order (normalise, then scale): scaling comes off first.
    let mut latent = file.latent.shallow_clone();
    if let (Some(scaling), shift) = (ctx.job.params.latent_scaling, ctx.job.params.latent_shift.unwrap_or(0.0)) {
        latent = latent / scaling + shift;
    }
    if file.meta.normalized {
        latent = ctx.vae.denormalize(&latent)?;
    }
    let (_, _, latent_frames, latent_h, latent_w) = latent.size5().expect("checked rank");
    let factor = ctx.vae.spatial_factor();
    let full = (latent_h * factor, latent_w * factor);
    let height = file.meta.height.map(|h| (h as i64).min(full.0)).unwrap_or(full.0);
    let width = file.meta.width.map(|w| (w as i64).min(full.1)).unwrap_or(full.1);
    let produced = 1 + (latent_frames - 1) * ctx.vae.temporal_factor();
    let total = file.meta.source_frames.map(|n| (n as i64).min(produced)).unwrap_or(produced) as u64;
    let fps = file.meta.fps_rational.clone().unwrap_or_else(|| DEFAULT_LATENT_FPS.into());
    let mut checkpoints = decode_checkpoints(ctx, &fps);
    let mut fallbacks = OomFallbacks::default();
    let tile_major = match (ctx.tile_plan.tile_major, ctx.tiles) {
        (true, Some(tiles)) => {
            let decode = TileMajorDecode {
                vae: ctx.vae,
                tiles,
                latent_frames_per_push: ctx.tile_plan.latent_frames_per_chunk,
                output: StreamOutput::Pipeline,
                checkpoint_frames: checkpoints.segment_frames,
            };
            // Before the sink opens: a checkpoint that cannot be gone on from is discarded with its segments.
            let from = tile_major_resume(ctx, &mut checkpoints, &decode, &latent.size(), &mut fallbacks)?;
            Some((decode, from))
        }
        _ => None,
    };
    let mut sink = DecodeSink::open(ctx, total, height, width, &fps, &mut checkpoints)?;
    // The sink may have discarded the checkpoint (its tensor file was not as counted): start over.
    if checkpoints.resumed.is_none() {
        fallbacks = OomFallbacks::default();
    }
    let tile_major = tile_major.map(|(decode, from)| (decode, from.filter(|_| checkpoints.resumed.is_some())));
    let latents_per_push = (ctx.chunk_frames as i64 / ctx.vae.temporal_factor()).max(1);
    let (done, row_split) = match tile_major {
        Some((decode, from)) => {
            let job = TileMajorJob { height, width, total, started, full_height: full.0, full_width: full.1 };
            decode_tile_major(ctx, &decode, from, &latent, &job, &mut sink, &checkpoints, &mut clock, &mut fallbacks)?
        }
        None => {
            let mut decoder = ctx.decoder();
            let (mut start, mut done) = resume_decoder(ctx, &checkpoints, &mut decoder, &mut fallbacks)?;
            while start < latent_frames && done < total {
                ctx.hooks.between_chunks()?;
                let count = latents_per_push.min(latent_frames - start);
                let slice = latent.narrow(2, start, count).to_device(ctx.exec.device);
                start += count;
                let frames = StageClock::time(&mut clock.compute, || -> Result<Tensor, ExecError> {
                    let size = ctx.push_size(count * ctx.vae.temporal_factor(), full.0, full.1);
                    let decoded = resilient::decode(&mut decoder, &slice, &size, &mut fallbacks)?;
                    Ok(frames_to_write(&decoded, height, width, total - done))
                })?;
                StageClock::time(&mut clock.write, || sink.write(&frames))?;
                done += frames.size()[0] as u64;
                // A segment ends after the push that fills it: pushes fall where an uninterrupted run's do.
                if checkpoints.segment_full(sink.frames_in_segment()) {
                    let mark = Mark::Vae { inputs: start, state: decoder.save_state(), row_split: decoder.row_split(), fallbacks: &fallbacks.log };
                    StageClock::time(&mut clock.write, || sink.checkpoint(&checkpoints, mark))?;
                }
                ctx.progress(done, total, started);
            }
            (done, decoder.row_split())
        }
    };
    ctx.hooks.between_chunks()?;
    let output_media = StageClock::time(&mut clock.write, || sink.finish(ctx))?;
    checkpoints.folder.remove();
    let kept = checkpoints.finished().frames;
    clock.record(timings, done - kept, started);
    let op = VaeDecodePlan {
        latent_shape: latent.size(),
        latent_frames_per_push: latents_per_push,
        frames: done,
        row_split,
        resumed_from: checkpoints.resumed_from(),
    };
    let plan = ctx.plan(fallbacks.log, VaeOpPlan::Decode(op));
    Ok(ctx.outcome(output_media, timings, plan, None))
}

/// A decoded push as `[n, 3, height, width]` frames, at most `remaining` of them (a latent made from a
/// clip that was not 1 + 4k frames long decodes a few frames past the source's end).
fn frames_to_write(decoded: &Tensor, height: i64, width: i64, remaining: u64) -> Tensor {
    let frames = VaeJob::crop_output(decoded, height, width);
    let keep = (frames.size()[0] as u64).min(remaining) as i64;
    frames.narrow(0, 0, keep)
}

/// What the tile-major path needs to know of the decode.
struct TileMajorJob {
    /// The output's size and frame count (the decode is cropped and trimmed to them).
    height: i64,
    width: i64,
    total: u64,
    /// The decode's full size before cropping (sizes an out-of-memory retry's row split).
    full_height: i64,
    full_width: i64,
    started: Instant,
}

/// Where a tile-major decode goes on from: the checkpoint's place, when it was made by a tile-major run of
/// this shape and the spools it counts are there; otherwise the checkpoint is discarded (start over).
fn tile_major_resume(ctx: &VaeJob, checkpoints: &mut Checkpoints, decode: &TileMajorDecode, latent_shape: &[i64], fallbacks: &mut OomFallbacks) -> Result<Option<TileMajorResume>, ExecError> {
    let Some(checkpoint) = &checkpoints.resumed else { return Ok(None) };
    let (Some(at), Some(mark)) = (&checkpoint.tile_major, &checkpoint.vae) else {
        checkpoints.discard();
        return Ok(None);
    };
    if !decode.can_go_on(latent_shape, &checkpoints.folder.dir, at) {
        tracing::info!(id = %ctx.job.id, "a tile-major checkpoint whose spools are not whole; starting over");
        checkpoints.discard();
        return Ok(None);
    }
    let stream = checkpoints.folder.tensors(&mark.state, ctx.exec.device)?;
    fallbacks.log.clone_from(&mark.fallbacks);
    Ok(Some(TileMajorResume { at: at.clone(), stream }))
}

/// The tile-major path (`plan.tile_major`): tiles over the whole clip, spooled in the job's resume folder,
/// blended per push and handed to the sink as they come; a push that runs out of memory is retried like a
/// time-major one (`fallbacks`). Checkpoints record the tile in hand's stream while tiles run, and the
/// segments written while the blends run. Returns the frames written and the row split the last tile
/// ended with.
#[allow(clippy::too_many_arguments)]
fn decode_tile_major(
    ctx: &VaeJob,
    decode: &TileMajorDecode,
    from: Option<TileMajorResume>,
    latent: &Tensor,
    job: &TileMajorJob,
    sink: &mut DecodeSink,
    checkpoints: &Checkpoints,
    clock: &mut StageClock,
    fallbacks: &mut OomFallbacks,
) -> Result<(u64, Option<RowSplit>), ExecError> {
    let spool = &checkpoints.folder.dir;
    std::fs::create_dir_all(spool).map_err(|source| ModelError::Io { path: spool.clone(), source })?;
    let mut done = checkpoints.finished().frames;
    let write_s = Cell::new(0.0);
    let fallbacks = RefCell::new(fallbacks);
    let run_started = Instant::now();
    let total = job.total;
    let hooks = TileMajorHooks {
        // Progress in frame units over all the work: every tile's pushes, then the blends.
        step: &mut |steps_done: usize, steps: usize| {
            ctx.progress(total * steps_done as u64 / steps.max(1) as u64, total, job.started);
            ctx.hooks.between_chunks()
        },
        push: &mut |decoder, slice| {
            // Each tile's stream is made by the decode: the cancel reaches inside its pushes from here.
            decoder.set_stop(ctx.hooks.stop_flag());
            let size = ctx.push_size(slice.size()[2] * ctx.vae.temporal_factor(), job.full_height, job.full_width);
            resilient::decode(decoder, slice, &size, &mut fallbacks.borrow_mut())
        },
        emit: &mut |chunk, after| {
            let started = Instant::now();
            let frames = frames_to_write(&chunk, job.height, job.width, total - done);
            sink.write(&frames)?;
            done += frames.size()[0] as u64;
            if checkpoints.segment_full(sink.frames_in_segment()) {
                sink.checkpoint(checkpoints, Mark::TileMajor { at: after, state: Vec::new(), fallbacks: &fallbacks.borrow().log })?;
            }
            write_s.set(write_s.get() + started.elapsed().as_secs_f64());
            Ok(())
        },
        checkpoint: &mut |at, stream| {
            let started = Instant::now();
            checkpoints.save_written(0, Mark::TileMajor { at, state: stream.save_state(), fallbacks: &fallbacks.borrow().log })?;
            write_s.set(write_s.get() + started.elapsed().as_secs_f64());
            Ok(())
        },
    };
    let (_, row_split) = decode.run::<ExecError>(&latent.to_device(ctx.exec.device), spool, from, hooks)?;
    ctx.progress(done, total, job.started);
    clock.compute += run_started.elapsed().as_secs_f64() - write_s.get();
    clock.write += write_s.get();
    Ok((done, row_split))
}

fn check_latent_fits(ctx: &VaeJob, latent: &Tensor, meta: &LatentMeta) -> Result<(), ExecError> {
    let channels = latent.size()[1];
    if channels != ctx.vae.latent_channels() {
        return Err(LatentError::ChannelMismatch { model: ctx.entry.name.clone(), got: channels, expected: ctx.vae.latent_channels() }.into());
    }
    if let Some(family) = &meta.family {
        if !crate::models::registry::shares_latent_space(ctx.entry.family, &ctx.entry.name, family, meta.model.as_deref().unwrap_or_default()) {
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
