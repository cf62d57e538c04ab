//! The upscale pipeline: ffmpeg decode → chunks of frames (re-timed by RIFE with `interpolate=N`) → tiled
//! upscaler → ffmpeg encode.
//! Decode and encode run in their own processes and threads, so they overlap the compute; the
//! timings record only the time this thread waited for them.
use crate::models::stop::StopFlag;
use std::time::Instant;

use tch::Tensor;

use super::media_io::{finish_output, input_media, read_frames, video_outcome, write_output, OutputVideo};
use super::frame_workers::FrameWorkers;
use super::resume::{Checkpoints, Mark};
use super::stage_clock::StageClock;
use super::context::{Executor, JobHooks, JobSpec, Portion};
use super::error::ExecError;
use super::{alpha, frames};
use crate::executor::tiled::upscale::upscale_tiled_reporting;
use crate::jobs::plan::{JobPlan, UpscalePlan};
use crate::jobs::{JobOutcome, Progress, Timings};
use crate::models::Op;
use crate::media::{FrameReader, RgbFrames, SampleDepth};
use super::interpolate::{retimer::Retimer, settings::InterpolateSettings, window::FrameWindow};
use crate::models::family::upscaler::Upscaler;
use crate::models::registry;
use crate::tiling::spatial::SpatialTiling;

/// Largest overlap chosen automatically (see below).
const AUTO_OVERLAP_CAP: i64 = 32;
/// Below this, tiles are mostly overlap; out of memory there is a real failure.
const MIN_FALLBACK_TILE: i64 = 32;

