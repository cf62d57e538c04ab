//! `probe`: what an input file is, validated against the limits before any work starts.

use std::ffi::OsString;
use std::io::Read;
use std::path::Path;
use std::sync::{Condvar, Mutex};
use std::time::Duration;

use serde::Deserialize;

use super::colour::{Colour, ProbedColour};
use super::process::{BoundedChild, ProcessPriority, ProcessSpec};
use super::{MediaError, MediaLimits, MediaTools};
pub use super::info::MediaInfo;
pub(crate) use super::info::{check_declared_pictures, parse_rate};

/// ffprobe's JSON for a crafted file with thousands of streams could be large; real ones are a few KiB.
const MAX_PROBE_OUTPUT_BYTES: u64 = 1 << 20;

/// Demuxers whose inputs point at other files or URLs: never follow those from an upload.
const REFERENCING_FORMATS: &[&str] = &["hls", "concat", "ffconcat", "dash", "webm_dash_manifest", "tee"];

/// Validates `path` against `limits` and describes it. Packets are always counted (a demux pass,
/// no decoding) because that both gives the exact frame count and reveals a truncated MP4.
pub fn probe(tools: &MediaTools, path: &Path, limits: &MediaLimits) -> Result<MediaInfo, MediaError> {
    let metadata = std::fs::metadata(path).map_err(|e| MediaError::io(format!("reading {}", path.display()), e))?;
    if !metadata.is_file() {
        return Err(MediaError::NotAVideo { reason: format!("{} is not a regular file", path.display()) });
    }
    let bytes = metadata.len();
    if bytes == 0 {
        return Err(MediaError::EmptyFile { path: path.to_path_buf() });
    }
    if bytes > limits.max_bytes {
        return Err(MediaError::too_large("bytes", bytes, limits.max_bytes));
    }
    if super::sequence::is_zip(path) {
        let info = super::sequence::probe_zip(path, bytes, limits)?;
        check_limits(&info, limits)?;
        return Ok(info);
    }
    if let Some((width, height)) = super::picture::declared_png_size(path) {
        check_declared_pictures(1, width, height, limits)?;
    }
    let (json, warnings) = run_ffprobe(tools, path, &["-count_packets", "-show_entries", SHOW_ENTRIES])
        .map_err(|e| classify_ffprobe_failure(e, path))?;
    let report: ProbeReport = serde_json::from_str(&json)
        .map_err(|e| MediaError::NotAVideo { reason: format!("unreadable ffprobe output: {e}") })?;
    let info = media_info_from(&report, bytes)?;
    // Containers without a declared frame count (Matroska, WebM) only reveal a cut in a warning.
    if let Some(hint) = TRUNCATION_WARNINGS.iter().find(|hint| warnings.contains(*hint)) {
        return Err(MediaError::Truncated { reason: format!("ffprobe: {hint}") });
    }
    check_limits(&info, limits)?;
    Ok(info)
}

/// What besides the picture a file carries, for the writer to copy.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct SourceStreams {
    /// The codec of the first audio stream.
    pub audio: Option<String>,
    /// The codec of each subtitle stream, in order.
    pub subtitles: Vec<String>,
    pub chapters: bool,
}

pub(crate) fn source_streams(tools: &MediaTools, path: &Path) -> Result<SourceStreams, MediaError> {
    let (json, _warnings) = run_ffprobe(tools, path, &["-show_entries", "stream=codec_type,codec_name:chapter=id"])?;
    let report: ProbeReport = serde_json::from_str(&json)
        .map_err(|e| MediaError::NotAVideo { reason: format!("unreadable ffprobe output: {e}") })?;
    let of_type = |kind: &'static str| -> Vec<String> {
        report.streams.iter().filter(|s| s.codec_type.as_deref() == Some(kind)).map(|s| s.codec_name.clone().unwrap_or_default()).collect()
    };
    Ok(SourceStreams { audio: of_type("audio").into_iter().next(), subtitles: of_type("subtitle"), chapters: !report.chapters.is_empty() })
}

