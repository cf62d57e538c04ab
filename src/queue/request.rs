//! A job's options, checked against what this box can do: one set of checks for the HTTP fields, the
//! remote-VAE query and `vaebox run`'s flags, each of which has already read its text into these types.
use std::path::Path;

use super::device_need::{device_bytes_needed, NeedOf};
use super::parameters::{CRF, METRICS, PRIORITY, TILE};
use super::QueueError;
use crate::config::{Config, MAX_MEMORY_BUDGET_MIB};
use crate::device::DtypeChoice;
use crate::error_codes as codes;
use crate::jobs::parts::{PartsChoice, MAX_PARTS};
use crate::executor::restore::{self, RestoreSettings};
use crate::executor::interpolate::settings::InterpolateSettings;
use crate::jobs::{InterpolateParams, JobParams, OutputFormat, RestoreParams};
use crate::models::{Op, OwnSettings, Retimes, Writes};
use crate::models::registry;

/// What a client asks for, typed (`parameters::read` makes it from the fields); `None`s take the default
/// (of the op, the model or the config) in `check`.
#[derive(Debug, Clone)]
pub struct JobOptions {
    pub op: Op,
    /// Default: `default_model`.
    pub model: Option<String>,
    pub priority: i64,
    /// Every op: the webhook told when the job ends (checked against `callback_secret` and `callback_hosts`).
    pub callback_url: Option<String>,
    /// The job's settings as given: `check` fills in and checks them (`sequence_fps` is the text given).
    pub params: JobParams,
}

impl JobOptions {
    pub fn new(op: Op) -> JobOptions {
        JobOptions { op, model: None, priority: 0, callback_url: None, params: JobParams::new(DtypeChoice::Auto) }
    }
}

/// A job request checked against what this box can do. Cloned for each item of a remote-VAE batch.
#[derive(Clone)]
pub struct JobRequest {
    pub op: Op,
    pub model: String,
    pub family: crate::models::family::Family,
    pub latent_channels: Option<i64>,
    /// The VAE's `(spatial, temporal)` factors from its entry (what a decode's output size is worked out from).
    pub vae_factors: Option<(i64, i64)>,
    pub priority: i64,
    pub params: JobParams,
    /// The least device memory it can run in (see `device_need`).
    pub device_bytes_needed: u64,
    /// The webhook, checked (`callbacks::check_url`).
    pub callback_url: Option<String>,
    /// The client named `params.output_format` (else it is the box's default, which a still replaces by `png`).
    pub output_format_given: bool,
}

/// The model a job without one gets: the op's default (for `upscale` the built-in upscaler), else the one
/// model of this box that can do the op, and when there are several, a refusal naming them.
pub fn default_model(models_dir: &Path, op: Op) -> Result<String, QueueError> {
    if let Some(model) = op.spec().default_model {
        return Ok(model.into());
    }
    let able = models_able_to(models_dir, op);
    match able.as_slice() {
        [only] => Ok(only.clone()),
        [] => Err(QueueError::refused(
            codes::MISSING_MODEL,
            format!("no model on this box can do `{}`; put one in the models folder (README: Models)", op.as_str()),
        )),
        several => Err(QueueError::refused(
            codes::MISSING_MODEL,
            format!("name the model for `{}`: this box has {}", op.as_str(), several.join(", ")),
        )),
    }
}

/// The models of this box, weights present, that can do `op`.
fn models_able_to(models_dir: &Path, op: Op) -> Vec<String> {
    registry::scan(models_dir).into_iter().filter(|m| m.ops.contains(&op) && m.present()).map(|m| m.name).collect()
}

