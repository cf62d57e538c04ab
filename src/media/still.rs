//! Stills: a PNG, JPEG or WebP picture is a one-frame clip whose colour the `FrameReader` decodes as it
//! decodes any video; this file knows what a still is, reads its alpha plane, and writes the PNG a still
//! job returns (RGB or RGBA, 8 or 16 bits), published by rename only when complete.
use std::ffi::OsString;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use super::format::SampleDepth;
use super::probe::file_url;
use super::process::{BoundedChild, ProcessPriority, ProcessSpec};
use super::{MediaError, MediaTools, RgbFrames};

// What a still is lives in `picture`, below `probe`, which asks it; the paths through here keep working.
pub use super::picture::{declared_png_size, has_alpha, is_still};

/// The still's alpha plane, 8 bits, `width × height` bytes row-major.
pub fn read_alpha(tools: &MediaTools, input: &Path, width: u32, height: u32) -> Result<Vec<u8>, MediaError> {
    let size = width as usize * height as usize;
    let mut args: Vec<OsString> = ["-nostdin", "-v", "error", "-protocol_whitelist", "file", "-i"].iter().map(OsString::from).collect();
    args.push(file_url(input));
    push_all(&mut args, &["-map", "0:v:0", "-frames:v", "1", "-vf", "alphaextract", "-f", "rawvideo", "-pix_fmt", "gray", "pipe:1"]);
    let mut child = BoundedChild::spawn(ProcessSpec {
        program: &tools.ffmpeg,
        args,
        timeout: tools.stream_timeout,
        pipe_stdin: false,
        pipe_stdout: true,
        priority: ProcessPriority::Normal,
    })?;
    let mut plane = Vec::with_capacity(size);
    // One byte more than a plane reveals a decoder that made more than was probed.
    let read = child.stdout.take().expect("stdout is piped").take(size as u64 + 1).read_to_end(&mut plane);
    child.finish()?;
    read.map_err(|e| MediaError::io("reading the alpha plane", e))?;
    if plane.len() != size {
        return Err(MediaError::FfmpegFailed {
            program: "ffmpeg".into(),
            status: "exit code 0".into(),
            stderr: format!("the alpha plane has {} bytes, not {width}×{height}", plane.len()),
        });
    }
    Ok(plane)
}

/// Collects the one frame of a still job and, at `finish`, writes it as a PNG (with the alpha plane when
/// one was given) to `.NAME.partial` beside the output, then renames it into place.
pub struct StillWriter {
    tools: MediaTools,
    output: PathBuf,
    width: u32,
    height: u32,
    depth: SampleDepth,
    colour: Option<RgbFrames>,
    /// `width × height` samples at `depth`, little-endian.
    alpha: Option<Vec<u8>>,
}

impl StillWriter {
    pub fn new(tools: &MediaTools, output: PathBuf, width: u32, height: u32, depth: SampleDepth) -> Result<Self, MediaError> {
        super::frames::frame_bytes(width, height)?;
        Ok(StillWriter { tools: tools.clone(), output, width, height, depth, colour: None, alpha: None })
    }

    pub fn depth(&self) -> SampleDepth {
        self.depth
    }

    pub fn write(&mut self, frames: RgbFrames) -> Result<(), MediaError> {
        frames.check_shape(self.width, self.height)?;
        if frames.depth != self.depth || frames.count != 1 || self.colour.is_some() {
            return Err(MediaError::InvalidRequest(format!(
                "a still takes one {} frame; got {} {} frame(s)",
                self.depth.rgb_pix_fmt(),
                frames.count + usize::from(self.colour.is_some()),
                frames.depth.rgb_pix_fmt()
            )));
        }
        self.colour = Some(frames);
        Ok(())
    }

    /// The alpha plane at the output's size and depth (`width × height` samples, little-endian).
    pub fn set_alpha(&mut self, plane: Vec<u8>) -> Result<(), MediaError> {
        let expected = self.width as usize * self.height as usize * self.depth.bytes();
        if plane.len() != expected {
            return Err(MediaError::InvalidRequest(format!("alpha plane of {} bytes for a {}×{} still", plane.len(), self.width, self.height)));
        }
        self.alpha = Some(plane);
        Ok(())
    }

