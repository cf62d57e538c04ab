//! What each model family provides, as traits the families implement and the catalogue (registry, `vae`)
//! and the executor use: the families sit below this, never beside each other.
pub mod interpolator;
pub mod upscaler;
pub mod vae;

use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Family {
    Realesrgan,
    /// Real-CUGAN (bilibili), from realcugan-ncnn-vulkan's ncnn files.
    Realcugan,
    Wan21,
    Wan22,
    Seedvr2,
    /// SeedVR2's restoration transformer (3B or 7B).
    Seedvr2Dit,
    /// RIFE frame interpolation (ECCV2022-RIFE's HDv3 model).
    Rife,
    /// madebyollin's tiny video autoencoders (TAEHV: taew2_1, taew2_2, taew2_2_super, taehv).
    Taehv,
    /// FlashVSR (OpenImagingLab): one-step streaming video super-resolution, a folder of the authors' files.
    #[serde(rename = "flashvsr")]
    FlashVsr,
}

impl Family {
    pub fn as_str(self) -> &'static str {
        match self {
            Family::Realesrgan => "realesrgan",
            Family::Realcugan => "realcugan",
            Family::Wan21 => "wan21",
            Family::Wan22 => "wan22",
            Family::Seedvr2 => "seedvr2",
            Family::Seedvr2Dit => "seedvr2_dit",
            Family::Rife => "rife",
            Family::Taehv => "taehv",
            Family::FlashVsr => "flashvsr",
        }
    }

    /// What the family's models are; every family names its kind here (no fallback arm), so a new one
    /// cannot be listed as something it is not.
    pub fn kind(self) -> ModelKind {
        match self {
            Family::Realesrgan | Family::Realcugan => ModelKind::Upscaler,
            Family::Wan21 | Family::Wan22 | Family::Seedvr2 | Family::Taehv => ModelKind::Vae,
            Family::Seedvr2Dit | Family::FlashVsr => ModelKind::Dit,
            Family::Rife => ModelKind::Interpolator,
        }
    }

    pub fn is_vae(self) -> bool {
        self.kind() == ModelKind::Vae
    }
}

/// The three kinds of model, as `GET /v1/models` names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelKind {
    Upscaler,
    Vae,
    Dit,
    Interpolator,
}

impl ModelKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ModelKind::Upscaler => "upscaler",
            ModelKind::Vae => "vae",
            ModelKind::Dit => "dit",
            ModelKind::Interpolator => "interpolator",
        }
    }
}
