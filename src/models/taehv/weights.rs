//! Reading a TAEHV checkpoint into the shared shape-checked weight store: the released `.pth` files
//! (plain `state_dict()`s, zip torch.save) and safetensors conversions, fp32, fp16 or bf16, cast to the
//! compute kind as modules take them. The key names are the state dict's own; nothing is renamed.
use std::path::Path;

use tch::{Device, Kind, Tensor};

use crate::models::formats::torch_file;
pub use crate::models::nn::weights::{WeightPath, Weights};
use crate::models::ModelError;

/// Opens a `.pth` (told apart by its zip magic, not its name) or a safetensors file.
pub fn read(path: &Path, device: Device, kind: Kind) -> Result<Weights, ModelError> {
    if torch_file::is_torch_zip(path) {
        let tensors = torch_file::read_tensors(path)?;
        return Ok(Weights::new(path, tensors.into_iter().collect(), device, kind));
    }
    Weights::open(path, device, kind)
}


/// Named tensors already in memory; `source` names them in errors and its file name is read as a
/// checkpoint name (see `naming`).
pub fn from_tensors(source: &Path, tensors: Vec<(String, Tensor)>, device: Device, kind: Kind) -> Result<Weights, ModelError> {
    Ok(Weights::new(source, tensors.into_iter().collect(), device, kind))
}
