//! `restore`: SeedVR2's one-step video restoration. Frames stream from ffmpeg, are resized and cropped to
//! the target, gathered into overlapping temporal batches of `4n + 1` frames, each batch restored in one
//! DiT step between a VAE encode and decode and colour-fixed, the overlaps cross-faded, and the frames
//! stream on to the encoder. Memory follows the batch, not the clip.
mod batches;

use std::time::Instant;

use serde_json::json;
use tch::{Kind, Tensor};

use super::{frames, ExecError, Executor, JobHooks, JobSpec};
use crate::jobs::{JobOutcome, Progress, RestoreParams, Timings};
use crate::media::{self, FrameReader, FrameWriter, MediaInfo, ReadConfig, WriteConfig};
use crate::models::registry::{self, Family, ModelEntry};
use crate::models::restore::one_step::{self, Noise, StageSeconds};
use crate::models::restore::prepare::{self, FrameGeometry, TargetSize};
use crate::models::restore::restorer::{Restorer, RestorerFiles};
use crate::tiling::dit_memory::{batch_memory, longest_fitting_batch, BatchMemory, DitShape};
use crate::tiling::memory::MemoryModel;
use batches::{BatchBuffer, BatchShape, TemporalBlender};

const QUEUE_CHUNKS: usize = 2;
/// 21 frames (6 latent frames) per DiT call unless the job says otherwise: long enough for temporal
/// consistency, short enough for a 16 GB card at 720p with the 3B.
pub const DEFAULT_BATCH_FRAMES: i64 = 21;
/// Frames cross-faded between batches (when the batch is long enough to share them).
pub const DEFAULT_BATCH_OVERLAP: i64 = 4;
/// The original's `set_seed(666)`.
pub const DEFAULT_SEED: i64 = 666;

/// The job's parameters with every default filled in.
pub struct RestoreSettings {
    pub target: TargetSize,
    pub seed: i64,
    pub color_fix: crate::models::restore::colorfix::ColorFix,
    pub batch: BatchShape,
    /// The job named its batch: the memory plan reports on it but does not change it.
    pub batch_given: bool,
    overlap_given: bool,
}

impl RestoreSettings {
    /// Fills in defaults; what cannot run is refused (the API checks the same before queueing).
    pub fn resolve(scale: Option<i64>, params: Option<&RestoreParams>) -> Result<Self, String> {
        let params = params.cloned().unwrap_or_default();
        let target = match (params.height, params.width, scale) {
            (Some(height), Some(width), _) => TargetSize::Size { height, width },
            (None, None, scale) => {
                let scale = scale.unwrap_or(2);
                if !(1..=4).contains(&scale) {
                    return Err(format!("scale must be 1 to 4, not {scale}"));
                }
                TargetSize::Scale(scale as u32)
            }
            _ => return Err("give both height and width, or neither".into()),
        };
        let frames = params.batch_frames.unwrap_or(DEFAULT_BATCH_FRAMES);
        if frames < 1 || (frames - 1) % 4 != 0 {
            return Err(format!("batch_frames must be 4n + 1 (1, 5, 9, 13, ...), not {frames}"));
        }
        let overlap = params.batch_overlap.unwrap_or(default_overlap(frames));
        if overlap < 0 || overlap >= frames {
            return Err(format!("batch_overlap must be 0 to batch_frames − 1 ({}), not {overlap}", frames - 1));
        }
        Ok(Self {
            target,
            seed: params.seed.unwrap_or(DEFAULT_SEED),
            color_fix: params.color_fix.unwrap_or_default(),
            batch: BatchShape { frames, overlap },
            batch_given: params.batch_frames.is_some(),
            overlap_given: params.batch_overlap.is_some(),
        })
    }

    /// A shorter batch (chosen for memory), with the overlap the job gave if it still fits, else the default.
    fn with_batch_frames(&self, frames: i64) -> BatchShape {
        let overlap = if self.overlap_given { self.batch.overlap.min(frames - 1) } else { default_overlap(frames) };
        BatchShape { frames, overlap }
    }
}

fn default_overlap(frames: i64) -> i64 {
    if frames > 2 * DEFAULT_BATCH_OVERLAP {
        DEFAULT_BATCH_OVERLAP
    } else {
        0
    }
}

