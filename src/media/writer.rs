//! `FrameWriter`: raw RGB chunks into an H.264 MP4, published by rename only when complete.

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ChildStdin;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::thread::JoinHandle;

use super::frames::frame_bytes;
use super::probe::{file_url, first_audio_codec, parse_rate};
use super::process::{BoundedChild, ProcessSpec};
use super::{MediaError, MediaTools, RgbFrames};

/// Audio codecs ffmpeg's MP4 muxer takes as they are; anything else (PCM, Vorbis, …) becomes AAC.
const MP4_AUDIO_CODECS: &[&str] = &["aac", "mp3", "ac3", "eac3", "alac", "opus"];

pub struct WriteConfig {
    pub output: PathBuf,
    pub width: u32,
    pub height: u32,
    /// The input's `MediaInfo::fps_rational`, so the output plays at the same speed.
    pub fps_rational: String,
    /// Copy the first audio stream of this file (usually the job's input), if it has one.
    pub audio_from: Option<PathBuf>,
    /// libx264 quality, 0–51 (lower is better; 18 is visually lossless).
    pub crf: u8,
    /// libx264 preset, e.g. `medium`.
    pub preset: String,
    /// Chunks waiting for the encoder; lets the caller compute while ffmpeg encodes.
    pub queue_chunks: usize,
}

/// Encodes every frame written, once, at `fps_rational` (libx264, yuv420p, `+faststart`).
/// Odd widths/heights are padded to even (4:2:0 needs even sizes) by repeating the last
/// column/row, so no pixel is lost or resampled; the output is then up to 1 px larger.
/// ffmpeg writes to `.NAME.partial` beside the output; `finish` renames it into place only after
/// ffmpeg exits 0, and dropping the writer unfinished kills ffmpeg and deletes the partial file.
pub struct FrameWriter {
    child: Option<BoundedChild>,
    chunks: Option<SyncSender<RgbFrames>>,
    pump: Option<JoinHandle<std::io::Result<()>>>,
    partial_path: PathBuf,
    output: PathBuf,
    width: u32,
    height: u32,
    frames_written: u64,
}

impl FrameWriter {
    pub fn spawn(tools: &MediaTools, config: WriteConfig) -> Result<Self, MediaError> {
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
        let partial_path = partial_path_for(&config.output)?;
        let audio = match &config.audio_from {
            Some(path) => first_audio_codec(tools, path)?.map(|codec| (path.clone(), codec)),
            None => None,
        };

        let mut args = encode_args(&config, &fps_rational, audio.as_ref());
        args.push(file_url(&partial_path));
        let mut child = BoundedChild::spawn(ProcessSpec {
            program: &tools.ffmpeg,
            args,
            timeout: tools.stream_timeout,
            pipe_stdin: true,
            pipe_stdout: false,
        })?;
        let stdin = child.stdin.take().expect("stdin is piped");
        let (sender, receiver) = sync_channel(config.queue_chunks);
        let pump = std::thread::Builder::new()
            .name("ffmpeg-encode".into())
            .spawn(move || pump_frames(receiver, stdin))
            .map_err(|e| MediaError::io("starting the encode thread", e))?;
        Ok(FrameWriter {
            child: Some(child),
            chunks: Some(sender),
            pump: Some(pump),
            partial_path,
            output: config.output,
            width: config.width,
            height: config.height,
            frames_written: 0,
        })
    }

    pub fn write(&mut self, frames: RgbFrames) -> Result<(), MediaError> {
        frames.check_shape(self.width, self.height)?;
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
        let context = |e| MediaError::io(format!("publishing {}", self.output.display()), e);
        // Durable before visible: a crash must not leave a named but empty result.
        std::fs::File::open(&self.partial_path).and_then(|f| f.sync_all()).map_err(context)?;
        std::fs::rename(&self.partial_path, &self.output).map_err(context)?;
        Ok(())
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

fn partial_path_for(output: &Path) -> Result<PathBuf, MediaError> {
    let name = output
        .file_name()
        .ok_or_else(|| MediaError::InvalidRequest(format!("output {} has no file name", output.display())))?;
    let mut partial = OsString::from(".");
    partial.push(name);
    partial.push(".partial");
    Ok(output.with_file_name(partial))
}

fn encode_args(config: &WriteConfig, fps_rational: &str, audio: Option<&(PathBuf, String)>) -> Vec<OsString> {
    let mut args: Vec<OsString> = Vec::new();
    let size = format!("{}x{}", config.width, config.height);
    push_all(&mut args, &["-nostdin", "-v", "error", "-y"]);
    push_all(&mut args, &["-f", "rawvideo", "-pix_fmt", "rgb24", "-s", &size, "-framerate", fps_rational, "-i", "pipe:0"]);
    if let Some((path, _)) = audio {
        push_all(&mut args, &["-protocol_whitelist", "file", "-i"]);
        args.push(file_url(path));
    }
    push_all(&mut args, &["-map", "0:v:0"]);
    if let Some(filter) = even_size_filter(config.width, config.height) {
        push_all(&mut args, &["-vf", &filter]);
    }
    let crf = config.crf.to_string();
    push_all(&mut args, &["-c:v", "libx264", "-preset", &config.preset, "-crf", &crf, "-pix_fmt", "yuv420p"]);
    if let Some((_, codec)) = audio {
        let audio_codec = if MP4_AUDIO_CODECS.contains(&codec.as_str()) { "copy" } else { "aac" };
        push_all(&mut args, &["-map", "1:a:0?", "-c:a", audio_codec]);
    }
    push_all(&mut args, &["-fps_mode", "passthrough", "-movflags", "+faststart", "-f", "mp4"]);
    args
}

fn push_all(args: &mut Vec<OsString>, items: &[&str]) {
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
