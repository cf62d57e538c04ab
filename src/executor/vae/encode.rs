//! `vae_encode`: a video (or a pixel tensor from `/v1/encode`) → a latent file.
use std::time::Instant;

use tch::{Device, Kind, Tensor};

use crate::executor::resilient::{self, OomFallbacks};
use super::job::VaeJob;
use crate::executor::stage_clock::StageClock;
use crate::executor::frames::{self, VideoTensorWriter};
use crate::executor::resume::{Checkpoints, Mark};
use crate::executor::tiled::streams::TiledEncoder;
use crate::executor::error::ExecError;
use crate::jobs::plan::{VaeEncodePlan, VaeOpPlan};
use crate::jobs::{JobOutcome, Timings};
use crate::media::latent::LatentMeta;
use crate::media::{FrameReader, MediaInfo};

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

/// Each latent chunk leaves for the file as soon as it exists, normalised on the way (the
/// normalisations are per channel, so chunks can be done one at a time).
struct LatentSink<'a> {
    ctx: &'a VaeJob<'a>,
    writer: VideoTensorWriter,
    normalized: bool,
}

impl LatentSink<'_> {
    fn write(&mut self, raw: &Tensor) -> Result<(), ExecError> {
        let mut latent = raw.to_device(Device::Cpu).to_kind(Kind::Float);
        if self.normalized {
            latent = self.ctx.vae.normalize(&latent)?;
        }
        let params = &self.ctx.job.params;
        if let Some(scaling) = params.latent_scaling {
            latent = (latent - params.latent_shift.unwrap_or(0.0)) * scaling;
        }
        self.writer.append(&latent)
    }
}

/// The encode's checkpoints: a video's (a tensor sent to `/v1/encode` is a short call that starts over).
fn encode_checkpoints(ctx: &VaeJob, source: &EncodeSource) -> Checkpoints {
    let (resumable, rate) = match source {
        EncodeSource::Video { info, .. } => (true, info.fps),
        EncodeSource::Tensor { .. } => (false, 16.0),
    };
    ctx.checkpoints(rate, resumable)
}

/// The latent file's writer and `encoder`, where the checkpoint the job goes on from left them, and the
/// input frames pushed then (0 for a fresh start, also when the partial latent file is gone).
fn resume_encoder(
    ctx: &VaeJob,
    checkpoints: &mut Checkpoints,
    shape: [i64; 5],
    meta: &LatentMeta,
    encoder: &mut TiledEncoder,
    fallbacks: &mut OomFallbacks,
) -> Result<(VideoTensorWriter, u64), ExecError> {
    let resumed = checkpoints.resumed.as_ref().and_then(|c| c.vae.clone().map(|mark| (c.frames, mark)));
    let (writer, continued) = VideoTensorWriter::resume_or_create(&ctx.job.output_path, "latent", shape, &meta.to_strings(), resumed.as_ref().map(|(frames, _)| *frames), checkpoints.can_resume())?;
    let Some((_, mark)) = resumed.filter(|_| continued) else {
        checkpoints.discard();
        return Ok((writer, 0));
    };
    encoder.set_row_split(mark.row_split);
    encoder.load_state(&checkpoints.folder.tensors(&mark.state, ctx.exec.device)?, ctx.exec.device)?;
    fallbacks.log.clone_from(&mark.fallbacks);
    Ok((writer, mark.inputs as u64))
}

pub(super) fn run(ctx: &VaeJob, timings: &mut Timings) -> Result<JobOutcome, ExecError> {
    let mut source = EncodeSource::open(ctx, timings)?;
    let total = source.total_frames();
    if total == 0 {
        return Err(ExecError::Invalid("the input has no frames".into()));
    }
    let (width, height, fps_rational) = source.describe();
    let factor = ctx.vae.spatial_factor();
    let latent_frames = 1 + (ctx.frames_needed(total as i64) - 1) / ctx.vae.temporal_factor();
    let shape = [1, ctx.vae.latent_channels(), latent_frames, (height as u64).div_ceil(factor as u64) as i64, (width as u64).div_ceil(factor as u64) as i64];
    let normalized = ctx.job.params.normalize.unwrap_or(false);
    let meta = LatentMeta {
        model: Some(ctx.entry.name.clone()),
        family: Some(ctx.entry.family.as_str().into()),
        normalized,
        fps_rational,
        source_frames: Some(total),
        width: Some(width),
        height: Some(height),
    };
    let mut checkpoints = encode_checkpoints(ctx, &source);
    let mut encoder = ctx.encoder();
    let mut fallbacks = OomFallbacks::default();
    let (writer, pushed) = resume_encoder(ctx, &mut checkpoints, shape, &meta, &mut encoder, &mut fallbacks)?;
    let mut sink = LatentSink { ctx, writer, normalized };
    let group = ctx.vae.temporal_factor();
    let mut clock = StageClock::default();
    let started = Instant::now();
    let (mut last_frame, mut done, mut checkpointed) = (None::<Tensor>, 0u64, pushed);
    loop {
        ctx.hooks.between_chunks()?;
        let Some((x, count)) = source.next(ctx, &mut clock)? else { break };
        last_frame = Some(x.narrow(2, x.size()[2] - 1, 1));
        // Frames a stopped run had pushed are read again, not encoded again.
        let skip = pushed.saturating_sub(done).min(count);
        done += count;
        if skip == count {
            ctx.progress(done, total, started);
            continue;
        }
        let x = x.narrow(2, skip as i64, (count - skip) as i64);
        if let Some(z) = StageClock::time(&mut clock.compute, || {
            let size = ctx.push_size(x.size()[2], x.size()[3], x.size()[4]);
            resilient::encode(&mut encoder, &x, group, &size, &mut fallbacks)
        })? {
            StageClock::time(&mut clock.write, || sink.write(&z))?;
        }
        if checkpoints.segment_full(done - checkpointed) {
            StageClock::time(&mut clock.write, || -> Result<(), ExecError> {
                sink.writer.sync()?;
                let mark = Mark::Vae { inputs: done as i64, state: encoder.save_state(), row_split: encoder.row_split(), fallbacks: &fallbacks.log };
                checkpoints.save_written(sink.writer.written(), mark)
            })?;
            checkpointed = done;
        }
        ctx.progress(done, total, started);
    }
    if done != total {
        return Err(ExecError::Invalid(format!("the input had {done} frames, not the {total} its container announced")));
    }
    // The encoder takes 1 + 4k frames (and a grouping one its end frames); repeat the last frame up to that,
    // decode trims it back.
    let missing = ctx.frames_needed(done as i64) - done as i64 + ctx.vae.encode_end_frames();
    if let (Some(last), true) = (last_frame, missing > 0) {
        let padding = last.repeat([1, 1, missing, 1, 1]);
        let size = ctx.push_size(missing, padding.size()[3], padding.size()[4]);
        if let Some(z) = StageClock::time(&mut clock.compute, || resilient::encode(&mut encoder, &padding, group, &size, &mut fallbacks))? {
            StageClock::time(&mut clock.write, || sink.write(&z))?;
        }
    }
    StageClock::time(&mut clock.write, || sink.writer.finish())?;
    checkpoints.folder.remove();
    clock.record(timings, done - pushed, started);
    let op = VaeEncodePlan {
        latent_shape: shape.to_vec(),
        padded_frames: missing,
        normalized,
        row_split: encoder.row_split(),
        resumed_from: checkpoints.resumed_from(),
    };
    let plan = ctx.plan(fallbacks.log, VaeOpPlan::Encode(op));
    Ok(ctx.outcome(None, timings, plan, None))
}
