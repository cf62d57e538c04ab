//! A `restore` job's parameters with every default filled in, and the files it needs; the API and
//! `vaebox run` check a job with these before it is queued, the executor runs it with them.
use super::batches::BatchShape;
use crate::error_codes as codes;
use crate::executor::error::ExecError;
use crate::jobs::RestoreParams;
use crate::models::family::Family;
use crate::models::registry::{self, ModelEntry};
use crate::models::restore::noise_augment::NoiseScales;
use crate::models::restore::prepare::{Fit, TargetSize, CROP_MULTIPLE};
use crate::models::restore::restorer::RestorerFiles;

/// 21 frames (6 latent frames) per DiT call unless the job says otherwise: long enough for temporal
/// consistency, short enough for a 16 GB card at 720p with the 3B.
pub const DEFAULT_BATCH_FRAMES: i64 = 21;
/// Frames cross-faded between batches (when the batch is long enough to share them).
pub const DEFAULT_BATCH_OVERLAP: i64 = 4;
/// The original's `set_seed(666)`.
pub const DEFAULT_SEED: i64 = 666;
/// The front-end's range for `prepend_frames` (its node input, 0 to 32).
pub const MAX_PREPEND_FRAMES: i64 = 32;
/// The scales a restore takes (the output's area is the input's times scale²), in order.
pub const SCALES: [i64; 4] = [1, 2, 3, 4];
/// `input_noise_scale` and `latent_noise_scale`: 0 (the default, off) to 1.
pub const NOISE_SCALES: std::ops::RangeInclusive<f64> = 0.0..=1.0;

/// The job's parameters with every default filled in.
pub struct RestoreSettings {
    pub target: TargetSize,
    pub seed: i64,
    pub color_fix: crate::models::restore::colorfix::ColorFix,
    pub batch: BatchShape,
    /// The job named its batch: the memory plan reports on it but does not change it.
    pub batch_given: bool,
    pub(super) overlap_given: bool,
    /// Crop to multiples of 16 or pad up to them.
    pub fit: Fit,
    pub noise: NoiseScales,
    /// Mirrored frames put before the clip (and dropped from the output).
    pub prepend_frames: i64,
    /// A frame whose picture changes more than this from the one before starts a new batch (0: never).
    pub scene_threshold: f64,
    /// A shorter last batch is padded to the batch's length.
    pub uniform_batches: bool,
}

impl RestoreSettings {
    /// Fills in defaults; what cannot run is refused (the API checks the same before queueing).
    pub fn resolve(scale: Option<i64>, params: Option<&RestoreParams>) -> Result<Self, String> {
        let params = params.cloned().unwrap_or_default();
        let target = target(scale, &params)?;
        let frames = params.batch_frames.unwrap_or(DEFAULT_BATCH_FRAMES);
        if frames < 1 || (frames - 1) % 4 != 0 {
            return Err(format!("batch_frames must be 4n + 1 (1, 5, 9, 13, ...), not {frames}"));
        }
        let overlap = params.batch_overlap.unwrap_or(default_overlap(frames));
        if overlap < 0 || overlap >= frames {
            return Err(format!("batch_overlap must be 0 to batch_frames − 1 ({}), not {overlap}", frames - 1));
        }
        let noise = NoiseScales {
            input: unit_scale("input_noise_scale", params.input_noise_scale)?,
            latent: unit_scale("latent_noise_scale", params.latent_noise_scale)?,
        };
        let prepend_frames = params.prepend_frames.unwrap_or(0);
        if !(0..=MAX_PREPEND_FRAMES).contains(&prepend_frames) {
            return Err(format!("prepend_frames must be 0 to {MAX_PREPEND_FRAMES}, not {prepend_frames}"));
        }
        let scene_threshold = params.scene_threshold.unwrap_or(crate::executor::scene::DEFAULT_THRESHOLD);
        let thresholds = crate::executor::scene::THRESHOLDS;
        if !thresholds.contains(&scene_threshold) {
            return Err(format!("scene_threshold must be {} to {}, not {scene_threshold}", thresholds.start(), thresholds.end()));
        }
        Ok(Self {
            target,
            scene_threshold,
            seed: params.seed.unwrap_or(DEFAULT_SEED),
            color_fix: params.color_fix.unwrap_or_default(),
            batch: BatchShape { frames, overlap },
            batch_given: params.batch_frames.is_some(),
            overlap_given: params.batch_overlap.is_some(),
            fit: params.fit.unwrap_or_default(),
            noise,
            prepend_frames,
            uniform_batches: params.uniform_batches.unwrap_or(false),
        })
    }

