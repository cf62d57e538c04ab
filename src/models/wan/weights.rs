//! Reading a Wan VAE checkpoint into the shared weight store under diffusers names: original/ComfyUI
//! checkpoints are renamed once here, and errors spell keys the way the user's file does.
use std::path::Path;

use tch::{Device, Kind, Tensor};

use super::keymap::{self, Naming, OriginalLayout};
pub use crate::models::nn::weights::{WeightPath, Weights};
use crate::models::ModelError;

/// Opens a safetensors or GGUF file (fp32/fp16/bf16, GGUF also Q8_0) in either naming scheme; tensors are
/// read as modules take them.
pub fn read(path: &Path, device: Device, kind: Kind) -> Result<Weights, ModelError> {
    std::fs::metadata(path).map_err(|source| ModelError::Io { path: path.to_path_buf(), source })?;
    with_diffusers_names(Weights::open(path, device, kind)?)
}

/// Takes named tensors in either scheme and renames them to diffusers names.
pub fn from_tensors(source: &Path, tensors: Vec<(String, Tensor)>, device: Device, kind: Kind) -> Result<Weights, ModelError> {
    with_diffusers_names(Weights::new(source, tensors.into_iter().collect(), device, kind))
}

fn with_diffusers_names(weights: Weights) -> Result<Weights, ModelError> {
    let naming = keymap::detect_naming(weights.keys()).ok_or_else(|| {
        weights.format_error("no `encoder.conv1.weight` (original naming) or `encoder.conv_in.weight` (diffusers naming): not a Wan VAE checkpoint")
    })?;
    match naming {
        Naming::Diffusers => Ok(weights),
        Naming::Original => {
            let keys: Vec<&str> = weights.keys().collect();
            let layout: OriginalLayout = OriginalLayout::detect(&keys).map_err(|reason| weights.format_error(reason))?;
            let file_names = Box::new(move |key: &str| keymap::diffusers_to_original(key, layout));
            Ok(weights.renamed(|key| keymap::original_to_diffusers(key, layout)).with_file_names(file_names))
        }
    }
}
