//! `FrameWriter`: raw RGB chunks into the job's output format (H.264/H.265 MP4, ProRes MOV, FFV1 MKV, a
//! zip of PNG frames), with the input's colour, audio, subtitles and chapters; published by rename only
//! when complete.

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ChildStdin;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::thread::JoinHandle;

use super::colour::Colour;
use super::format::{OutputFormat, SampleDepth};
use super::frames::frame_bytes;
use super::range::FrameSpan;
use super::probe::{file_url, parse_rate, source_streams, SourceStreams};
use super::process::{set_thread_priority, BoundedChild, ProcessPriority, ProcessSpec};
use super::{MediaError, MediaTools, RgbFrames};

/// Audio codecs the MP4 and MOV muxers take as they are; anything else (PCM, Vorbis, …) becomes AAC.
const MP4_AUDIO_CODECS: &[&str] = &["aac", "mp3", "ac3", "eac3", "alac", "opus"];
/// Text subtitles, which MP4 and MOV carry as `mov_text`; picture subtitles (DVD, PGS) they cannot carry.
const TEXT_SUBTITLES: &[&str] = &["subrip", "ass", "ssa", "mov_text", "webvtt", "text"];

#[derive(Clone)]
pub struct WriteConfig {
    pub output: PathBuf,
    pub width: u32,
    pub height: u32,
    /// The input's `MediaInfo::fps_rational`, so the output plays at the same speed.
    pub fps_rational: String,
    /// Copy the audio (first stream), subtitles and chapters of this file (the job's input) where
    /// the output's container takes them; `None` keeps none.
    pub streams_from: Option<PathBuf>,
    /// A job over part of the input: the time of `streams_from` kept (its audio and subtitles from the
    /// span's start, for its length), so they stay in step with the frames.
    pub streams_span: Option<FrameSpan>,
    /// Any but `safetensors`.
    pub format: OutputFormat,
    /// Written into the output, and the matrix and range its YUV is made with.
    pub colour: Colour,
    /// x264/x265 quality, 0–51 (lower is better; 18 is visually lossless).
    pub crf: u8,
    /// x264/x265 preset, e.g. `medium`.
    pub preset: String,
    /// Chunks waiting for the encoder; lets the caller compute while ffmpeg encodes.
    pub queue_chunks: usize,
    /// The encoder's CPU priority against the model.
    pub priority: ProcessPriority,
    /// The input's non-square pixel shape (`MediaInfo::sample_aspect_ratio`), kept in the output.
    pub sample_aspect_ratio: Option<String>,
}

/// Encodes every frame written, once, at `fps_rational`, from RGB at the format's depth
/// (`OutputFormat::depth`). YUV formats pad odd widths/heights to even (4:2:0 and 4:2:2 need them)
/// by repeating the last column/row, so no pixel is lost or resampled; the output is then up to
/// 1 px larger. ffmpeg writes to `.NAME.partial` beside the output (PNG frames into `.NAME.partial.d/`,
/// zipped at the end); `finish` renames it into place only after ffmpeg exits 0, and dropping the
/// writer unfinished kills ffmpeg and deletes what it wrote.
pub struct FrameWriter {
    child: Option<BoundedChild>,
    chunks: Option<SyncSender<RgbFrames>>,
    pump: Option<JoinHandle<std::io::Result<()>>>,
    partial_path: PathBuf,
    /// PNG frames, before they are zipped.
    frames_dir: Option<PathBuf>,
    publish: Publish,
    output: PathBuf,
    width: u32,
    height: u32,
    depth: SampleDepth,
    frames_written: u64,
}

/// What one ffmpeg run writes.
pub(super) enum Target {
    /// The whole output, at `WriteConfig::output`.
    Whole,
    /// Part of a resumable output (`segments`): its frames from `first_frame` on, encoded alone and without
    /// the input's other streams, into `path` in the format's container; PNG frames go into the folder
    /// `path`, numbered from `first_frame`.
    Segment { path: PathBuf, first_frame: u64 },
}

/// What `finish` does with what ffmpeg wrote.
#[derive(Clone, Copy, PartialEq)]
enum Publish {
    /// Renames the partial file into place.
    Rename,
    /// Zips the PNG frames into the partial file, then renames it into place.
    ZipFrames,
    /// A segment's PNG frames stay in the folder they share with the other segments' until the whole is zipped.
    LeaveFrames,
}

