//! Models loaded on the executor's device, kept between jobs (loading is not free, jobs repeat).
use std::collections::HashMap;
use std::path::Path;
use std::rc::Rc;

use tch::{Device, Kind};

use crate::models::realesrgan::{LoadOptions, RealEsrgan};
use crate::models::registry::{Family, ModelEntry};
use crate::models::ModelError;

#[derive(Default)]
pub struct LoadedModels {
    upscalers: HashMap<(&'static str, KindKey), Rc<RealEsrgan>>,
}

/// `tch::Kind` is not `Hash`; its name is.
type KindKey = &'static str;

impl LoadedModels {
    /// Returns the model and whether it had to be loaded now.
    pub fn upscaler(
        &mut self,
        entry: &'static ModelEntry,
        models_dir: &Path,
        device: Device,
        kind: Kind,
    ) -> Result<(Rc<RealEsrgan>, bool), ModelError> {
        let key = (entry.name, crate::device::kind_name(kind));
        if let Some(model) = self.upscalers.get(&key) {
            return Ok((model.clone(), false));
        }
        if entry.family != Family::Realesrgan {
            return Err(ModelError::Unsupported { model: entry.name.into(), what: "upscale".into() });
        }
        if !entry.present(models_dir) {
            return Err(ModelError::WeightsMissing(entry.name.into()));
        }
        let paths = entry.paths(models_dir);
        // Channels-last pays for these 2-D convolutions on CPU and GPU alike (measured in `bench upscale`).
        let options = LoadOptions { device, kind, channels_last: true };
        let model = Rc::new(RealEsrgan::load(&paths[0], &paths[1], &options)?);
        // One upscaler resident at a time keeps device memory for the frames.
        self.upscalers.clear();
        self.upscalers.insert(key, model.clone());
        Ok((model, true))
    }
}
