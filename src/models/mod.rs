//! Model code: tch modules built from checkpoint files, one file per family.
//! Everything here runs on the executor thread; nothing here is async.
// Floors, each using only those below it: the catalogue (registry, op, vae) names the families; a
// family (wan, wan_dit, seedvr2, seedvr2_dit, realesrgan, realcugan; restore is the pipeline around the DiT) builds
// on the shared layers in `nn` and reads its files through `formats`, and never imports another family.
pub mod family;
pub mod flashvsr;
pub mod formats;
pub mod nn;
pub mod realcugan;
pub mod realesrgan;
pub mod restore;
pub mod rife;
pub mod seedvr2;
pub mod seedvr2_dit;
pub mod stop;
pub mod taehv;
pub mod wan;
pub mod wan_dit;
mod op;
pub mod registry;
pub mod vae;
pub use op::{DeviceNeed, Op, OpSpec, OutputName, OutputSize, OwnSettings, Reads, Retimes, VaeOp, Writes};

use std::path::PathBuf;

use crate::error_codes as codes;

#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("model file {path} could not be read: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("model file {path} is not valid: {reason}")]
    Format { path: PathBuf, reason: String },
    #[error("model file {path}: tensor `{tensor}` is stored as {ggml_type}, not one of the types read (F32, F16, BF16, Q8_0, Q4_K-Q6_K)")]
    UnsupportedQuantization { path: PathBuf, tensor: String, ggml_type: String },
    #[error("unknown model `{0}`")]
    Unknown(String),
    #[error("weights for model `{0}` are not present on this box")]
    WeightsMissing(String),
    #[error("model `{model}` does not support {what}")]
    Unsupported { model: String, what: String },
    #[error("torch: {0}")]
    Torch(#[from] tch::TchError),
    #[error("out of memory: a host buffer of {bytes} bytes could not be allocated")]
    HostOutOfMemory { bytes: usize },
    /// A caller's stop (a cancelled job, [`stop::StopFlag`]) seen between two pieces of work (tiles,
    /// causal convolutions, DiT blocks).
    #[error("stopped: the job was cancelled")]
    Stopped,
}

impl ModelError {
    pub fn code(&self) -> &'static str {
        match self {
            ModelError::Io { .. } => codes::MODEL_IO,
            ModelError::Format { .. } => codes::MODEL_FORMAT,
            ModelError::UnsupportedQuantization { .. } => codes::UNSUPPORTED_QUANTIZATION,
            ModelError::Unknown(_) => codes::UNKNOWN_MODEL,
            ModelError::WeightsMissing(_) => codes::MODEL_WEIGHTS_MISSING,
            ModelError::Unsupported { .. } => codes::UNSUPPORTED_MODEL_OP,
            ModelError::Torch(e) if is_out_of_memory(e) => codes::OUT_OF_MEMORY,
            ModelError::Torch(_) => codes::TORCH_ERROR,
            ModelError::HostOutOfMemory { .. } => codes::OUT_OF_MEMORY,
            ModelError::Stopped => codes::CANCELLED,
        }
    }
}

/// libtorch reports allocator failures as ordinary errors; the message is the only signal.
pub fn is_out_of_memory(e: &tch::TchError) -> bool {
    is_out_of_memory_message(&e.to_string())
}

/// What libtorch says when memory runs out. oneDNN turns its own failed allocations (a convolution's
/// scratchpad, under an address-space cap) into "could not create a primitive" with no status text;
/// a primitive that cannot be created for any other reason fails the same way on every retry, so
/// treating it as out of memory costs a few quick retries and then the original error.
pub fn is_out_of_memory_message(message: &str) -> bool {
    ["out of memory", "DefaultCPUAllocator: can't allocate", ONEDNN_CANNOT_CREATE_KERNEL, "std::bad_alloc"].iter().any(|sign| message.contains(sign))
}

/// oneDNN's error when it cannot create a kernel (a primitive), also when its JIT ran out of memory.
pub const ONEDNN_CANNOT_CREATE_KERNEL: &str = "could not create a primitive";