/// The DiT entry, its VAE entry and the prompt embedding file, or why they cannot run here.
pub fn restore_files(models_dir: &std::path::Path, model: &str, vae: Option<&str>) -> Result<(ModelEntry, RestorerFiles), ExecError> {
    let entries = registry::scan(models_dir);
    let dit = entries
        .iter()
        .find(|e| e.name == model && e.family == Family::Seedvr2Dit)
        .ok_or_else(|| ExecError::Invalid(format!("{model} is not a SeedVR2 DiT on this box")))?;
    let vae_name = vae.map(str::to_string).or_else(|| dit.pairs_with.clone()).ok_or_else(|| {
        ExecError::Invalid(format!("no SeedVR2 VAE in {}/{} to pair with {model}", models_dir.display(), registry::VAE_DIR))
    })?;
    let vae = entries
        .iter()
        .find(|e| e.name == vae_name && e.family == Family::Seedvr2)
        .ok_or_else(|| ExecError::Invalid(format!("{vae_name} is not a SeedVR2 VAE on this box")))?;
    let text = registry::text_embedding_file(models_dir).ok_or_else(|| {
        ExecError::Invalid(format!("no text embedding ({}) in {}/{}", registry::TEXT_EMBEDDING_FILES.join(", "), models_dir.display(), registry::DIT_DIR))
    })?;
    Ok((dit.clone(), RestorerFiles { dit: dit.files[0].clone(), vae: vae.files[0].clone(), text }))
}

pub(super) fn run(exec: &mut Executor, job: &JobSpec, hooks: &JobHooks, timings: &mut Timings) -> Result<JobOutcome, ExecError> {
    let settings = RestoreSettings::resolve(job.params.scale, job.params.restore.as_ref()).map_err(ExecError::Invalid)?;
    let (_, files) = restore_files(&exec.config.models_dir, &job.model, job.params.restore.as_ref().and_then(|p| p.vae.as_deref()))?;
    let info = input_media(exec, job, timings)?;
    let geometry = prepare::target_size(info.height as i64, info.width as i64, settings.target);
    let kind = exec.resolve_kind(job, timings);
    let load_started = Instant::now();
    let restorer = exec.models.restorer(&job.model, &files, exec.device, kind)?;
    timings.load_model = Some(load_started.elapsed().as_secs_f64());
    let memory = memory_plan(exec, job, &restorer, &settings, &geometry);
    let settings = RestoreSettings { batch: memory.batch, ..settings };
    let pipeline = Pipeline { exec, job, hooks, restorer: &restorer, settings: &settings, geometry, info: &info, memory };
    tch::no_grad(|| pipeline.run(timings))
}

/// How the batch fits the working memory: the batch (shortened to fit when the job did not name one)
/// and the estimates behind it, for the plan.
struct MemoryPlan {
    batch: BatchShape,
    budget_bytes: Option<u64>,
    estimate: BatchMemory,
    fits: Option<bool>,
    dit_weight_bytes: u64,
}

fn memory_plan(exec: &Executor, job: &JobSpec, restorer: &Restorer, settings: &RestoreSettings, geometry: &FrameGeometry) -> MemoryPlan {
    let kind = restorer.dit.kind();
    let vae_memory = MemoryModel::lookup(exec.device, Family::Seedvr2, kind, restorer.vae.config().block_out_channels[0]);
    let dit = restorer.dit.config();
    let shape = DitShape {
        dim: dit.dim,
        inner: dit.heads * dit.head_dim,
        mlp_hidden: dit.mlp_hidden,
        text_len: restorer.text.size()[0],
        element_bytes: kind.elt_size_in_bytes() as i64,
    };
    let estimate = |frames| batch_memory(vae_memory.as_ref(), &shape, frames, geometry.crop_h, geometry.crop_w);
    let budget_mib = exec.working_budget_mib(job);
    let dit_weight_bytes = restorer.dit.weight_bytes();
    if budget_mib == 0 {
        return MemoryPlan { batch: settings.batch, budget_bytes: None, estimate: estimate(settings.batch.frames), fits: None, dit_weight_bytes };
    }
    let budget_bytes = budget_mib << 20;
    let batch = if settings.batch_given {
        settings.batch
    } else {
        settings.with_batch_frames(longest_fitting_batch(settings.batch.frames, budget_bytes, estimate).0)
    };
    let estimate = estimate(batch.frames);
    MemoryPlan { batch, budget_bytes: Some(budget_bytes), fits: Some(estimate.peak_bytes() <= budget_bytes as f64), estimate, dit_weight_bytes }
}