impl FrameWriter {
    pub fn spawn(tools: &MediaTools, config: WriteConfig) -> Result<Self, MediaError> {
        Self::spawn_to(tools, config, Target::Whole)
    }

    pub(super) fn spawn_to(tools: &MediaTools, config: WriteConfig, target: Target) -> Result<Self, MediaError> {
        frame_bytes(config.width, config.height)?;
        let invalid = |what: String| Err(MediaError::InvalidRequest(what));
        let Some((fps_rational, _)) = parse_rate(&config.fps_rational) else {
            return invalid(format!("frame rate {:?}", config.fps_rational));
        };
        if config.crf > 51 || config.preset.is_empty() || !config.preset.bytes().all(|b| b.is_ascii_lowercase()) {
            return invalid(format!("crf {} / preset {:?}", config.crf, config.preset));
        }
        if config.queue_chunks == 0 {
            return invalid("queue_chunks must be at least 1".into());
        }
        if !config.format.is_video() && !config.format.is_png() {
            return invalid(format!("{} is not written by ffmpeg", config.format.as_str()));
        }
        let (output, first_frame) = match &target {
            Target::Whole => (config.output.clone(), 0),
            Target::Segment { path, first_frame } => (path.clone(), *first_frame),
        };
        let partial_path = partial_path_for(&output)?;
        let sources = match (&config.streams_from, &target) {
            (Some(path), Target::Whole) if !config.format.is_png() => Some((path.clone(), source_streams(tools, path)?)),
            _ => None,
        };
        let publish = match (&target, config.format.is_png()) {
            (_, false) => Publish::Rename,
            (Target::Whole, true) => Publish::ZipFrames,
            (Target::Segment { .. }, true) => Publish::LeaveFrames,
        };
        let frames_dir = match publish {
            Publish::Rename => None,
            Publish::ZipFrames => {
                let mut dir = partial_path.clone().into_os_string();
                dir.push(".d");
                let dir = PathBuf::from(dir);
                let _ = std::fs::remove_dir_all(&dir);
                Some(dir)
            }
            Publish::LeaveFrames => Some(output.clone()),
        };
        if let Some(dir) = &frames_dir {
            std::fs::create_dir_all(dir).map_err(|e| MediaError::io("making the frames folder", e))?;
        }

        let whole = matches!(target, Target::Whole);
        let mut args = encode_args(&config, &fps_rational, sources.as_ref(), whole, first_frame);
        match &frames_dir {
            Some(dir) => args.push(file_url(&dir.join("frame_%06d.png"))),
            None => args.push(file_url(&partial_path)),
        }
        let mut child = BoundedChild::spawn(ProcessSpec {
            program: &tools.ffmpeg,
            args,
            timeout: tools.stream_timeout,
            pipe_stdin: true,
            pipe_stdout: false,
            priority: config.priority,
        })?;
        let stdin = child.stdin.take().expect("stdin is piped");
        let priority = config.priority;
        let (sender, receiver) = sync_channel(config.queue_chunks);
        let pump = std::thread::Builder::new()
            .name("ffmpeg-encode".into())
            .spawn(move || {
                set_thread_priority(priority);
                pump_frames(receiver, stdin)
            })
            .map_err(|e| MediaError::io("starting the encode thread", e))?;
        Ok(FrameWriter {
            child: Some(child),
            chunks: Some(sender),
            pump: Some(pump),
            partial_path,
            frames_dir,
            publish,
            output,
            width: config.width,
            height: config.height,
            depth: config.format.depth(),
            frames_written: 0,
        })
    }

    pub fn write(&mut self, frames: RgbFrames) -> Result<(), MediaError> {
        frames.check_shape(self.width, self.height)?;
        if frames.depth != self.depth {
            return Err(MediaError::InvalidRequest(format!("{} frames for a {} encoder", frames.depth.rgb_pix_fmt(), self.depth.rgb_pix_fmt())));
        }
        let Some(chunks) = &self.chunks else {
            return Err(MediaError::InvalidRequest("the writer already failed".into()));
        };
        let count = frames.count as u64;
        if chunks.send(frames).is_err() {
            // The pump stopped, so ffmpeg closed its input: its exit status says why.
            return Err(self.stop_and_explain());
        }
        self.frames_written += count;
        Ok(())
    }

