//! Looking at a job in a browser: a still of its output (or of its input until there is one) and
//! videos of both sides that play anywhere, made once on request and kept in the job's folder (so
//! they go with the job).
use std::path::{Path, PathBuf};

use serde::Deserialize;
use utoipa::ToSchema;

use super::{Queue, QueueError};
use crate::jobs::{Job, JobStatus};
use crate::media::preview::{self, ProxyRequest, StillRequest, PROXY_MAX_WIDTH};
use crate::media::MediaInfo;

/// Which side of a job a preview shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum PreviewSide {
    Input,
    Output,
}

impl PreviewSide {
    fn as_str(self) -> &'static str {
        match self {
            PreviewSide::Input => "input",
            PreviewSide::Output => "output",
        }
    }
}

/// Why a job shows no output video: "yet" only where one may still come (a synchronous call's result went
/// back in its answer; a latent, a tensor or a failed job never has one).
fn no_video_output(job: &Job) -> &'static str {
    match (job.status.is_terminal(), &job.output) {
        (false, _) => "it has no video output yet",
        (true, Some(output)) if !output.kept => "its result went back to the caller in the call's answer and was not kept",
        (true, _) => "it has no video output",
    }
}

/// One side of a job, when that side is a video.
struct VideoSide<'a> {
    path: PathBuf,
    media: &'a MediaInfo,
}

impl Queue {
    /// A PNG of a middle frame of the output once the job succeeded, else of the input.
    pub async fn thumbnail(&self, job: &Job) -> Result<PathBuf, QueueError> {
        let (side, video) = match output_video(job) {
            Some(video) => (PreviewSide::Output, video),
            None => {
                let why = format!("its input is not a video and {}", no_video_output(job));
                (PreviewSide::Input, input_video(job).ok_or_else(|| unavailable(job, &why))?)
            }
        };
        let video = self.on_this_box(job, video).await?;
        let png = self.preview_dir(job)?.join(format!("thumbnail-{}.png", side.as_str()));
        // A still image (one frame) has nothing after its start: a seek past it would write no picture.
        let at_s = if video.media.frames <= 1 { 0.0 } else { video.media.duration_s.max(0.0) / 2.0 };
        let tools = self.config.media_tools();
        self.make_once(&png, move |target| preview::still(&tools, StillRequest { video: &video.path, at_s, png: target })).await
    }

    /// A video of one side that a browser plays: an H.264 output as it is, anything else as an H.264
    /// proxy. Both sides come at the output's width (capped), so a before/after view lines them up.
    pub async fn preview_video(&self, job: &Job, side: PreviewSide) -> Result<PathBuf, QueueError> {
        let output = output_video(job);
        let video = match side {
            PreviewSide::Output => output.as_ref().map(|o| VideoSide { path: o.path.clone(), media: o.media }),
            PreviewSide::Input => input_video(job),
        };
        let Some(video) = video else {
            let why = match side {
                PreviewSide::Output => no_video_output(job),
                PreviewSide::Input => "its input is not a video",
            };
            return Err(unavailable(job, why));
        };
        let width = output.as_ref().unwrap_or(&video).media.width.min(PROXY_MAX_WIDTH);
        let video = self.on_this_box(job, video).await?;
        if side == PreviewSide::Output && plays_everywhere(video.media) && video.media.width == width {
            return Ok(video.path);
        }
        let mp4 = self.preview_dir(job)?.join(format!("preview-{}-{width}.mp4", side.as_str()));
        let tools = self.config.media_tools();
        let timeout = tools.stream_timeout;
        self.make_once(&mp4, move |target| preview::h264_proxy(&tools, ProxyRequest { video: &video.path, mp4: target, width, timeout })).await
    }

    /// The side's file on this box: with shared storage, a copy made on first use (kept with the job).
    async fn on_this_box<'a>(&self, job: &Job, side: VideoSide<'a>) -> Result<VideoSide<'a>, QueueError> {
        let recorded = side.path.to_string_lossy().into_owned();
        let path = self.files.ensure_local(job.id, &recorded).await.map_err(|e| QueueError::from_blob(e, &job.id.to_string()))?;
        if !path.is_file() {
            return Err(unavailable(job, "its files are no longer kept"));
        }
        Ok(VideoSide { path, media: side.media })
    }

    fn preview_dir(&self, job: &Job) -> Result<PathBuf, QueueError> {
        let dir = self.job_dir(job.id).join("preview");
        std::fs::create_dir_all(&dir)?;
        Ok(dir)
    }

    /// `target` if it exists, else made by `make`, one at a time: previews share the CPU with the
    /// running job, and a page full of thumbnails must not start a dozen ffmpegs at once.
    async fn make_once<F>(&self, target: &Path, make: F) -> Result<PathBuf, QueueError>
    where
        F: FnOnce(&Path) -> Result<(), crate::media::MediaError> + Send + 'static,
    {
        if target.exists() {
            return Ok(target.to_path_buf());
        }
        let _turn = self.previews.acquire().await.map_err(|e| QueueError::Internal(e.to_string()))?;
        if target.exists() {
            return Ok(target.to_path_buf());
        }
        let owned = target.to_path_buf();
        tokio::task::spawn_blocking(move || make(&owned)).await??;
        Ok(target.to_path_buf())
    }
}

fn output_video(job: &Job) -> Option<VideoSide<'_>> {
    let (JobStatus::Succeeded, Some(output), Some(path)) = (job.status, &job.output, &job.output_path) else { return None };
    output.media.as_ref().map(|media| VideoSide { path: PathBuf::from(path), media })
}

/// A zip of PNG frames is no file ffmpeg opens by itself (its frames reach ffmpeg one by one): none.
fn input_video(job: &Job) -> Option<VideoSide<'_>> {
    let media = job.input.media.as_ref().filter(|media| media.container != crate::media::sequence::CONTAINER)?;
    Some(VideoSide { path: PathBuf::from(&job.input_path), media })
}

/// What every browser decodes: H.264 in an MP4 (the box writes its H.264 as 8-bit 4:2:0).
fn plays_everywhere(media: &MediaInfo) -> bool {
    media.codec == "h264" && media.container == "mp4"
}

fn unavailable(job: &Job, why: &str) -> QueueError {
    QueueError::PreviewUnavailable(format!("job {} has nothing to show: {why}", job.id))
}
