//! A FlashVSR `restore` job's parameters with every default filled in, and the files it reads. The restore
//! parameters that mean something to FlashVSR keep their meaning (`seed`, `fit`, `color_fix`, `vae`, a
//! `scale` of 4); the rest are SeedVR2's batches, noise and sizes, refused for it, never ignored.
use std::path::{Path, PathBuf};

use crate::error_codes as codes;
use crate::jobs::RestoreParams;
use crate::models::family::Family;
use crate::models::flashvsr::folder::{self, FlashVsrFolder};
use crate::models::flashvsr::SCALE;
use crate::models::registry::{self, ModelEntry};
use crate::models::restore::colorfix::ColorFix;
use crate::models::restore::prepare::Fit;

/// The original's `seed=0`.
pub const DEFAULT_SEED: i64 = 0;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlashVsrSettings {
    pub seed: i64,
    /// `pad` (the default): the whole picture, padded to 128-multiples for the model and cut back after;
    /// `crop`: the original's centre crop to 128-multiples.
    pub fit: Fit,
    /// The AdaIN colour fix (the original's, the default) or none.
    pub colour_fix: bool,
}

impl FlashVsrSettings {
    /// `scale_given`: the client's own (the queue fills in the restore default after this check).
    pub fn resolve(scale_given: Option<i64>, params: Option<&RestoreParams>) -> Result<Self, String> {
        let params = params.cloned().unwrap_or_default();
        if let Some(scale) = scale_given.filter(|scale| *scale != SCALE) {
            return Err(format!("FlashVSR upscales ×{SCALE} (its design), not ×{scale}"));
        }
        let not_for_it = [
            ("height", params.height.is_some()),
            ("width", params.width.is_some()),
            ("resolution", params.resolution.is_some()),
            ("max_resolution", params.max_resolution.is_some()),
            ("batch_frames", params.batch_frames.is_some()),
            ("batch_overlap", params.batch_overlap.is_some()),
            ("input_noise_scale", params.input_noise_scale.is_some()),
            ("latent_noise_scale", params.latent_noise_scale.is_some()),
            ("prepend_frames", params.prepend_frames.is_some()),
            ("uniform_batches", params.uniform_batches.is_some()),
            ("scene_threshold", params.scene_threshold.is_some()),
        ];
        let given: Vec<&str> = not_for_it.iter().filter(|(_, given)| *given).map(|(name, _)| *name).collect();
        if !given.is_empty() {
            return Err(format!(
                "{} do(es) not apply to a FlashVSR model: it upscales ×{SCALE} and streams the clip in steps of 8 frames (SeedVR2's batches, noise and sizes are not its)",
                given.join(", ")
            ));
        }
        let colour_fix = match params.color_fix {
            None | Some(ColorFix::Adain) => true,
            Some(ColorFix::None) => false,
            Some(other) => return Err(format!("color_fix `{}` is not FlashVSR's: it takes adain (its own, the default) or none", other.as_str())),
        };
        Ok(Self { seed: params.seed.unwrap_or(DEFAULT_SEED), fit: params.fit.unwrap_or(Fit::Pad), colour_fix })
    }
}

/// What decodes a FlashVSR run's latents.
#[derive(Debug, Clone)]
pub enum FlashVsrDecoder {
    /// The folder's TCDecoder: FlashVSR-Tiny.
    Tiny(PathBuf),
    /// A Wan 2.1 VAE of this box (`vae=`): FlashVSR-Full.
    Full(ModelEntry),
}

/// A FlashVSR model's folder and its decoder, or why the job cannot run here (`None`: `model` is no
/// FlashVSR model).
pub fn flashvsr_files(models_dir: &Path, model: &str, vae: Option<&str>) -> Option<Result<(FlashVsrFolder, FlashVsrDecoder), (&'static str, String)>> {
    let folder = folder::folders(models_dir).into_iter().find(|f| f.name == model)?;
    let missing: Vec<String> = folder.files().into_iter().filter(|f| !f.is_file()).map(|f| f.file_name().unwrap_or_default().to_string_lossy().into_owned()).collect();
    let needed = |file: &str| vae.is_none() || file != folder::TC_DECODER_FILE;
    let missing: Vec<String> = missing.into_iter().filter(|f| needed(f)).collect();
    if !missing.is_empty() {
        let why = format!("FlashVSR model `{model}` lacks {} in {} (the authors' files; posi_prompt.pth is in their code repository)", missing.join(", "), folder.dir.display());
        return Some(Err((codes::MODEL_WEIGHTS_MISSING, why)));
    }
    let Some(vae) = vae else { return Some(Ok((folder.clone(), FlashVsrDecoder::Tiny(folder.tc_decoder())))) };
    let entries = registry::scan(models_dir);
    let wan21 = || entries.iter().filter(|e| e.family == Family::Wan21).map(|e| e.name.as_str()).collect::<Vec<_>>().join(", ");
    Some(match entries.iter().find(|e| e.name == vae) {
        Some(entry) if entry.family == Family::Wan21 => Ok((folder, FlashVsrDecoder::Full(entry.clone()))),
        Some(other) => Err((codes::UNSUPPORTED_OP, format!("vae `{vae}` is a {} VAE; FlashVSR-Full decodes with a Wan 2.1 VAE: {}", other.family.as_str(), wan21()))),
        None => Err((codes::UNKNOWN_MODEL, format!("vae `{vae}` is not on this box; its Wan 2.1 VAEs: {}", wan21()))),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_keep_the_whole_picture_and_seedvr2_s_parameters_are_refused() {
        let settings = FlashVsrSettings::resolve(None, None).unwrap();
        assert_eq!(settings, FlashVsrSettings { seed: 0, fit: Fit::Pad, colour_fix: true });
        let given = RestoreParams { seed: Some(7), fit: Some(Fit::Crop), color_fix: Some(ColorFix::None), ..RestoreParams::default() };
        assert_eq!(FlashVsrSettings::resolve(Some(4), Some(&given)).unwrap(), FlashVsrSettings { seed: 7, fit: Fit::Crop, colour_fix: false });
        for (scale, bad, says) in [
            (Some(2), RestoreParams::default(), "×4"),
            (None, RestoreParams { batch_frames: Some(21), ..RestoreParams::default() }, "batch_frames"),
            (None, RestoreParams { resolution: Some(720), prepend_frames: Some(2), ..RestoreParams::default() }, "resolution, prepend_frames"),
            (None, RestoreParams { color_fix: Some(ColorFix::Wavelet), ..RestoreParams::default() }, "wavelet"),
        ] {
            let why = FlashVsrSettings::resolve(scale, Some(&bad)).unwrap_err();
            assert!(why.contains(says), "{bad:?}: {why}");
        }
    }
}