const SHOW_ENTRIES: &str = "format=format_name:format_tags=major_brand:\
stream=codec_type,codec_name,pix_fmt,width,height,sample_aspect_ratio,nb_frames,nb_read_packets,avg_frame_rate,r_frame_rate,duration,\
color_range,color_space,color_primaries,color_transfer:\
stream_disposition=attached_pic:stream_side_data=rotation";

/// ffprobe's stderr when it reaches the end of a cut file (exit status 0).
const TRUNCATION_WARNINGS: &[&str] = &["File ended prematurely", "partial file"];

/// Returns ffprobe's JSON and its stderr warnings.
fn run_ffprobe(tools: &MediaTools, path: &Path, query: &[&str]) -> Result<(String, String), MediaError> {
    let _slot = PROBE_SLOTS.acquire(tools.probe_timeout)?;
    let mut args: Vec<OsString> = ["-v", "error", "-protocol_whitelist", "file", "-of", "json"]
        .iter()
        .chain(query)
        .map(OsString::from)
        .collect();
    args.push(file_url(path));
    let mut child = BoundedChild::spawn(ProcessSpec {
        program: &tools.ffprobe,
        args,
        timeout: tools.probe_timeout,
        pipe_stdin: false,
        pipe_stdout: true,
        priority: ProcessPriority::Normal,
    })?;
    let mut json = String::new();
    let read = child.stdout.take().expect("stdout is piped").take(MAX_PROBE_OUTPUT_BYTES).read_to_string(&mut json);
    let warnings = child.finish()?; // a timeout or failure explains a failed read better than the read error
    read.map_err(|e| MediaError::io("reading ffprobe output", e))?;
    Ok((json, warnings))
}

/// Uploads are probed from many request handlers at once; each probe reads a whole file, so only a
/// few run at a time and the rest wait (within their own timeout) rather than thrash the disk.
const MAX_CONCURRENT_PROBES: usize = 4;
static PROBE_SLOTS: ProbeSlots = ProbeSlots { in_use: Mutex::new(0), freed: Condvar::new() };

struct ProbeSlots {
    in_use: Mutex<usize>,
    freed: Condvar,
}

struct ProbeSlot;

impl ProbeSlots {
    fn acquire(&'static self, timeout: Duration) -> Result<ProbeSlot, MediaError> {
        let in_use = self.in_use.lock().unwrap_or_else(|p| p.into_inner());
        let (mut in_use, waited) = self
            .freed
            .wait_timeout_while(in_use, timeout, |n| *n >= MAX_CONCURRENT_PROBES)
            .unwrap_or_else(|p| p.into_inner());
        if waited.timed_out() && *in_use >= MAX_CONCURRENT_PROBES {
            return Err(MediaError::Timeout {
                program: "ffprobe".into(),
                after: timeout,
                stderr: format!("all {MAX_CONCURRENT_PROBES} probe slots stayed busy"),
            });
        }
        *in_use += 1;
        Ok(ProbeSlot)
    }
}

impl Drop for ProbeSlot {
    fn drop(&mut self) {
        *PROBE_SLOTS.in_use.lock().unwrap_or_else(|p| p.into_inner()) -= 1;
        PROBE_SLOTS.freed.notify_one();
    }
}

/// `file:` keeps a name like `http:x` or `concat:a|b` from being taken as a protocol.
pub(crate) fn file_url(path: &Path) -> OsString {
    let mut url = OsString::from("file:");
    url.push(path.as_os_str());
    url
}

/// ffprobe exits non-zero when it cannot open the input at all: that is the file's fault, unless
/// ffprobe itself crashed (killed by a signal).
fn classify_ffprobe_failure(error: MediaError, path: &Path) -> MediaError {
    let MediaError::FfmpegFailed { status, stderr, .. } = &error else { return error };
    if status.starts_with("killed") {
        return error;
    }
    let last_line = stderr.lines().last().unwrap_or("ffprobe could not read it").to_string();
    if stderr.contains("moov atom not found") && starts_like_mp4(path) {
        return MediaError::Truncated { reason: format!("MP4 without its index (moov atom not found): {last_line}") };
    }
    MediaError::NotAVideo { reason: last_line }
}

