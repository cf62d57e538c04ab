//! `vae_reconstruct`: video → latent → video in one pass, chunk by chunk, with PSNR/SSIM of the result.
//! The video is written in segments; after the push that fills one, a checkpoint keeps both streams'
//! state, the source frames still waiting for their reconstruction and the PSNR/SSIM sums, so a stopped
//! job goes on from there and ends as an uninterrupted run would, figures included.
use std::collections::{HashMap, VecDeque};
use std::time::Instant;

use tch::{Device, Tensor};

use crate::executor::resilient::{self, OomFallbacks};
use super::job::VaeJob;
use crate::executor::stage_clock::StageClock;
use crate::executor::error::ExecError;
use crate::executor::frames;
use crate::jobs::plan::{RowSplitHalves, VaeOpPlan, VaeReconstructPlan};
use crate::jobs::{JobOutcome, Timings};
use crate::executor::media_io::{finish_output, write_segments, OutputVideo};
use crate::executor::resume::{Checkpoints, Mark};
use crate::executor::tiled::streams::{TiledDecoder, TiledEncoder};
use crate::models::nn::causal_cache::SavedTensors;
use crate::media::RgbFrames;

/// Where each part of a reconstruct's saved state goes in the checkpoint's tensor file.
const ENCODER_PREFIX: &str = "encoder.";
const DECODER_PREFIX: &str = "decoder.";
const WAITING_KEY: &str = "waiting";

/// The two streams and the source frames waiting for their reconstruction, where a checkpoint keeps them.
fn saved_state(encoder: &TiledEncoder, decoder: &TiledDecoder, waiting: &VecDeque<Tensor>) -> SavedTensors {
    let prefixed = |prefix: &str, saved: SavedTensors| saved.into_iter().map(move |(key, tensor)| (format!("{prefix}{key}"), tensor)).collect::<Vec<_>>();
    let mut saved = prefixed(ENCODER_PREFIX, encoder.save_state());
    saved.extend(prefixed(DECODER_PREFIX, decoder.save_state()));
    if !waiting.is_empty() {
        // Kept as read (`frames::to_tensor`: channels last): the PSNR/SSIM sums over them depend on the
        // layout in their last bits, and a file keeps no strides.
        let frames = Tensor::cat(&waiting.iter().collect::<Vec<_>>(), 0);
        saved.push((WAITING_KEY.into(), frames.permute([0, 2, 3, 1]).to_device(Device::Cpu).contiguous()));
    }
    saved
}

/// The tensors `saved_state` wrote under `prefix`, without it.
fn under_prefix(saved: &HashMap<String, Tensor>, prefix: &str) -> HashMap<String, Tensor> {
    saved.iter().filter_map(|(key, tensor)| Some((key.strip_prefix(prefix)?.to_string(), tensor.shallow_clone()))).collect()
}

/// Puts the streams where the checkpoint the job goes on from left them, and returns the input frames
/// pushed then (0 for a fresh start) and the source frames waiting for their reconstruction.
fn resume_streams(
    ctx: &VaeJob,
    checkpoints: &Checkpoints,
    encoder: &mut TiledEncoder,
    decoder: &mut TiledDecoder,
    fallbacks: &mut OomFallbacks,
) -> Result<(u64, VecDeque<Tensor>), ExecError> {
    let Some(checkpoint) = &checkpoints.resumed else { return Ok((0, VecDeque::new())) };
    let mark = checkpoint.vae.as_ref().ok_or_else(|| ExecError::Invalid("a reconstruct checkpoint without its streams' state".into()))?;
    let device = ctx.exec.device;
    let saved = checkpoints.folder.tensors(&mark.state, device)?;
    encoder.set_row_split(mark.row_split);
    encoder.load_state(&under_prefix(&saved, ENCODER_PREFIX), device)?;
    decoder.set_row_split(mark.decoder_row_split);
    decoder.load_state(&under_prefix(&saved, DECODER_PREFIX), device)?;
    let waiting = match saved.get(WAITING_KEY) {
        Some(frames) => {
            let frames = frames.permute([0, 3, 1, 2]);
            (0..frames.size()[0]).map(|i| frames.narrow(0, i, 1)).collect()
        }
        None => VecDeque::new(),
    };
    fallbacks.log.clone_from(&mark.fallbacks);
    Ok((mark.inputs as u64, waiting))
}

