//! The models this box knows, the files each needs under `models_dir`, and what each can do.
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::jobs::Op;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Family {
    Realesrgan,
}

#[derive(Debug)]
pub struct ModelEntry {
    pub name: &'static str,
    pub family: Family,
    pub ops: &'static [Op],
    pub scales: &'static [i64],
    /// Paths relative to `models_dir`.
    pub files: &'static [&'static str],
    pub description: &'static str,
}

pub const DEFAULT_UPSCALE_MODEL: &str = "realesrgan-animevideov3";

const CATALOG: &[ModelEntry] = &[
    ModelEntry {
        name: "realesrgan-animevideov3",
        family: Family::Realesrgan,
        ops: &[Op::Upscale],
        scales: &[2, 4],
        files: &["realesrgan/REALESRGAN_ANIMAVIDEOV3_UP4X.param", "realesrgan/REALESRGAN_ANIMAVIDEOV3_UP4X.bin"],
        description: "Real-ESRGAN animevideov3 (SRVGGNetCompact, 0.6M params): fast video upscaler",
    },
    ModelEntry {
        name: "realesrgan-x4plus",
        family: Family::Realesrgan,
        ops: &[Op::Upscale],
        scales: &[2, 4],
        files: &["realesrgan/REALESRGAN_X4PLUS_UP4X.param", "realesrgan/REALESRGAN_X4PLUS_UP4X.bin"],
        description: "Real-ESRGAN x4plus (RRDBNet, 23 blocks, 16.7M params): general photos, slow",
    },
];

pub fn catalog() -> &'static [ModelEntry] {
    CATALOG
}

pub fn find(name: &str) -> Option<&'static ModelEntry> {
    CATALOG.iter().find(|m| m.name == name)
}

impl ModelEntry {
    pub fn paths(&self, models_dir: &Path) -> Vec<PathBuf> {
        self.files.iter().map(|f| models_dir.join(f)).collect()
    }

    pub fn present(&self, models_dir: &Path) -> bool {
        self.paths(models_dir).iter().all(|p| p.is_file())
    }

    pub fn info(&self, models_dir: &Path) -> ModelInfo {
        ModelInfo {
            name: self.name,
            family: self.family,
            ops: self.ops.iter().map(|op| op.as_str()).collect(),
            scales: self.scales.to_vec(),
            dtypes: vec!["f32", "bf16"],
            present: self.present(models_dir),
            description: self.description,
        }
    }
}

#[derive(Debug, Serialize)]
pub struct ModelInfo {
    pub name: &'static str,
    pub family: Family,
    pub ops: Vec<&'static str>,
    pub scales: Vec<i64>,
    pub dtypes: Vec<&'static str>,
    pub present: bool,
    pub description: &'static str,
}