fn input_media(exec: &Executor, job: &JobSpec, timings: &mut Timings) -> Result<MediaInfo, ExecError> {
    if let Some(info) = &job.input_media {
        return Ok(info.clone());
    }
    let started = Instant::now();
    let info = media::probe(&exec.config.tools, &job.input_path, &exec.config.limits)?;
    timings.probe = Some(timings.probe.unwrap_or(0.0) + started.elapsed().as_secs_f64());
    Ok(info)
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
}

/// Seconds this thread waited on each side, and the stages of the batches.
#[derive(Default)]
struct Clock {
    read: f64,
    write: f64,
    stages: StageSeconds,
    /// Out-of-memory retries, in the order they happened.
    fallbacks: Vec<String>,
}

impl Pipeline<'_> {
    fn run(&self, timings: &mut Timings) -> Result<JobOutcome, ExecError> {
        let (exec, info) = (self.exec, self.info);
        let mut reader = FrameReader::spawn(
            &exec.config.tools,
            ReadConfig { input: self.job.input_path.clone(), width: info.width, height: info.height, chunk_frames: exec.config.chunk_frames, queue_chunks: QUEUE_CHUNKS },
        )?;
        let mut writer = FrameWriter::spawn(
            &exec.config.tools,
            WriteConfig {
                output: self.job.output_path.clone(),
                width: self.geometry.crop_w as u32,
                height: self.geometry.crop_h as u32,
                fps_rational: info.fps_rational.clone(),
                audio_from: info.has_audio.then(|| self.job.input_path.clone()),
                crf: exec.config.output_crf,
                preset: exec.config.output_preset.clone(),
                queue_chunks: QUEUE_CHUNKS,
            },
        )?;
        let (mut buffer, mut blender) = (BatchBuffer::new(self.settings.batch), TemporalBlender::new(self.settings.batch));
        let (mut clock, mut done, mut batch_index) = (Clock::default(), 0u64, 0i64);
        let started = Instant::now();
        let mut input_ended = false;
        while !input_ended {
            self.hooks.check_cancelled()?;
            let waited = Instant::now();
            let chunk = reader.next_chunk()?;
            clock.read += waited.elapsed().as_secs_f64();
            match chunk {
                Some(chunk) => {
                    let prepared = prepare::prepare_frames(&frames::to_tensor(&chunk, exec.device), &self.geometry)?;
                    for i in 0..prepared.size()[1] {
                        buffer.push(prepared.select(1, i));
                    }
                }
                None => input_ended = true,
            }
            loop {
                let overlap = buffer.overlap_with_previous();
                let Some(batch) = buffer.next_batch(input_ended) else { break };
                self.hooks.check_cancelled()?;
                let restored = self.restore_resilient(&batch, batch_index, &mut clock)?;
                batch_index += 1;
                done += self.write(&mut writer, &blender.push(&restored, overlap), &mut clock)?;
                self.hooks.progress.send_replace(Progress::frames(done, info.frames.max(done), started.elapsed().as_secs_f64()));
            }
        }
        if let Some(rest) = blender.finish() {
            done += self.write(&mut writer, &rest, &mut clock)?;
        }
        self.hooks.check_cancelled()?;
        let flushed = Instant::now();
        writer.finish()?;
        clock.write += flushed.elapsed().as_secs_f64();
        let output_media = media::probe(&exec.config.tools, &self.job.output_path, &media::MediaLimits::unlimited()).ok();
        self.record(timings, &clock, done, started);
        Ok(JobOutcome {
            output_name: self.job.output_path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
            output_path: self.job.output_path.clone(),
            output_bytes: std::fs::metadata(&self.job.output_path).map(|m| m.len()).unwrap_or(0),
            output_media,
            timings: timings.clone(),
            plan: Some(self.plan(done, batch_index, &clock.fallbacks)),
            metrics: None,
        })
    }

    /// Out of memory is not a failure: the batch is restored again as shorter overlapping batches
    /// (halved, down to single frames), blended as the job's own batches are.
    fn restore_resilient(&self, batch: &Tensor, index: i64, clock: &mut Clock) -> Result<Tensor, ExecError> {
        let error = match super::attempt::attempt(|| self.restore_batch(batch, index, &mut clock.stages)) {
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
            out.push(blender.push(&self.restore_resilient(&part, index, clock)?, overlap));
        }
        out.extend(blender.finish());
        Ok(Tensor::cat(&out, 0))
    }

    /// `batch`: `[3, n, H, W]` prepared frames → `[n, 3, H, W]` restored, colour-fixed, in [-1, 1].
    fn restore_batch(&self, batch: &Tensor, index: i64, stages: &mut StageSeconds) -> Result<Tensor, ExecError> {
        let (padded, keep) = prepare::pad_frames_4n1(batch)?;
        let noise = Noise::Seeded(self.settings.seed.wrapping_add(index));
        let out = one_step::restore(&self.restorer.models(), &padded, keep, self.settings.color_fix, noise)?;
        stages.add(&out.seconds);
        Ok(out.frames.clamp(-1.0, 1.0))
    }

    fn write(&self, writer: &mut FrameWriter, frames_11: &Tensor, clock: &mut Clock) -> Result<u64, ExecError> {
        let count = frames_11.size()[0];
        if count == 0 {
            return Ok(0);
        }
        let rgb = frames::to_rgb(&((frames_11.to_kind(Kind::Float) + 1.0) * 0.5));
        let waited = Instant::now();
        writer.write(rgb)?;
        clock.write += waited.elapsed().as_secs_f64();
        Ok(count as u64)
    }

    fn record(&self, timings: &mut Timings, clock: &Clock, frames: u64, since: Instant) {
        timings.read = Some(clock.read);
        timings.write = Some(clock.write);
        timings.compute = Some(clock.stages.total());
        timings.encode = Some(clock.stages.encode);
        timings.dit = Some(clock.stages.dit);
        timings.decode = Some(clock.stages.decode);
        timings.color_fix = Some(clock.stages.color_fix);
        timings.fps = Some(frames as f64 / since.elapsed().as_secs_f64().max(1e-9));
    }

    fn plan(&self, frames: u64, batches: i64, fallbacks: &[String]) -> serde_json::Value {
        let g = &self.geometry;
        let dit = self.restorer.dit.config();
        let memory = &self.memory;
        json!({
            "frames": frames,
            "batch_frames": self.settings.batch.frames,
            "batch_overlap": self.settings.batch.overlap,
            "batches": batches,
            "resize": [g.resize_h, g.resize_w],
            "output": [g.crop_h, g.crop_w],
            "latent_grid": [prepare::padded_frame_count(self.settings.batch.frames) / 4 + 1, g.crop_h / 8, g.crop_w / 8],
            "seed": self.settings.seed,
            "color_fix": self.settings.color_fix.as_str(),
            "dit": { "variant": dit.variant.as_str(), "blocks": dit.num_blocks, "dim": dit.dim },
            "spatial_tiles": null,
            "device_memory": {
                "budget_bytes": memory.budget_bytes,
                "dit_weight_bytes": memory.dit_weight_bytes,
                "estimated_batch_bytes": memory.estimate,
                "fits": memory.fits,
            },
            "fallbacks": fallbacks,
        })
    }
}

