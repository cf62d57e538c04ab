//! The scheduler's side of jobs run in parts (`jobs::parts`): cutting a job it claimed when more than one
//! worker could run its parts, running a part (its frames as the job's `range`, into its own folder inside
//! the job's resume folder), joining the parts, and moving the job on as each part ends.
//!
//! Which jobs are cut: an upscale (without `interpolate`), an interpolation or a SeedVR2 restore of a video
//! (not a still, not a PNG result, without `metrics`) whose frames make at least two segments (`checkpoint_s`),
//! when at least two workers were heard of within two leases. An upscale is cut on its input frames, an
//! interpolation on its output frames, a restore where its batches start. `parts=auto` (the default) cuts it into one part per such worker, `parts=N` into N
//! (at most its segments), `parts=1` never.
use std::path::PathBuf;

use uuid::Uuid;

use super::output_path::output_path_for;
use super::scheduler::Scheduler;
use crate::executor::{PartFrames, Portion};
use crate::jobs::model::{now_rfc3339, seconds_between, Estimate, Job, JobParams, Timings};
use crate::jobs::parts::{plan_parts, JobPart, PartsChoice, Settled, SplitState};
use crate::jobs::plan::JobPlan;
use crate::jobs::shared_resume::{delete_stored, fetch_stored, remove_dir, resume_dir};
use crate::jobs::store::{Lease, NewPart};
use crate::media::{InputRange, OutputFormat};
use crate::models::Op;

/// How many parts `job` may be cut into, as its `parts` asks; none for a job that is not cut.
pub fn parts_choice(job: &Job, models_dir: &std::path::Path) -> Option<PartsChoice> {
    let choice = match job.params.parts.as_deref() {
        None => PartsChoice::Auto,
        Some(text) => PartsChoice::parse(text)?,
    };
    let media = job.input.media.as_ref()?;
    let format = job.params.output_format.unwrap_or(OutputFormat::H264);
    let cuttable = match job.op {
        Op::Upscale => job.params.interpolate.is_none(),
        Op::Interpolate => true,
        // FlashVSR streams the clip through one KV cache.
        Op::Restore => !crate::executor::flashvsr::is_flashvsr(models_dir, &job.model),
        // The VAE ops' causal caches see the whole clip.
        Op::VaeEncode | Op::VaeDecode | Op::VaeReconstruct => false,
    };
    let whole_only = !cuttable || media.still || format.is_png() || job.params.metrics == Some(true) || job.part.is_some() || job.split.is_some();
    (!whole_only && choice != PartsChoice::Count(1)).then_some(choice)
}

/// The frames a job is cut on, and how many of them make a segment: an upscale's input frames (one output
/// frame each), an interpolation's output frames.
fn frames_to_cut(job: &Job, checkpoint_s: f64) -> Option<(u64, u64)> {
    let media = job.input.media.as_ref()?;
    let segment = |fps: f64| (checkpoint_s * fps).round().max(1.0) as u64;
    match job.op {
        Op::Interpolate => {
            let (frames, fps) = crate::executor::interpolate::planned_output(media, job.params.interpolate.as_ref())?;
            Some((frames, segment(fps)))
        }
        // A restore is cut where its batches start (the mirrored lead counted): whole steps of its batches.
        Op::Restore => {
            let settings = crate::executor::restore::RestoreSettings::resolve(job.params.scale, job.params.restore.as_ref()).ok()?;
            let step = (settings.batch.frames - settings.batch.overlap).max(1) as u64;
            Some((media.frames + settings.prepend_frames.max(0) as u64, segment(media.fps).div_ceil(step) * step))
        }
        Op::Upscale | Op::VaeEncode | Op::VaeDecode | Op::VaeReconstruct => Some((media.frames, segment(media.fps))),
    }
}

impl Scheduler {
    /// Where part `part` of `job` writes: a name inside the job's resume folder, whose own resume folder holds
    /// the part's segments and checkpoint.
    pub(super) fn part_output_path(job: &Job, part: &JobPart) -> PathBuf {
        let whole = output_path_for(job);
        let extension = whole.extension().map(|e| e.to_string_lossy().into_owned()).unwrap_or_default();
        resume_dir(&whole).join(format!("part_{:03}.{extension}", part.index))
    }