/// The model by name, able to do `op`, with its weights on this box.
pub fn find_model(models_dir: &Path, op: Op, name: &str) -> Result<registry::ModelEntry, QueueError> {
    let entry = registry::find(models_dir, name).ok_or_else(|| {
        let able = models_able_to(models_dir, op);
        let message = match able.is_empty() {
            true => format!("unknown model `{name}`; no model on this box can do `{}`", op.as_str()),
            false => format!("unknown model `{name}`; for `{}` this box has {}", op.as_str(), able.join(", ")),
        };
        QueueError::refused(codes::UNKNOWN_MODEL, message)
    })?;
    if !entry.ops.contains(&op) {
        let able = models_able_to(models_dir, op);
        let which = if able.is_empty() { "no model on this box can".to_string() } else { format!("models that can: {}", able.join(", ")) };
        return Err(QueueError::refused(codes::UNSUPPORTED_OP, format!("model `{}` cannot do `{}`; {which}", entry.name, op.as_str())));
    }
    if !entry.present() {
        return Err(QueueError::refused(
            codes::MODEL_WEIGHTS_MISSING,
            format!("the weights of `{}` are not in the models folder of this box", entry.name),
        ));
    }
    Ok(entry)
}

pub fn bad_scale(raw: &str, scales: &[i64]) -> QueueError {
    QueueError::refused(codes::INVALID_SCALE, format!("scale `{raw}` is not supported; use one of {scales:?}"))
}

pub fn bad_priority(raw: &str) -> QueueError {
    QueueError::refused(codes::INVALID_PRIORITY, format!("priority `{raw}` is not an integer in {:?}", PRIORITY.bounds()))
}

/// The least side of a tile other than 0 (whole frames): the rest of the tile's bounds are its row's.
const LEAST_TILE: i64 = 16;

fn tiles() -> std::ops::RangeInclusive<i64> {
    LEAST_TILE..=*TILE.bounds().end()
}

pub fn bad_tile(raw: &str) -> QueueError {
    let tiles = tiles();
    QueueError::refused(codes::INVALID_TILE, format!("tile `{raw}` must be 0 or between {} and {} pixels", tiles.start(), tiles.end()))
}

pub fn bad_memory_budget(raw: &str) -> QueueError {
    let message = format!("memory_budget_mib `{raw}` is not a whole number of MiB up to {MAX_MEMORY_BUDGET_MIB}");
    QueueError::refused(codes::INVALID_MEMORY_BUDGET, message)
}

