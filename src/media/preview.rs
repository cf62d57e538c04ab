//! What a browser needs to look at a job: a still of a middle frame (PNG) and a small H.264 proxy
//! of a video it may not play (ProRes, FFV1, 10-bit, an upload's own codec). Both are written beside
//! `.partial` and renamed into place, so a reader never sees half a file.
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::probe::file_url;
use super::process::{BoundedChild, ProcessPriority, ProcessSpec};
use super::{MediaError, MediaTools};

/// Stills are made for lists: small, and never wider than their source.
pub const THUMBNAIL_WIDTH: u32 = 320;
/// Proxies are for looking, side by side with the input; this keeps them quick to make and to load.
pub const PROXY_MAX_WIDTH: u32 = 1280;
/// A still decodes one frame after a seek: this is generous.
const STILL_TIMEOUT: Duration = Duration::from_secs(60);

pub struct StillRequest<'a> {
    pub video: &'a Path,
    /// Where the video's middle is, in seconds (a seek before the input: quick on long videos).
    pub at_s: f64,
    pub png: &'a Path,
}

/// A PNG of the frame at `at_s`, at most `THUMBNAIL_WIDTH` wide, aspect kept.
pub fn still(tools: &MediaTools, request: StillRequest<'_>) -> Result<(), MediaError> {
    let scale = format!("scale='min({THUMBNAIL_WIDTH},iw)':-2:flags=area");
    let mut args: Vec<OsString> = ["-nostdin", "-v", "error", "-y", "-ss"].map(OsString::from).to_vec();
    args.push(format!("{:.3}", request.at_s.max(0.0)).into());
    args.extend(["-i".into(), file_url(request.video)]);
    args.extend(["-map", "0:v:0", "-frames:v", "1", "-vf", &scale, "-c:v", "png", "-f", "image2"].map(OsString::from));
    write_then_publish(tools, args, request.png, STILL_TIMEOUT)
}

pub struct ProxyRequest<'a> {
    pub video: &'a Path,
    pub mp4: &'a Path,
    /// The proxy's width (even, at most `PROXY_MAX_WIDTH`); the height follows the aspect ratio. Both
    /// sides of a before/after view are made at the same width, so their pixels line up.
    pub width: u32,
    pub timeout: Duration,
}

/// An H.264 MP4 (yuv420p, BT.709 flags, no audio) that every browser plays, `+faststart` for streaming.
pub fn h264_proxy(tools: &MediaTools, request: ProxyRequest<'_>) -> Result<(), MediaError> {
    let width = (request.width.clamp(16, PROXY_MAX_WIDTH) / 2) * 2;
    let scale = format!("scale={width}:-2:flags=bicubic:out_color_matrix=bt709:out_range=tv,format=yuv420p");
    let mut args: Vec<OsString> = ["-nostdin", "-v", "error", "-y", "-i"].map(OsString::from).to_vec();
    args.push(file_url(request.video));
    args.extend(
        [
            "-map", "0:v:0", "-an", "-sn", "-dn", "-vf", &scale, "-c:v", "libx264", "-preset", "veryfast", "-crf", "20",
            "-colorspace", "bt709", "-color_primaries", "bt709", "-color_trc", "bt709", "-color_range", "tv",
            "-movflags", "+faststart", "-f", "mp4",
        ]
        .map(OsString::from),
    );
    write_then_publish(tools, args, request.mp4, request.timeout)
}

fn write_then_publish(tools: &MediaTools, mut args: Vec<OsString>, target: &Path, timeout: Duration) -> Result<(), MediaError> {
    let partial = partial_beside(target);
    args.push(file_url(&partial));
    let child = BoundedChild::spawn(ProcessSpec { program: &tools.ffmpeg, args, timeout, pipe_stdin: false, pipe_stdout: false, priority: ProcessPriority::Normal })?;
    let finished = child.finish().and_then(|_| {
        std::fs::rename(&partial, target).map_err(|e| MediaError::io(format!("publishing {}", target.display()), e))
    });
    if finished.is_err() {
        let _ = std::fs::remove_file(&partial);
    }
    finished
}

/// Unique per call: two requests for the same preview may run at once, and the second rename wins.
fn partial_beside(target: &Path) -> PathBuf {
    let name = target.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    target.with_file_name(format!(".{name}.{}.partial", uuid::Uuid::new_v4().simple()))
}
