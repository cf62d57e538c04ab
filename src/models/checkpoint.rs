//! Reading a checkpoint file, whatever its container: safetensors or GGUF (told apart by magic bytes).
use std::path::Path;

use tch::Tensor;

use super::{gguf, ModelError};

pub fn read_tensors(path: &Path) -> Result<Vec<(String, Tensor)>, ModelError> {
    if gguf::is_gguf(path) {
        return gguf::read(path);
    }
    Tensor::read_safetensors(path).map_err(|e| ModelError::Format { path: path.to_path_buf(), reason: e.to_string() })
}

/// Names and shapes without reading the weights.
pub fn tensor_shapes(path: &Path) -> Result<Vec<(String, Vec<i64>)>, ModelError> {
    if gguf::is_gguf(path) {
        return gguf::shapes(path);
    }
    let header = crate::media::safetensors::read_header(path)
        .map_err(|e| ModelError::Format { path: path.to_path_buf(), reason: e.to_string() })?;
    Ok(header.tensors.into_iter().map(|(name, entry)| (name, entry.shape)).collect())
}
