//! A part of the input instead of all of it ("try the first five seconds"): `InputRange` as a client gives
//! it, in seconds or frames, and `FrameSpan`, the exact frames it names in a probed video. A job over a span
//! reads only those frames and writes the audio and subtitles of that time only.
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use std::path::Path;

use super::{MediaError, MediaInfo, MediaLimits, MediaTools};
// `FrameSpan` is part of `MediaInfo`, so it lives beside it in `info`; this path keeps working.
pub use super::info::FrameSpan;

/// Where the part starts and how long it is; each at most one way. Nothing given is the whole input.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct InputRange {
    /// Seconds from the first frame: the part starts at the first frame at or after it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<f64>,
    /// The index of the first frame (0 is the first), instead of `start`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_frame: Option<u64>,
    /// How many frames (at most; the input may end first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frames: Option<u64>,
    /// Seconds, instead of `frames`: the frames that start within them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration: Option<f64>,
}

/// Half a millisecond's worth of a frame: a start given as `1.2` s at 25 fps is frame 30, not 31.
const TIME_SLACK_FRAMES: f64 = 1e-3;

impl InputRange {
    pub fn is_empty(&self) -> bool {
        self == &InputRange::default()
    }

    /// The fields together: each given at most one way, numbers that name a part. Says why not.
    pub fn check(&self) -> Result<(), String> {
        if self.start.is_some() && self.start_frame.is_some() {
            return Err("give `start` (seconds) or `start_frame`, not both".into());
        }
        if self.frames.is_some() && self.duration.is_some() {
            return Err("give `frames` or `duration` (seconds), not both".into());
        }
        if let Some(start) = self.start.filter(|s| !s.is_finite() || *s < 0.0) {
            return Err(format!("start {start} is not a time in seconds from the first frame (0 or more)"));
        }
        if let Some(duration) = self.duration.filter(|d| !d.is_finite() || *d <= 0.0) {
            return Err(format!("duration {duration} is not a length in seconds (more than 0)"));
        }
        if self.frames == Some(0) {
            return Err("frames 0 names no frame; give 1 or more".into());
        }
        Ok(())
    }

    /// The frames this range names in `info` (a whole probed input). A start at or past the end is refused;
    /// a length past the end stops at the end.
    pub fn span_in(&self, info: &MediaInfo) -> Result<FrameSpan, MediaError> {
        self.check().map_err(|reason| MediaError::OutsideInput { reason })?;
        let fps = info.fps;
        if !(fps.is_finite() && fps > 0.0) {
            return Err(MediaError::OutsideInput { reason: format!("the input's frame rate ({fps}) does not place a time on a frame") });
        }
        let first_at_or_after = |seconds: f64| (seconds * fps - TIME_SLACK_FRAMES).ceil().max(0.0) as u64;
        let start_frame = match (self.start, self.start_frame) {
            (Some(seconds), _) => first_at_or_after(seconds),
            (None, Some(frame)) => frame,
            (None, None) => 0,
        };
        if start_frame >= info.frames {
            let asked = match self.start {
                Some(seconds) => format!("start {seconds} s (frame {start_frame})"),
                None => format!("start_frame {start_frame}"),
            };
            return Err(MediaError::OutsideInput {
                reason: format!("{asked} is past the input's end: it has {} frames ({:.3} s)", info.frames, info.duration_s),
            });
        }
        let wanted = match (self.frames, self.duration) {
            (Some(frames), _) => frames,
            (None, Some(seconds)) => {
                let start_s = self.start.unwrap_or(start_frame as f64 / fps);
                first_at_or_after(start_s + seconds).saturating_sub(start_frame)
            }
            (None, None) => u64::MAX,
        };
        if wanted == 0 {
            let duration = self.duration.unwrap_or_default();
            return Err(MediaError::OutsideInput { reason: format!("duration {duration} s holds no frame at {fps:.3} fps") });
        }
        let frames = wanted.min(info.frames - start_frame);
        Ok(FrameSpan { start_frame, frames, source_frames: info.frames, start_s: start_frame as f64 / fps, duration_s: frames as f64 / fps })
    }
}

