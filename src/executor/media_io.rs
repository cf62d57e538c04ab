//! Where every op opens its frames: the reader at the input's colour, the writer in the job's
//! format with that colour and, unless `keep_audio=false`, the input's audio, subtitles and chapters.
use std::path::Path;

use super::context::{Executor, JobSpec};
use super::error::ExecError;
use crate::media::segments::{FinishedSegments, SegmentedWriter};
use crate::jobs::{JobOutcome, JobPlan, OutputFormat, QualityMetrics, Timings};
use crate::media::{Colour, FrameReader, FrameSpan, MediaError, MediaInfo, ReadConfig, RgbFrames, SampleDepth, StillWriter, WriteConfig};

/// Chunks waiting between ffmpeg and the model, each way; enough to hide jitter, small enough to bound memory.
const QUEUE_CHUNKS: usize = 2;

/// The video a job writes.
pub struct OutputVideo {
    pub width: u32,
    pub height: u32,
    pub fps_rational: String,
    pub colour: Colour,
    /// The input is a video whose other streams belong in the result.
    pub from_input_video: bool,
    /// Non-square pixels keep their shape: every op scales both sides alike (upscale) or resizes by one
    /// factor and crops (restore).
    pub sample_aspect_ratio: Option<String>,
    /// A job over part of the input keeps the audio and subtitles of that part's time only.
    pub span: Option<FrameSpan>,
}

impl OutputVideo {
    /// The input's rate, colour and streams at a new size.
    pub fn like(info: &MediaInfo, width: u32, height: u32) -> OutputVideo {
        OutputVideo {
            width,
            height,
            fps_rational: info.fps_rational.clone(),
            colour: info.colour.clone(),
            // A zip of frames has no other streams to keep (and ffprobe cannot read it).
            from_input_video: info.container != crate::media::sequence::CONTAINER,
            sample_aspect_ratio: info.sample_aspect_ratio.clone(),
            span: info.span,
        }
    }
}

pub fn read_frames(exec: &Executor, job: &JobSpec, info: &MediaInfo, chunk_frames: usize) -> Result<FrameReader, ExecError> {
    let config = ReadConfig {
        input: job.input_path.clone(),
        width: info.width,
        height: info.height,
        chunk_frames,
        queue_chunks: QUEUE_CHUNKS,
        colour: info.colour.clone(),
        priority: exec.config.media_priority,
        span: info.span,
    };
    Ok(FrameReader::spawn(&exec.config.tools, config)?)
}

/// The x264/x265 quality of the job's result: its own `crf`, else the box's.
pub fn encoder_crf(exec: &Executor, job: &JobSpec) -> u8 {
    job.params.crf.and_then(|crf| u8::try_from(crf).ok()).unwrap_or(exec.config.output_crf)
}

/// The x264/x265 preset of the job's result: its own `encoder_preset`, else the box's.
pub fn encoder_preset(exec: &Executor, job: &JobSpec) -> String {
    job.params.encoder_preset.clone().unwrap_or_else(|| exec.config.output_preset.clone())
}

fn write_config(exec: &Executor, job: &JobSpec, video: OutputVideo) -> WriteConfig {
    let keep_streams = video.from_input_video && job.params.keep_audio != Some(false);
    WriteConfig {
        output: job.output_path.clone(),
        width: video.width,
        height: video.height,
        fps_rational: video.fps_rational,
        streams_from: keep_streams.then(|| job.input_path.clone()),
        streams_span: video.span,
        format: job.params.output_format.unwrap_or(OutputFormat::H264),
        colour: video.colour,
        crf: encoder_crf(exec, job),
        preset: encoder_preset(exec, job),
        queue_chunks: QUEUE_CHUNKS,
        priority: exec.config.media_priority,
        sample_aspect_ratio: video.sample_aspect_ratio,
    }
}

/// The job's input as probed: what the upload's checks found, or a probe now (a job made by `vaebox run`,
/// or one whose input came from the shared storage), whose time is added to the upload's `probe`. A job
/// over part of the input (`start`, `frames`, …) sees that part (`MediaInfo::span`).
pub fn input_media(exec: &Executor, job: &JobSpec, timings: &mut Timings) -> Result<MediaInfo, ExecError> {
    if let Some(info) = &job.input_media {
        return Ok(info.clone());
    }
    let started = std::time::Instant::now();
    let info = crate::media::probe_part(&exec.config.tools, &job.input_path, &exec.config.limits, job.params.range.as_ref())?;
    timings.probe = Some(timings.probe.unwrap_or(0.0) + started.elapsed().as_secs_f64());
    Ok(info)
}