    /// What a run of part `part` of `job` is given: its parameters and what of the job it makes. An upscale's
    /// part reads its frames alone (the job's range, within the job's own range); an interpolation's reads the
    /// input from the start, passing over the output frames before its own without calling the model.
    pub(super) fn part_run(job: &Job, part: &JobPart) -> (JobParams, Portion) {
        match job.op {
            Op::Interpolate | Op::Restore => (job.params.clone(), Portion::Part { outputs: Some(PartFrames { first: part.first_frame, count: part.frames }) }),
            Op::Upscale | Op::VaeEncode | Op::VaeDecode | Op::VaeReconstruct => {
                let span = job.input.media.as_ref().and_then(|media| media.span);
                let start = span.map_or(0, |span| span.start_frame);
                let frames = part.frames.or_else(|| span.map(|span| span.frames.saturating_sub(part.first_frame)));
                let range = InputRange { start: None, start_frame: Some(start + part.first_frame), frames, duration: None };
                (JobParams { range: Some(range), ..job.params.clone() }, Portion::Part { outputs: None })
            }
        }
    }

    /// Cuts the job this worker just claimed into parts when it should be (see the module); true when it was
    /// (this worker then lets go of it, and claims what comes next: most likely one of its parts).
    pub(super) async fn cut_into_parts(&self, job: &Job) -> bool {
        let Some(choice) = parts_choice(job, &self.worker.models_dir) else { return false };
        let Some((frames, segment_frames)) = frames_to_cut(job, self.config.checkpoint_s) else { return false };
        let workers = match self.store.workers(self.worker.lease * 2).await {
            Ok(workers) => workers.len(),
            Err(error) => {
                tracing::warn!(id = %job.id, %error, "cannot count the workers; the job runs whole");
                return false;
            }
        };
        if workers < 2 {
            return false;
        }
        let plan = plan_parts(frames, segment_frames, choice.wanted(workers));
        if plan.len() < 2 {
            return false;
        }
        let count = plan.len();
        let parts: Vec<NewPart> = plan
            .iter()
            .enumerate()
            .map(|(index, &(first_frame, part_frames))| NewPart {
                id: Uuid::new_v4(),
                part: JobPart { of: job.id, index, count, first_frame, frames: part_frames },
                estimate: job.estimate.as_ref().map(|estimate| share_of(estimate, part_frames.unwrap_or(frames.saturating_sub(first_frame)), frames)),
            })
            .collect();
        let lease = Lease { id: job.id, worker: self.worker.name.clone(), attempt: job.attempts };
        match self.store.split(&lease, &parts).await {
            Ok(true) => {
                tracing::info!(id = %job.id, parts = count, workers, segment_frames, "job cut into parts");
                let _ = self.events.send(job.id);
                self.wake.notify_waiters();
                true
            }
            Ok(false) => false,
            Err(error) => {
                tracing::warn!(id = %job.id, %error, "cannot cut the job into parts; it runs whole");
                false
            }
        }
    }

    /// What a run of `job` does: all of it, one part, or the join of its parts (whose segments are fetched
    /// from the shared storage first, when there is one).
    pub(super) async fn portion_of(&self, job: &Job, output_path: &std::path::Path) -> Result<Portion, String> {
        if let Some(part) = &job.part {
            return Ok(Self::part_run(job, part).1);
        }
        if job.split != Some(SplitState::Join) {
            return Ok(Portion::Whole);
        }
        let parts = self.store.parts_of(job.id).await.map_err(|e| format!("cannot read the job's parts: {e}"))?;
        let mut dirs = Vec::with_capacity(parts.len());
        for part in &parts {
            let Some(info) = &part.part else { continue };
            let dir = resume_dir(&resume_dir(output_path).join(Self::part_output_path(job, info).file_name().unwrap_or_default()));
            fetch_stored(&self.files, part.id, &dir).await.map_err(|e| format!("cannot fetch {} from the shared storage: {e}", info.describe()))?;
            dirs.push(dir);
        }
        Ok(Portion::Join { parts: dirs, plan: joined_plan(&parts) })
    }

    /// Moves the job `of` on after one of its parts ended: to its join, or to its end (its parts' files then
    /// go); the lease keeper does the same for parts whose worker was lost.
    pub(super) async fn settle_parts_of(&self, of: Uuid) {
        match self.store.settle_split(of).await {
            Ok(Some(Settled::Join)) => {
                tracing::info!(id = %of, "every part of the job is done; it is queued to be joined");
                self.wake.notify_waiters();
            }
            Ok(Some(Settled::Failed(_) | Settled::Cancelled { parts_running: false })) => self.remove_parts_files(of).await,
            Ok(_) => {}
            Err(error) => tracing::warn!(id = %of, %error, "cannot move the job on after its part; the lease keeper will"),
        }
        let _ = self.events.send(of);
    }

    /// A job whose parts will not be joined (failed, cancelled): their segments here and in the storage.
    async fn remove_parts_files(&self, of: Uuid) {
        let Ok(Some(job)) = self.store.get(of).await else { return };
        let dir = resume_dir(&self.files.local(of, &output_path_for(&job).to_string_lossy()));
        if let Err(error) = remove_dir(&dir).await {
            tracing::warn!(id = %of, %error, "could not remove the parts' segments");
        }
        self.forget_stored_parts(of).await;
    }

