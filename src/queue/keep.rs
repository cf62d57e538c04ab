//! A cancel that keeps what is done (`…/cancel?keep=true`): the segments the job's last checkpoint names are
//! joined, without encoding again, into `NAME_partial-Nf.ext` beside where the whole result would have been;
//! the cancelled job serves it as its result (`partial: true`). The input's audio is not in it.
use std::path::{Path, PathBuf};

use crate::config::Config;
use crate::jobs::files::JobFiles;
use crate::jobs::shared_resume::{resume_dir, CHECKPOINT};
use crate::jobs::{Job, KeptOutput};
use crate::media::OutputFormat;
use crate::models::Writes;

/// Whether a job of this op and format can keep its finished frames: one whose video is written in segments.
pub fn can_keep(job: &Job) -> bool {
    let format = job.params.output_format.unwrap_or(OutputFormat::H264);
    matches!(job.op.spec().writes, Writes::Video { .. }) && !format.is_png() && job.input.media.as_ref().is_none_or(|media| !media.still)
}

/// `in_x4.mp4` with 240 frames kept: `in_x4_partial-240f.mp4`.
fn kept_path(output: &Path, frames: u64) -> PathBuf {
    let stem = output.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let extension = output.extension().map(|e| e.to_string_lossy().into_owned()).unwrap_or_else(|| "mp4".into());
    output.with_file_name(format!("{stem}_partial-{frames}f.{extension}"))
}

/// Joins the stopped `job`'s finished segments into a file of their own: its result once it is recorded
/// cancelled. `output`: where its whole result would have been (`output_path::output_path_for`). None when its
/// checkpoints name none.
pub async fn keep_finished(config: &Config, files: &JobFiles, job: &Job, output: &Path) -> Option<KeptOutput> {
    let id = job.id;
    let output = files.local(id, &output.to_string_lossy());
    let dir = resume_dir(&output);
    let checkpoint: Option<serde_json::Value> = std::fs::read_to_string(dir.join(CHECKPOINT)).ok().and_then(|text| serde_json::from_str(&text).ok());
    let count = |key: &str| checkpoint.as_ref().and_then(|c| c.get(key)).and_then(serde_json::Value::as_u64).unwrap_or(0);
    let (segments, frames) = (count("segments") as usize, count("frames"));
    if segments == 0 {
        tracing::info!(%id, "cancelled with keep=true before any segment was finished: nothing to keep");
        return None;
    }
    let kept = kept_path(&output, frames);
    let format = job.params.output_format.unwrap_or(OutputFormat::H264);
    let tools = config.media_tools();
    let (joined_dir, joined_to) = (dir.clone(), kept.clone());
    let joined = tokio::task::spawn_blocking(move || crate::media::segments::join_finished(&tools, &joined_dir, segments, format, &joined_to)).await;
    match joined {
        Ok(Ok(true)) => {}
        Ok(Ok(false)) => return None,
        Ok(Err(error)) => {
            tracing::warn!(%id, %error, "could not join a cancelled job's finished segments");
            return None;
        }
        Err(error) => {
            tracing::warn!(%id, %error, "could not join a cancelled job's finished segments");
            return None;
        }
    }
    let tools = config.media_tools();
    let probed = kept.clone();
    let media = tokio::task::spawn_blocking(move || crate::media::probe(&tools, &probed, &crate::media::MediaLimits::unlimited()).ok()).await.ok().flatten();
    let name = kept.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let bytes = std::fs::metadata(&kept).map(|m| m.len()).unwrap_or(0);
    tracing::info!(%id, frames, segments, "a cancelled job's finished frames are kept as its result");
    Some(KeptOutput { name, path: kept.to_string_lossy().into_owned(), bytes, media })
}
