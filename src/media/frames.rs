//! Raw RGB frames and `FrameReader`, which decodes a video into chunks on a background thread.

use std::ffi::OsString;
use std::io::Read;
use std::path::PathBuf;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::thread::JoinHandle;

use super::colour::Colour;
use super::format::SampleDepth;
use super::probe::file_url;
use super::range::FrameSpan;
use super::process::{set_thread_priority, BoundedChild, ChildKiller, ProcessPriority, ProcessSpec};
use super::{MediaError, MediaTools};

/// `count` frames of packed RGB (rgb24, or rgb48le at 16 bits), row-major, frame after frame.
#[derive(Debug, Clone, PartialEq)]
pub struct RgbFrames {
    pub width: u32,
    pub height: u32,
    pub count: usize,
    pub depth: SampleDepth,
    pub data: Vec<u8>,
}

impl RgbFrames {
    pub fn new(width: u32, height: u32, data: Vec<u8>) -> Result<Self, MediaError> {
        Self::with_depth(width, height, SampleDepth::Eight, data)
    }

    pub fn with_depth(width: u32, height: u32, depth: SampleDepth, data: Vec<u8>) -> Result<Self, MediaError> {
        let frame_bytes = frame_bytes(width, height)? * depth.bytes();
        if !data.len().is_multiple_of(frame_bytes) {
            return Err(MediaError::InvalidRequest(format!(
                "{} bytes is not a whole number of {width}x{height} {} frames",
                data.len(),
                depth.rgb_pix_fmt()
            )));
        }
        Ok(RgbFrames { width, height, count: data.len() / frame_bytes, depth, data })
    }

    pub fn frame_bytes(&self) -> usize {
        self.width as usize * self.height as usize * 3 * self.depth.bytes()
    }

    pub fn frame(&self, index: usize) -> &[u8] {
        let size = self.frame_bytes();
        &self.data[index * size..(index + 1) * size]
    }

    /// The frames from `at` on, leaving the first `at` here (as `Vec::split_off`).
    pub fn split_off(&mut self, at: usize) -> RgbFrames {
        let at = at.min(self.count);
        let data = self.data.split_off(at * self.frame_bytes());
        let rest = RgbFrames { width: self.width, height: self.height, count: self.count - at, depth: self.depth, data };
        self.count = at;
        rest
    }

    pub(crate) fn check_shape(&self, width: u32, height: u32) -> Result<(), MediaError> {
        if (self.width, self.height) != (width, height) || self.data.len() != self.count * self.frame_bytes() {
            return Err(MediaError::InvalidRequest(format!(
                "chunk of {} {}x{} frames in {} bytes does not fit a {width}x{height} stream",
                self.count,
                self.width,
                self.height,
                self.data.len()
            )));
        }
        Ok(())
    }
}

pub(crate) fn frame_bytes(width: u32, height: u32) -> Result<usize, MediaError> {
    if width == 0 || height == 0 {
        return Err(MediaError::InvalidRequest(format!("frame size {width}x{height}")));
    }
    (width as usize).checked_mul(height as usize).and_then(|p| p.checked_mul(3)).ok_or_else(|| {
        MediaError::InvalidRequest(format!("frame size {width}x{height} overflows"))
    })
}

pub struct ReadConfig {
    pub input: PathBuf,
    /// The decoded size, i.e. `MediaInfo::width`/`height` from `probe`.
    pub width: u32,
    pub height: u32,
    pub chunk_frames: usize,
    /// Decoded chunks waiting for the consumer; memory is about (queue_chunks + 2) chunks.
    pub queue_chunks: usize,
    /// The input's colour (`MediaInfo::colour`): YUV becomes RGB with its matrix and range.
    pub colour: Colour,
    /// The decoder's CPU priority against the model.
    pub priority: ProcessPriority,
    /// Only these frames (`MediaInfo::span`); `None` reads them all.
    pub span: Option<FrameSpan>,
}

