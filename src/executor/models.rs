//! Models loaded on the executor's device, kept between jobs (loading is not free, jobs repeat).
use std::rc::Rc;

use tch::{Device, Kind};

use crate::models::flashvsr::folder::FlashVsrFolder;
use crate::models::flashvsr::loaded::FlashVsrModels;
use crate::models::family::interpolator::{Interpolator, InterpolatorLoadOptions};
use crate::models::family::upscaler::{Upscaler, UpscalerLoadOptions};
use crate::models::registry::{self, ModelEntry};
use crate::models::restore::restorer::{Restorer, RestorerFiles, RestorerOptions};
use crate::models::family::vae::LoadOptions as VaeLoadOptions;
use crate::models::vae::VideoVae;
use crate::models::ModelError;

/// One model resident at a time keeps device memory for the frames; a box serves one job at a time.
#[derive(Default)]
pub struct LoadedModels {
    resident: Option<(String, Kind, Resident)>,
    /// The frame interpolator, kept beside the resident model: an upscale with `interpolate=N` needs both,
    /// and RIFE's weights are 11 MB.
    interpolator: Option<(String, Kind, Rc<dyn Interpolator>)>,
}

#[derive(Clone)]
enum Resident {
    Upscaler(Rc<dyn Upscaler>),
    Vae(Rc<VideoVae>),
    Restorer(Rc<Restorer>),
    FlashVsr(Rc<FlashVsrModels>),
}

impl LoadedModels {
    fn cached(&self, name: &str, kind: Kind) -> Option<Resident> {
        match &self.resident {
            Some((n, k, model)) if n == name && *k == kind => Some(model.clone()),
            _ => None,
        }
    }

    fn check(entry: &ModelEntry, family_ok: bool, what: &str) -> Result<(), ModelError> {
        if !family_ok {
            return Err(ModelError::Unsupported { model: entry.name.clone(), what: what.into() });
        }
        if !entry.present() {
            return Err(ModelError::WeightsMissing(entry.name.clone()));
        }
        Ok(())
    }

    pub fn upscaler(&mut self, entry: &ModelEntry, device: Device, kind: Kind) -> Result<(Rc<dyn Upscaler>, bool), ModelError> {
        if let Some(Resident::Upscaler(model)) = self.cached(&entry.name, kind) {
            return Ok((model, false));
        }
        let family = registry::upscaler_family(entry.family);
        Self::check(entry, family.is_some(), "upscale")?;
        let Some(family) = family else { unreachable!("checked above") };
        self.resident = None;
        let model: Rc<dyn Upscaler> = Rc::from((family.load)(&entry.files, &UpscalerLoadOptions { device, kind })?);
        self.resident = Some((entry.name.clone(), kind, Resident::Upscaler(model.clone())));
        Ok((model, true))
    }

    pub fn interpolator(&mut self, entry: &ModelEntry, device: Device, kind: Kind) -> Result<Rc<dyn Interpolator>, ModelError> {
        if let Some((_, _, model)) = self.interpolator.as_ref().filter(|(name, k, _)| *name == entry.name && *k == kind) {
            return Ok(model.clone());
        }
        let family = registry::interpolator_family(entry.family);
        Self::check(entry, family.is_some(), "interpolate")?;
        let (Some(family), Some(file)) = (family, entry.files.first()) else { unreachable!("checked above: a shipped model has its file") };
        self.interpolator = None;
        let model: Rc<dyn Interpolator> = Rc::from((family.load)(file, &InterpolatorLoadOptions { device, kind })?);
        self.interpolator = Some((entry.name.clone(), kind, model.clone()));
        Ok(model)
    }

    pub fn vae(&mut self, entry: &ModelEntry, device: Device, kind: Kind) -> Result<(Rc<VideoVae>, bool), ModelError> {
        if let Some(Resident::Vae(model)) = self.cached(&entry.name, kind) {
            return Ok((model, false));
        }
        Self::check(entry, entry.family.is_vae(), "VAE ops")?;
        self.resident = None;
        let model = Rc::new(VideoVae::load(entry, &VaeLoadOptions { device, kind })?);
        settle(&model, &entry.name)?;
        self.resident = Some((entry.name.clone(), kind, Resident::Vae(model.clone())));
        Ok((model, true))
    }

    /// The restorer for this DiT and VAE if it is loaded, wherever its blocks live.
    pub fn restorer_if_loaded(&self, dit: &str, files: &RestorerFiles, kind: Kind) -> Option<Rc<Restorer>> {
        match &self.resident {
            Some((key, k, Resident::Restorer(model))) if *k == kind && key.starts_with(&format!("{dit}+{}+", files.vae.display())) => Some(model.clone()),
            _ => None,
        }
    }

    /// The DiT with its VAE and prompt, kept under `dit+vae` (and where its blocks live) so a job naming
    /// another VAE loads again.
    pub fn restorer(&mut self, dit: &str, files: &RestorerFiles, opts: &RestorerOptions) -> Result<Rc<Restorer>, ModelError> {
        let key = format!("{dit}+{}+{}", files.vae.display(), opts.placement.as_str());
        if let Some(Resident::Restorer(model)) = self.cached(&key, opts.kind) {
            return Ok(model);
        }
        self.resident = None;
        let started = std::time::Instant::now();
        let model = Rc::new(Restorer::load(files, opts)?);
        tracing::info!(
            model = %dit,
            weight_mib = model.dit.weight_bytes() >> 20,
            blocks = model.dit.placement().as_str(),
            seconds = started.elapsed().as_secs_f64(),
            "DiT loaded"
        );
        settle(&model.vae, &files.vae.display().to_string())?;
        self.resident = Some((key, opts.kind, Resident::Restorer(model.clone())));
        Ok(model)
    }
}

impl LoadedModels {
    /// A FlashVSR model's parts with its decoder (`vae`: a Wan 2.1 VAE for Full, none for the folder's
    /// TCDecoder), kept under `folder+decoder`; whether they were loaded now.
    pub fn flashvsr(&mut self, folder: &FlashVsrFolder, vae: Option<&ModelEntry>, device: Device, kind: Kind) -> Result<(Rc<FlashVsrModels>, bool), ModelError> {
        let key = format!("flashvsr:{}+{}", folder.dir.display(), vae.map_or("TCDecoder", |entry| entry.name.as_str()));
        if let Some(Resident::FlashVsr(model)) = self.cached(&key, kind) {
            return Ok((model, false));
        }
        self.resident = None;
        let started = std::time::Instant::now();
        let model = Rc::new(FlashVsrModels::load(folder, vae, device, kind)?);
        tracing::info!(model = %folder.name, weight_mib = model.weight_bytes() >> 20, seconds = started.elapsed().as_secs_f64(), "FlashVSR loaded");
        self.resident = Some((key, kind, Resident::FlashVsr(model.clone())));
        Ok((model, true))
    }
}

/// A VAE that made Winograd kernels at load gets this thread's Winograd workspace now as well, so that
/// both are the model's memory: a job's working memory (calibrated after a warm-up) is planned on top.
fn settle(vae: &VideoVae, name: &str) -> Result<(), ModelError> {
    let held = vae.held_bytes();
    if held.derived > 0 {
        crate::models::nn::winograd::reserve_workspace()?;
    }
    tracing::info!(model = %name, weight_mib = held.weights >> 20, winograd_kernel_mib = held.derived >> 20, "VAE loaded");
    Ok(())
}
