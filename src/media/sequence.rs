//! Image sequences: a zip of PNG frames is a clip whose frames come in member-name order. It is checked
//! from the zip's directory and each member's PNG header before a job is queued, and decoded by streaming
//! the members one after another into ffmpeg's PNG demuxer: never unpacked onto disk or into memory.
use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;

use super::colour::{Colour, ProbedColour};
use super::info::{check_declared_pictures, parse_rate, MediaInfo};
use super::{MediaError, MediaLimits};
use crate::error_codes as codes;

/// `MediaInfo::container` of a zip of PNG frames.
pub const CONTAINER: &str = "zip";
/// The sequence's rate when the job gives no `fps`.
pub const DEFAULT_FPS: &str = "24/1";

/// Folder entries a zip may hold beside its frames (only files count as frames, checked once listed).
const MAX_FOLDERS: u64 = 1024;
const ZIP_MAGIC: &[u8; 4] = b"PK\x03\x04";
const PNG_SIGNATURE: &[u8; 8] = b"\x89PNG\r\n\x1a\n";

/// Told by the content, whatever the upload's name.
pub fn is_zip(path: &Path) -> bool {
    let mut head = [0u8; 4];
    File::open(path).and_then(|mut f| f.read_exact(&mut head)).is_ok() && &head == ZIP_MAGIC
}

/// `24`, `30000/1001` → (`24/1`, 24.0); anything else (zero, negative, text) → None.
pub fn parse_fps(text: &str) -> Option<(String, f64)> {
    parse_rate(text).filter(|(_, fps)| *fps <= 1000.0)
}

/// Checks the zip against `limits` and describes it: every member a PNG of one size, no more than
/// `max_frames` of them, no more than `max_bytes` unpacked (the upload limit: a zip bomb stops here), and
/// no more than `max_bytes` decoded, as the first frame's header declares it for all (a PNG bomb stops
/// here: `info::check_declared_pictures`).
pub fn probe_zip(path: &Path, bytes: u64, limits: &MediaLimits) -> Result<MediaInfo, MediaError> {
    // The zip reader holds the whole central directory in memory: its entry count is checked first, from
    // the end-of-directory record, so a directory of millions of tiny entries is refused unread.
    if let Some(entries) = declared_entries(path).map_err(|e| MediaError::io(format!("reading {}", path.display()), e))? {
        if entries > limits.max_frames.saturating_add(MAX_FOLDERS) {
            return Err(MediaError::too_large("frames", entries, limits.max_frames));
        }
    }
    let mut archive = open(path)?;
    let names = member_names(&mut archive)?;
    if names.len() as u64 > limits.max_frames {
        return Err(MediaError::too_large("frames", names.len(), limits.max_frames));
    }
    let mut unpacked = 0u64;
    let mut size: Option<(String, u32, u32)> = None;
    for name in &names {
        let mut member = archive.by_name(name).map_err(|e| unreadable(&e))?;
        unpacked = unpacked.saturating_add(member.size());
        if unpacked > limits.max_bytes {
            return Err(MediaError::too_large("unpacked bytes", unpacked, limits.max_bytes));
        }
        let (width, height) = png_size(&mut member).ok_or_else(|| bad(codes::SEQUENCE_NOT_PNG, format!("member `{name}` is not a PNG picture")))?;
        match &size {
            None => {
                // Every frame has the first one's size (else the zip is refused below): its header declares the
                // whole sequence's, refused before another member is read.
                check_declared_pictures(names.len() as u64, width, height, limits)?;
                size = Some((name.clone(), width, height));
            }
            Some((first, w, h)) if (*w, *h) != (width, height) => {
                return Err(bad(codes::SEQUENCE_MIXED_SIZES, format!("`{name}` is {width}×{height}, but `{first}` is {w}×{h}; every frame must have one size")));
            }
            Some(_) => {}
        }
    }
    let (_, width, height) = size.ok_or_else(|| MediaError::NotAVideo { reason: "the zip holds no PNG frames".into() })?;
    let (fps_rational, fps) = parse_rate(DEFAULT_FPS).expect("a valid default rate");
    let frames = names.len() as u64;
    Ok(MediaInfo {
        container: CONTAINER.into(),
        codec: "png".into(),
        width,
        height,
        frames,
        fps,
        fps_rational,
        duration_s: frames as f64 / fps,
        has_audio: false,
        bytes,
        // What ffprobe reports for a PNG: full-range RGB.
        colour: Colour::from_probe(&ProbedColour { color_range: Some("pc".into()), ..ProbedColour::default() }, height),
        sample_aspect_ratio: None,
        still: false,
        alpha: false,
        span: None,
    })
}

