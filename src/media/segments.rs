//! `SegmentedWriter`: an output written as consecutive segments that survive the process, so that a stopped
//! job can go on from its last finished segment. Each segment is the job's format encoded on its own (a
//! video starts it with a keyframe) in a folder beside the output; `finish` joins them without encoding
//! again and adds the input's audio, subtitles and chapters, as a whole `FrameWriter` would. A run that
//! goes on from segment N writes exactly the segments an uninterrupted run would: where a segment ends
//! is the caller's choice, made from frame counts only.
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use super::format::{OutputFormat, SampleDepth};
use super::probe::{file_url, source_streams};
use super::process::{BoundedChild, ProcessSpec};
use super::writer::{partial_path_for, publish_file, push_all, push_container, push_kept_streams, push_streams_input, zip_frames, FrameWriter, Target, WriteConfig};
use super::{MediaError, MediaTools, RgbFrames};

/// Segments already finished in the folder: the first `segments` of them, `frames` frames in all.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FinishedSegments {
    pub segments: usize,
    pub frames: u64,
}

pub struct SegmentedWriter {
    tools: MediaTools,
    config: WriteConfig,
    dir: PathBuf,
    finished: FinishedSegments,
    current: Option<FrameWriter>,
    current_frames: u64,
}

impl SegmentedWriter {
    /// Writes into `dir` after the `finished` segments there (none: an empty folder); anything else in it,
    /// written after them by a run that stopped, is removed.
    pub fn open(tools: &MediaTools, config: WriteConfig, dir: PathBuf, finished: FinishedSegments) -> Result<SegmentedWriter, MediaError> {
        std::fs::create_dir_all(&dir).map_err(|e| MediaError::io("making the segments folder", e))?;
        let writer = SegmentedWriter { tools: tools.clone(), config, dir, finished, current: None, current_frames: 0 };
        writer.remove_unfinished().map_err(|e| MediaError::io("clearing the segments folder", e))?;
        Ok(writer)
    }

    pub fn write(&mut self, frames: RgbFrames) -> Result<(), MediaError> {
        let count = frames.count as u64;
        if self.current.is_none() {
            let target = Target::Segment { path: self.segment_path(self.finished.segments), first_frame: self.finished.frames };
            self.current = Some(FrameWriter::spawn_to(&self.tools, self.config.clone(), target)?);
        }
        self.current.as_mut().expect("started above").write(frames)?;
        self.current_frames += count;
        Ok(())
    }

    /// Frames written into the segment not yet finished.
    pub fn frames_in_segment(&self) -> u64 {
        self.current_frames
    }

    /// Finishes the segment being written (on disk when this returns) and says what is finished now.
    pub fn end_segment(&mut self) -> Result<FinishedSegments, MediaError> {
        if let Some(writer) = self.current.take() {
            writer.finish()?;
            self.finished.segments += 1;
            self.finished.frames += self.current_frames;
            self.current_frames = 0;
        }
        Ok(self.finished)
    }

    pub fn depth(&self) -> SampleDepth {
        self.config.format.depth()
    }

    /// Finishes the last segment and joins all of them into the output.
    pub fn finish(mut self) -> Result<(), MediaError> {
        self.end_segment()?;
        let partial = partial_path_for(&self.config.output)?;
        if self.config.format.is_png() {
            zip_frames(&self.frames_dir(), &partial).map_err(|e| MediaError::io("zipping the PNG frames", e))?;
        } else {
            self.join_videos(&partial)?;
        }
        publish_file(&partial, &self.config.output)
    }

    /// Joins the segments of a job's parts instead of its own (`jobs::parts`): `parts` are the parts'
    /// folders, first to last, each with its finished segments, all inside this writer's folder.
    pub fn finish_parts(self, parts: &[(PathBuf, usize)]) -> Result<(), MediaError> {
        let mut names = Vec::new();
        for (dir, segments) in parts {
            let within = dir.strip_prefix(&self.dir).map_err(|_| MediaError::io("joining the parts", std::io::Error::other(format!("{} is not inside {}", dir.display(), self.dir.display()))))?;
            names.extend((0..*segments).map(|index| within.join(format!("segment_{index:06}.{}", self.config.format.extension()))));
        }
        let partial = partial_path_for(&self.config.output)?;
        self.join_named(&partial, &names)?;
        publish_file(&partial, &self.config.output)
    }

    /// The segments one after another, copied as they are, with the input's other streams (as
    /// `FrameWriter` takes them).
    fn join_videos(&self, partial: &Path) -> Result<(), MediaError> {
        let names: Vec<PathBuf> = (0..self.finished.segments).map(|index| self.segment_name(index)).collect();
        self.join_named(partial, &names)
    }

    /// `names` (relative to the folder) one after another, with the input's other streams.
    fn join_named(&self, partial: &Path, names: &[PathBuf]) -> Result<(), MediaError> {
        let config = &self.config;
        let mut args = concat_input(&self.dir, names)?;
        let sources = match &config.streams_from {
            Some(path) => Some(source_streams(&self.tools, path)?),
            None => None,
        };
        if let Some(path) = &config.streams_from {
            push_streams_input(&mut args, path, config.streams_span.as_ref());
        }
        push_all(&mut args, &["-map", "0:v:0", "-c:v", "copy"]);
        if config.format == OutputFormat::H265 {
            push_all(&mut args, &["-tag:v", "hvc1"]);
        }
        if let Some(streams) = &sources {
            push_kept_streams(&mut args, config.format, streams, config.streams_span.is_some());
        }
        push_container(&mut args, config.format, true);
        args.push(file_url(partial));
        let child = BoundedChild::spawn(ProcessSpec {
            program: &self.tools.ffmpeg,
            args,
            timeout: self.tools.stream_timeout,
            pipe_stdin: false,
            pipe_stdout: false,
            priority: config.priority,
        })?;
        child.finish()?;
        Ok(())
    }