/// Checks the options as the executor will use them, so that a job that cannot run is refused before it is
/// queued (or, for `vaebox run`, before a model is loaded).
pub fn check(options: &JobOptions, config: &Config) -> Result<JobRequest, QueueError> {
    let models_dir = config.models_dir.as_path();
    let op = options.op;
    let model = match &options.model {
        Some(model) => model.clone(),
        None => default_model(models_dir, op)?,
    };
    let entry = find_model(models_dir, op, &model)?;
    let spec = op.spec();
    let scale = match spec.default_scale {
        Some(default) => {
            // A model made for one scale (every Real-CUGAN) takes it: the op's default is for models with a choice.
            let scale = options.params.scale.unwrap_or(match entry.scales.as_slice() {
                [only] => *only,
                _ => default,
            });
            if !entry.scales.contains(&scale) {
                return Err(bad_scale(&scale.to_string(), &entry.scales));
            }
            Some(scale)
        }
        None => None,
    };
    if !PRIORITY.bounds().contains(&options.priority) {
        return Err(bad_priority(&options.priority.to_string()));
    }
    if let Some(tile) = options.params.tile.filter(|t| *t != 0 && !tiles().contains(t)) {
        return Err(bad_tile(&tile.to_string()));
    }
    // `normalize` is applied to the latent the op writes.
    if spec.writes == Writes::Latent && options.params.normalize == Some(true) {
        registry::check_normalization(&entry.name, entry.family, entry.latent_channels, false)?;
    }
    if let Some(mib) = options.params.memory_budget_mib.filter(|mib| *mib > MAX_MEMORY_BUDGET_MIB) {
        return Err(bad_memory_budget(&mib.to_string()));
    }
    let restore = match spec.own_settings {
        Some(OwnSettings::Restore) => {
            Some(check_restore(options.params.restore.clone().unwrap_or_default(), options.params.scale, scale, &entry.name, models_dir)?)
        }
        None => None,
    };
    let resolve_interpolation = |params: Option<&InterpolateParams>| {
        InterpolateSettings::resolve(params).map_err(|why| QueueError::refused(codes::INVALID_INTERPOLATE_PARAMETER, why)).map(|s| s.params())
    };
    let interpolate = match (spec.retimes, options.params.interpolate.as_ref()) {
        (Retimes::Always, given) => Some(resolve_interpolation(given)?),
        // An op that interpolates as well when asked needs an interpolator on this box.
        (Retimes::WhenAsked, Some(given)) => {
            default_model(models_dir, Op::Interpolate)?;
            Some(resolve_interpolation(Some(given))?)
        }
        (Retimes::WhenAsked, None) | (Retimes::Never, _) => None,
    };
    let range = options.params.range.clone().filter(|range| !range.is_empty());
    if let Some(range) = &range {
        range.check().map_err(|why| QueueError::refused(codes::INVALID_RANGE, why))?;
    }
    let output_format = check_output_format(op, options.params.output_format, config)?;
    check_encoder_settings(&options.params, output_format)?;
    let callback_url = options.callback_url.as_deref().map(|raw| super::callbacks::check_url(raw, config)).transpose()?;
    if options.params.metrics == Some(true) && !METRICS.is_for(op) {
        let takers: Vec<&str> = METRICS.ops().map(Op::as_str).collect();
        let why = format!("metrics=true is for {} jobs; {} reports its own or none", takers.join(", "), op.as_str());
        return Err(QueueError::refused(codes::UNSUPPORTED_OPTION, why));
    }
    let sequence_fps = match options.params.sequence_fps.as_deref() {
        None => None,
        Some(raw) => Some(crate::media::sequence::parse_fps(raw).map(|(rational, _)| rational).ok_or_else(|| {
            QueueError::refused(codes::INVALID_FPS, format!("fps `{raw}` is not a frame rate between 0 and 1000 (`24`, `30000/1001`)"))
        })?),
    };
    let parts = check_parts(&options.params, output_format, entry.family == crate::models::family::Family::FlashVsr)?;
    let params = JobParams {
        parts,
        sequence_fps,
        scale,
        restore,
        interpolate,
        output_format,
        range,
        ..options.params.clone()
    };
    let need = NeedOf { models_dir, entry: &entry, op, params: &params, block_swap: config.dit_block_swap };
    let device_bytes_needed = device_bytes_needed(need);
    Ok(JobRequest {
        output_format_given: options.params.output_format.is_some(),
        device_bytes_needed,
        callback_url,
        op,
        latent_channels: entry.latent_channels,
        vae_factors: entry.vae_factors,
        family: entry.family,
        model: entry.name,
        priority: options.priority,
        params,
    })
}

/// `parts` as stored (`auto`, or a count); refused when it is neither, or asks for more than one part of a
/// job that is never cut (`queue::parts::parts_choice`: a PNG result, `metrics`, `interpolate`, FlashVSR).
fn check_parts(params: &JobParams, output_format: Option<OutputFormat>, streamed: bool) -> Result<Option<String>, QueueError> {
    let Some(raw) = params.parts.as_deref() else { return Ok(None) };
    let choice = PartsChoice::parse(raw)
        .ok_or_else(|| QueueError::refused(codes::INVALID_PARTS, format!("parts `{raw}` is not auto or a whole number from 1 to {MAX_PARTS}")))?;
    let whole_only = [
        (output_format.is_some_and(OutputFormat::is_png), "a PNG result is written frame by frame"),
        (params.metrics == Some(true), "metrics=true sums its figures over the whole clip"),
        (params.interpolate.is_some(), "interpolate=N needs the frames on both sides of every cut"),
        (streamed, "FlashVSR streams the whole clip through one cache"),
    ];
    if let (PartsChoice::Count(count @ 2..), Some((_, why))) = (choice, whole_only.iter().find(|(applies, _)| *applies)) {
        return Err(QueueError::refused(codes::INVALID_PARTS, format!("parts={count}: this job runs whole ({why}); leave parts out or give 1")));
    }
    Ok(Some(match choice {
        PartsChoice::Auto => "auto".into(),
        PartsChoice::Count(count) => count.to_string(),
    }))
}

