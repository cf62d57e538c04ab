//! What a still picture is, told from its header or from what ffprobe reports: `probe` asks it while it
//! probes, and `still` (which re-exports it) reads and writes the pictures themselves.
use std::io::Read;
use std::path::Path;

/// ffprobe's demuxers for single pictures: `image2` (chosen by the file's extension) and the `*_pipe`
/// ones (chosen by the content, whatever the name).
const STILL_DEMUXERS: &[&str] = &["image2", "png_pipe", "jpeg_pipe", "webp_pipe"];
/// PNG, JPEG and WebP; other pictures (BMP, TIFF) stay one-frame videos as before.
const STILL_CODECS: &[&str] = &["png", "mjpeg", "webp"];

/// A PNG's width and height as its header (IHDR) declares them, read from its first 24 bytes; `None` for a
/// file that is no PNG. ffprobe refuses a picture past its own size limit as unreadable, which told the
/// sender "not a video" for a 20000×20000 PNG; the header says what is too large.
pub fn declared_png_size(path: &Path) -> Option<(u32, u32)> {
    const SIGNATURE: [u8; 8] = [0x89, b'P', b'N', b'G', b'\r', b'\n', 0x1a, b'\n'];
    let mut head = [0u8; 24];
    std::fs::File::open(path).ok()?.read_exact(&mut head).ok()?;
    if head[..8] != SIGNATURE || &head[12..16] != b"IHDR" {
        return None;
    }
    let word = |at: usize| u32::from_be_bytes([head[at], head[at + 1], head[at + 2], head[at + 3]]);
    Some((word(16), word(20)))
}

/// A picture read by an image demuxer: one frame of PNG, JPEG or WebP.
pub fn is_still(container: &str, codec: &str, frames: u64) -> bool {
    frames == 1 && STILL_DEMUXERS.contains(&container) && STILL_CODECS.contains(&codec)
}

/// ffmpeg's pixel formats with an alpha channel, as the PNG and WebP decoders report them; a palette
/// may carry transparency (tRNS), so it counts too (an opaque one reads back as all 255).
pub fn has_alpha(pix_fmt: &str) -> bool {
    const WITH_ALPHA: &[&str] = &["rgba", "argb", "bgra", "abgr", "ya8", "ya16be", "ya16le", "rgba64be", "rgba64le", "pal8"];
    WITH_ALPHA.contains(&pix_fmt) || pix_fmt.starts_with("yuva") || pix_fmt.starts_with("gbrap")
}