/// Where upscale, restore and interpolate put their frames: the video in segments a stopped job goes on from, or for a
/// still written as PNG the still's writer (which also takes the alpha plane).
pub enum FrameSink {
    Video(SegmentedWriter),
    Still(StillWriter),
}

impl FrameSink {
    pub fn write(&mut self, frames: RgbFrames) -> Result<(), MediaError> {
        match self {
            FrameSink::Video(writer) => writer.write(frames),
            FrameSink::Still(writer) => writer.write(frames),
        }
    }

    /// Frames in the video's unfinished segment; `None` for a still, which is written whole.
    pub fn frames_in_segment(&self) -> Option<u64> {
        match self {
            FrameSink::Video(writer) => Some(writer.frames_in_segment()),
            FrameSink::Still(_) => None,
        }
    }

    /// Finishes the video's segment in hand: what is then on disk.
    pub fn end_segment(&mut self) -> Result<FinishedSegments, MediaError> {
        match self {
            FrameSink::Video(writer) => writer.end_segment(),
            FrameSink::Still(_) => Ok(FinishedSegments::default()),
        }
    }

    pub fn depth(&self) -> SampleDepth {
        match self {
            FrameSink::Video(writer) => writer.depth(),
            FrameSink::Still(writer) => writer.depth(),
        }
    }

    /// The still's PNG to be written with alpha; `None` for a video, which has none.
    pub fn still(&mut self) -> Option<&mut StillWriter> {
        match self {
            FrameSink::Video(_) => None,
            FrameSink::Still(writer) => Some(writer),
        }
    }
}

/// A still input asked to be written as PNG gets one PNG file; anything else the job's video format, in
/// segments in `segments_dir` after the `finished` ones there.
pub fn write_output(exec: &Executor, job: &JobSpec, info: &MediaInfo, video: OutputVideo, segments_dir: &Path, finished: FinishedSegments) -> Result<FrameSink, ExecError> {
    let format = job.params.output_format.unwrap_or(OutputFormat::H264);
    if info.still && format.is_png() {
        let writer = StillWriter::new(&exec.config.tools, job.output_path.clone(), video.width, video.height, format.depth())?;
        return Ok(FrameSink::Still(writer));
    }
    write_segments(exec, job, video, segments_dir, finished)
}

/// The job's video in segments in `segments_dir`, after the `finished` ones there.
pub fn write_segments(exec: &Executor, job: &JobSpec, video: OutputVideo, segments_dir: &Path, finished: FinishedSegments) -> Result<FrameSink, ExecError> {
    let config = write_config(exec, job, video);
    Ok(FrameSink::Video(SegmentedWriter::open(&exec.config.tools, config, segments_dir.to_path_buf(), finished)?))
}

/// Finishes what `write_output` opened, and probes the result for the job's `output.media` (a still's PNG
/// is described as a one-frame picture, as its input was, so the page's thumbnail shows the result).
pub fn finish_output(exec: &Executor, job: &JobSpec, sink: FrameSink) -> Result<Option<MediaInfo>, ExecError> {
    match sink {
        FrameSink::Video(writer) => {
            writer.finish()?;
            Ok(output_media(exec, job))
        }
        FrameSink::Still(writer) => {
            writer.finish()?;
            Ok(crate::media::probe(&exec.config.tools, &job.output_path, &crate::media::MediaLimits::unlimited()).ok())
        }
    }
}

/// The written video as probed, for the job's `output.media`: none for a zip of PNG frames, which is not a
/// video a player takes (although the probe reads it as an image sequence).
pub fn output_media(exec: &Executor, job: &JobSpec) -> Option<MediaInfo> {
    if job.params.output_format.is_some_and(OutputFormat::is_png) {
        return None;
    }
    crate::media::probe(&exec.config.tools, &job.output_path, &crate::media::MediaLimits::unlimited()).ok()
}

/// The outcome of a job that wrote its video to `job.output_path`.
pub fn video_outcome(job: &JobSpec, output_media: Option<MediaInfo>, timings: &Timings, plan: JobPlan, metrics: Option<QualityMetrics>) -> JobOutcome {
    JobOutcome {
        output_name: job.output_path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
        output_path: job.output_path.clone(),
        output_bytes: std::fs::metadata(&job.output_path).map(|m| m.len()).unwrap_or(0),
        output_media,
        timings: timings.clone(),
        plan: Some(plan),
        metrics,
    }
}