    /// Waits for ffmpeg to encode everything, then moves the file into place.
    pub fn finish(mut self) -> Result<(), MediaError> {
        if self.chunks.is_none() {
            return Err(MediaError::InvalidRequest("the writer already failed".into()));
        }
        self.chunks.take();
        let pumped = self.pump.take().map(join_pump).unwrap_or(Ok(()));
        self.child.take().expect("child lives until finish").finish()?;
        pumped.map_err(|e| MediaError::io("writing frames to ffmpeg", e))?;
        match (&self.frames_dir, self.publish) {
            (Some(dir), Publish::ZipFrames) => zip_frames(dir, &self.partial_path).map_err(|e| MediaError::io("zipping the PNG frames", e))?,
            (Some(dir), Publish::LeaveFrames) => return sync_folder(dir).map_err(|e| MediaError::io("keeping the PNG frames", e)),
            _ => {}
        }
        publish_file(&self.partial_path, &self.output)
    }

    /// The depth `write` takes (the format's).
    pub fn depth(&self) -> SampleDepth {
        self.depth
    }

    pub fn frames_written(&self) -> u64 {
        self.frames_written
    }

    fn stop_and_explain(&mut self) -> MediaError {
        self.chunks.take();
        let pumped = self.pump.take().map(join_pump).unwrap_or(Ok(()));
        let exited = self.child.take().map(BoundedChild::finish).unwrap_or(Ok(String::new()));
        match (exited, pumped) {
            (Err(e), _) => e,
            (Ok(_), Err(e)) => MediaError::io("writing frames to ffmpeg", e),
            (Ok(_), Ok(())) => MediaError::io("writing frames to ffmpeg", std::io::Error::other("encoder stopped early")),
        }
    }
}