    /// A joined job's timings as a whole (`joined_timings`); the join's own when its parts cannot be read.
    pub(super) async fn whole_timings(&self, job: &Job, join: Timings) -> Timings {
        match self.store.parts_of(job.id).await {
            Ok(parts) => joined_timings(&parts, &join, job.started_at.as_deref(), &now_rfc3339()),
            Err(error) => {
                tracing::warn!(id = %job.id, %error, "cannot read the parts' timings");
                join
            }
        }
    }

    /// The parts' folders in the shared storage, once joined or of no more use.
    pub(super) async fn forget_stored_parts(&self, of: Uuid) {
        if let Ok(parts) = self.store.parts_of(of).await {
            for part in parts {
                delete_stored(&self.files, part.id).await;
            }
        }
    }
}

/// A job run in parts, timed as a whole: `total` from the start of its first claim (`started_at`, which its
/// join's claim keeps) to `now`, and the frames per second over it; each stage summed over the parts (seconds
/// of work on every worker, which may add up to more than `total`) with the join's copy in `write`; the
/// largest peaks.
fn joined_timings(parts: &[Job], join: &Timings, started_at: Option<&str>, now: &str) -> Timings {
    let theirs: Vec<&Timings> = parts.iter().filter_map(|part| part.timings.as_ref()).collect();
    let sum = |stage: fn(&Timings) -> Option<f64>| theirs.iter().filter_map(|t| stage(t)).reduce(|a, b| a + b);
    let peak = |of: fn(&Timings) -> Option<u64>| theirs.iter().filter_map(|t| of(t)).chain(of(join)).max();
    let total = started_at.and_then(|start| seconds_between(start, now)).or(join.total);
    let frames: u64 = parts.iter().filter_map(|part| part.progress.as_ref()).map(|p| p.done).sum();
    Timings {
        queued: join.queued,
        probe: join.probe,
        load_model: sum(|t| t.load_model),
        read: sum(|t| t.read),
        compute: sum(|t| t.compute),
        write: [sum(|t| t.write), join.write].into_iter().flatten().reduce(|a, b| a + b),
        total,
        encode: sum(|t| t.encode),
        dit: sum(|t| t.dit),
        decode: sum(|t| t.decode),
        color_fix: sum(|t| t.color_fix),
        fps: total.filter(|s| *s > 0.0).map(|s| frames as f64 / s),
        peak_host_bytes: peak(|t| t.peak_host_bytes),
        peak_device_bytes: peak(|t| t.peak_device_bytes),
        device: theirs.first().and_then(|t| t.device.clone()).or_else(|| join.device.clone()),
        dtype: theirs.first().and_then(|t| t.dtype.clone()).or_else(|| join.dtype.clone()),
        lent: sum(|t| t.lent),
    }
}

/// `estimate` for `frames` of the job's `total`.
fn share_of(estimate: &Estimate, frames: u64, total: u64) -> Estimate {
    let share = frames as f64 / total.max(1) as f64;
    Estimate { frames, seconds: estimate.seconds.map(|s| s * share), ..estimate.clone() }
}

/// How the parts ran, as the job's plan, over every part's frames: an upscale's first part's; an
/// interpolation's or a restore's last part's, whose counts (frames made by the model, batches, scene cuts)
/// cover the whole clip, as it passed over every earlier part's frames to reach its own.
fn joined_plan(parts: &[Job]) -> Option<JobPlan> {
    let plans: Vec<&JobPlan> = parts.iter().filter_map(|part| part.plan.as_ref()).collect();
    // Only the ops that are cut have parts.
    let frames = |plan: &JobPlan| match plan {
        JobPlan::Upscale(p) => p.frames,
        JobPlan::Interpolate(p) => p.frames,
        JobPlan::Restore(p) => p.frames,
        JobPlan::Vae(_) | JobPlan::FlashVsr(_) | JobPlan::Other(_) => 0,
    };
    let total: u64 = plans.iter().map(|plan| frames(plan)).sum();
    let mut plan = match plans.first()? {
        JobPlan::Upscale(_) => (*plans.first()?).clone(),
        _ => (*plans.last()?).clone(),
    };
    match &mut plan {
        JobPlan::Upscale(p) => (p.frames, p.resumed_from) = (total, None),
        JobPlan::Interpolate(p) => (p.frames, p.resumed_from) = (total, None),
        JobPlan::Restore(p) => (p.frames, p.resumed_from) = (total, None),
        JobPlan::Vae(_) | JobPlan::FlashVsr(_) | JobPlan::Other(_) => {}
    }
    Some(plan)
}
