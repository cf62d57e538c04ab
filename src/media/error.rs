use std::path::PathBuf;
use std::time::Duration;

use crate::error_codes as codes;

/// Everything that can go wrong in the media layer. `code()` is the stable string the API returns;
/// `is_client_error()` separates bad uploads (4xx) from faults of this box (5xx).
#[derive(Debug, thiserror::Error)]
pub enum MediaError {
    #[error("{path} is empty (zero bytes)")]
    EmptyFile { path: PathBuf },

    #[error("not a video: {reason}")]
    NotAVideo { reason: String },

    #[error("truncated media: {reason}")]
    Truncated { reason: String },

    /// `limit` names the exceeded limit: `bytes`, `width`, `height`, `frames` or `duration`.
    #[error("media too large: {limit} is {value}, the limit is {max}")]
    TooLarge { limit: &'static str, value: String, max: String },

    #[error("{program} did not finish within {after:?}; stderr: {stderr}")]
    Timeout { program: String, after: Duration, stderr: String },

    #[error("{program} failed ({status}): {stderr}")]
    FfmpegFailed { program: String, status: String, stderr: String },

    #[error("cannot run {program}: {source}")]
    Missing { program: PathBuf, source: std::io::Error },

    #[error("{context}: {source}")]
    Io { context: String, source: std::io::Error },

    /// A range (`start`, `frames`, …) that names no frame of the input.
    #[error("range outside the input: {reason}")]
    OutsideInput { reason: String },
    /// A zip of frames that is not a sequence of same-sized PNGs; `code` says which rule it breaks.
    #[error("not an image sequence: {reason}")]
    BadSequence { code: &'static str, reason: String },

    /// A caller handed the media layer something inconsistent (zero sizes, a chunk of the wrong size).
    #[error("invalid media request: {0}")]
    InvalidRequest(String),
}

impl MediaError {
    pub fn code(&self) -> &'static str {
        match self {
            MediaError::EmptyFile { .. } => codes::EMPTY_FILE,
            MediaError::NotAVideo { .. } => codes::NOT_A_VIDEO,
            MediaError::Truncated { .. } => codes::TRUNCATED_MEDIA,
            MediaError::TooLarge { .. } => codes::MEDIA_TOO_LARGE,
            MediaError::Timeout { .. } => codes::MEDIA_TIMEOUT,
            MediaError::FfmpegFailed { .. } => codes::FFMPEG_FAILED,
            MediaError::Missing { .. } => codes::FFMPEG_MISSING,
            MediaError::Io { .. } => codes::MEDIA_IO,
            MediaError::OutsideInput { .. } => codes::RANGE_OUTSIDE_INPUT,
            MediaError::InvalidRequest(_) => codes::MEDIA_INVALID_REQUEST,
            MediaError::BadSequence { code, .. } => *code,
        }
    }

    /// True when the input is at fault. A timeout counts as the box's fault: limits are checked
    /// before long work starts, so a stall more likely means an overloaded or wedged machine.
    pub fn is_client_error(&self) -> bool {
        matches!(
            self,
            MediaError::EmptyFile { .. }
                | MediaError::NotAVideo { .. }
                | MediaError::Truncated { .. }
                | MediaError::TooLarge { .. }
                | MediaError::OutsideInput { .. }
                | MediaError::BadSequence { .. }
        )
    }

    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        MediaError::Io { context: context.into(), source }
    }

    pub(crate) fn too_large(limit: &'static str, value: impl ToString, max: impl ToString) -> Self {
        MediaError::TooLarge { limit, value: value.to_string(), max: max.to_string() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn too_large_message_names_the_limit_value_and_maximum() {
        let err = MediaError::too_large("width", 4000, 3840);
        assert_eq!(err.code(), "media-too-large");
        assert!(err.is_client_error());
        assert_eq!(err.to_string(), "media too large: width is 4000, the limit is 3840");
    }

    #[test]
    fn server_faults_are_not_client_errors() {
        let err = MediaError::FfmpegFailed { program: "ffmpeg".into(), status: "exit 1".into(), stderr: String::new() };
        assert!(!err.is_client_error());
        assert_eq!(err.code(), "ffmpeg-failed");
    }
}
