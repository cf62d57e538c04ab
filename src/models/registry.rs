//! The models this box knows: the Real-ESRGAN files it ships with, and every VAE checkpoint found in
//! `models_dir/vae/` (named by its file stem, its family read from the checkpoint's key names).
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::jobs::Op;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Family {
    Realesrgan,
    Wan21,
    Wan22,
    Seedvr2,
}

impl Family {
    pub fn as_str(self) -> &'static str {
        match self {
            Family::Realesrgan => "realesrgan",
            Family::Wan21 => "wan21",
            Family::Wan22 => "wan22",
            Family::Seedvr2 => "seedvr2",
        }
    }

    pub fn is_vae(self) -> bool {
        !matches!(self, Family::Realesrgan)
    }
}

#[derive(Debug, Clone)]
pub struct ModelEntry {
    pub name: String,
    pub family: Family,
    pub ops: Vec<Op>,
    pub scales: Vec<i64>,
    pub files: Vec<PathBuf>,
    pub description: String,
    /// Channels of the latents a VAE reads and writes, from its first decoder convolution.
    pub latent_channels: Option<i64>,
}

pub const DEFAULT_UPSCALE_MODEL: &str = "realesrgan-animevideov3";
/// VAE checkpoints are looked for here, below `models_dir`.
pub const VAE_DIR: &str = "vae";

struct Upscaler {
    name: &'static str,
    stem: &'static str,
    description: &'static str,
}

const UPSCALERS: &[Upscaler] = &[
    Upscaler {
        name: "realesrgan-animevideov3",
        stem: "realesrgan/REALESRGAN_ANIMAVIDEOV3_UP4X",
        description: "Real-ESRGAN animevideov3 (SRVGGNetCompact, 0.6M params): fast video upscaler",
    },
    Upscaler {
        name: "realesrgan-x4plus",
        stem: "realesrgan/REALESRGAN_X4PLUS_UP4X",
        description: "Real-ESRGAN x4plus (RRDBNet, 23 blocks, 16.7M params): general photos, slow",
    },
];

const VAE_OPS: [Op; 3] = [Op::VaeEncode, Op::VaeDecode, Op::VaeReconstruct];

/// Everything usable on this box now. Cheap: a directory listing and a few safetensors headers.
pub fn scan(models_dir: &Path) -> Vec<ModelEntry> {
    let mut entries: Vec<ModelEntry> = UPSCALERS
        .iter()
        .map(|u| ModelEntry {
            name: u.name.into(),
            family: Family::Realesrgan,
            ops: vec![Op::Upscale],
            scales: vec![2, 4],
            files: vec![models_dir.join(format!("{}.param", u.stem)), models_dir.join(format!("{}.bin", u.stem))],
            description: u.description.into(),
            latent_channels: None,
        })
        .collect();
    let Ok(dir) = std::fs::read_dir(models_dir.join(VAE_DIR)) else { return entries };
    let mut files: Vec<PathBuf> =
        dir.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|e| e == "safetensors" || e == "gguf")).collect();
    files.sort();
    for path in files {
        let Some(name) = path.file_stem().map(|s| s.to_string_lossy().into_owned()) else { continue };
        match detect_vae_family(&path) {
            Some((family, latent_channels)) => entries.push(ModelEntry {
                latent_channels,
                description: format!("{} video VAE from {}", family.as_str(), path.display()),
                name,
                family,
                ops: VAE_OPS.to_vec(),
                scales: vec![],
                files: vec![path],
            }),
            None => tracing::warn!(path = %path.display(), "not a known VAE checkpoint; skipped"),
        }
    }
    entries
}

pub fn find(models_dir: &Path, name: &str) -> Option<ModelEntry> {
    scan(models_dir).into_iter().find(|m| m.name == name)
}

impl ModelEntry {
    pub fn present(&self) -> bool {
        self.files.iter().all(|p| p.is_file())
    }

    pub fn info(&self) -> ModelInfo {
        ModelInfo {
            name: self.name.clone(),
            family: self.family,
            kind: if self.family.is_vae() { "vae" } else { "upscaler" },
            latent_channels: self.latent_channels,
            ops: self.ops.iter().map(|op| op.as_str()).collect(),
            scales: self.scales.clone(),
            dtypes: vec!["f32", "bf16", "f16"],
            present: self.present(),
            description: self.description.clone(),
        }
    }
}

#[derive(Debug, Serialize)]
pub struct ModelInfo {
    pub name: String,
    pub family: Family,
    pub kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latent_channels: Option<i64>,
    pub ops: Vec<&'static str>,
    pub scales: Vec<i64>,
    pub dtypes: Vec<&'static str>,
    pub present: bool,
    pub description: String,
}

fn tensor_shapes(path: &Path) -> Option<BTreeMap<String, Vec<i64>>> {
    Some(crate::models::checkpoint::tensor_shapes(path).ok()?.into_iter().collect())
}

/// Wan uses RMS norms (`gamma`), SeedVR2 GroupNorms and MAGViT up-samplers (`upscale_conv`);
/// Wan 2.2 patchifies its input, so its first convolution sees 12 channels instead of 3.
fn detect_vae_family(path: &Path) -> Option<(Family, Option<i64>)> {
    let shapes = tensor_shapes(path)?;
    let has = |needle: &str| shapes.keys().any(|k| k.contains(needle));
    let input_channels = |keys: [&str; 2]| keys.iter().find_map(|k| shapes.get(*k)).and_then(|s| s.get(1).copied());
    let latent_channels = input_channels(["decoder.conv_in.weight", "decoder.conv1.weight"]);
    if has("upscale_conv") {
        return Some((Family::Seedvr2, latent_channels));
    }
    if has(".gamma") && has("decoder.") && has("encoder.") {
        return match input_channels(["encoder.conv_in.weight", "encoder.conv1.weight"]) {
            Some(12) => Some((Family::Wan22, latent_channels)),
            Some(_) => Some((Family::Wan21, latent_channels)),
            None => None,
        };
    }
    None
}