/// About half a batch, still `4n + 1` frames (21 → 9, 9 → 5, 5 → 1).
fn halved_batch(frames: i64) -> i64 {
    ((frames - 1) / 2) / 4 * 4 + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn halved_batches_stay_4n_plus_1() {
        assert_eq!([21, 17, 13, 9, 5, 4, 2].map(halved_batch), [9, 9, 5, 5, 1, 1, 1]);
    }

    #[test]
    fn settings_fill_defaults_and_refuse_what_cannot_run() {
        let settings = RestoreSettings::resolve(None, None).unwrap();
        assert_eq!((settings.target, settings.seed, settings.batch), (TargetSize::Scale(2), DEFAULT_SEED, BatchShape { frames: 21, overlap: 4 }));
        let given = RestoreParams { batch_frames: Some(9), batch_overlap: Some(2), ..RestoreParams::default() };
        let settings = RestoreSettings::resolve(Some(3), Some(&given)).unwrap();
        assert_eq!((settings.target, settings.batch), (TargetSize::Scale(3), BatchShape { frames: 9, overlap: 2 }));
        assert_eq!(settings.with_batch_frames(5), BatchShape { frames: 5, overlap: 2 });
        assert_eq!(RestoreSettings::resolve(None, None).unwrap().with_batch_frames(5), BatchShape { frames: 5, overlap: 0 });
        for bad in [
            RestoreParams { batch_frames: Some(8), ..RestoreParams::default() },
            RestoreParams { batch_frames: Some(5), batch_overlap: Some(5), ..RestoreParams::default() },
            RestoreParams { height: Some(64), ..RestoreParams::default() },
        ] {
            assert!(RestoreSettings::resolve(None, Some(&bad)).is_err(), "{bad:?}");
        }
        assert!(RestoreSettings::resolve(Some(5), None).is_err());
    }
}
