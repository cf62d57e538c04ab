//! What a `restore` job keeps loaded: the SeedVR2 VAE, the DiT and the prompt embedding, on one device
//! at one compute dtype.
use std::path::{Path, PathBuf};

use tch::{Device, Kind, Tensor};

use super::one_step::RestoreModels;
use crate::models::seedvr2::{SeedVr2LoadOptions, SeedVr2Vae};
use crate::models::vae::VideoVae;
use crate::models::seedvr2_dit::{BlockPlacement, DitLoadOptions, SeedVr2Dit};
use crate::models::ModelError;

/// The name of the prompt tensor in the original files and in a combined `text_embeds.safetensors`.
const PROMPT_TENSOR: &str = "pos_emb";

pub struct RestorerFiles {
    pub dit: PathBuf,
    pub vae: PathBuf,
    pub text: PathBuf,
}

pub struct Restorer {
    /// Always the SeedVR2 VAE; held as a [`VideoVae`] so the executor's tiled streams take it.
    pub vae: VideoVae,
    pub dit: SeedVr2Dit,
    pub text: Tensor,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RestorerOptions {
    pub device: Device,
    pub kind: Kind,
    /// Where the DiT's blocks live between calls.
    pub placement: BlockPlacement,
}

impl Restorer {
    pub fn load(files: &RestorerFiles, opts: &RestorerOptions) -> Result<Self, ModelError> {
        let RestorerOptions { device, kind, placement } = *opts;
        let dit = SeedVr2Dit::load(&files.dit, &DitLoadOptions { device, kind, placement, ..DitLoadOptions::default() })?;
        let text = read_text_embedding(&files.text)?;
        if text.dim() != 2 || text.size()[1] != dit.config().txt_in_dim {
            return Err(ModelError::Format {
                path: files.text.clone(),
                reason: format!("text embedding {:?} does not fit the DiT's text input of {}", text.size(), dit.config().txt_in_dim),
            });
        }
        let vae = VideoVae::new(SeedVr2Vae::load(&files.vae, &SeedVr2LoadOptions { device, kind })?);
        Ok(Self { vae, dit, text: text.to_device(device).to_kind(kind) })
    }

    pub fn models(&self) -> RestoreModels<'_> {
        RestoreModels { dit: &self.dit, text: &self.text }
    }
}

/// `pos_emb` `[L, 5120]` from a safetensors file (a tensor named `pos_emb`, or the only tensor), or from
/// the original `pos_emb.pt`.
pub fn read_text_embedding(path: &Path) -> Result<Tensor, ModelError> {
    let format_error = |reason: String| ModelError::Format { path: path.to_path_buf(), reason };
    std::fs::metadata(path).map_err(|source| ModelError::Io { path: path.to_path_buf(), source })?;
    let tensors = if path.extension().is_some_and(|e| e == "pt") {
        vec![(PROMPT_TENSOR.to_string(), crate::models::formats::torch_file::read_tensor(path)?)]
    } else {
        Tensor::read_safetensors(path).map_err(|e| format_error(e.to_string()))?
    };
    match tensors.iter().find(|(name, _)| name == PROMPT_TENSOR) {
        Some((_, tensor)) => Ok(tensor.shallow_clone()),
        None if tensors.len() == 1 => Ok(tensors[0].1.shallow_clone()),
        None => Err(format_error(format!("no `{PROMPT_TENSOR}` tensor (and not a single tensor)"))),
    }
}