pub(super) fn run(exec: &mut Executor, job: &JobSpec, hooks: &JobHooks, timings: &mut Timings) -> Result<JobOutcome, ExecError> {
    let entry = registry::find(&exec.config.models_dir, &job.model).ok_or_else(|| ExecError::Invalid(format!("unknown model {}", job.model)))?;
    let scale = Op::Upscale.scale_or_default(job.params.scale);
    if !entry.scales.contains(&scale) {
        return Err(ExecError::Invalid(format!("model {} supports scales {:?}, not {scale}", entry.name, entry.scales)));
    }
    let info = input_media(exec, job, timings)?;
    if let Portion::Join { parts, plan } = &job.portion {
        let video = OutputVideo::like(&info, info.width * scale as u32, info.height * scale as u32);
        return super::parts::join(exec, job, video, parts, plan.clone(), timings);
    }
    let kind = exec.resolve_kind(job, timings);

    let load_started = Instant::now();
    let (model, _loaded_now) = exec.models.upscaler(&entry, exec.device, kind)?;
    // `interpolate=N`: the settings and the box's interpolator, together.
    let interpolation = match job.params.interpolate.as_ref() {
        Some(params) => {
            let settings = InterpolateSettings::resolve(Some(params)).map_err(ExecError::Invalid)?;
            let entry = registry::scan(&exec.config.models_dir).into_iter().find(|e| e.ops.contains(&Op::Interpolate) && e.present());
            let entry = entry.ok_or_else(|| ExecError::Invalid("interpolate: no frame interpolator in the models folder".into()))?;
            Some((settings, exec.models.interpolator(&entry, exec.device, kind)?))
        }
        None => None,
    };
    timings.load_model = Some(load_started.elapsed().as_secs_f64());

    let mut fallbacks = Vec::new();
    // Workers pay on the CPU only: a CUDA device runs one call at a time anyway.
    let workers = match exec.config.cpu_frame_workers {
        _ if exec.device.is_cuda() => 1,
        0 => tch::get_num_threads().max(1) as usize,
        n => n,
    };
    let (width, height) = (info.width, info.height);
    let (out_width, out_height) = (width * scale as u32, height * scale as u32);
    let chunk_frames = exec.config.chunk_frames;

    let reader = read_frames(exec, job, &info, chunk_frames)?;
    let mut source = match &interpolation {
        Some((settings, interpolator)) => FrameSource::Retimed(Retimer::for_input(&**interpolator, &info, settings, FrameWindow::new(reader, exec.device))?),
        None => FrameSource::Read(reader),
    };
    let (fps_rational, fps) = match &source {
        FrameSource::Retimed(retimer) => (retimer.output_rate().as_text(), retimer.output_rate().as_f64()),
        FrameSource::Read(_) => (info.fps_rational.clone(), info.fps),
    };
    let mut tiling = SpatialTiling {
        tile: job.params.tile.unwrap_or(exec.config.upscale_tile),
        overlap: if exec.config.upscale_overlap > 0 {
            exec.config.upscale_overlap
        } else {
            // Exact (the receptive radius) when that is small, as for SRVGGNetCompact (19 px); RRDBNet's 349 px
            // would make every tile ~1200 px wide, so it gets a practical overlap (mean error 3e-3 at 16 px).
            model.receptive_radius().min(AUTO_OVERLAP_CAP)
        },
        // Tiles that cannot be exact (also after an out-of-memory fallback cuts a whole frame into
        // tiles) are blended across their shared context: same work, lower error (x4plus, tile 32:
        // mean 2.79e-3 against 3.00e-3 keeping cores at 16 px of overlap; 7.42e-3 against 7.64e-3 at
        // 8 px — tests/it/realesrgan_parity.rs).
        blend: true,
    };
    let settings = serde_json::json!({ "kind": format!("{kind:?}"), "tile": tiling.tile, "overlap": tiling.overlap });
    let checkpoints = Checkpoints::open(exec, job, hooks, settings, fps, !info.still);
    let output = OutputVideo { fps_rational, ..OutputVideo::like(&info, out_width, out_height) };
    let mut writer = write_output(exec, job, &info, output, &checkpoints.folder.dir, checkpoints.finished())?;
    let total = source.total(info.frames);
    let frames_started = Instant::now();
    let tile_progress = TileProgress { progress: &hooks.progress, started: frames_started, total, chunk: Default::default() };
    let upscaler = ChunkUpscaler { model: &*model, scale, depth: writer.depth(), workers: FrameWorkers { workers }, stop: hooks.stop_flag(), progress: &tile_progress };
    // A resumed job's figures go on from the sums its checkpoint kept.
    let mut quality = job.params.metrics.unwrap_or(false).then(|| checkpoints.resumed_quality());

    let mut clock = StageClock::default();
    // Frames the source has given; those a stopped run already wrote are read again, not upscaled again
    // (nor, re-timed, interpolated again: the retimer passes over them).
    let kept = checkpoints.finished().frames;
    hooks.progress.send_replace(Progress::frames(0, total, 0.0).at("upscale"));
    let mut done = source.pass_over(kept, &mut clock)?;
    // Each chunk allocates and frees the same activations; under the bounded allocator they would be fresh
    // mappings faulted in page by page every time (2.1× the compute at bf16, docs/benchmarks.md).
    let heap_reuse = crate::device::HeapReuse::for_call();
    loop {
        hooks.between_chunks()?;
        let Some(frames_in) = source.next_chunk(chunk_frames, exec.device, &mut clock)? else { break };
        let count = frames_in.size()[0] as u64;
        let skip = kept.saturating_sub(done).min(count);
        done += count;
        if skip == count {
            hooks.progress.send_replace(Progress::frames(done, total.max(done), frames_started.elapsed().as_secs_f64()).at("resume"));
            continue;
        }
        let frames_in = frames_in.narrow(0, skip as i64, (count - skip) as i64);
        // The chunk's tiles move the fraction as they finish: a chunk of big frames is minutes of work.
        tile_progress.start_chunk(done - (count - skip), count - skip);
        // Consecutive runs of the chunk's frames, converted as the model made them; never joined into one
        // tensor, which would need the whole chunk's output twice at once.
        let outputs = StageClock::time(&mut clock.compute, || tch::no_grad(|| upscaler.resilient(&frames_in, &mut tiling, &mut fallbacks)));
        tile_progress.start_chunk(done, 0);
        let outputs = outputs?;
        let mut index = 0;
        for run in outputs {
            for piece in checkpoints.split_at_segments(&writer, run) {
                if let Some(meter) = quality.as_mut() {
                    // Area-averaged back to the input's size: each input pixel against the mean of the
                    // scale × scale pixels made from it, as written (rounded to the output's depth).
                    for i in 0..piece.count {
                        let pooled = frames::written_frame(&piece, i).to_device(exec.device).avg_pool2d([scale, scale], [scale, scale], [0, 0], false, true, None::<i64>);
                        meter.add(&frames_in.narrow(0, index, 1), &pooled);
                        index += 1;
                    }
                }
                StageClock::time(&mut clock.write, || writer.write(piece))?;
                StageClock::time(&mut clock.write, || checkpoints.save_frames_when_full(&mut writer, quality.as_ref()))?;
            }
        }
        hooks.progress.send_replace(Progress::frames(done, total.max(done), frames_started.elapsed().as_secs_f64()).at("upscale"));
    }
    if let Some(still) = writer.still() {
        // A still's alpha goes through the same model as a grey picture, as Real-ESRGAN's tools do.
        if let Some(alpha) = StageClock::time(&mut clock.read, || alpha::read(exec, job, &info))? {
            hooks.progress.send_modify(|p| p.stage = Some("alpha".into()));
            let grey = StageClock::time(&mut clock.compute, || tch::no_grad(|| upscaler.resilient(&alpha::as_grey_picture(&alpha), &mut tiling, &mut fallbacks)))?;
            let picture = grey.first().ok_or_else(|| ExecError::Invalid("the upscaler returned no alpha".into()))?;
            still.set_alpha(alpha::plane_from_grey_picture(picture)?)?;
        }
    }
    drop(heap_reuse);
    hooks.between_chunks()?;
    hooks.progress.send_modify(|p| p.stage = Some("write".into()));
    let output_media = match job.portion {
        // A part's segments stay in its folder, with a checkpoint that names them all, for the join.
        Portion::Part { .. } => {
            StageClock::time(&mut clock.write, || checkpoints.save(&mut writer, Mark::Frames, quality.as_ref()))?;
            None
        }
        Portion::Whole | Portion::Join { .. } => {
            let media = StageClock::time(&mut clock.write, || finish_output(exec, job, writer))?;
            checkpoints.folder.remove();
            media
        }
    };
    clock.record(timings, done, frames_started);
    let tiles = crate::tiling::spatial::plan_tiles(height as i64, width as i64, &tiling).len();
    let plan = JobPlan::Upscale(UpscalePlan {
        chunk_frames,
        tile: tiling.tile,
        overlap: tiling.overlap,
        receptive_radius: model.receptive_radius(),
        exact: tiling.is_exact(model.receptive_radius()),
        blend: tiling.blends(model.receptive_radius()),
        tiles_per_frame: tiles,
        scale,
        frames: done,
        fallbacks,
        frame_workers: workers,
        interpolation: match &source {
            FrameSource::Retimed(retimer) => Some(retimer.plan(done)),
            FrameSource::Read(_) => None,
        },
        resumed_from: checkpoints.resumed_from(),
    });
    Ok(video_outcome(job, output_media, timings, plan, quality.map(|meter| meter.metrics())))
}