    /// Refuses a `scale` the client gave beside a size: the queue fills in the default scale for every
    /// restore, so this is checked on what was given, before that.
    pub fn refuse_scale_beside_size(scale_given: Option<i64>, params: Option<&RestoreParams>) -> Result<(), String> {
        let Some(params) = params else { return Ok(()) };
        let size = match (params.resolution, params.height.or(params.width)) {
            (Some(_), _) => Some("resolution"),
            (None, Some(_)) => Some("height and width"),
            (None, None) => None,
        };
        match (scale_given, size) {
            (Some(scale), Some(size)) => Err(format!("scale {scale} and {size} both set the output's size; give one of scale, height and width, or resolution")),
            (None, _) | (_, None) => Ok(()),
        }
    }

    /// A shorter batch (chosen for memory), with the overlap the job gave if it still fits, else the default.
    pub(super) fn with_batch_frames(&self, frames: i64) -> BatchShape {
        let overlap = if self.overlap_given { self.batch.overlap.min(frames - 1) } else { default_overlap(frames) };
        BatchShape { frames, overlap }
    }
}

/// The output's size from one of `scale` (the default), `height` × `width` (an area) or `resolution` (the
/// short side, with `max_resolution` capping the long one).
fn target(scale: Option<i64>, params: &RestoreParams) -> Result<TargetSize, String> {
    let cap = params.max_resolution.filter(|max| *max != 0);
    if params.max_resolution.is_some() && params.resolution.is_none() {
        return Err("max_resolution caps the long side of a resolution; give it with resolution".into());
    }
    match (params.resolution, params.height, params.width) {
        (Some(_), Some(_), _) | (Some(_), _, Some(_)) => Err("resolution and height and width both set the output's size; give one".into()),
        (Some(resolution), None, None) => {
            let least = CROP_MULTIPLE as u32;
            if resolution < least {
                return Err(format!("resolution must be at least {least}, not {resolution}"));
            }
            if let Some(max) = cap.filter(|max| *max < resolution) {
                return Err(format!("max_resolution {max} is below resolution {resolution}: the long side cannot be shorter than the short one (0 for no cap)"));
            }
            Ok(TargetSize::ShortSide { resolution, max_long: cap })
        }
        (None, Some(height), Some(width)) => Ok(TargetSize::Size { height, width }),
        (None, None, None) => {
            let scale = crate::models::Op::Restore.scale_or_default(scale);
            if !SCALES.contains(&scale) {
                return Err(format!("scale must be {} to {}, not {scale}", SCALES[0], SCALES[SCALES.len() - 1]));
            }
            Ok(TargetSize::Scale(scale as u32))
        }
        (None, Some(_), None) | (None, None, Some(_)) => Err("give both height and width, or neither".into()),
    }
}

/// A noise scale in `NOISE_SCALES`; 0 (off) when not given.
fn unit_scale(name: &str, value: Option<f64>) -> Result<f64, String> {
    match value.unwrap_or(0.0) {
        scale if NOISE_SCALES.contains(&scale) => Ok(scale),
        scale => Err(format!("{name} must be {} to {}, not {scale}", NOISE_SCALES.start(), NOISE_SCALES.end())),
    }
}

fn default_overlap(frames: i64) -> i64 {
    if frames > 2 * DEFAULT_BATCH_OVERLAP {
        DEFAULT_BATCH_OVERLAP
    } else {
        0
    }
}