/// The format the job will write, resolved against the config's default and checked against the op
/// and this ffmpeg's encoders (`None` for an op whose result is a latent).
fn check_output_format(op: Op, asked: Option<OutputFormat>, config: &Config) -> Result<Option<OutputFormat>, QueueError> {
    let pixel_tensor = match (op.spec().writes, asked) {
        (Writes::Latent, None) => return Ok(None),
        (Writes::Latent, Some(format)) => {
            let why = format!("{} writes a latent (safetensors); output_format `{}` is for video results", op.as_str(), format.as_str());
            return Err(QueueError::refused(codes::INVALID_OUTPUT_FORMAT, why));
        }
        (Writes::Video { pixel_tensor, .. }, _) => pixel_tensor,
    };
    let format = asked.unwrap_or(config.output_format);
    if format.is_pixel_tensor() && !pixel_tensor {
        let takers: Vec<&str> = Op::ALL.into_iter().filter(|op| matches!(op.spec().writes, Writes::Video { pixel_tensor: true, .. })).map(Op::as_str).collect();
        return Err(QueueError::refused(codes::INVALID_OUTPUT_FORMAT, format!("output_format safetensors is for {}, not {}", takers.join(", "), op.as_str())));
    }
    if !crate::media::available_formats(&config.media_tools()).get(&format).copied().unwrap_or(false) {
        let encoder = format.encoder().unwrap_or("?");
        let why = format!("this box's ffmpeg has no {encoder} encoder for output_format {}; /healthz lists those it has", format.as_str());
        return Err(QueueError::refused(codes::OUTPUT_FORMAT_UNAVAILABLE, why));
    }
    Ok(Some(format))
}

/// `crf` within x264's range, and `crf`/`encoder_preset` only for a result x264 or x265 writes.
fn check_encoder_settings(params: &JobParams, format: Option<OutputFormat>) -> Result<(), QueueError> {
    if let Some(crf) = params.crf.filter(|crf| !CRF.bounds().contains(crf)) {
        return Err(QueueError::refused(codes::INVALID_ENCODER_SETTING, format!("crf {crf} is not from 0 to 51")));
    }
    match format {
        Some(format) if !format.takes_crf() => refuse_encoder_settings(params, &format!("output_format `{}`", format.as_str())),
        Some(_) | None => Ok(()),
    }
}

/// `crf` and `encoder_preset` refused for a result `what` is (no x264 or x265 writes it).
pub(super) fn refuse_encoder_settings(params: &JobParams, what: &str) -> Result<(), QueueError> {
    let given: Vec<&str> = [("crf", params.crf.is_some()), ("encoder_preset", params.encoder_preset.is_some())].into_iter().filter(|(_, given)| *given).map(|(name, _)| name).collect();
    if given.is_empty() {
        return Ok(());
    }
    let why = format!("{} set(s) the h264 and h265 encoders; {what} is not written by them", given.join(" and "));
    Err(QueueError::refused(codes::PARAMETER_NOT_FOR_OUTPUT_FORMAT, why))
}