/// Where the upscaler's frames come from: the decoder, or the decoder through RIFE.
enum FrameSource<'m> {
    Read(FrameReader),
    Retimed(Retimer<'m>),
}

impl FrameSource<'_> {
    fn total(&self, input_frames: u64) -> u64 {
        match self {
            FrameSource::Read(_) => input_frames,
            FrameSource::Retimed(retimer) => retimer.output_frames(),
        }
    }

    /// Passes over up to `frames` frames a stopped run already wrote, where that saves work: the retimer's,
    /// without calling its model. The decoder's frames are read and dropped chunk by chunk instead (none
    /// passed over here). Returns the frames passed over.
    fn pass_over(&mut self, frames: u64, clock: &mut StageClock) -> Result<u64, ExecError> {
        match self {
            FrameSource::Read(_) => Ok(0),
            FrameSource::Retimed(retimer) => retimer.pass_over(frames, clock),
        }
    }

    /// The next chunk, `[n, 3, H, W]` Float in [0, 1] on `device`.
    fn next_chunk(&mut self, chunk_frames: usize, device: tch::Device, clock: &mut StageClock) -> Result<Option<Tensor>, ExecError> {
        match self {
            FrameSource::Read(reader) => {
                let chunk = StageClock::time(&mut clock.read, || reader.next_chunk())?;
                Ok(chunk.map(|chunk| frames::to_tensor(&chunk, device)))
            }
            FrameSource::Retimed(retimer) => retimer.next_chunk(chunk_frames, clock),
        }
    }
}

/// One chunk's model call and conversion to the output's samples, as the job makes them.
struct ChunkUpscaler<'a> {
    model: &'a (dyn Upscaler + 'static),
    scale: i64,
    depth: SampleDepth,
    workers: FrameWorkers,
    /// The job's cancel, asked between tiles and between the model's layers.
    stop: StopFlag,
    /// Told of each finished tile.
    progress: &'a TileProgress<'a>,
}