fn starts_like_mp4(path: &Path) -> bool {
    let mut head = [0u8; 8];
    let read = std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut head));
    read.is_ok() && &head[4..8] == b"ftyp"
}

#[derive(Debug, Default, Deserialize)]
struct ProbeReport {
    #[serde(default)]
    streams: Vec<ProbeStream>,
    #[serde(default)]
    format: Option<ProbeFormat>,
    #[serde(default)]
    chapters: Vec<serde_json::Value>,
}

#[derive(Debug, Default, Deserialize)]
struct ProbeStream {
    codec_type: Option<String>,
    codec_name: Option<String>,
    pix_fmt: Option<String>,
    width: Option<u32>,
    height: Option<u32>,
    sample_aspect_ratio: Option<String>,
    nb_frames: Option<String>,
    nb_read_packets: Option<String>,
    avg_frame_rate: Option<String>,
    r_frame_rate: Option<String>,
    duration: Option<String>,
    disposition: Option<Disposition>,
    #[serde(default)]
    side_data_list: Vec<SideData>,
    #[serde(flatten)]
    colour: ProbedColour,
}

#[derive(Debug, Default, Deserialize)]
struct Disposition {
    #[serde(default)]
    attached_pic: u8,
}

#[derive(Debug, Default, Deserialize)]
struct SideData {
    rotation: Option<f64>,
}

#[derive(Debug, Default, Deserialize)]
struct ProbeFormat {
    format_name: Option<String>,
    tags: Option<FormatTags>,
}

#[derive(Debug, Default, Deserialize)]
struct FormatTags {
    major_brand: Option<String>,
}

fn media_info_from(report: &ProbeReport, bytes: u64) -> Result<MediaInfo, MediaError> {
    let not_a_video = |reason: &str| MediaError::NotAVideo { reason: reason.to_string() };
    let container = container_name(report.format.as_ref());
    if REFERENCING_FORMATS.contains(&container.as_str()) {
        return Err(not_a_video(&format!("{container} playlists are not accepted")));
    }
    // The decoder maps `0:v:0`, so the first video stream is the one that counts.
    let video = report.streams.iter().find(|s| s.codec_type.as_deref() == Some("video")).ok_or_else(|| not_a_video("no video stream"))?;
    if video.disposition.as_ref().is_some_and(|d| d.attached_pic != 0) {
        return Err(not_a_video("the only picture is a cover image"));
    }
    let (Some(width), Some(height)) = (video.width.filter(|w| *w > 0), video.height.filter(|h| *h > 0)) else {
        return Err(not_a_video("video stream without a size"));
    };
    let declared = parse_count(video.nb_frames.as_deref());
    let counted = parse_count(video.nb_read_packets.as_deref());
    if let (Some(declared), Some(counted)) = (declared, counted) {
        if counted < declared {
            return Err(MediaError::Truncated { reason: format!("only {counted} of {declared} video frames are present") });
        }
    }
    let frames = declared.or(counted).ok_or_else(|| not_a_video("video stream without frames"))?;
    let (fps_rational, fps) = [&video.avg_frame_rate, &video.r_frame_rate]
        .into_iter()
        .find_map(|rate| parse_rate(rate.as_deref()?))
        .ok_or_else(|| not_a_video("video stream without a frame rate"))?;
    let duration_s = video
        .duration
        .as_deref()
        .and_then(|d| d.parse::<f64>().ok())
        .filter(|d| d.is_finite() && *d > 0.0)
        .unwrap_or(frames as f64 / fps);
    let quarter_turned = video.side_data_list.iter().filter_map(|s| s.rotation).any(|r| (r.abs() as i64) % 180 == 90);
    let (width, height) = if quarter_turned { (height, width) } else { (width, height) };
    let sample_aspect_ratio = video.sample_aspect_ratio.as_deref().and_then(|sar| non_square(sar, quarter_turned));
    let codec = video.codec_name.clone().unwrap_or_else(|| "unknown".into());
    let still = super::picture::is_still(&container, &codec, frames);
    Ok(MediaInfo {
        container,
        alpha: still && video.pix_fmt.as_deref().is_some_and(super::picture::has_alpha),
        still,
        codec,
        width,
        height,
        frames,
        fps,
        fps_rational,
        duration_s,
        has_audio: report.streams.iter().any(|s| s.codec_type.as_deref() == Some("audio")),
        bytes,
        colour: Colour::from_probe(&video.colour, height),
        sample_aspect_ratio,
        span: None,
    })
}

