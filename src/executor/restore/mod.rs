//! `restore`: SeedVR2's one-step video restoration. Frames stream from ffmpeg, are resized and cropped (or
//! padded) to the target, led by mirrored frames if asked, gathered into overlapping temporal batches of
//! `4n + 1` frames, each batch restored in one DiT step between a VAE encode and decode and colour-fixed,
//! the overlaps cross-faded, and the frames stream on to the encoder. Memory follows the batch, not the clip.
//! A scene cut ends the batches of one scene as the clip's end would: the next scene starts a batch of its
//! own, and no batch or cross-fade holds frames of two scenes.
mod batches;
mod memory;
mod prepend;
mod settings;
pub mod vae;

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Instant;

use tch::{Kind, Tensor};

use super::context::{Executor, JobHooks, JobSpec, PartFrames, Portion};
use super::error::ExecError;
use super::{alpha, frames};
use crate::jobs::plan::{DeviceMemoryPlan, DitPlan, JobPlan, RestorePlan};
use crate::jobs::{JobOutcome, Progress, Timings};
use super::stage_clock::StageClock;
use super::media_io::{finish_output, input_media, read_frames, write_output, FrameSink, OutputVideo};
use crate::media::{self, MediaInfo};
use crate::models::restore::dit_tiles::DitTile;
use crate::models::restore::one_step::{self, Noise, RestoreStep, Stage, StageSeconds};
use crate::models::restore::prepare::{self, FrameGeometry};
use crate::models::restore::restorer::{Restorer, RestorerOptions};
use crate::tiling::blend::TileBlender;
use crate::tiling::dit_tiles::DitTiles;
use batches::{BatchBuffer, BatchShape, TemporalBlender};
use memory::{memory_plan, MemoryInputs, MemoryPlan};
use prepend::PrependMirror;
use settings::halved_batch;
use super::resume::{Checkpoints, Mark};
use super::scene::CutFinder;
use vae::{StreamSettings, StreamedVae};
pub use settings::{restore_files, RestoreSettings, DEFAULT_BATCH_FRAMES, DEFAULT_BATCH_OVERLAP, DEFAULT_SEED, MAX_PREPEND_FRAMES, NOISE_SCALES, SCALES};


pub(super) fn run(exec: &mut Executor, job: &JobSpec, hooks: &JobHooks, timings: &mut Timings) -> Result<JobOutcome, ExecError> {
    if super::flashvsr::is_flashvsr(&exec.config.models_dir, &job.model) {
        return super::flashvsr::run(exec, job, hooks, timings);
    }
    let settings = RestoreSettings::resolve(job.params.scale, job.params.restore.as_ref()).map_err(ExecError::Invalid)?;
    let (_, files) = restore_files(&exec.config.models_dir, &job.model, job.params.restore.as_ref().and_then(|p| p.vae.as_deref()))?;
    let info = input_media(exec, job, timings)?;
    let geometry = prepare::target_size(info.height as i64, info.width as i64, settings.target, settings.fit);
    let kind = exec.resolve_kind(job, timings);
    let load_started = Instant::now();
    let placement = memory::block_placement(exec, &job.model, &files, kind);
    let restorer = exec.models.restorer(&job.model, &files, &RestorerOptions { device: exec.device, kind, placement })?;
    timings.load_model = Some(load_started.elapsed().as_secs_f64());
    let budget_mib = exec.working_budget_mib(job);
    let stream_settings = StreamSettings {
        budget_mib,
        max_latent_frames: exec.max_push_latent_frames(restorer.vae.temporal_factor()),
        kind,
        device: exec.device,
    };
    let mut vae = StreamedVae::new(&restorer.vae, stream_settings)?;
    vae.set_stop(hooks.stop_flag());
    let dit_budget_mib = exec.config.dit_memory_budget_mib;
    let memory = memory_plan(&MemoryInputs { restorer: &restorer, vae: &vae, settings: &settings, geometry: &geometry, budget_mib, dit_budget_mib });
    let settings = RestoreSettings { batch: memory.batch, ..settings };
    // The DiT's tiles decide the frames too (their seams are blended).
    let resume_settings = serde_json::json!({ "kind": format!("{kind:?}"), "batch": settings.batch, "budget_mib": budget_mib, "dit_tiles": memory.dit_tiles });
    let checkpoints = Checkpoints::open(exec, job, hooks, resume_settings, info.fps, !info.still);
    let factor = restorer.vae.spatial_factor();
    let dit_tiles = memory.dit_tiles.map(|tiles| blended_tiles(&tiles, geometry.model_h() / factor, geometry.model_w() / factor, exec.device)).unwrap_or_default();
    let stage_span: Rc<RefCell<Option<StageSpan>>> = Rc::default();
    let reporting = Rc::clone(&stage_span);
    vae.report_pushes(Box::new(move |within| {
        if let Some(span) = reporting.borrow().as_ref() {
            hooks.progress.send_replace(span.at(within));
        }
    }));
    let pipeline = Pipeline { exec, job, hooks, restorer: &restorer, settings: &settings, geometry, info: &info, memory, dit_tiles, checkpoints, stage_span };
    tch::no_grad(|| pipeline.run(&mut vae, timings))
}