/// `Ok(None)` marks a clean end, so a vanished thread is never mistaken for one.
type ChunkMessage = Result<Option<RgbFrames>, MediaError>;

/// Decodes every frame exactly once (`-fps_mode passthrough`) into chunks of `chunk_frames`;
/// the last chunk may be shorter. A reader thread keeps the queue full while the caller computes.
pub struct FrameReader {
    chunks: Option<Receiver<ChunkMessage>>,
    killer: ChildKiller,
    pump: Option<JoinHandle<()>>,
    /// The thread writing a zip's frames into ffmpeg, whose failure would otherwise look like a short clip.
    feeder: Option<JoinHandle<std::io::Result<()>>>,
    finished: bool,
    frames_read: u64,
}

impl FrameReader {
    pub fn spawn(tools: &MediaTools, config: ReadConfig) -> Result<Self, MediaError> {
        let frame_bytes = frame_bytes(config.width, config.height)?;
        if config.chunk_frames == 0 || config.queue_chunks == 0 {
            return Err(MediaError::InvalidRequest("chunk_frames and queue_chunks must be at least 1".into()));
        }
        let chunk_bytes = frame_bytes
            .checked_mul(config.chunk_frames)
            .ok_or_else(|| MediaError::InvalidRequest("chunk size overflows".into()))?;
        // A zip of PNG frames reaches ffmpeg's PNG demuxer member by member on its stdin.
        let sequence = super::sequence::is_zip(&config.input);
        let mut args: Vec<OsString> = if sequence {
            ["-v", "error", "-f", "png_pipe", "-i", "pipe:0"].iter().map(OsString::from).collect()
        } else {
            let mut args: Vec<OsString> = ["-nostdin", "-v", "error", "-protocol_whitelist", "file", "-i"].iter().map(OsString::from).collect();
            args.push(file_url(&config.input));
            args
        };
        // `trim` counts the decoded frames themselves, so a span is exact whatever the timestamps.
        let take_span = config.span.map(|span| {
            format!("trim=start_frame={}:end_frame={},setpts=PTS-STARTPTS,", span.start_frame, span.start_frame + span.frames)
        });
        let to_rgb = format!("{}{},format=rgb24", take_span.unwrap_or_default(), config.colour.to_rgb_filter());
        args.extend(
            ["-map", "0:v:0", "-vf", &to_rgb, "-f", "rawvideo", "-pix_fmt", "rgb24", "-fps_mode", "passthrough", "pipe:1"]
                .iter()
                .map(OsString::from),
        );
        let mut child = BoundedChild::spawn(ProcessSpec {
            program: &tools.ffmpeg,
            args,
            timeout: tools.stream_timeout,
            pipe_stdin: sequence,
            pipe_stdout: true,
            priority: config.priority,
        })?;
        let feeder = match child.stdin.take() {
            Some(stdin) => Some(super::sequence::feed_members(config.input.clone(), stdin).map_err(|e| MediaError::io("starting the zip reader", e))?),
            None => None,
        };
        let killer = child.killer();
        let priority = config.priority;
        let (sender, chunks) = sync_channel(config.queue_chunks);
        let shape = ChunkShape { width: config.width, height: config.height, frame_bytes, chunk_bytes };
        let pump = std::thread::Builder::new()
            .name("ffmpeg-decode".into())
            .spawn(move || {
                set_thread_priority(priority);
                pump_frames(child, shape, sender)
            })
            .map_err(|e| MediaError::io("starting the decode thread", e))?;
        Ok(FrameReader { chunks: Some(chunks), killer, pump: Some(pump), feeder, finished: false, frames_read: 0 })
    }

