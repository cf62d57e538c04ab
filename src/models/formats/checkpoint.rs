//! Reading a checkpoint file, whatever its container: safetensors or GGUF (told apart by magic bytes).
//! Tensors are read one at a time from their place in the file ([`TensorFile`]), so a load never holds
//! the file and a second copy of it at once.
use std::path::Path;

use tch::{Device, Tensor};

use super::tensor_file::{LoadAs, TensorFile};
use super::gguf;
use crate::models::ModelError;

/// Every tensor in its stored dtype (fp8 stays fp8; GGUF quantisations come back as f32), on the CPU.
pub fn read_tensors(path: &Path) -> Result<Vec<(String, Tensor)>, ModelError> {
    TensorFile::open(path)?.load_all(Device::Cpu, LoadAs::Stored)
}

/// Names and shapes without reading the weights.
pub fn tensor_shapes(path: &Path) -> Result<Vec<(String, Vec<i64>)>, ModelError> {
    if gguf::is_gguf(path) {
        return gguf::shapes(path);
    }
    if super::torch_file::is_torch_zip(path) {
        return super::torch_file::tensor_shapes(path);
    }
    let header = crate::media::safetensors::read_header(path)
        .map_err(|e| ModelError::Format { path: path.to_path_buf(), reason: e.to_string() })?;
    Ok(header.tensors.into_iter().map(|(name, entry)| (name, entry.shape)).collect())
}

/// The `config` JSON a file may carry in its metadata (the reference files do; a GGUF converter may copy it
/// into a string value of the same name). `None` for a file without one or one that is not JSON.
pub fn config_metadata(path: &Path) -> Option<serde_json::Value> {
    let text = if gguf::is_gguf(path) {
        gguf::string_metadata(path, "config")?
    } else {
        crate::media::safetensors::read_header(path).ok()?.metadata.get("config")?.as_str()?.to_string()
    };
    serde_json::from_str(&text).ok()
}