/// ffprobe's `128:117` → `Some("128:117")` (`117:128` turned a quarter); square (`1:1`), unknown (`0:1`,
/// `N/A`) and nonsense → None.
fn non_square(sar: &str, quarter_turned: bool) -> Option<String> {
    let (num, den) = sar.trim().split_once(':')?;
    let (num, den) = (num.parse::<u32>().ok()?, den.parse::<u32>().ok()?);
    if num == 0 || den == 0 || num == den || num.max(den) / num.min(den) > 100 {
        return None;
    }
    let (num, den) = if quarter_turned { (den, num) } else { (num, den) };
    Some(format!("{num}:{den}"))
}

pub(super) fn check_limits(info: &MediaInfo, limits: &MediaLimits) -> Result<(), MediaError> {
    if info.width > limits.max_width {
        return Err(MediaError::too_large("width", info.width, limits.max_width));
    }
    if info.height > limits.max_height {
        return Err(MediaError::too_large("height", info.height, limits.max_height));
    }
    if info.frames > limits.max_frames {
        return Err(MediaError::too_large("frames", info.frames, limits.max_frames));
    }
    if info.duration_s > limits.max_duration_s {
        return Err(MediaError::too_large("duration", format!("{:.3} s", info.duration_s), format!("{} s", limits.max_duration_s)));
    }
    Ok(())
}

/// The ISO family shares one demuxer (`mov,mp4,m4a,…`); the brand tells a QuickTime file from an MP4.
fn container_name(format: Option<&ProbeFormat>) -> String {
    let name = format.and_then(|f| f.format_name.as_deref()).unwrap_or("unknown");
    if name.starts_with("mov,") {
        let brand = format.and_then(|f| f.tags.as_ref()).and_then(|t| t.major_brand.as_deref()).unwrap_or("");
        return if brand.trim() == "qt" { "mov".into() } else { "mp4".into() };
    }
    name.split(',').next().unwrap_or(name).to_string()
}