    fn segment_path(&self, index: usize) -> PathBuf {
        if self.config.format.is_png() {
            return self.frames_dir();
        }
        self.dir.join(format!("segment_{index:06}.{}", self.config.format.extension()))
    }

    /// A segment as the concat list names it: ffmpeg reads a list's relative paths against the list's own
    /// folder, which is the segments' folder, so the name alone is right from any working directory (a
    /// relative `data_dir` named every segment twice over).
    fn segment_name(&self, index: usize) -> PathBuf {
        let path = self.segment_path(index);
        path.file_name().map(PathBuf::from).unwrap_or(path)
    }

    fn frames_dir(&self) -> PathBuf {
        self.dir.join("frames")
    }

    /// Segments (or PNG frames) past the finished ones, and partial files.
    fn remove_unfinished(&self) -> std::io::Result<()> {
        let finished: Vec<OsString> = (0..self.finished.segments).map(|index| self.segment_path(index).file_name().unwrap_or_default().to_os_string()).collect();
        for entry in std::fs::read_dir(&self.dir)? {
            let entry = entry?;
            let name = entry.file_name();
            let is_segment = name.to_string_lossy().starts_with("segment_") || name.to_string_lossy().starts_with(".segment_");
            if is_segment && !finished.contains(&name) {
                std::fs::remove_file(entry.path())?;
            }
        }
        if self.config.format.is_png() && self.frames_dir().is_dir() {
            for entry in std::fs::read_dir(self.frames_dir())? {
                let entry = entry?;
                if frame_number(&entry.file_name()).is_none_or(|number| number >= self.finished.frames) {
                    std::fs::remove_file(entry.path())?;
                }
            }
        }
        Ok(())
    }
}

/// ffmpeg's arguments that read the segments `names` (in `dir`) one after another, through a concat list
/// written into `dir`.
fn concat_input(dir: &Path, names: &[PathBuf]) -> Result<Vec<OsString>, MediaError> {
    let list = dir.join("segments.txt");
    let lines: String = names.iter().map(|name| format!("file '{}'\n", concat_quoted(name))).collect();
    std::fs::write(&list, lines).map_err(|e| MediaError::io("listing the segments", e))?;
    let mut args: Vec<OsString> = Vec::new();
    push_all(&mut args, &["-nostdin", "-v", "error", "-y", "-protocol_whitelist", "file", "-f", "concat", "-safe", "0", "-i"]);
    args.push(list.into_os_string());
    Ok(args)
}

/// The first `segments` finished video segments in `dir` (as `SegmentedWriter` names them in `format`) joined
/// into `output` as they are, without the input's other streams: a stopped job's frames so far, kept as a
/// shorter result. Returns false when there is nothing to join (no segment, or a PNG output's frames).
pub fn join_finished(tools: &MediaTools, dir: &Path, segments: usize, format: OutputFormat, output: &Path) -> Result<bool, MediaError> {
    let names: Vec<PathBuf> = (0..segments).map(|index| PathBuf::from(format!("segment_{index:06}.{}", format.extension()))).collect();
    if format.is_png() || segments == 0 || !names.iter().all(|name| dir.join(name).is_file()) {
        return Ok(false);
    }
    let partial = partial_path_for(output)?;
    let mut args = concat_input(dir, &names)?;
    push_all(&mut args, &["-map", "0:v:0", "-c:v", "copy"]);
    if format == OutputFormat::H265 {
        push_all(&mut args, &["-tag:v", "hvc1"]);
    }
    push_container(&mut args, format, true);
    args.push(file_url(&partial));
    let child = BoundedChild::spawn(ProcessSpec {
        program: &tools.ffmpeg,
        args,
        timeout: tools.stream_timeout,
        pipe_stdin: false,
        pipe_stdout: false,
        priority: Default::default(),
    })?;
    child.finish()?;
    publish_file(&partial, output)?;
    Ok(true)
}

/// A path inside the concat list's quotes: a quote closes them, is escaped, and opens them again.
fn concat_quoted(path: &Path) -> String {
    path.display().to_string().replace('\'', "'\\''")
}

/// `frame_000012.png` → 12.
fn frame_number(name: &std::ffi::OsStr) -> Option<u64> {
    name.to_str()?.strip_prefix("frame_")?.strip_suffix(".png")?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_numbered_by_their_file_names() {
        assert_eq!(frame_number(std::ffi::OsStr::new("frame_000012.png")), Some(12));
        assert_eq!(frame_number(std::ffi::OsStr::new(".frame_000012.png.partial")), None);
    }

    #[test]
    fn quotes_in_a_segment_path_are_escaped_for_the_concat_list() {
        assert_eq!(concat_quoted(Path::new("/d/it's/segment_000000.mp4")), "/d/it'\\''s/segment_000000.mp4");
    }
}
