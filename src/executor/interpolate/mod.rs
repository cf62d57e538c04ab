//! The interpolate op: ffmpeg decode → RIFE between neighbouring frames → ffmpeg encode at the new rate.
//! Input frames at an output time are written as they are; the frames between come from the model, or,
//! across a scene cut, are the earlier frame held. The output lasts as long as the input (its last frame
//! held), so the audio and subtitles copied beside it stay in step. It is written in segments: a stopped job
//! goes on from its last one (`resume`), passing over the frames written without calling the model.
pub mod schedule;
pub mod settings;
pub mod retimer;
pub mod window;

use std::time::Instant;

use super::media_io::{finish_output, input_media, read_frames, video_outcome, write_segments, OutputVideo};
use super::resume::{Checkpoints, Mark};
use super::stage_clock::StageClock;
use super::context::{Executor, JobHooks, JobSpec, PartFrames, Portion};
use super::error::ExecError;
use super::frames;
use crate::jobs::plan::{InterpolatePlan, JobPlan};
use crate::jobs::{JobOutcome, Progress, Timings};
use crate::models::registry;
use retimer::Retimer;
use settings::InterpolateSettings;
use window::FrameWindow;

pub use super::scene::DEFAULT_THRESHOLD as DEFAULT_SCENE_THRESHOLD;

/// The input's frame rate, as the re-timing reads it.
fn input_rate(info: &crate::media::MediaInfo) -> Result<schedule::FrameRate, ExecError> {
    schedule::FrameRate::parse(&info.fps_rational).ok_or_else(|| ExecError::Invalid(format!("the input's frame rate {} cannot be read", info.fps_rational)))
}

/// The frames and rate an interpolation of `info` as `params` ask makes (`None`: it cannot be re-timed so):
/// what its parts are cut from.
pub fn planned_output(info: &crate::media::MediaInfo, params: Option<&crate::jobs::InterpolateParams>) -> Option<(u64, f64)> {
    let settings = InterpolateSettings::resolve(params).ok()?;
    let input = input_rate(info).ok()?;
    let output = settings.output_rate(input).ok()?;
    Some((schedule::Retiming::new(input, output, info.frames).output_frames(), output.as_f64()))
}

pub(super) fn run(exec: &mut Executor, job: &JobSpec, hooks: &JobHooks, timings: &mut Timings) -> Result<JobOutcome, ExecError> {
    let entry = registry::find(&exec.config.models_dir, &job.model).ok_or_else(|| ExecError::Invalid(format!("unknown model {}", job.model)))?;
    let settings = InterpolateSettings::resolve(job.params.interpolate.as_ref()).map_err(ExecError::Invalid)?;
    let info = input_media(exec, job, timings)?;
    if let Portion::Join { parts, plan } = &job.portion {
        let output_rate = settings.output_rate(input_rate(&info)?).map_err(ExecError::Invalid)?;
        let video = OutputVideo { fps_rational: output_rate.as_text(), ..OutputVideo::like(&info, info.width, info.height) };
        return super::parts::join(exec, job, video, parts, plan.clone(), timings);
    }
    let kind = exec.resolve_kind(job, timings);

    let load_started = Instant::now();
    let model = exec.models.interpolator(&entry, exec.device, kind)?;
    timings.load_model = Some(load_started.elapsed().as_secs_f64());

    let chunk_frames = exec.config.chunk_frames;
    let window = FrameWindow::new(read_frames(exec, job, &info, chunk_frames)?, exec.device);
    let mut retimer = Retimer::for_input(&*model, &info, &settings, window)?;
    let output_rate = retimer.output_rate();
    // Every output frame is the job's to write (a still input too: its frame held, as a video), so any run
    // can go on from its last segment.
    let resume_settings = serde_json::json!({ "kind": format!("{kind:?}"), "interpolate": format!("{settings:?}") });
    let checkpoints = Checkpoints::open(exec, job, hooks, resume_settings, output_rate.as_f64(), true);
    let output = OutputVideo { fps_rational: output_rate.as_text(), ..OutputVideo::like(&info, info.width, info.height) };
    let mut writer = write_segments(exec, job, output, &checkpoints.folder.dir, checkpoints.finished())?;
    let depth = writer.depth();

    // A part makes its own output frames only: those before it are passed over as a resume passes over
    // the ones written, and it ends where the next part begins.
    let outputs = match job.portion {
        Portion::Part { outputs: Some(outputs) } => outputs,
        Portion::Part { outputs: None } | Portion::Whole | Portion::Join { .. } => PartFrames { first: 0, count: None },
    };
    let end = outputs.count.map_or(retimer.output_frames(), |count| (outputs.first + count).min(retimer.output_frames()));
    let total = end - outputs.first.min(end);
    let mut clock = StageClock::default();
    let started = Instant::now();
    hooks.progress.send_replace(Progress::frames(0, total, 0.0).at("interpolate"));
    // The frames a stopped run wrote are passed over, not made again.
    let passed = retimer.pass_over(outputs.first + checkpoints.finished().frames, &mut clock)?;
    let mut written = passed.saturating_sub(outputs.first);
    while outputs.first + written < end {
        hooks.between_chunks()?;
        let Some(chunk) = retimer.next_chunk(chunk_frames, &mut clock)? else { break };
        // A pair's frames come together: the last chunk of a part stops at the part's end.
        let chunk = chunk.narrow(0, 0, chunk.size()[0].min((end - outputs.first - written) as i64));
        written += chunk.size()[0] as u64;
        let rgb = StageClock::time(&mut clock.write, || frames::to_rgb(&chunk, depth))?;
        for piece in checkpoints.split_at_segments(&writer, rgb) {
            StageClock::time(&mut clock.write, || writer.write(piece))?;
            StageClock::time(&mut clock.write, || checkpoints.save_frames_when_full(&mut writer, None))?;
        }
        hooks.progress.send_replace(Progress::frames(written, total.max(written), started.elapsed().as_secs_f64()).at("interpolate"));
    }
    hooks.between_chunks()?;
    hooks.progress.send_modify(|p| p.stage = Some("write".into()));
    let output_media = match job.portion {
        // A part's segments stay in its folder, with a checkpoint that names them all, for the join.
        Portion::Part { .. } => {
            StageClock::time(&mut clock.write, || checkpoints.save(&mut writer, Mark::Frames, None))?;
            None
        }
        Portion::Whole | Portion::Join { .. } => {
            let media = StageClock::time(&mut clock.write, || finish_output(exec, job, writer))?;
            checkpoints.folder.remove();
            media
        }
    };
    clock.record(timings, written, started);
    let plan = InterpolatePlan { resumed_from: checkpoints.resumed_from(), ..retimer.plan(written) };
    Ok(video_outcome(job, output_media, timings, JobPlan::Interpolate(plan), None))
}