/// `restore`'s own fields, checked as the executor will use them (the same `RestoreSettings::resolve`),
/// and its VAE and text embeddings looked up. `scale_given` is the client's, `scale` with the default.
fn check_restore(params: RestoreParams, scale_given: Option<i64>, scale: Option<i64>, model: &str, models_dir: &Path) -> Result<RestoreParams, QueueError> {
    let refused = |why| QueueError::refused(codes::INVALID_RESTORE_PARAMETER, why);
    if let Some(found) = crate::executor::flashvsr::settings::flashvsr_files(models_dir, model, params.vae.as_deref()) {
        crate::executor::flashvsr::settings::FlashVsrSettings::resolve(scale_given, Some(&params)).map_err(refused)?;
        found.map_err(|(code, why)| QueueError::refused(code, why))?;
        return Ok(params);
    }
    RestoreSettings::refuse_scale_beside_size(scale_given, Some(&params)).map_err(refused)?;
    RestoreSettings::resolve(scale, Some(&params)).map_err(refused)?;
    restore::restore_files(models_dir, model, params.vae.as_deref()).map_err(|missing| QueueError::refused(missing.code(), missing.to_string()))?;
    Ok(params)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config_with(models_dir: &Path) -> Config {
        Config { models_dir: models_dir.to_path_buf(), ..Config::default() }
    }

    fn params() -> JobParams {
        JobParams::new(DtypeChoice::Auto)
    }

    fn with(options: &JobOptions, params: JobParams) -> JobOptions {
        JobOptions { params, ..options.clone() }
    }

    fn code_of(options: &JobOptions, models_dir: &Path) -> &'static str {
        check(options, &config_with(models_dir)).err().map(|e| e.code()).unwrap_or("accepted")
    }

    /// The same refusals whoever submits (the HTTP tests check them through the API; `vaebox run` gets these).
    #[test]
    fn options_are_refused_with_their_codes() {
        let empty = tempfile::tempdir().unwrap();
        let upscale = JobOptions::new(Op::Upscale);
        assert_eq!(code_of(&upscale, empty.path()), codes::MODEL_WEIGHTS_MISSING);
        assert_eq!(code_of(&JobOptions { model: Some("no-such-model".into()), ..upscale.clone() }, empty.path()), codes::UNKNOWN_MODEL);
        // No model named, and none on the box that can encode: nothing to default to.
        assert_eq!(code_of(&JobOptions::new(Op::VaeEncode), empty.path()), codes::MISSING_MODEL);
        assert_eq!(code_of(&JobOptions { model: Some(registry::DEFAULT_UPSCALE_MODEL.into()), ..JobOptions::new(Op::VaeEncode) }, empty.path()), codes::UNSUPPORTED_OP);

        let models = Path::new(env!("CARGO_MANIFEST_DIR")).join("models");
        assert!(
            registry::find(&models, registry::DEFAULT_UPSCALE_MODEL).is_some_and(|m| m.present()),
            "no {} in {}: scripts/setup.sh --test puts it there",
            registry::DEFAULT_UPSCALE_MODEL,
            models.display()
        );
        assert_eq!(code_of(&upscale, &models), "accepted");
        let cases = [
            (with(&upscale, JobParams { scale: Some(3), ..params() }), codes::INVALID_SCALE),
            (JobOptions { priority: 1001, ..upscale.clone() }, codes::INVALID_PRIORITY),
            (JobOptions { priority: -1000, ..upscale.clone() }, "accepted"),
            (with(&upscale, JobParams { tile: Some(8), ..params() }), codes::INVALID_TILE),
            (with(&upscale, JobParams { tile: Some(0), ..params() }), "accepted"),
            (with(&upscale, JobParams { tile: Some(8193), ..params() }), codes::INVALID_TILE),
            (with(&upscale, JobParams { memory_budget_mib: Some(MAX_MEMORY_BUDGET_MIB + 1), ..params() }), codes::INVALID_MEMORY_BUDGET),
            (with(&upscale, JobParams { output_format: Some(OutputFormat::Safetensors), ..params() }), codes::INVALID_OUTPUT_FORMAT),
            (with(&upscale, JobParams { output_format: Some(OutputFormat::Ffv1), ..params() }), "accepted"),
            (with(&upscale, JobParams { metrics: Some(true), ..params() }), "accepted"),
        ];
        for (options, code) in cases {
            assert_eq!(code_of(&options, &models), code, "{options:?}");
        }
        let request = check(&upscale, &config_with(&models)).unwrap();
        assert_eq!((request.params.scale, request.priority), (Some(4), 0), "the documented defaults");
        assert_eq!(request.params.output_format, Some(OutputFormat::H264), "the config's format, recorded with the job");
    }
}