    pub fn finish(self) -> Result<(), MediaError> {
        let colour = self.colour.as_ref().ok_or_else(|| MediaError::InvalidRequest("the still's frame was never written".into()))?;
        let (pixels, in_fmt, out_fmt) = match (&self.alpha, self.depth) {
            (None, SampleDepth::Eight) => (colour.data.clone(), "rgb24", "rgb24"),
            (None, SampleDepth::Sixteen) => (colour.data.clone(), "rgb48le", "rgb48be"),
            (Some(alpha), SampleDepth::Eight) => (interleave(&colour.data, alpha, 1), "rgba", "rgba"),
            (Some(alpha), SampleDepth::Sixteen) => (interleave(&colour.data, alpha, 2), "rgba64le", "rgba64be"),
        };
        let partial = partial_path(&self.output)?;
        let size = format!("{}x{}", self.width, self.height);
        let mut args = Vec::new();
        push_all(&mut args, &["-nostdin", "-v", "error", "-y", "-f", "rawvideo", "-pix_fmt", in_fmt, "-s", &size, "-i", "pipe:0"]);
        push_all(&mut args, &["-frames:v", "1", "-c:v", "png", "-pix_fmt", out_fmt, "-update", "1", "-f", "image2"]);
        args.push(file_url(&partial));
        let mut child = BoundedChild::spawn(ProcessSpec {
            program: &self.tools.ffmpeg,
            args,
            timeout: self.tools.stream_timeout,
            pipe_stdin: true,
            pipe_stdout: false,
            priority: ProcessPriority::Normal,
        })?;
        let mut stdin = child.stdin.take().expect("stdin is piped");
        let written = stdin.write_all(&pixels).and_then(|_| stdin.flush());
        drop(stdin);
        let finished = child.finish();
        let published = finished.and_then(|_| {
            written.map_err(|e| MediaError::io("writing the still to ffmpeg", e))?;
            let context = |e| MediaError::io(format!("publishing {}", self.output.display()), e);
            // Durable before visible, as the video writer does.
            std::fs::File::open(&partial).and_then(|f| f.sync_all()).map_err(context)?;
            std::fs::rename(&partial, &self.output).map_err(context)
        });
        if published.is_err() {
            let _ = std::fs::remove_file(&partial);
        }
        published
    }
}

/// RGB samples and an alpha plane (`bytes` per sample each) → RGBA.
fn interleave(rgb: &[u8], alpha: &[u8], bytes: usize) -> Vec<u8> {
    let mut rgba = Vec::with_capacity(rgb.len() + alpha.len());
    for (pixel, a) in rgb.chunks_exact(3 * bytes).zip(alpha.chunks_exact(bytes)) {
        rgba.extend_from_slice(pixel);
        rgba.extend_from_slice(a);
    }
    rgba
}

fn partial_path(output: &Path) -> Result<PathBuf, MediaError> {
    let name = output.file_name().ok_or_else(|| MediaError::InvalidRequest(format!("output {} has no file name", output.display())))?;
    let mut partial = OsString::from(".");
    partial.push(name);
    partial.push(".partial");
    Ok(output.with_file_name(partial))
}

fn push_all(args: &mut Vec<OsString>, items: &[&str]) {
    args.extend(items.iter().map(OsString::from));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stills_are_one_picture_from_an_image_demuxer() {
        assert!(is_still("png_pipe", "png", 1));
        assert!(is_still("image2", "mjpeg", 1));
        assert!(is_still("webp_pipe", "webp", 1));
        assert!(!is_still("image2", "bmp", 1));
        assert!(!is_still("mp4", "h264", 1));
        assert!(!is_still("png_pipe", "png", 2));
    }

    #[test]
    fn alpha_formats() {
        for fmt in ["rgba", "argb", "yuva420p", "rgba64be", "ya8", "pal8"] {
            assert!(has_alpha(fmt), "{fmt}");
        }
        for fmt in ["rgb24", "yuv420p", "yuvj444p", "gray", "rgb48be"] {
            assert!(!has_alpha(fmt), "{fmt}");
        }
    }

    #[test]
    fn interleaving_puts_alpha_after_each_pixel() {
        assert_eq!(interleave(&[1, 2, 3, 4, 5, 6], &[9, 8], 1), [1, 2, 3, 9, 4, 5, 6, 8]);
        assert_eq!(interleave(&[1, 0, 2, 0, 3, 0], &[7, 1], 2), [1, 0, 2, 0, 3, 0, 7, 1]);
    }
}
