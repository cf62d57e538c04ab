use crate::error_codes as codes;
use crate::media::latent::LatentError;
use crate::media::MediaError;
use crate::models::ModelError;

#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error("cancelled")]
    Cancelled,
    /// Stopped right after a checkpoint to make way (a pause, another owner's turn, the server's stop): it
    /// goes on from that checkpoint when it runs again.
    #[error("stopped at a checkpoint to make way")]
    MadeWay,
    #[error(transparent)]
    Media(#[from] MediaError),
    #[error(transparent)]
    Model(ModelError),
    #[error(transparent)]
    Latent(#[from] LatentError),
    #[error("{0}")]
    Unsupported(String),
    #[error("invalid job: {0}")]
    Invalid(String),
    #[error("the executor thread is gone")]
    ExecutorGone,
    #[error("the device ran out of memory: {0}")]
    OutOfMemory(String),
    /// Refused before it ran: not even its smallest plan fits what the host gives a job.
    #[error("the job does not fit this box's memory: {0}")]
    ExceedsHostMemory(String),
    #[error("internal error in the model code: {0}")]
    Panicked(String),
    #[error("the shared storage: {0}")]
    Storage(String),
}

impl From<ModelError> for ExecError {
    /// A model stopped for a cancel is the job's cancel, whichever layer saw it.
    fn from(e: ModelError) -> Self {
        match e {
            ModelError::Stopped => ExecError::Cancelled,
            other => ExecError::Model(other),
        }
    }
}

impl From<tch::TchError> for ExecError {
    fn from(e: tch::TchError) -> Self {
        ExecError::Model(ModelError::Torch(e))
    }
}

impl ExecError {
    pub fn code(&self) -> &'static str {
        if crate::jobs::disk::is_full(self) {
            return codes::DISK_FULL;
        }
        match self {
            ExecError::Cancelled => codes::CANCELLED,
            ExecError::MadeWay => codes::MADE_WAY,
            ExecError::Media(e) => e.code(),
            ExecError::Model(e) => e.code(),
            ExecError::Latent(e) => e.code(),
            ExecError::Unsupported(_) => codes::UNSUPPORTED_OP,
            ExecError::Invalid(_) => codes::INVALID_JOB,
            ExecError::ExecutorGone => codes::EXECUTOR_GONE,
            ExecError::OutOfMemory(_) | ExecError::ExceedsHostMemory(_) => codes::OUT_OF_MEMORY,
            ExecError::Panicked(_) => codes::INTERNAL_ERROR,
            ExecError::Storage(_) => codes::STORAGE_UNAVAILABLE,
        }
    }

    pub fn is_out_of_memory(&self) -> bool {
        match self {
            ExecError::OutOfMemory(_) => true,
            ExecError::Model(ModelError::Torch(e)) => crate::models::is_out_of_memory(e),
            ExecError::Model(ModelError::HostOutOfMemory { .. }) => true,
            _ => false,
        }
    }

    pub fn from_panic(payload: Box<dyn std::any::Any + Send>) -> ExecError {
        let message = payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "unknown panic".into());
        // tch's panic text embeds libtorch's whole C++ backtrace; the first frame marker ends the useful part.
        let first_line: String = message.split("\\nframe #0").next().unwrap_or_default().lines().next().unwrap_or_default().chars().take(400).collect();
        if crate::models::is_out_of_memory_message(&message) {
            ExecError::OutOfMemory(first_line)
        } else {
            ExecError::Panicked(first_line)
        }
    }
}