struct Pipeline<'a> {
    exec: &'a Executor,
    job: &'a JobSpec,
    hooks: &'a JobHooks,
    restorer: &'a Restorer,
    settings: &'a RestoreSettings,
    geometry: FrameGeometry,
    info: &'a MediaInfo,
    memory: MemoryPlan,
    /// The DiT's spatial tiles and their blend weights; empty: the whole latent in one call.
    dit_tiles: Vec<DitTile>,
    checkpoints: Checkpoints,
    /// The batch stage in hand, for the VAE's pushes to report within.
    stage_span: Rc<RefCell<Option<StageSpan>>>,
}

/// A batch stage's part of the job: its progress runs from `from` to `to` as the stage's pushes are done.
struct StageSpan {
    progress: Progress,
    from: f64,
    to: f64,
    started: Instant,
}

impl StageSpan {
    /// The job's progress with `within` of the stage done.
    fn at(&self, within: f64) -> Progress {
        // Never past `to`, the next stage's start as `fraction_at` counts it: the fraction never goes back.
        let fraction = (self.from + (self.to - self.from) * within.clamp(0.0, 1.0)).min(self.to);
        self.progress.clone().with_fraction(fraction, self.started.elapsed().as_secs_f64())
    }
}

/// `tiles` over a `height × width` latent, each with its raised-cosine weight (all summing to one).
fn blended_tiles(tiles: &DitTiles, height: i64, width: i64, device: tch::Device) -> Vec<DitTile> {
    let grid = tiles.grid(height, width);
    let blender = TileBlender::new(&grid.rows, &grid.cols, device);
    grid.tiles()
        .enumerate()
        .filter_map(|(index, (rows, cols))| {
            let weight = blender.tile(index)?.weight.view([rows.len(), cols.len()]);
            Some(DitTile { rows: rows.start..rows.end, cols: cols.start..cols.end, weight })
        })
        .collect()
}

/// Seconds this thread waited on each side (the shared clock; its `compute` is split into the batches'
/// stages here), and the stages of the batches.
#[derive(Default)]
struct Clock {
    io: StageClock,
    stages: StageSeconds,
    /// Out-of-memory retries, in the order they happened.
    fallbacks: Vec<String>,
    /// Frames written so far.
    done: u64,
    /// Of the `prepend_frames` at the output's start, those dropped so far.
    dropped: i64,
    /// Batches restored so far (each draws its noise from the seed and its index), or passed over because a
    /// stopped run had restored and written them.
    batches: i64,
    /// Going on from a checkpoint: the batches to pass over, and the frames they held for the next blend.
    replay: Option<(i64, Option<Tensor>)>,
    /// Frames pushed into the batches so far (the mirrored lead included): where each batch starts.
    pushed: u64,
    /// The last batch was this run's to write (always, but in a part: see `BatchRole`).
    last_written: bool,
    /// A part met the first batch of the next part: it is done.
    part_done: bool,
}

/// What a run does with a batch, by where the batch starts (`jobs::parts`): a job run whole writes every
/// batch; a part writes the batches that start in its frames, restores the one before them only for the
/// frames it hands on to their cross-fade, passes over the earlier ones (their index still counts, for the
/// noise) and stops at the first batch of the next part. The batch after a batch starting at `s` starts at
/// `s + frames − overlap` in the same scene, so each batch is written by exactly one part and blended as a
/// single worker blends it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BatchRole {
    Write,
    HandOn,
    PassOver,
    NextPart,
}

/// The batches of the scene being read, waiting frames and the frames held for the next cross-fade.
struct SceneBatches {
    buffer: BatchBuffer,
    blender: TemporalBlender,
}