/// The sequence at `fps_rational` (`parse_fps`'s first value).
pub fn at_rate(info: &mut MediaInfo, fps_rational: String, fps: f64) {
    info.duration_s = info.frames as f64 / fps;
    info.fps = fps;
    info.fps_rational = fps_rational;
}

/// Writes the zip's members, in name order, into `sink` (ffmpeg's stdin) on a thread of its own; the
/// thread ends when they are written or the sink closes (ffmpeg stopped or was killed).
pub(crate) fn feed_members(path: PathBuf, mut sink: impl Write + Send + 'static) -> std::io::Result<JoinHandle<std::io::Result<()>>> {
    std::thread::Builder::new().name("zip-frames".into()).spawn(move || {
        let mut archive = open(&path).map_err(std::io::Error::other)?;
        let names = member_names(&mut archive).map_err(std::io::Error::other)?;
        for name in names {
            let member = archive.by_name(&name).map_err(std::io::Error::other)?;
            // The probe held the declared sizes to the upload limit; a member never yields more than its own.
            let declared = member.size();
            std::io::copy(&mut member.take(declared), &mut sink)?;
        }
        sink.flush()
    })
}

/// The entry count of the zip's end-of-central-directory record (its ZIP64 record's when the classic one
/// says 0xFFFF); `None` when no record is found (the zip reader then refuses the file itself).
fn declared_entries(path: &Path) -> std::io::Result<Option<u64>> {
    use std::io::{Seek, SeekFrom};
    const EOCD: &[u8; 4] = b"PK\x05\x06";
    const ZIP64_LOCATOR: &[u8; 4] = b"PK\x06\x07";
    const ZIP64_EOCD: &[u8; 4] = b"PK\x06\x06";
    let mut file = File::open(path)?;
    let length = file.metadata()?.len();
    // The record is 22 bytes plus a comment of at most 64 KiB, at the very end.
    let tail_length = length.min(22 + 0xFFFF + 20);
    file.seek(SeekFrom::Start(length - tail_length))?;
    let mut tail = vec![0u8; tail_length as usize];
    file.read_exact(&mut tail)?;
    let Some(at) = (0..tail.len().saturating_sub(21)).rev().find(|i| &tail[*i..*i + 4] == EOCD) else { return Ok(None) };
    let entries = u16::from_le_bytes([tail[at + 10], tail[at + 11]]);
    if entries != 0xFFFF {
        return Ok(Some(u64::from(entries)));
    }
    // ZIP64: a 20-byte locator just before the record points at the ZIP64 record (count at byte 32).
    let Some(locator) = at.checked_sub(20).filter(|l| &tail[*l..*l + 4] == ZIP64_LOCATOR) else { return Ok(None) };
    let offset = u64::from_le_bytes(tail[locator + 8..locator + 16].try_into().expect("8 bytes"));
    let mut record = [0u8; 40];
    file.seek(SeekFrom::Start(offset))?;
    file.read_exact(&mut record)?;
    Ok((&record[..4] == ZIP64_EOCD).then(|| u64::from_le_bytes(record[32..40].try_into().expect("8 bytes"))))
}

fn open(path: &Path) -> Result<zip::ZipArchive<File>, MediaError> {
    let file = File::open(path).map_err(|e| MediaError::io(format!("reading {}", path.display()), e))?;
    zip::ZipArchive::new(file).map_err(|e| unreadable(&e))
}