fn parse_count(value: Option<&str>) -> Option<u64> {
    value?.trim().parse::<u64>().ok().filter(|n| *n > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(json: &str) -> ProbeReport {
        serde_json::from_str(json).unwrap()
    }

    const CLIP: &str = r#"{"streams": [{"codec_type": "video", "codec_name": "h264", "width": 176, "height": 144,
        "nb_frames": "120", "nb_read_packets": "120", "avg_frame_rate": "30000/1001", "r_frame_rate": "30000/1001",
        "duration": "4.004000", "disposition": {"attached_pic": 0}}],
        "format": {"format_name": "mov,mp4,m4a,3gp,3g2,mj2", "tags": {"major_brand": "isom"}}}"#;

    #[test]
    fn reads_an_mp4_report() {
        let info = media_info_from(&report(CLIP), 1000).unwrap();
        assert_eq!((info.container.as_str(), info.codec.as_str(), info.width, info.height), ("mp4", "h264", 176, 144));
        assert_eq!((info.frames, info.fps_rational.as_str(), info.has_audio), (120, "30000/1001", false));
        assert!((info.fps - 29.97).abs() < 0.01);
    }

    #[test]
    fn fewer_packets_than_declared_frames_is_truncation() {
        let json = CLIP.replace(r#""nb_read_packets": "120""#, r#""nb_read_packets": "59""#);
        let err = media_info_from(&report(&json), 1000).unwrap_err();
        assert_eq!(err.code(), "truncated-media", "{err}");
    }

    #[test]
    fn counted_packets_stand_in_when_the_container_declares_no_count() {
        let json = CLIP.replace(r#""nb_frames": "120","#, "").replace(r#""nb_read_packets": "120""#, r#""nb_read_packets": "77""#);
        assert_eq!(media_info_from(&report(&json), 1000).unwrap().frames, 77);
    }

    #[test]
    fn quarter_turned_video_reports_its_upright_size() {
        let json = CLIP.replace(r#""disposition""#, r#""side_data_list": [{"rotation": -90}], "disposition""#);
        let info = media_info_from(&report(&json), 1000).unwrap();
        assert_eq!((info.width, info.height), (144, 176));
    }

    #[test]
    fn audio_only_and_cover_art_are_not_videos() {
        let audio = report(r#"{"streams": [{"codec_type": "audio", "codec_name": "mp3"}], "format": {"format_name": "mp3"}}"#);
        assert_eq!(media_info_from(&audio, 10).unwrap_err().code(), "not-a-video");
        let cover = CLIP.replace(r#""attached_pic": 0"#, r#""attached_pic": 1"#);
        assert_eq!(media_info_from(&report(&cover), 10).unwrap_err().code(), "not-a-video");
    }

    #[test]
    fn limits_name_the_exceeded_dimension() {
        let info = media_info_from(&report(CLIP), 1000).unwrap();
        let limits = MediaLimits { max_bytes: 1 << 30, max_width: 4096, max_height: 4096, max_frames: 1000, max_duration_s: 60.0 };
        assert!(check_limits(&info, &limits).is_ok());
        let cases = [
            (MediaLimits { max_width: 100, ..limits.clone() }, "width is 176, the limit is 100"),
            (MediaLimits { max_height: 100, ..limits.clone() }, "height is 144"),
            (MediaLimits { max_frames: 100, ..limits.clone() }, "frames is 120, the limit is 100"),
            (MediaLimits { max_duration_s: 2.0, ..limits.clone() }, "duration is 4.004 s, the limit is 2 s"),
        ];
        for (limits, expected) in cases {
            let err = check_limits(&info, &limits).unwrap_err();
            assert_eq!(err.code(), "media-too-large");
            assert!(err.to_string().contains(expected), "{err} lacks {expected}");
        }
    }

    #[test]
    fn declared_pictures_are_held_to_the_sides_and_their_decoded_size() {
        let limits = MediaLimits { max_bytes: 4 << 30, max_width: 4096, max_height: 4096, max_frames: 100_000, max_duration_s: 3600.0 };
        assert!(check_declared_pictures(85, 4096, 4096, &limits).is_ok(), "85 frames of 4096² fit in 4 GiB");
        assert!(check_declared_pictures(1000, 1280, 720, &limits).is_ok());
        let cases = [
            (200, 4096, 4096, "decoded size is 10066329600 bytes (200 frames of 4096×4096, 3 bytes a pixel), the limit is 4294967296 bytes"),
            (1, 20000, 20000, "width is 20000, the limit is 4096"),
            (1, 4096, 5000, "height is 5000"),
            (u64::MAX, 4096, 4096, "decoded size is 18446744073709551615 bytes"),
        ];
        for (frames, width, height, expected) in cases {
            let err = check_declared_pictures(frames, width, height, &limits).unwrap_err();
            assert_eq!(err.code(), "media-too-large");
            assert!(err.to_string().contains(expected), "{err} lacks {expected}");
        }
        let small = MediaLimits { max_bytes: 1 << 20, ..limits };
        assert!(check_declared_pictures(1, 1024, 1024, &small).unwrap_err().to_string().contains("(1 picture of 1024×1024"));
    }

    #[test]
    fn frame_rates_parse_or_are_unknown() {
        assert_eq!(parse_rate("25/1").unwrap().0, "25/1");
        assert_eq!(parse_rate("24").unwrap().1, 24.0);
        assert!(parse_rate("0/0").is_none());
        assert!(parse_rate("1.5/2").is_none());
    }
}