impl SceneBatches {
    fn new(shape: BatchShape) -> SceneBatches {
        SceneBatches { buffer: BatchBuffer::new(shape), blender: TemporalBlender::new(shape) }
    }
}

/// Shares of a batch's time per stage before any batch has been timed (the 3B at 720p on an H100:
/// the VAE decode is three quarters of it, docs/benchmarks.md); measured shares replace them.
const FIRST_BATCH_SHARES: StageSeconds = StageSeconds { encode: 0.12, dit: 0.1, decode: 0.75, color_fix: 0.03 };

/// The job's share done when `stage` of batch `index` (of `batches`) starts: whole batches, then the
/// stages before it, weighted by the time each stage took in the batches so far.
fn fraction_at(index: i64, batches: i64, stage: Stage, timed: &StageSeconds) -> f64 {
    let weights = if timed.total() > 0.0 { timed } else { &FIRST_BATCH_SHARES };
    let before: f64 = Stage::ALL.iter().take_while(|s| **s != stage).map(|s| s.of(weights)).sum();
    (index as f64 + before / weights.total()) / batches.max(1) as f64
}

/// The job's share done when `stage` of batch `index` ends: the next stage's start, the same number
/// `fraction_at` gives it (computed another way, it came out one rounding step lower, and went back).
fn fraction_after(index: i64, batches: i64, stage: Stage, timed: &StageSeconds) -> f64 {
    match Stage::ALL.iter().skip_while(|s| **s != stage).nth(1) {
        Some(next) => fraction_at(index, batches, *next, timed),
        None => (index + 1) as f64 / batches.max(1) as f64,
    }
}

