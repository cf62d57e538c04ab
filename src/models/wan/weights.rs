//! Reading a Wan VAE checkpoint into the shared weight store under diffusers names: original/ComfyUI
//! checkpoints are renamed once here, and errors spell keys the way the user's file does.
use std::collections::BTreeMap;
use std::path::Path;

use tch::{Device, Kind, Tensor};

use super::keymap::{self, Naming, OriginalLayout};
pub use crate::models::weights::{WeightPath, Weights};
use crate::models::ModelError;

/// Reads a safetensors or GGUF file (fp32/fp16/bf16, GGUF also Q8_0) in either naming scheme.
pub fn read(path: &Path, device: Device, kind: Kind) -> Result<Weights, ModelError> {
    std::fs::metadata(path).map_err(|source| ModelError::Io { path: path.to_path_buf(), source })?;
    let tensors = crate::models::checkpoint::read_tensors(path)?;
    from_tensors(path, tensors, device, kind)
}

/// Takes named tensors in either scheme and renames them to diffusers names.
pub fn from_tensors(source: &Path, tensors: Vec<(String, Tensor)>, device: Device, kind: Kind) -> Result<Weights, ModelError> {
    let format_error = |reason: String| ModelError::Format { path: source.to_path_buf(), reason };
    let naming = keymap::detect_naming(tensors.iter().map(|(k, _)| k.as_str())).ok_or_else(|| {
        format_error("no `encoder.conv1.weight` (original naming) or `encoder.conv_in.weight` (diffusers naming): not a Wan VAE checkpoint".into())
    })?;
    match naming {
        Naming::Diffusers => Ok(Weights::new(source, tensors.into_iter().collect(), device, kind)),
        Naming::Original => {
            let keys: Vec<&str> = tensors.iter().map(|(k, _)| k.as_str()).collect();
            let layout: OriginalLayout = OriginalLayout::detect(&keys).map_err(|reason| format_error(reason.into()))?;
            let renamed: BTreeMap<String, Tensor> = tensors.into_iter().map(|(k, t)| (keymap::original_to_diffusers(&k, layout), t)).collect();
            let file_names = Box::new(move |key: &str| keymap::diffusers_to_original(key, layout));
            Ok(Weights::new(source, renamed, device, kind).with_file_names(file_names))
        }
    }
}