/// The files of the zip (folders left out), sorted by name: the frames' order.
fn member_names(archive: &mut zip::ZipArchive<File>) -> Result<Vec<String>, MediaError> {
    let mut names = Vec::with_capacity(archive.len());
    for index in 0..archive.len() {
        let member = archive.by_index_raw(index).map_err(|e| unreadable(&e))?;
        if !member.is_dir() {
            names.push(member.name().to_string());
        }
    }
    names.sort();
    Ok(names)
}

/// A PNG's width and height from its signature and IHDR chunk (the first 24 bytes).
fn png_size(member: &mut impl Read) -> Option<(u32, u32)> {
    let mut head = [0u8; 24];
    member.read_exact(&mut head).ok()?;
    if &head[..8] != PNG_SIGNATURE || &head[12..16] != b"IHDR" {
        return None;
    }
    let width = u32::from_be_bytes(head[16..20].try_into().ok()?);
    let height = u32::from_be_bytes(head[20..24].try_into().ok()?);
    (width > 0 && height > 0).then_some((width, height))
}

fn unreadable(error: &zip::result::ZipError) -> MediaError {
    MediaError::NotAVideo { reason: format!("unreadable zip: {error}") }
}

fn bad(code: &'static str, reason: String) -> MediaError {
    MediaError::BadSequence { code, reason }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn png_headers_give_the_size() {
        let mut head = PNG_SIGNATURE.to_vec();
        head.extend_from_slice(&[0, 0, 0, 13]);
        head.extend_from_slice(b"IHDR");
        head.extend_from_slice(&64u32.to_be_bytes());
        head.extend_from_slice(&48u32.to_be_bytes());
        assert_eq!(png_size(&mut head.as_slice()), Some((64, 48)));
        assert_eq!(png_size(&mut &b"\xff\xd8\xff\xe0 a JPEG, not a PNG...."[..]), None);
        assert_eq!(png_size(&mut &head[..10]), None);
    }

    #[test]
    fn the_directory_count_is_read_before_the_directory() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("three.zip");
        let mut zip = zip::ZipWriter::new(File::create(&path).unwrap());
        for name in ["a", "b", "c"] {
            zip.start_file(name, zip::write::FileOptions::default()).unwrap();
            zip.write_all(b"x").unwrap();
        }
        zip.set_comment("a comment, which comes after the record's fixed part");
        zip.finish().unwrap();
        assert_eq!(declared_entries(&path).unwrap(), Some(3));
        std::fs::write(&path, b"PK\x03\x04 not really a zip").unwrap();
        assert_eq!(declared_entries(&path).unwrap(), None);
    }

    #[test]
    fn frames_are_refused_by_what_their_headers_declare_they_decode_to() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("huge.zip");
        let mut head = PNG_SIGNATURE.to_vec();
        head.extend_from_slice(&[0, 0, 0, 13]);
        head.extend_from_slice(b"IHDR");
        head.extend_from_slice(&4096u32.to_be_bytes());
        head.extend_from_slice(&4096u32.to_be_bytes());
        let mut zip = zip::ZipWriter::new(File::create(&path).unwrap());
        for frame in 0..200 {
            zip.start_file(format!("{frame:03}.png"), zip::write::FileOptions::default()).unwrap();
            zip.write_all(&head).unwrap();
        }
        zip.finish().unwrap();
        let bytes = std::fs::metadata(&path).unwrap().len();
        let limits = MediaLimits { max_bytes: 4 << 30, max_width: 4096, max_height: 4096, ..MediaLimits::default() };
        let err = probe_zip(&path, bytes, &limits).unwrap_err();
        assert_eq!(err.code(), "media-too-large", "{err}");
        assert!(err.to_string().contains("decoded size is 10066329600 bytes (200 frames of 4096×4096"), "{err}");
    }

    #[test]
    fn rates() {
        assert_eq!(parse_fps("24").unwrap().0, "24/1");
        assert_eq!(parse_fps("30000/1001").unwrap().0, "30000/1001");
        assert!(parse_fps("0").is_none() && parse_fps("fast").is_none() && parse_fps("5000").is_none());
    }
}