    /// The next chunk, `None` after the last one. An error ends the stream.
    pub fn next_chunk(&mut self) -> Result<Option<RgbFrames>, MediaError> {
        if self.finished {
            return Ok(None);
        }
        let received = self.chunks.as_ref().expect("receiver lives until drop").recv();
        let message = received.unwrap_or_else(|_| {
            Err(MediaError::io("decode thread", std::io::Error::other("ended without reporting")))
        });
        match message {
            Ok(Some(chunk)) => {
                self.frames_read += chunk.count as u64;
                Ok(Some(chunk))
            }
            Ok(None) => {
                self.finished = true;
                if let Some(feeder) = self.feeder.take() {
                    let fed = feeder.join().unwrap_or_else(|_| Err(std::io::Error::other("the zip reader panicked")));
                    fed.map_err(|e| MediaError::io("reading the frames from the zip", e))?;
                }
                Ok(None)
            }
            Err(e) => {
                self.finished = true;
                Err(e)
            }
        }
    }

    pub fn frames_read(&self) -> u64 {
        self.frames_read
    }
}

impl Drop for FrameReader {
    fn drop(&mut self) {
        // The pump may be blocked reading ffmpeg's stdout or sending to us: unblock both, then join,
        // so ffmpeg is reaped before drop returns.
        self.killer.kill();
        self.chunks.take();
        if let Some(pump) = self.pump.take() {
            let _ = pump.join();
        }
        // ffmpeg is gone, so its stdin is closed and the feeder's next write fails.
        if let Some(feeder) = self.feeder.take() {
            let _ = feeder.join();
        }
    }
}

struct ChunkShape {
    width: u32,
    height: u32,
    frame_bytes: usize,
    chunk_bytes: usize,
}

fn pump_frames(mut child: BoundedChild, shape: ChunkShape, sender: SyncSender<ChunkMessage>) {
    let mut stdout = child.stdout.take().expect("stdout is piped");
    loop {
        let mut data = vec![0u8; shape.chunk_bytes];
        let filled = match read_until_full(&mut stdout, &mut data) {
            Ok(filled) => filled,
            Err(e) => {
                drop(stdout);
                let error = child.finish().err().unwrap_or_else(|| MediaError::io("reading decoded frames", e));
                let _ = sender.send(Err(error));
                return;
            }
        };
        if !filled.is_multiple_of(shape.frame_bytes) {
            drop(stdout);
            let error = child.finish().err().unwrap_or_else(|| MediaError::FfmpegFailed {
                program: "ffmpeg".into(),
                status: "exit code 0".into(),
                stderr: format!("decoded output ended inside a frame ({filled} bytes in the last chunk)"),
            });
            let _ = sender.send(Err(error));
            return;
        }
        if filled > 0 {
            data.truncate(filled);
            let chunk = RgbFrames { width: shape.width, height: shape.height, count: filled / shape.frame_bytes, depth: SampleDepth::Eight, data };
            if sender.send(Ok(Some(chunk))).is_err() {
                return; // the reader was dropped; dropping `child` kills ffmpeg
            }
        }
        if filled < shape.chunk_bytes {
            break;
        }
    }
    drop(stdout);
    let _ = sender.send(child.finish().map(|_warnings| None));
}

/// Fills `buf` unless the stream ends first; returns how much was filled.
fn read_until_full(reader: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match reader.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_must_be_whole() {
        assert_eq!(RgbFrames::new(2, 2, vec![0; 24]).unwrap().count, 2);
        assert_eq!(RgbFrames::new(2, 2, vec![0; 25]).unwrap_err().code(), "media-invalid-request");
        assert!(RgbFrames::new(0, 2, vec![]).is_err());
    }

    #[test]
    fn frame_slices_index_the_packed_buffer() {
        let frames = RgbFrames::new(1, 1, vec![1, 2, 3, 4, 5, 6]).unwrap();
        assert_eq!(frames.frame(1), &[4, 5, 6]);
    }

    #[test]
    fn read_until_full_stops_at_the_end_of_the_stream() {
        let mut source: &[u8] = &[1, 2, 3, 4, 5];
        let mut buf = [0u8; 4];
        assert_eq!(read_until_full(&mut source, &mut buf).unwrap(), 4);
        assert_eq!(read_until_full(&mut source, &mut buf).unwrap(), 1);
        assert_eq!(read_until_full(&mut source, &mut buf).unwrap(), 0);
    }
}
