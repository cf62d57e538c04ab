//! What the input turns out to be decides part of the job: a still picture (upscale, restore) is written as a
//! PNG and refuses video-only options; a zip of PNG frames takes its rate from `fps`; a video's `png` keeps
//! its meaning from before stills. Run after the probe, by the server and `vaebox run` alike.
use super::{JobRequest, QueueError};
use crate::error_codes as codes;
use crate::jobs::OutputFormat;
use crate::media::{sequence, MediaInfo};
use crate::models::{Retimes, Writes};

/// A still picture has no frames to make between, and no part to try first.
fn refuse_what_needs_a_clip(request: &JobRequest) -> Result<(), QueueError> {
    let still = |why: String| Err(QueueError::refused(codes::INPUT_IS_A_STILL, why));
    match request.op.spec().retimes {
        Retimes::Always => return still(format!("`{}` makes frames between a video's frames; this input is a still picture (one frame)", request.op.as_str())),
        Retimes::WhenAsked | Retimes::Never => {}
    }
    if request.params.range.is_some() {
        return still("a still picture (one frame) has no part to try first; send it without start, start_frame, frames or duration".into());
    }
    Ok(())
}

/// The output format once the input is known: upscale and restore write a still (PNG, JPEG or WebP) as a
/// PNG (`png` unless the client asked for `png16`) and refuse a video format for it; a video's `png` keeps
/// its meaning from before stills, a zip of 16-bit frames (`png16`).
/// A zip of PNG frames takes the job's `fps` (`sequence_fps`), which nothing else takes.
pub fn fit_to_input(request: &mut JobRequest, info: &mut MediaInfo) -> Result<(), QueueError> {
    let writes_stills = match request.op.spec().writes {
        Writes::Video { stills, .. } => stills,
        Writes::Latent => false,
    };
    let is_sequence = info.container == sequence::CONTAINER;
    if info.still {
        refuse_what_needs_a_clip(request)?;
    }
    if let Some(rational) = request.params.sequence_fps.clone() {
        if !is_sequence {
            let why = "fps is the rate of an image sequence (a zip of PNG frames); this input has its own";
            return Err(QueueError::refused(codes::PARAMETER_NOT_FOR_INPUT, why));
        }
        let (rational, fps) = sequence::parse_fps(&rational).ok_or_else(|| QueueError::refused(codes::INVALID_FPS, format!("fps `{rational}`")))?;
        sequence::at_rate(info, rational, fps);
    }
    let format = request.params.output_format;
    if !(info.still && writes_stills) {
        // Before stills, a video's `png` was a zip of 16-bit frames; it stays so. A sequence's is 8-bit.
        if format == Some(OutputFormat::Png) && !is_sequence {
            request.params.output_format = Some(OutputFormat::Png16);
        }
        return Ok(());
    }
    if request.params.parts.as_deref().is_some_and(|parts| !matches!(parts, "auto" | "1")) {
        return Err(QueueError::refused(codes::INVALID_PARTS, "parts: a still picture is one frame, run whole; leave parts out or give 1"));
    }
    if request.params.keep_audio.is_some() || request.params.interpolate.is_some() {
        let why = "keep_audio and interpolate are for videos; this input is a still picture (one frame)";
        return Err(QueueError::refused(codes::PARAMETER_NOT_FOR_INPUT, why));
    }
    super::request::refuse_encoder_settings(&request.params, "a still picture, written as png,")?;
    match format {
        Some(format) if format.is_png() => Ok(()),
        Some(format) if request.output_format_given => Err(QueueError::refused(
            codes::OUTPUT_FORMAT_NOT_FOR_STILL,
            format!("output_format `{}` is a video format; a still picture is written as png (8-bit) or png16 (16-bit)", format.as_str()),
        )),
        Some(_) | None => {
            request.params.output_format = Some(OutputFormat::Png);
            Ok(())
        }
    }
}