/// Why a restore's files are not all on this box; each with its error code.
#[derive(Debug, thiserror::Error)]
pub enum MissingRestoreFile {
    #[error("{model} is not a SeedVR2 DiT on this box")]
    Dit { model: String },
    #[error("no SeedVR2 VAE in {folder} to pair with {model}")]
    NoVae { model: String, folder: String },
    #[error("vae `{name}` is not on this box; its SeedVR2 VAEs: {available}")]
    UnknownVae { name: String, available: String },
    #[error("vae `{name}` is a {family} VAE; restore needs a SeedVR2 VAE: {available}")]
    NotASeedvr2Vae { name: String, family: &'static str, available: String },
    #[error("no text embedding ({files}) in {folder}")]
    NoTextEmbedding { files: String, folder: String },
}

impl MissingRestoreFile {
    pub fn code(&self) -> &'static str {
        match self {
            MissingRestoreFile::Dit { .. } | MissingRestoreFile::UnknownVae { .. } => codes::UNKNOWN_MODEL,
            MissingRestoreFile::NotASeedvr2Vae { .. } => codes::UNSUPPORTED_OP,
            MissingRestoreFile::NoVae { .. } | MissingRestoreFile::NoTextEmbedding { .. } => codes::MODEL_WEIGHTS_MISSING,
        }
    }
}

impl From<MissingRestoreFile> for ExecError {
    fn from(missing: MissingRestoreFile) -> Self {
        ExecError::Invalid(missing.to_string())
    }
}

/// The DiT entry, its VAE entry and the prompt embedding file, or why they cannot run here.
pub fn restore_files(models_dir: &std::path::Path, model: &str, vae: Option<&str>) -> Result<(ModelEntry, RestorerFiles), MissingRestoreFile> {
    let entries = registry::scan(models_dir);
    let dit = entries
        .iter()
        .find(|e| e.name == model && e.family == Family::Seedvr2Dit)
        .ok_or_else(|| MissingRestoreFile::Dit { model: model.into() })?;
    let vae_name = vae.map(str::to_string).or_else(|| dit.pairs_with.clone()).ok_or_else(|| MissingRestoreFile::NoVae {
        model: model.into(),
        folder: format!("{}/{}", models_dir.display(), registry::VAE_DIR),
    })?;
    let seedvr2_vaes = || entries.iter().filter(|e| e.family == Family::Seedvr2).map(|e| e.name.as_str()).collect::<Vec<_>>().join(", ");
    let vae = match entries.iter().find(|e| e.name == vae_name) {
        Some(entry) if entry.family == Family::Seedvr2 => entry,
        Some(other) => return Err(MissingRestoreFile::NotASeedvr2Vae { name: vae_name, family: other.family.as_str(), available: seedvr2_vaes() }),
        None => return Err(MissingRestoreFile::UnknownVae { name: vae_name, available: seedvr2_vaes() }),
    };
    let text = registry::text_embedding_file(models_dir).ok_or_else(|| MissingRestoreFile::NoTextEmbedding {
        files: registry::TEXT_EMBEDDING_FILES.join(", "),
        folder: format!("{}/{}", models_dir.display(), registry::DIT_DIR),
    })?;
    Ok((dit.clone(), RestorerFiles { dit: dit.files[0].clone(), vae: vae.files[0].clone(), text }))
}