pub(super) fn run(ctx: &VaeJob, timings: &mut Timings) -> Result<JobOutcome, ExecError> {
    let info = ctx.input_media(timings)?;
    let device = ctx.exec.device;
    let (height, width) = (info.height as i64, info.width as i64);
    let checkpoints = ctx.checkpoints(info.fps, true);
    let mut reader = ctx.reader(&info)?;
    let video = OutputVideo::like(&info, info.width, info.height);
    let mut sink = write_segments(ctx.exec, ctx.job, video, &checkpoints.folder.dir, checkpoints.finished())?;
    let depth = sink.depth();
    let mut encoder = ctx.encoder();
    let mut decoder = ctx.decoder();
    let mut fallbacks = OomFallbacks::default();
    // Source frames wait here until their reconstruction comes out (at most a chunk plus one latent's worth).
    let (pushed, mut waiting) = resume_streams(ctx, &checkpoints, &mut encoder, &mut decoder, &mut fallbacks)?;
    // A resumed job's figures go on from the sums its checkpoint kept.
    let mut quality = checkpoints.resumed_quality();
    let group = ctx.vae.temporal_factor();
    let factor = ctx.vae.spatial_factor();
    let mut clock = StageClock::default();
    let started = Instant::now();
    let kept = checkpoints.finished().frames;
    let (mut read_frames, mut done, mut last_frame) = (0u64, kept, None::<Tensor>);
    let mut finished_input = false;
    while !finished_input || !waiting.is_empty() {
        ctx.hooks.between_chunks()?;
        let x = match StageClock::time(&mut clock.read, || reader.next_chunk())? {
            Some(chunk) => {
                let pixels = frames::to_tensor(&chunk, device);
                let count = chunk.count as u64;
                let x = ctx.to_model_input(&pixels);
                last_frame = Some(x.narrow(2, x.size()[2] - 1, 1));
                // Frames a stopped run had pushed are read again, not pushed again (those still waiting
                // for their reconstruction came back with the checkpoint).
                let skip = pushed.saturating_sub(read_frames).min(count);
                read_frames += count;
                if skip == count {
                    ctx.progress(done, info.frames, started);
                    continue;
                }
                for i in skip as i64..count as i64 {
                    waiting.push_back(pixels.narrow(0, i, 1));
                }
                x.narrow(2, skip as i64, (count - skip) as i64)
            }
            None if !finished_input => {
                finished_input = true;
                let missing = ctx.frames_needed(read_frames.max(1) as i64) - read_frames as i64 + ctx.vae.encode_end_frames();
                match (&last_frame, missing > 0) {
                    (Some(last), true) => last.repeat([1, 1, missing, 1, 1]),
                    _ if waiting.is_empty() => break,
                    _ => return Err(ExecError::Invalid("the encoder kept frames it could not complete".into())),
                }
            }
            None => break,
        };
        let out = StageClock::time(&mut clock.compute, || -> Result<Option<RgbFrames>, ExecError> {
            let (_, _, frames, padded_height, padded_width) = x.size5()?;
            let size = ctx.push_size(frames, padded_height, padded_width);
            let Some(z) = resilient::encode(&mut encoder, &x, group, &size, &mut fallbacks)? else { return Ok(None) };
            let size = ctx.push_size(z.size()[2] * group, z.size()[3] * factor, z.size()[4] * factor);
            let decoded = resilient::decode(&mut decoder, &z, &size, &mut fallbacks)?;
            let frames = VaeJob::to_unit_range(&VaeJob::crop_output(&decoded, height, width));
            let keep = (frames.size()[0] as usize).min(waiting.len()) as i64;
            let frames = frames.narrow(0, 0, keep);
            let sources: Vec<Tensor> = waiting.drain(..keep as usize).collect();
            quality.add(&Tensor::cat(&sources, 0), &frames);
            Ok(Some(frames::to_rgb(&frames, depth)?))
        })?;
        if let Some(out) = out {
            done += out.count as u64;
            StageClock::time(&mut clock.write, || sink.write(out))?;
            // A segment ends after the push that fills it: pushes fall where an uninterrupted run's do. The
            // padding push at the end is the last one: a run going on after it would push it again.
            if !finished_input && checkpoints.segment_full(sink.frames_in_segment().unwrap_or(0)) {
                let row_split = RowSplitHalves { encoder: encoder.row_split(), decoder: decoder.row_split() };
                let mark = Mark::Reconstruct { inputs: read_frames as i64, state: saved_state(&encoder, &decoder, &waiting), row_split, fallbacks: &fallbacks.log };
                StageClock::time(&mut clock.write, || checkpoints.save(&mut sink, mark, Some(&quality)))?;
            }
            ctx.progress(done, info.frames, started);
        }
    }
    ctx.hooks.between_chunks()?;
    let output_media = StageClock::time(&mut clock.write, || finish_output(ctx.exec, ctx.job, sink))?;
    checkpoints.folder.remove();
    clock.record(timings, done - kept, started);
    let op = VaeReconstructPlan {
        frames: done,
        row_split: RowSplitHalves { encoder: encoder.row_split(), decoder: decoder.row_split() },
        resumed_from: checkpoints.resumed_from(),
    };
    let plan = ctx.plan(fallbacks.log, VaeOpPlan::Reconstruct(op));
    Ok(ctx.outcome(output_media, timings, plan, Some(quality.metrics())))
}