impl MediaInfo {
    /// The input as a job over `span` sees it: that many frames, that long. The span itself goes along, so
    /// the reader and the writer know which frames and which time to take.
    pub fn limited_to(&self, span: FrameSpan) -> MediaInfo {
        if span.is_whole() {
            return self.clone();
        }
        MediaInfo { frames: span.frames, duration_s: span.duration_s, span: Some(span), ..self.clone() }
    }

    /// A job's view of a whole probed input: `range` applied when one is given.
    pub fn in_range(&self, range: Option<&InputRange>) -> Result<MediaInfo, MediaError> {
        match range.filter(|range| !range.is_empty()) {
            Some(range) => Ok(self.limited_to(range.span_in(self)?)),
            None => Ok(self.clone()),
        }
    }
}

/// `probe` for a job over `range` of the input: the frame and duration limits hold for the part, not the
/// whole file (a long film may be tried five seconds at a time); the others (bytes, sides) for the file.
pub fn probe_part(tools: &MediaTools, path: &Path, limits: &MediaLimits, range: Option<&InputRange>) -> Result<MediaInfo, MediaError> {
    let Some(range) = range.filter(|range| !range.is_empty()) else {
        return super::probe(tools, path, limits);
    };
    let whole_file_limits = MediaLimits { max_frames: u64::MAX, max_duration_s: f64::MAX, ..limits.clone() };
    let part = super::probe(tools, path, &whole_file_limits)?.in_range(Some(range))?;
    super::probe::check_limits(&part, limits)?;
    Ok(part)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::media::Colour;

    fn clip(frames: u64, fps: f64) -> MediaInfo {
        MediaInfo {
            container: "mp4".into(),
            codec: "h264".into(),
            width: 64,
            height: 48,
            frames,
            fps,
            fps_rational: "25/1".into(),
            duration_s: frames as f64 / fps,
            has_audio: false,
            bytes: 1,
            colour: Colour::default_for_height(48),
            sample_aspect_ratio: None,
            still: false,
            alpha: false,
            span: None,
        }
    }

    fn span(range: InputRange, info: &MediaInfo) -> (u64, u64) {
        let span = range.span_in(info).unwrap();
        (span.start_frame, span.frames)
    }

    #[test]
    fn seconds_name_the_frames_that_start_within_them() {
        let info = clip(100, 25.0);
        assert_eq!(span(InputRange { start: Some(1.2), duration: Some(1.0), ..Default::default() }, &info), (30, 25));
        assert_eq!(span(InputRange { start: Some(1.21), duration: Some(1.0), ..Default::default() }, &info), (31, 25));
        assert_eq!(span(InputRange { duration: Some(0.5), ..Default::default() }, &info), (0, 13));
        let ntsc = clip(300, 30000.0 / 1001.0);
        assert_eq!(span(InputRange { duration: Some(5.0), ..Default::default() }, &ntsc), (0, 150));
    }

    #[test]
    fn frames_are_taken_as_given_and_stop_at_the_end() {
        let info = clip(100, 25.0);
        assert_eq!(span(InputRange { start_frame: Some(90), frames: Some(48), ..Default::default() }, &info), (90, 10));
        assert_eq!(span(InputRange { start_frame: Some(7), ..Default::default() }, &info), (7, 93));
        let limited = info.in_range(Some(&InputRange { frames: Some(10), ..Default::default() })).unwrap();
        assert_eq!((limited.frames, limited.duration_s), (10, 0.4));
        assert!(info.in_range(Some(&InputRange { frames: Some(100), ..Default::default() })).unwrap().span.is_none());
    }

    #[test]
    fn a_range_past_the_end_or_given_twice_is_refused() {
        let info = clip(100, 25.0);
        let refused = |range: InputRange| range.span_in(&info).unwrap_err().to_string();
        assert!(refused(InputRange { start: Some(4.0), ..Default::default() }).contains("past the input's end: it has 100 frames"));
        assert!(refused(InputRange { start: Some(1.0), start_frame: Some(2), ..Default::default() }).contains("not both"));
        assert!(refused(InputRange { frames: Some(3), duration: Some(1.0), ..Default::default() }).contains("not both"));
        assert!(refused(InputRange { start: Some(1.21), duration: Some(0.01), ..Default::default() }).contains("holds no frame"));
        assert!(refused(InputRange { start: Some(-1.0), ..Default::default() }).contains("0 or more"));
    }
}