impl Drop for FrameWriter {
    fn drop(&mut self) {
        if let Some(child) = &self.child {
            child.killer().kill(); // unblocks a pump stuck writing into a full pipe
        }
        self.chunks.take();
        if let Some(pump) = self.pump.take() {
            let _ = pump.join();
        }
        self.child.take(); // reaps ffmpeg
        // After a successful finish the partial file was renamed away and this is a no-op.
        let _ = std::fs::remove_file(&self.partial_path);
        // A segment's frames share their folder with the finished segments' (the resume cuts its own back).
        if let (Some(dir), Publish::ZipFrames) = (&self.frames_dir, self.publish) {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

fn pump_frames(chunks: Receiver<RgbFrames>, mut stdin: ChildStdin) -> std::io::Result<()> {
    for chunk in chunks {
        stdin.write_all(&chunk.data)?;
    }
    stdin.flush() // then dropping stdin closes the pipe: end of stream for ffmpeg
}

fn join_pump(pump: JoinHandle<std::io::Result<()>>) -> std::io::Result<()> {
    pump.join().unwrap_or_else(|_| Err(std::io::Error::other("encode thread panicked")))
}

/// Moves a finished file into place, durable before visible: a crash must not leave a named but empty result.
pub(super) fn publish_file(partial: &Path, output: &Path) -> Result<(), MediaError> {
    let context = |e| MediaError::io(format!("publishing {}", output.display()), e);
    std::fs::File::open(partial).and_then(|f| f.sync_all()).map_err(context)?;
    std::fs::rename(partial, output).map_err(context)
}

/// Every file of `dir` on disk.
fn sync_folder(dir: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        std::fs::File::open(entry?.path())?.sync_all()?;
    }
    Ok(())
}

pub(super) fn partial_path_for(output: &Path) -> Result<PathBuf, MediaError> {
    let name = output
        .file_name()
        .ok_or_else(|| MediaError::InvalidRequest(format!("output {} has no file name", output.display())))?;
    let mut partial = OsString::from(".");
    partial.push(name);
    partial.push(".partial");
    Ok(output.with_file_name(partial))
}

/// A zip of the frames, stored (PNG is already compressed), in frame order.
pub(super) fn zip_frames(dir: &Path, zip_path: &Path) -> std::io::Result<()> {
    let mut names: Vec<_> = std::fs::read_dir(dir)?.map(|entry| entry.map(|e| e.file_name())).collect::<Result<_, _>>()?;
    names.sort();
    let mut zip = zip::ZipWriter::new(std::fs::File::create(zip_path)?);
    let options = zip::write::FileOptions::default().compression_method(zip::CompressionMethod::Stored).large_file(true);
    for name in names {
        let name = name.to_string_lossy().into_owned();
        zip.start_file(name.as_str(), options).map_err(std::io::Error::other)?;
        std::io::copy(&mut std::fs::File::open(dir.join(&name))?, &mut zip)?;
    }
    zip.finish().map_err(std::io::Error::other)?;
    std::fs::remove_dir_all(dir)
}

/// `whole`: the whole output, else one segment of it starting at `first_frame`.
fn encode_args(config: &WriteConfig, fps_rational: &str, sources: Option<&(PathBuf, SourceStreams)>, whole: bool, first_frame: u64) -> Vec<OsString> {
    let mut args: Vec<OsString> = Vec::new();
    let size = format!("{}x{}", config.width, config.height);
    let format = config.format;
    push_all(&mut args, &["-nostdin", "-v", "error", "-y"]);
    let input_pix_fmt = format.depth().rgb_pix_fmt();
    push_all(&mut args, &["-f", "rawvideo", "-pix_fmt", input_pix_fmt, "-s", &size, "-framerate", fps_rational, "-i", "pipe:0"]);
    if let Some((path, _)) = sources {
        push_streams_input(&mut args, path, config.streams_span.as_ref());
    }
    push_all(&mut args, &["-map", "0:v:0"]);
    let mut filters = Vec::new();
    if !format.is_rgb() {
        filters.extend(even_size_filter(config.width, config.height));
        filters.push(config.colour.from_rgb_filter());
    }
    filters.push(format!("format={}", output_pix_fmt(format)));
    if let Some(sar) = &config.sample_aspect_ratio {
        // `max`: setsar otherwise reduces terms over 100 to a nearby ratio (128:117 became 93:85).
        filters.push(format!("setsar=sar={}:max=65535", sar.replace(':', "/")));
    }
    push_all(&mut args, &["-vf", &filters.join(",")]);
    let crf = config.crf.to_string();
    // The encoder `available_formats` checked this ffmpeg for.
    push_all(&mut args, &["-c:v", format.encoder().unwrap_or("png")]);
    match format {
        OutputFormat::H264 => push_all(&mut args, &["-preset", &config.preset, "-crf", &crf]),
        OutputFormat::H265 => push_all(&mut args, &["-preset", &config.preset, "-crf", &crf, "-tag:v", "hvc1", "-x265-params", "log-level=error"]),
        OutputFormat::Prores => push_all(&mut args, &["-profile:v", "3", "-vendor", "apl0"]),
        OutputFormat::Ffv1 => push_all(&mut args, &["-level", "3", "-slicecrc", "1"]),
        OutputFormat::Png | OutputFormat::Png16 | OutputFormat::Safetensors => push_all(&mut args, &["-start_number", &first_frame.to_string()]),
    }
    push_all(&mut args, &["-pix_fmt", output_pix_fmt(format)]);
    args.extend(config.colour.output_flags(format.is_rgb()).into_iter().map(OsString::from));
    if let Some((_, streams)) = sources {
        push_kept_streams(&mut args, format, streams, config.streams_span.is_some());
    }
    push_all(&mut args, &["-fps_mode", "passthrough"]);
    push_container(&mut args, format, whole);
    args
}

/// The format's container; the index at the front (`faststart`) only in the whole output, which players
/// stream: a segment is read whole when the segments are joined.
pub(super) fn push_container(args: &mut Vec<OsString>, format: OutputFormat, whole: bool) {
    match format {
        OutputFormat::H264 | OutputFormat::H265 if whole => push_all(args, &["-movflags", "+faststart", "-f", "mp4"]),
        OutputFormat::H264 | OutputFormat::H265 => push_all(args, &["-f", "mp4"]),
        OutputFormat::Prores => push_all(args, &["-f", "mov"]),
        OutputFormat::Ffv1 => push_all(args, &["-f", "matroska"]),
        OutputFormat::Png | OutputFormat::Png16 | OutputFormat::Safetensors => push_all(args, &["-f", "image2"]),
    }
}

/// The next input: the file whose audio, subtitles and chapters the output keeps, from a span's start for its
/// length when the job is over part of it.
pub(super) fn push_streams_input(args: &mut Vec<OsString>, path: &Path, span: Option<&FrameSpan>) {
    if let Some(span) = span {
        // Input options: ffmpeg seeks this input (exactly, as it decodes) and reads no further.
        push_all(args, &["-ss", &format!("{:.6}", span.start_s), "-t", &format!("{:.6}", span.duration_s)]);
    }
    push_all(args, &["-protocol_whitelist", "file", "-i"]);
    args.push(file_url(path));
}

/// The encoder's pixel format: what each format's users expect of it.
fn output_pix_fmt(format: OutputFormat) -> &'static str {
    match format {
        OutputFormat::H264 => "yuv420p",
        OutputFormat::H265 => "yuv420p10le",
        OutputFormat::Prores => "yuv422p10le",
        OutputFormat::Ffv1 => "gbrp16le",
        OutputFormat::Png => "rgb24",
        OutputFormat::Png16 | OutputFormat::Safetensors => "rgb48be",
    }
}

/// Audio, subtitles and chapters of input 1, as the container takes them: Matroska copies them as they
/// are; MP4 and MOV re-encode audio they cannot hold to AAC and text subtitles to `mov_text`, and leave
/// out picture subtitles (said in the log).
/// Audio of part of the input (`cut`) is decoded and encoded again: a copy would start at the packet ffmpeg
/// seeked to (the video's keyframe before the part), not at the part's start.
pub(super) fn push_kept_streams(args: &mut Vec<OsString>, format: OutputFormat, streams: &SourceStreams, cut: bool) {
    let matroska = format == OutputFormat::Ffv1;
    if let Some(codec) = &streams.audio {
        let audio_codec = match (cut, matroska) {
            (true, true) => "flac",
            (true, false) => "aac",
            (false, true) => "copy",
            (false, false) if MP4_AUDIO_CODECS.contains(&codec.as_str()) => "copy",
            (false, false) => "aac",
        };
        push_all(args, &["-map", "1:a:0?", "-c:a", audio_codec]);
    }
    let mut kept = 0;
    for (index, codec) in streams.subtitles.iter().enumerate() {
        let text = TEXT_SUBTITLES.contains(&codec.as_str());
        let subtitle_codec = match (matroska, codec.as_str()) {
            (true, "mov_text") => "subrip", // Matroska has no mov_text
            (true, _) => "copy",
            (false, _) if text => "mov_text",
            (false, _) => {
                tracing::info!(codec, "picture subtitles do not fit an MP4/MOV output: left out");
                continue;
            }
        };
        push_all(args, &["-map", &format!("1:s:{index}"), &format!("-c:s:{kept}"), subtitle_codec]);
        kept += 1;
    }
    if streams.chapters {
        push_all(args, &["-map_chapters", "1"]);
    }
}

pub(super) fn push_all(args: &mut Vec<OsString>, items: &[&str]) {
    args.extend(items.iter().map(OsString::from));
}

/// `None` for even sizes; otherwise pad by one pixel and smear the last column/row into it.
fn even_size_filter(width: u32, height: u32) -> Option<String> {
    let (pad_right, pad_bottom) = (width % 2, height % 2);
    (pad_right + pad_bottom > 0).then(|| {
        format!(
            "pad={}:{}:0:0,fillborders=right={pad_right}:bottom={pad_bottom}:mode=smear",
            width + pad_right,
            height + pad_bottom
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partial_file_is_hidden_beside_the_output() {
        assert_eq!(partial_path_for(Path::new("/d/out.mp4")).unwrap(), PathBuf::from("/d/.out.mp4.partial"));
    }

    #[test]
    fn only_odd_sizes_get_padded() {
        assert_eq!(even_size_filter(176, 144), None);
        assert_eq!(
            even_size_filter(175, 144).unwrap(),
            "pad=176:144:0:0,fillborders=right=1:bottom=0:mode=smear"
        );
    }
}
