//! Reading a SeedVR2 checkpoint into the shared shape-checked weight store ([`Weights`], from the
//! Wan module: same lookups, same "first offending key" errors). The only renaming SeedVR2 needs is
//! diffusers' deprecated attention names, translated once here.
use std::path::Path;

use tch::{Device, Kind, Tensor};

pub use crate::models::nn::weights::{WeightPath, Weights};
use crate::models::ModelError;

/// Old diffusers `AttentionBlock` names → current `Attention` names (the checkpoint's own).
const DEPRECATED_ATTENTION_NAMES: [(&str, &str); 4] =
    [("query.", "to_q."), ("key.", "to_k."), ("value.", "to_v."), ("proj_attn.", "to_out.0.")];

/// Opens a safetensors or GGUF file (told apart by the GGUF magic, not the file name); tensors are
/// read, at `kind`, as modules take them.
pub fn read(path: &Path, device: Device, kind: Kind) -> Result<Weights, ModelError> {
    std::fs::metadata(path).map_err(|source| ModelError::Io { path: path.to_path_buf(), source })?;
    with_current_names(Weights::open(path, device, kind)?)
}

/// Takes named tensors in either attention naming style.
pub fn from_tensors(source: &Path, tensors: Vec<(String, Tensor)>, device: Device, kind: Kind) -> Result<Weights, ModelError> {
    with_current_names(Weights::new(source, tensors.into_iter().collect(), device, kind))
}

fn with_current_names(weights: Weights) -> Result<Weights, ModelError> {
    if !weights.contains("encoder.conv_in.weight") {
        return Err(weights.format_error("no `encoder.conv_in.weight`: not a SeedVR2 VAE checkpoint"));
    }
    Ok(weights.renamed(current_attention_name))
}

/// `….attentions.0.query.weight` → `….attentions.0.to_q.weight`; other keys unchanged.
pub fn current_attention_name(key: &str) -> String {
    let Some((block, rest)) = key.split_once(".attentions.") else { return key.to_string() };
    let Some((index, tail)) = rest.split_once('.') else { return key.to_string() };
    DEPRECATED_ATTENTION_NAMES
        .iter()
        .find_map(|(old, new)| tail.strip_prefix(old).map(|param| format!("{block}.attentions.{index}.{new}{param}")))
        .unwrap_or_else(|| key.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deprecated_attention_names_are_translated() {
        assert_eq!(current_attention_name("decoder.mid_block.attentions.0.query.weight"), "decoder.mid_block.attentions.0.to_q.weight");
        assert_eq!(current_attention_name("encoder.mid_block.attentions.0.proj_attn.bias"), "encoder.mid_block.attentions.0.to_out.0.bias");
        assert_eq!(current_attention_name("encoder.mid_block.attentions.0.group_norm.bias"), "encoder.mid_block.attentions.0.group_norm.bias");
        assert_eq!(current_attention_name("encoder.mid_block.resnets.0.conv1.weight"), "encoder.mid_block.resnets.0.conv1.weight");
    }
}
