//! The interpolate op: ffmpeg decode → RIFE between neighbouring frames → ffmpeg encode at the new rate.
//! Input frames at an output time are written as they are; the frames between come from the model, or,
//! across a scene cut, are the earlier frame held. The output lasts as long as the input (its last frame
//! held), so the audio and subtitles copied beside it stay in step.
pub mod scene;
pub mod schedule;
pub mod settings;
mod window;

use std::time::Instant;

use tch::Tensor;

use super::media_io::{input_media, read_frames, write_frames, OutputVideo};
use super::stage_clock::StageClock;
use super::{frames, ExecError, Executor, JobHooks, JobSpec};
use crate::jobs::plan::{InterpolatePlan, JobPlan};
use crate::jobs::{JobOutcome, Progress, Timings};
use crate::media;
use crate::models::registry;
use schedule::{FrameRate, Retiming, Source};
use settings::InterpolateSettings;
use window::FrameWindow;

pub use scene::DEFAULT_THRESHOLD as DEFAULT_SCENE_THRESHOLD;

/// Above this many pixels the motion is estimated at half resolution (RIFE's advice: `--scale 0.5` for 4K,
/// where a motion spans twice the pixels its flow network was trained on).
const FULL_SCALE_FLOW_MAX_PIXELS: u64 = 2560 * 1440;

pub(super) fn run(exec: &mut Executor, job: &JobSpec, hooks: &JobHooks, timings: &mut Timings) -> Result<JobOutcome, ExecError> {
    let entry = registry::find(&exec.config.models_dir, &job.model).ok_or_else(|| ExecError::Invalid(format!("unknown model {}", job.model)))?;
    let settings = InterpolateSettings::resolve(job.params.interpolate.as_ref()).map_err(ExecError::Invalid)?;
    let info = input_media(exec, job, timings)?;
    let input_rate = FrameRate::parse(&info.fps_rational).ok_or_else(|| ExecError::Invalid(format!("the input's frame rate {} cannot be read", info.fps_rational)))?;
    let output_rate = settings.output_rate(input_rate).map_err(ExecError::Invalid)?;
    let retiming = Retiming::new(input_rate, output_rate, info.frames);
    let kind = exec.resolve_kind(job, timings);

    let load_started = Instant::now();
    let model = exec.models.interpolator(&entry, exec.device, kind)?;
    timings.load_model = Some(load_started.elapsed().as_secs_f64());

    let flow_scale = if u64::from(info.width) * u64::from(info.height) > FULL_SCALE_FLOW_MAX_PIXELS { 0.5 } else { 1.0 };
    let chunk_frames = exec.config.chunk_frames;
    let reader = read_frames(exec, job, &info, chunk_frames)?;
    let mut writer = write_frames(exec, job, OutputVideo { fps_rational: output_rate.as_text(), ..OutputVideo::like(&info, info.width, info.height) })?;
    let depth = writer.depth();

    let total = retiming.output_frames();
    let mut window = FrameWindow::new(reader, exec.device);
    let mut clock = StageClock::default();
    let mut pending: Vec<Tensor> = Vec::with_capacity(chunk_frames);
    let (mut written, mut interpolated) = (0u64, 0u64);
    let mut cuts = SceneCuts { threshold: settings.scene_threshold, found: Vec::new(), last_checked: None };
    let started = Instant::now();
    hooks.progress.send_replace(Progress::frames(0, total, 0.0).at("interpolate"));
    let mut index = 0u64;
    while index < total {
        hooks.check_cancelled()?;
        let source = retiming.source(index);
        let made: Vec<Tensor> = match source {
            Source::Input(frame) => match StageClock::time(&mut clock.read, || window.frame(frame))? {
                Some(frame) => vec![frame],
                // The input ended early (fewer frames than its header said): so does the output.
                None => break,
            },
            Source::Between { first, .. } => {
                // Every output frame between this pair, made from one call (shared bisection steps).
                let times: Vec<f64> = (index..total)
                    .map(|j| retiming.source(j))
                    .take_while(|s| matches!(s, Source::Between { first: f, .. } if *f == first))
                    .map(|s| match s {
                        Source::Between { t, .. } => t,
                        Source::Input(_) => unreachable!("taken while between"),
                    })
                    .collect();
                let pair = StageClock::time(&mut clock.read, || Ok::<_, ExecError>((window.frame(first)?, window.frame(first + 1)?)))?;
                let (Some(a), Some(b)) = pair else { break };
                if cuts.is_cut(first, &a, &b) {
                    times.iter().map(|_| a.shallow_clone()).collect()
                } else {
                    let middles = StageClock::time(&mut clock.compute, || tch::no_grad(|| model.interpolate_many(&a, &b, &times, flow_scale)))?;
                    interpolated += middles.len() as u64;
                    middles
                }
            }
        };
        index += made.len() as u64;
        pending.extend(made);
        if pending.len() >= chunk_frames || index >= total {
            written += pending.len() as u64;
            let chunk = Tensor::cat(&std::mem::take(&mut pending), 0);
            StageClock::time(&mut clock.write, || -> Result<(), ExecError> { Ok(writer.write(frames::to_rgb(&chunk, depth)?)?) })?;
            hooks.progress.send_replace(Progress::frames(written, total, started.elapsed().as_secs_f64()).at("interpolate"));
        }
    }
    if !pending.is_empty() {
        written += pending.len() as u64;
        let chunk = Tensor::cat(&pending, 0);
        StageClock::time(&mut clock.write, || -> Result<(), ExecError> { Ok(writer.write(frames::to_rgb(&chunk, depth)?)?) })?;
    }
    hooks.check_cancelled()?;
    hooks.progress.send_modify(|p| p.stage = Some("write".into()));
    let output_media = StageClock::time(&mut clock.write, || -> Result<_, ExecError> {
        writer.finish()?;
        Ok(media::probe(&exec.config.tools, &job.output_path, &media::MediaLimits::unlimited()).ok())
    })?;
    clock.record(timings, written, started);
    Ok(JobOutcome {
        output_name: job.output_path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
        output_path: job.output_path.clone(),
        output_bytes: std::fs::metadata(&job.output_path).map(|m| m.len()).unwrap_or(0),
        output_media,
        timings: timings.clone(),
        plan: Some(JobPlan::Interpolate(InterpolatePlan {
            input_fps: input_rate.as_text(),
            output_fps: output_rate.as_text(),
            input_frames: window.frames_read(),
            frames: written,
            interpolated,
            scene_cuts: cuts.found,
            scene_threshold: settings.scene_threshold,
            flow_scale,
            pairs_per_call: 1,
        })),
        metrics: None,
    })
}

/// The cuts found so far; each pair is measured once.
struct SceneCuts {
    threshold: f64,
    /// Input frames that start a new scene.
    found: Vec<u64>,
    last_checked: Option<(u64, bool)>,
}

impl SceneCuts {
    fn is_cut(&mut self, first: u64, a: &Tensor, b: &Tensor) -> bool {
        if self.threshold <= 0.0 {
            return false;
        }
        if let Some((checked, cut)) = self.last_checked.filter(|(checked, _)| *checked == first) {
            debug_assert_eq!(checked, first);
            return cut;
        }
        let cut = scene::change(a, b) > self.threshold;
        if cut {
            self.found.push(first + 1);
        }
        self.last_checked = Some((first, cut));
        cut
    }
}
