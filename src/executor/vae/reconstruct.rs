//! `vae_reconstruct`: video → latent → video in one pass, chunk by chunk, with PSNR/SSIM of the result.
use std::collections::VecDeque;
use std::time::Instant;

use tch::Tensor;

use crate::executor::resilient::{self, OomFallbacks};
use super::VaeJob;
use crate::executor::stage_clock::StageClock;
use crate::executor::quality::QualityMeter;
use crate::executor::{frames, ExecError};
use crate::jobs::plan::{RowSplitHalves, VaeOpPlan, VaeReconstructPlan};
use crate::jobs::{JobOutcome, Timings};
use crate::executor::media_io::{output_media, OutputVideo};
use crate::media::RgbFrames;

pub(super) fn run(ctx: &VaeJob, timings: &mut Timings) -> Result<JobOutcome, ExecError> {
    let info = ctx.input_media(timings)?;
    let device = ctx.exec.device;
    let (height, width) = (info.height as i64, info.width as i64);
    let mut reader = ctx.reader(&info)?;
    let mut writer = ctx.writer(OutputVideo::like(&info, info.width, info.height))?;
    let depth = writer.depth();
    let mut encoder = ctx.encoder();
    let mut decoder = ctx.decoder();
    let mut fallbacks = OomFallbacks::default();
    let group = ctx.vae.temporal_factor();
    let factor = ctx.vae.spatial_factor();
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
            StageClock::time(&mut clock.write, || writer.write(out))?;
            ctx.progress(done, info.frames, started);
        }
    }
    ctx.hooks.check_cancelled()?;
    StageClock::time(&mut clock.write, || writer.finish())?;
    let output_media = output_media(ctx.exec, ctx.job);
    clock.record(timings, done, started);
    let row_split = RowSplitHalves { encoder: encoder.row_split(), decoder: decoder.row_split() };
    let plan = ctx.plan(fallbacks.log, VaeOpPlan::Reconstruct(VaeReconstructPlan { frames: done, row_split }));
    Ok(ctx.outcome(output_media, timings, plan, Some(quality.metrics())))
}