impl Pipeline<'_> {
    fn run(&self, vae: &mut StreamedVae, timings: &mut Timings) -> Result<JobOutcome, ExecError> {
        let (exec, info) = (self.exec, self.info);
        let mut reader = read_frames(exec, self.job, info, exec.config.chunk_frames)?;
        let video = OutputVideo::like(info, self.geometry.crop_w as u32, self.geometry.crop_h as u32);
        let mut writer = write_output(exec, self.job, info, video, &self.checkpoints.folder.dir, self.checkpoints.finished())?;
        let mut scene = SceneBatches::new(self.settings.batch);
        let mut clock = self.resumed_clock()?;
        let mut mirror = PrependMirror::new(self.settings.prepend_frames);
        let mut cuts = CutFinder::new(self.settings.scene_threshold);
        let started = Instant::now();
        let mut input_ended = false;
        while !input_ended {
            self.hooks.between_chunks()?;
            let waited = Instant::now();
            let chunk = reader.next_chunk()?;
            clock.io.read += waited.elapsed().as_secs_f64();
            let ready: Vec<Tensor> = match chunk {
                Some(chunk) => {
                    let prepared = prepare::prepare_frames(&frames::to_tensor(&chunk, exec.device), &self.geometry)?;
                    (0..prepared.size()[1]).flat_map(|i| mirror.push(prepared.select(1, i))).collect()
                }
                None => {
                    input_ended = true;
                    mirror.finish()
                }
            };
            for frame in ready {
                // Prepared frames are in [-1, 1]; the measure takes [0, 1].
                if cuts.starts_scene(&((&frame + 1.0) * 0.5).unsqueeze(0)) {
                    self.restore_batches(vae, &mut scene, true, &mut writer, &mut clock, started)?;
                    scene = SceneBatches::new(self.settings.batch);
                }
                scene.buffer.push(frame);
                clock.pushed += 1;
            }
            if !clock.part_done {
                self.restore_batches(vae, &mut scene, input_ended, &mut writer, &mut clock, started)?;
            }
            if clock.part_done {
                break;
            }
        }
        self.hooks.between_chunks()?;
        let done = clock.done;
        self.hooks.progress.send_replace(self.progress(&clock, started).with_fraction(1.0, started.elapsed().as_secs_f64()).at("write"));
        if let Some(still) = writer.still() {
            if let Some(alpha) = alpha::read(exec, self.job, info)? {
                still.set_alpha(self.resized_alpha(&alpha, still.depth())?)?;
            }
        }
        let flushed = Instant::now();
        let output_media = match self.job.portion {
            // A part's segments stay in its folder, with a checkpoint that names them all, for the join.
            Portion::Part { .. } => {
                self.checkpoints.save(&mut writer, Mark::Restore { batches: clock.batches, dropped: clock.dropped, held: None }, None)?;
                None
            }
            Portion::Whole | Portion::Join { .. } => {
                let media = finish_output(exec, self.job, writer)?;
                self.checkpoints.folder.remove();
                media
            }
        };
        clock.io.write += flushed.elapsed().as_secs_f64();
        self.record(timings, &clock, done, started);
        // Cuts are counted in the frames the batches saw, which begin with the mirrored lead.
        let lead = self.settings.prepend_frames as u64;
        let scene_cuts = cuts.cuts.iter().filter(|cut| **cut > lead).map(|cut| cut - lead).collect();
        Ok(JobOutcome {
            output_name: self.job.output_path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
            output_path: self.job.output_path.clone(),
            output_bytes: std::fs::metadata(&self.job.output_path).map(|m| m.len()).unwrap_or(0),
            output_media,
            timings: timings.clone(),
            plan: Some(JobPlan::Restore(self.plan(done, clock.batches, scene_cuts, vae, clock.fallbacks))),
            metrics: None,
        })
    }

    /// Where a checkpoint left off: frames written and dropped, batches to pass over.
    fn resumed_clock(&self) -> Result<Clock, ExecError> {
        let mut clock = Clock::default();
        // A later part's output starts past the mirrored lead: an earlier part dropped it.
        if self.part().is_some_and(|part| part.first > 0) {
            clock.dropped = self.settings.prepend_frames;
        }
        let Some(checkpoint) = &self.checkpoints.resumed else { return Ok(clock) };
        let Some(mark) = &checkpoint.restore else { return Ok(clock) };
        let held = mark.held.as_deref().map(|name| self.checkpoints.folder.held(name, self.exec.device)).transpose()?;
        clock.done = checkpoint.frames;
        clock.dropped = mark.dropped;
        clock.replay = Some((mark.batches, held));
        Ok(clock)
    }

    /// Restores the batches that are ready and writes what is final; at the end of the scene (the input's
    /// end, or a cut) the rest as well, with the frames held for a cross-fade that will not come. A segment
    /// that has grown long enough then ends, with a checkpoint.
    fn restore_batches(&self, vae: &mut StreamedVae, scene: &mut SceneBatches, scene_ended: bool, writer: &mut FrameSink, clock: &mut Clock, started: Instant) -> Result<(), ExecError> {
        let mut restored_any = false;
        loop {
            let overlap = scene.buffer.overlap_with_previous();
            let start = clock.pushed - scene.buffer.buffered();
            let role = self.role_of(start);
            if role == BatchRole::NextPart {
                clock.part_done = true;
                return Ok(());
            }
            let Some(batch) = scene.buffer.next_batch(scene_ended) else { break };
            self.hooks.between_chunks()?;
            if let Some((batches, held)) = clock.replay.as_mut() {
                // A stopped run restored and wrote this batch: passed over, but counted (its noise index).
                clock.batches += 1;
                clock.last_written = role == BatchRole::Write;
                if clock.batches == *batches {
                    scene.blender.resume_with(held.take());
                    clock.replay = None;
                }
                self.hooks.progress.send_replace(self.progress(clock, started).at(format!("resume: batch {}", clock.batches)));
                continue;
            }
            clock.last_written = role == BatchRole::Write;
            if role == BatchRole::PassOver {
                clock.batches += 1;
                continue;
            }
            let pad_to = if self.settings.uniform_batches { self.settings.batch.frames } else { 1 };
            let restored = self.restore_resilient(vae, &batch, clock.batches, pad_to, clock, started)?;
            clock.batches += 1;
            let done = scene.blender.push(&restored, overlap);
            if role == BatchRole::Write {
                clock.done += self.write(writer, &done, clock)?;
                restored_any = true;
            }
        }
        if scene_ended {
            // The scene's last frames are the writer's of its last batch.
            if let Some(rest) = scene.blender.finish().filter(|_| clock.last_written) {
                clock.done += self.write(writer, &rest, clock)?;
            }
        }
        if restored_any && writer.frames_in_segment().is_some_and(|frames| frames >= self.checkpoints.segment_frames) {
            let waited = Instant::now();
            self.checkpoints.save(writer, Mark::Restore { batches: clock.batches, dropped: clock.dropped, held: scene.blender.held() }, None)?;
            clock.io.write += waited.elapsed().as_secs_f64();
        }
        Ok(())
    }

    /// Out of memory is not a failure: the batch is restored again as shorter overlapping batches
    /// (halved, down to single frames), blended as the job's own batches are. `pad_to`: the frames a shorter
    /// batch is padded to (`uniform_batches`; 1: none beyond the model's `4n + 1`).
    fn restore_resilient(&self, vae: &mut StreamedVae, batch: &Tensor, index: i64, pad_to: i64, clock: &mut Clock, started: Instant) -> Result<Tensor, ExecError> {
        let result = super::attempt::attempt(|| self.restore_batch(vae, batch, index, pad_to, clock, started));
        clock.fallbacks.extend(vae.take_fallbacks());
        let error = match result {
            Ok(restored) => return Ok(restored),
            Err(error) => error,
        };
        let frames = batch.size()[1];
        if !error.is_out_of_memory() || frames == 1 {
            return Err(error);
        }
        let shorter = BatchShape { frames: halved_batch(frames), overlap: self.settings.batch.overlap.min(halved_batch(frames) - 1) };
        clock.fallbacks.push(format!("out of memory on a batch of {frames} frames: batches of {} frames, {} shared", shorter.frames, shorter.overlap));
        crate::device::release_cached_memory(self.exec.device);
        let (mut buffer, mut blender) = (BatchBuffer::new(shorter), TemporalBlender::new(shorter));
        for i in 0..frames {
            buffer.push(batch.select(1, i));
        }
        let mut out = Vec::new();
        loop {
            let overlap = buffer.overlap_with_previous();
            let Some(part) = buffer.next_batch(true) else { break };
            let pad_to = if pad_to > 1 { shorter.frames } else { 1 };
            out.push(blender.push(&self.restore_resilient(vae, &part, index, pad_to, clock, started)?, overlap));
        }
        out.extend(blender.finish());
        Ok(Tensor::cat(&out, 0))
    }

    /// `batch`: `[3, n, H, W]` prepared frames → `[n, 3, H, W]` restored, colour-fixed, in [-1, 1].
    fn restore_batch(&self, vae: &mut StreamedVae, batch: &Tensor, index: i64, pad_to: i64, clock: &mut Clock, started: Instant) -> Result<Tensor, ExecError> {
        let (padded, keep) = prepare::pad_frames_to(batch, pad_to)?;
        let noise = Noise::Seeded(self.settings.seed.wrapping_add(index));
        let g = &self.geometry;
        let keep_size = (g.pad_bottom > 0 || g.pad_right > 0).then_some([g.crop_h, g.crop_w]);
        let (color_fix, noise_scales) = (self.settings.color_fix, self.settings.noise);
        let step = RestoreStep { input: &padded, keep, keep_size, color_fix, noise, noise_scales };
        let batches = self.settings.batch.batches(self.info.frames as i64 + self.settings.prepend_frames).max(index + 1);
        let progress = self.progress(clock, started);
        let timed = clock.stages;
        let mut starting = |stage: Stage| {
            let (from, to) = (fraction_at(index, batches, stage, &timed), fraction_after(index, batches, stage, &timed));
            let progress = progress.clone().at(format!("{} batch {}/{batches}", stage.as_str(), index + 1));
            let span = StageSpan { progress, from, to, started };
            self.hooks.progress.send_replace(span.at(0.0));
            *self.stage_span.borrow_mut() = Some(span);
        };
        let out = one_step::restore_tiled_in_stages_until(vae, &self.restorer.models(), step, &self.dit_tiles, &mut starting, &self.hooks.stop_flag())?;
        clock.stages.add(&out.seconds);
        Ok(out.frames.clamp(-1.0, 1.0))
    }

    /// This run's part of the job, in the frames the batches start at; none when it runs whole.
    fn part(&self) -> Option<PartFrames> {
        match self.job.portion {
            Portion::Part { outputs } => outputs,
            Portion::Whole | Portion::Join { .. } => None,
        }
    }

    /// What this run does with the batch that starts at frame `start` (`BatchRole`).
    fn role_of(&self, start: u64) -> BatchRole {
        let Some(part) = self.part() else { return BatchRole::Write };
        let step = (self.settings.batch.frames - self.settings.batch.overlap).max(1) as u64;
        match part.count {
            Some(count) if start >= part.first + count => BatchRole::NextPart,
            _ if start >= part.first => BatchRole::Write,
            _ if start + step >= part.first => BatchRole::HandOn,
            _ => BatchRole::PassOver,
        }
    }

    /// Frames written of the clip's, before a fraction and a stage are set.
    fn progress(&self, clock: &Clock, started: Instant) -> Progress {
        Progress::frames(clock.done, self.info.frames.max(clock.done), started.elapsed().as_secs_f64())
    }

    /// A still's alpha, resized and cropped as its colour was (the same antialiased bicubic), at `depth`.
    fn resized_alpha(&self, alpha: &Tensor, depth: media::SampleDepth) -> Result<Vec<u8>, ExecError> {
        let g = &self.geometry;
        // `[3, 1, h, w]` in [-1, 1], padded to the model's size in `fit=pad`: cut back to the output's.
        let prepared = prepare::prepare_frames(&alpha::as_grey_picture(alpha), g)?;
        let plane = prepared.select(0, 0).narrow(1, 0, g.crop_h).narrow(2, 0, g.crop_w).unsqueeze(0);
        alpha::plane_from_unit(&((plane + 1.0) * 0.5), depth)
    }

    fn write(&self, writer: &mut FrameSink, frames_11: &Tensor, clock: &mut Clock) -> Result<u64, ExecError> {
        // The mirrored lead (`prepend_frames`) was only there for the batches: it is not the clip's.
        let skip = (self.settings.prepend_frames - clock.dropped).clamp(0, frames_11.size()[0]);
        clock.dropped += skip;
        let frames_11 = frames_11.narrow(0, skip, frames_11.size()[0] - skip);
        let count = frames_11.size()[0];
        if count == 0 {
            return Ok(0);
        }
        let rgb = frames::to_rgb(&((frames_11.to_kind(Kind::Float) + 1.0) * 0.5), writer.depth())?;
        let waited = Instant::now();
        writer.write(rgb)?;
        clock.io.write += waited.elapsed().as_secs_f64();
        Ok(count as u64)
    }

    fn record(&self, timings: &mut Timings, clock: &Clock, frames: u64, since: Instant) {
        timings.read = Some(clock.io.read);
        timings.write = Some(clock.io.write);
        timings.compute = Some(clock.stages.total());
        timings.encode = Some(clock.stages.encode);
        timings.dit = Some(clock.stages.dit);
        timings.decode = Some(clock.stages.decode);
        timings.color_fix = Some(clock.stages.color_fix);
        timings.fps = Some(frames as f64 / since.elapsed().as_secs_f64().max(1e-9));
    }

    fn plan(&self, frames: u64, batches: i64, scene_cuts: Vec<u64>, vae: &StreamedVae, fallbacks: Vec<String>) -> RestorePlan {
        let g = &self.geometry;
        let dit = self.restorer.dit.config();
        let memory = &self.memory;
        RestorePlan {
            frames,
            batch_frames: self.settings.batch.frames,
            batch_overlap: self.settings.batch.overlap,
            batches,
            resize: [g.resize_h, g.resize_w],
            output: [g.crop_h, g.crop_w],
            fit: self.settings.fit,
            padding: [g.pad_bottom, g.pad_right],
            latent_grid: [prepare::padded_frame_count(self.settings.batch.frames) / 4 + 1, g.model_h() / 8, g.model_w() / 8],
            seed: self.settings.seed,
            color_fix: self.settings.color_fix,
            prepend_frames: self.settings.prepend_frames,
            input_noise_scale: self.settings.noise.input,
            latent_noise_scale: self.settings.noise.latent,
            scene_cuts,
            scene_threshold: self.settings.scene_threshold,
            uniform_batches: self.settings.uniform_batches,
            dit: DitPlan {
                variant: dit.variant.as_str().into(),
                blocks: dit.num_blocks,
                dim: dit.dim,
                block_placement: self.restorer.dit.placement().as_str().into(),
                host_block_bytes: self.restorer.dit.host_block_bytes(),
            },
            vae: vae.plans.clone(),
            spatial_tiles: vae.plans.decode.as_ref().and_then(|plan| plan.spatial),
            dit_tiles: memory.dit_tiles,
            device_memory: DeviceMemoryPlan {
                budget_bytes: memory.budget_bytes,
                dit_weight_bytes: memory.dit_weight_bytes,
                estimated_batch_bytes: memory.estimate,
                fits: memory.fits,
            },
            fallbacks,
            resumed_from: self.checkpoints.resumed_from(),
        }
    }
}
