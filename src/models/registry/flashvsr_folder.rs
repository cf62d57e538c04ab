//! A FlashVSR model on disk: a folder `models_dir/flashvsr/<name>/` holding the authors' files under their
//! own names — the streaming DiT, the LQ projection, TCDecoder and the fixed text context (`posi_prompt.pth`,
//! which ships in the authors' code repository, not with the weights). Its name says its release
//! (`FlashVsrVersion::of_folder`). The catalogue's knowledge, below the FlashVSR pipeline that reads it.
use std::path::{Path, PathBuf};

use super::flashvsr_version::FlashVsrVersion;

/// Output pixels per input pixel along each side: the model's design (its LQ projection reads 4× frames).
pub const SCALE: i64 = 4;

/// FlashVSR model folders are looked for here, below `models_dir`.
pub const FLASHVSR_DIR: &str = "flashvsr";
pub const DIT_FILE: &str = "diffusion_pytorch_model_streaming_dmd.safetensors";
pub const LQ_PROJ_FILE: &str = "LQ_proj_in.ckpt";
pub const TC_DECODER_FILE: &str = "TCDecoder.ckpt";
pub const PROMPT_FILE: &str = "posi_prompt.pth";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlashVsrFolder {
    pub name: String,
    pub dir: PathBuf,
    pub version: FlashVsrVersion,
}

impl FlashVsrFolder {
    pub fn dit(&self) -> PathBuf {
        self.dir.join(DIT_FILE)
    }

    pub fn lq_proj(&self) -> PathBuf {
        self.dir.join(LQ_PROJ_FILE)
    }

    pub fn tc_decoder(&self) -> PathBuf {
        self.dir.join(TC_DECODER_FILE)
    }

    pub fn prompt(&self) -> PathBuf {
        self.dir.join(PROMPT_FILE)
    }

    /// Every file a Tiny run reads (a Full one reads a Wan 2.1 VAE instead of TCDecoder).
    pub fn files(&self) -> Vec<PathBuf> {
        vec![self.dit(), self.lq_proj(), self.tc_decoder(), self.prompt()]
    }
}

/// Every folder below `models_dir/flashvsr/` holding a FlashVSR DiT, by name.
pub fn folders(models_dir: &Path) -> Vec<FlashVsrFolder> {
    let Ok(listing) = std::fs::read_dir(models_dir.join(FLASHVSR_DIR)) else { return vec![] };
    let mut folders: Vec<FlashVsrFolder> = listing
        .flatten()
        .map(|entry| entry.path())
        .filter(|dir| dir.join(DIT_FILE).is_file())
        .filter_map(|dir| {
            let name = dir.file_name()?.to_string_lossy().into_owned();
            Some(FlashVsrFolder { version: FlashVsrVersion::of_folder(&name), name, dir })
        })
        .collect();
    folders.sort_by(|a, b| a.name.cmp(&b.name));
    folders
}
