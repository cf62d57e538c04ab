//! What the queue refuses or fails at, each with its stable code; `api::error` gives each its HTTP status.
use crate::error_codes as codes;
use crate::jobs::blobs::BlobError;
use crate::jobs::StoreError;
use crate::media::latent::LatentError;
use crate::media::MediaError;
use crate::models::registry::NormalizeRefusal;

#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    /// A field of the request that this box cannot honour (its code says which).
    #[error("{message}")]
    Refused { code: &'static str, message: String },
    #[error("no job with id {0}")]
    JobNotFound(String),
    /// Queued or running where a finished job is needed (a result, a delete).
    #[error("{0}")]
    NotFinished(String),
    #[error("{0}")]
    OutputTooLarge(String),
    #[error("the result of job {0} is no longer kept (synchronous calls return it once; others after retention_hours)")]
    ResultGone(String),
    /// The input of a job whose files were removed (by a synchronous call's answer, or by hand).
    #[error("the input of job {0} is no longer kept; upload the file again")]
    InputGone(String),
    #[error("{0}")]
    PreviewUnavailable(String),
    #[error("the box's disk is (nearly) full; uploads resume once space is freed (delete finished jobs)")]
    InsufficientStorage,
    #[error("this token has {limit} jobs waiting, its limit; try again when one has started")]
    TokenQueueFull { limit: u32 },
    #[error("the queue is full ({limit} jobs waiting); try again later")]
    QueueFull { limit: u32 },
    #[error(transparent)]
    Media(#[from] MediaError),
    #[error(transparent)]
    Latent(#[from] LatentError),
    #[error(transparent)]
    Normalize(#[from] NormalizeRefusal),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the shared storage: {0}")]
    Storage(String),
    /// Every worker heard of offers less device memory than the job needs: it would wait for ever.
    #[error("{0}")]
    NoWorkerFits(String),
    #[error("{0}")]
    Internal(String),
}

impl QueueError {
    pub fn refused(code: &'static str, message: impl Into<String>) -> QueueError {
        QueueError::Refused { code, message: message.into() }
    }

    pub fn code(&self) -> &'static str {
        match self {
            QueueError::Refused { code, .. } => code,
            QueueError::JobNotFound(_) => codes::JOB_NOT_FOUND,
            QueueError::NotFinished(_) => codes::JOB_NOT_FINISHED,
            QueueError::OutputTooLarge(_) => codes::OUTPUT_TOO_LARGE,
            QueueError::ResultGone(_) => codes::RESULT_GONE,
            QueueError::InputGone(_) => codes::INPUT_GONE,
            QueueError::PreviewUnavailable(_) => codes::PREVIEW_UNAVAILABLE,
            QueueError::InsufficientStorage => codes::INSUFFICIENT_STORAGE,
            QueueError::TokenQueueFull { .. } | QueueError::QueueFull { .. } => codes::QUEUE_FULL,
            QueueError::Media(e) => e.code(),
            QueueError::Latent(e) => e.code(),
            QueueError::Normalize(e) => e.code(),
            QueueError::Store(e) if e.is_outage() => codes::STORE_UNAVAILABLE,
            QueueError::Store(_) => codes::STORE_ERROR,
            QueueError::Storage(_) => codes::STORAGE_UNAVAILABLE,
            QueueError::NoWorkerFits(_) => codes::NO_WORKER_FITS,
            QueueError::Internal(_) => codes::INTERNAL_ERROR,
        }
    }
}

impl QueueError {
    /// A file of job `raw_id` that the shared storage could not give: gone if it is not there.
    pub fn from_blob(e: BlobError, raw_id: &str) -> QueueError {
        match e {
            BlobError::NotFound(_) => QueueError::ResultGone(raw_id.to_string()),
            other => QueueError::Storage(other.to_string()),
        }
    }
}

impl From<std::io::Error> for QueueError {
    fn from(e: std::io::Error) -> Self {
        if e.kind() == std::io::ErrorKind::StorageFull || e.raw_os_error() == Some(libc::EDQUOT) {
            return QueueError::InsufficientStorage;
        }
        QueueError::Internal(format!("file system: {e}"))
    }
}

impl From<tokio::task::JoinError> for QueueError {
    fn from(e: tokio::task::JoinError) -> Self {
        QueueError::Internal(e.to_string())
    }
}