impl ChunkUpscaler<'_> {
    /// Out of memory is not a failure: the chunk is split in halves, then (one frame at a time) the tile
    /// side is halved, and that piece is retried. The smaller tile stays for the rest of the job.
    /// The output comes in consecutive runs of frames, in order. Each run is converted inside the retry:
    /// the conversion needs memory too, and a worker's float output is freed as soon as it is converted.
    fn resilient(&self, frames: &Tensor, tiling: &mut SpatialTiling, fallbacks: &mut Vec<String>) -> Result<Vec<RgbFrames>, ExecError> {
        let (tiles, scale, depth) = (&*tiling, self.scale, self.depth);
        let (stop, progress) = (&self.stop, self.progress);
        let forward = |model: &(dyn Upscaler + 'static), part: &Tensor| {
            let frames = part.size().first().copied().unwrap_or(0);
            let tile_done = |_done: usize, tiles: usize| progress.tile_done(frames, tiles);
            frames::to_rgb(&upscale_tiled_reporting(model, part, scale, tiles, stop, &tile_done)?, depth)
        };
        let error = match super::attempt::attempt(|| self.workers.run(self.model, frames, forward)) {
            Ok(upscaled) => return Ok(upscaled),
            Err(error) => error,
        };
        if !error.is_out_of_memory() {
            return Err(error);
        }
        let (n, _, h, w) = frames.size4().expect("[n, 3, H, W]");
        if n > 1 {
            let half = n / 2;
            fallbacks.push(format!("out of memory on {n} frames: split into {half} + {}", n - half));
            let mut pieces = self.resilient(&frames.narrow(0, 0, half), tiling, fallbacks)?;
            pieces.extend(self.resilient(&frames.narrow(0, half, n - half), tiling, fallbacks)?);
            return Ok(pieces);
        }
        let side = if tiling.tile == 0 { h.max(w) } else { tiling.tile };
        if side / 2 < MIN_FALLBACK_TILE {
            return Err(error);
        }
        fallbacks.push(format!("out of memory at tile {side}: tile {}", side / 2));
        tiling.tile = side / 2;
        self.resilient(frames, tiling, fallbacks)
    }
}

/// A chunk's progress tile by tile: the frames' worth its finished tiles make (a frame worker's part of `n`
/// frames in `t` tiles makes `n / t` per tile), as a fraction of the job. Frames written are counted at the
/// chunk's end, as before; only the fraction (and so the ETA) moves within it, never past where that end puts it.
struct TileProgress<'h> {
    progress: &'h tokio::sync::watch::Sender<Progress>,
    started: Instant,
    total: u64,
    chunk: std::sync::Mutex<ChunkShare>,
}

#[derive(Default)]
struct ChunkShare {
    /// Frames done before the chunk, and the chunk's frames (0: no chunk in hand, such as a still's alpha).
    before: u64,
    frames: u64,
    /// Frames' worth of finished tiles.
    worth: f64,
}

impl TileProgress<'_> {
    fn start_chunk(&self, before: u64, frames: u64) {
        *self.chunk.lock().unwrap_or_else(|p| p.into_inner()) = ChunkShare { before, frames, worth: 0.0 };
    }

    fn tile_done(&self, part_frames: i64, tiles: usize) {
        let mut chunk = self.chunk.lock().unwrap_or_else(|p| p.into_inner());
        if chunk.frames == 0 || tiles == 0 {
            return;
        }
        // A part retried after running out of memory counts its tiles again: never past the chunk.
        chunk.worth = (chunk.worth + part_frames.max(0) as f64 / tiles as f64).min(chunk.frames as f64);
        let total = self.total.max(chunk.before + chunk.frames);
        let fraction = (chunk.before as f64 + chunk.worth) / total as f64;
        let elapsed = self.started.elapsed().as_secs_f64();
        self.progress.send_replace(Progress::frames(chunk.before, total, elapsed).with_fraction(fraction, elapsed).at("upscale"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two frame workers' parts of a 4-frame chunk, 4 tiles each, after 8 frames of 20: each tile moves the
    /// fraction by half a frame; the frames written stay at the chunk's start until its end.
    #[test]
    fn a_chunk_moves_the_fraction_tile_by_tile() {
        let (sender, receiver) = tokio::sync::watch::channel(Progress::default());
        let progress = TileProgress { progress: &sender, started: Instant::now(), total: 20, chunk: Default::default() };
        progress.tile_done(2, 4);
        assert_eq!(receiver.borrow().fraction, 0.0, "no chunk in hand: nothing to report");
        progress.start_chunk(8, 4);
        let mut fractions = Vec::new();
        for _ in 0..4 {
            progress.tile_done(2, 4);
            progress.tile_done(2, 4);
            let seen = receiver.borrow().clone();
            assert_eq!((seen.done, seen.total, seen.stage.as_deref()), (8, 20, Some("upscale")), "{seen:?}");
            fractions.push(seen.fraction);
        }
        let expected = [9.0 / 20.0, 10.0 / 20.0, 11.0 / 20.0, 12.0 / 20.0];
        assert!(fractions.iter().zip(expected).all(|(got, want)| (got - want).abs() < 1e-9), "{fractions:?}");
        // Tiles counted again (an out-of-memory retry) never pass the chunk's end.
        progress.tile_done(4, 1);
        assert!((receiver.borrow().fraction - 12.0 / 20.0).abs() < 1e-9);
    }
}
