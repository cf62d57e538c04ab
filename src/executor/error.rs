use crate::media::latent::LatentError;
use crate::media::MediaError;
use crate::models::ModelError;

#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error("cancelled")]
    Cancelled,
    #[error(transparent)]
    Media(#[from] MediaError),
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error(transparent)]
    Latent(#[from] LatentError),
    #[error("{0}")]
    Unsupported(String),
    #[error("invalid job: {0}")]
    Invalid(String),
    #[error("the executor thread is gone")]
    ExecutorGone,
}

impl From<tch::TchError> for ExecError {
    fn from(e: tch::TchError) -> Self {
        ExecError::Model(ModelError::Torch(e))
    }
}

impl ExecError {
    pub fn code(&self) -> &'static str {
        match self {
            ExecError::Cancelled => "cancelled",
            ExecError::Media(e) => e.code(),
            ExecError::Model(e) => e.code(),
            ExecError::Latent(e) => e.code(),
            ExecError::Unsupported(_) => "unsupported-op",
            ExecError::Invalid(_) => "invalid-job",
            ExecError::ExecutorGone => "executor-gone",
        }
    }
}
