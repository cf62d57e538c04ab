//! The join of a job run in parts (`jobs::parts`): each part left its finished segments and a checkpoint in
//! its own resume folder; the join checks them against the checkpoint's digests and copies them, first part
//! to last, into the result with the input's audio, subtitles and chapters, as a job run whole joins its own
//! segments. Nothing is encoded again.
use std::path::PathBuf;
use std::time::Instant;

use super::context::{Executor, JobSpec};
use super::error::ExecError;
use super::media_io::{output_media, write_segments, FrameSink, OutputVideo};
use super::resume::Checkpoint;
use super::segment_digests;
use crate::jobs::plan::JobPlan;
use crate::jobs::shared_resume::{resume_dir, CHECKPOINT};
use crate::jobs::{JobOutcome, Timings};
use crate::media::segments::FinishedSegments;

/// Joins the segments in the `parts` folders into the job's result (`video`: its size, rate and streams).
pub(super) fn join(exec: &Executor, job: &JobSpec, video: OutputVideo, parts: &[PathBuf], plan: Option<JobPlan>, timings: &mut Timings) -> Result<JobOutcome, ExecError> {
    let started = Instant::now();
    let finished = parts.iter().enumerate().map(|(index, dir)| Ok((dir.clone(), finished_segments(index, parts.len(), dir)?))).collect::<Result<Vec<_>, ExecError>>()?;
    let own = resume_dir(&job.output_path);
    let FrameSink::Video(writer) = write_segments(exec, job, video, &own, FinishedSegments::default())? else {
        unreachable!("write_segments writes a video")
    };
    writer.finish_parts(&finished)?;
    let media = output_media(exec, job);
    if let Err(error) = std::fs::remove_dir_all(&own) {
        tracing::warn!(dir = %own.display(), %error, "could not remove the joined parts' segments");
    }
    timings.write = Some(timings.write.unwrap_or(0.0) + started.elapsed().as_secs_f64());
    Ok(JobOutcome {
        output_name: job.output_path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
        output_path: job.output_path.clone(),
        output_bytes: std::fs::metadata(&job.output_path).map(|m| m.len()).unwrap_or(0),
        output_media: media,
        timings: timings.clone(),
        plan,
        metrics: None,
    })
}

/// How many segments part `index` finished, as its checkpoint records them and its folder still holds them.
fn finished_segments(index: usize, count: usize, dir: &std::path::Path) -> Result<usize, ExecError> {
    let missing = |why: &str| ExecError::Invalid(format!("part {} of {count} cannot be joined: {why} ({})", index + 1, dir.display()));
    let text = std::fs::read_to_string(dir.join(CHECKPOINT)).map_err(|_| missing("its checkpoint is missing"))?;
    let checkpoint: Checkpoint = serde_json::from_str(&text).map_err(|_| missing("its checkpoint is unreadable"))?;
    let digests = checkpoint.segment_digests.unwrap_or_default();
    if digests.len() != checkpoint.segments || segment_digests::good_prefix(dir, &digests) != digests.len() {
        return Err(missing("its segments are not as its checkpoint recorded them"));
    }
    Ok(checkpoint.segments)
}
