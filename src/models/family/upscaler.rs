//! What an upscaler family gives the executor: a model that upscales a tile ([`Upscaler`]), and the list of
//! the models it ships with their loader ([`UpscalerFamily`]), which the registry lists in one line.
use std::path::{Path, PathBuf};

use tch::{Device, Kind, Tensor};

use super::Family;
use crate::models::stop::StopFlag;
use crate::models::ModelError;

#[derive(Debug, Clone, Copy)]
pub struct UpscalerLoadOptions {
    pub device: Device,
    /// `Float`, `BFloat16` or `Half`: the weights' and activations' kind.
    pub kind: Kind,
}

/// A loaded upscaler. `upscale` only reads the model (no interior mutability): the executor's frame
/// workers call it from several threads at once.
pub trait Upscaler {
    /// `[N,3,H,W]` Float in [0,1] on the model's device → `[N,3,H·scale,W·scale]` Float in [0,1], asking
    /// `stop` between layers: a cancel ends a frame's network within about a second, not at its end (one
    /// tile of x4plus on a chunk of frames is minutes of CPU). `ModelError::Stopped` then.
    fn upscale_until(&self, x: &Tensor, scale: i64, stop: &StopFlag) -> Result<Tensor, ModelError>;
    /// [`Upscaler::upscale_until`] for a caller that never stops (benches, whole-frame helpers).
    fn upscale(&self, x: &Tensor, scale: i64) -> Result<Tensor, ModelError> {
        self.upscale_until(x, scale, &StopFlag::never())
    }
    /// Input pixels per side that can influence an output pixel at every scale `upscale` takes: tiles with
    /// this much context reproduce the whole frame exactly; with less, tiles are blended.
    fn receptive_radius(&self) -> i64;
}

/// A model the family ships, with its files relative to the models folder.
pub struct ShippedUpscaler {
    pub name: &'static str,
    pub files: &'static [&'static str],
    pub scales: &'static [i64],
    pub description: &'static str,
}

/// One upscaler family: its models and how to load one of them from its files.
pub struct UpscalerFamily {
    pub family: Family,
    pub models: &'static [ShippedUpscaler],
    pub load: fn(files: &[PathBuf], options: &UpscalerLoadOptions) -> Result<Box<dyn Upscaler>, ModelError>,
}

impl ShippedUpscaler {
    pub fn paths(&self, models_dir: &Path) -> Vec<PathBuf> {
        self.files.iter().map(|file| models_dir.join(file)).collect()
    }
}