/// About half a batch, still `4n + 1` frames (21 → 9, 9 → 5, 5 → 1).
pub(super) fn halved_batch(frames: i64) -> i64 {
    ((frames - 1) / 2) / 4 * 4 + 1
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jobs::RestoreParams;

    #[test]
    fn halved_batches_stay_4n_plus_1() {
        assert_eq!([21, 17, 13, 9, 5, 4, 2].map(halved_batch), [9, 9, 5, 5, 1, 1, 1]);
    }

    #[test]
    fn settings_fill_defaults_and_refuse_what_cannot_run() {
        let settings = RestoreSettings::resolve(None, None).unwrap();
        assert_eq!((settings.target, settings.seed, settings.batch), (TargetSize::Scale(2), DEFAULT_SEED, BatchShape { frames: 21, overlap: 4 }));
        let given = RestoreParams { batch_frames: Some(9), batch_overlap: Some(2), ..RestoreParams::default() };
        let settings = RestoreSettings::resolve(Some(3), Some(&given)).unwrap();
        assert_eq!((settings.target, settings.batch), (TargetSize::Scale(3), BatchShape { frames: 9, overlap: 2 }));
        assert_eq!(settings.with_batch_frames(5), BatchShape { frames: 5, overlap: 2 });
        assert_eq!(RestoreSettings::resolve(None, None).unwrap().with_batch_frames(5), BatchShape { frames: 5, overlap: 0 });
        for bad in [
            RestoreParams { batch_frames: Some(8), ..RestoreParams::default() },
            RestoreParams { batch_frames: Some(5), batch_overlap: Some(5), ..RestoreParams::default() },
            RestoreParams { height: Some(64), ..RestoreParams::default() },
        ] {
            assert!(RestoreSettings::resolve(None, Some(&bad)).is_err(), "{bad:?}");
        }
        assert!(RestoreSettings::resolve(Some(5), None).is_err());
    }

    #[test]
    fn resolution_is_one_way_to_the_size_with_its_own_cap() {
        let with = |params: RestoreParams| RestoreSettings::resolve(Some(2), Some(&params));
        let settings = with(RestoreParams { resolution: Some(720), max_resolution: Some(1280), fit: Some(Fit::Pad), ..RestoreParams::default() }).unwrap();
        assert_eq!((settings.target, settings.fit), (TargetSize::ShortSide { resolution: 720, max_long: Some(1280) }, Fit::Pad));
        // The front-end's 0: no cap. The default fit crops, as the original does.
        let settings = with(RestoreParams { resolution: Some(720), max_resolution: Some(0), ..RestoreParams::default() }).unwrap();
        assert_eq!((settings.target, settings.fit), (TargetSize::ShortSide { resolution: 720, max_long: None }, Fit::Crop));
        // The queue's default scale does not count against a size; a scale the client gave does.
        assert_eq!(with(RestoreParams { height: Some(96), width: Some(112), ..RestoreParams::default() }).unwrap().target, TargetSize::Size { height: 96, width: 112 });
        let sized = RestoreParams { resolution: Some(720), ..RestoreParams::default() };
        assert!(RestoreSettings::refuse_scale_beside_size(Some(2), Some(&sized)).unwrap_err().contains("resolution"));
        let area = RestoreParams { height: Some(96), width: Some(112), ..RestoreParams::default() };
        assert!(RestoreSettings::refuse_scale_beside_size(Some(2), Some(&area)).unwrap_err().contains("height and width"));
        assert!(RestoreSettings::refuse_scale_beside_size(None, Some(&sized)).is_ok());
        assert!(RestoreSettings::refuse_scale_beside_size(Some(2), Some(&RestoreParams::default())).is_ok());
        for (bad, says) in [
            (RestoreParams { resolution: Some(720), height: Some(96), width: Some(112), ..RestoreParams::default() }, "give one"),
            (RestoreParams { resolution: Some(720), width: Some(112), ..RestoreParams::default() }, "give one"),
            (RestoreParams { max_resolution: Some(1280), ..RestoreParams::default() }, "with resolution"),
            (RestoreParams { max_resolution: Some(1280), height: Some(96), width: Some(112), ..RestoreParams::default() }, "with resolution"),
            (RestoreParams { resolution: Some(720), max_resolution: Some(700), ..RestoreParams::default() }, "below resolution"),
            (RestoreParams { resolution: Some(8), ..RestoreParams::default() }, "at least 16"),
        ] {
            let why = with(bad.clone()).err().unwrap_or_else(|| panic!("{bad:?} was accepted"));
            assert!(why.contains(says), "{bad:?}: {why}");
        }
    }

    #[test]
    fn noise_scales_and_prepend_have_the_front_end_s_ranges() {
        let settings = RestoreSettings::resolve(None, None).unwrap();
        assert_eq!((settings.noise, settings.prepend_frames), (NoiseScales::default(), 0));
        let given = RestoreParams { input_noise_scale: Some(0.25), latent_noise_scale: Some(1.0), prepend_frames: Some(32), ..RestoreParams::default() };
        let settings = RestoreSettings::resolve(None, Some(&given)).unwrap();
        assert_eq!((settings.noise, settings.prepend_frames), (NoiseScales { input: 0.25, latent: 1.0 }, 32));
        for bad in [
            RestoreParams { input_noise_scale: Some(1.5), ..RestoreParams::default() },
            RestoreParams { input_noise_scale: Some(f64::NAN), ..RestoreParams::default() },
            RestoreParams { latent_noise_scale: Some(-0.1), ..RestoreParams::default() },
            RestoreParams { prepend_frames: Some(33), ..RestoreParams::default() },
            RestoreParams { prepend_frames: Some(-1), ..RestoreParams::default() },
        ] {
            assert!(RestoreSettings::resolve(None, Some(&bad)).is_err(), "{bad:?}");
        }
    }
}
