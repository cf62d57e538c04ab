//! The job fields' text read into the queue's typed `JobOptions`; what the values mean (models, scales,
//! ranges) is checked by the queue, for HTTP and `vaebox run` alike.
use std::path::Path;

use super::error::ApiError;
use super::params::JobFields;
use crate::device::DtypeChoice;
use crate::error_codes as codes;
use crate::config::Config;
use crate::jobs::{InterpolateParams, OutputFormat, RestoreParams};
use crate::media::InputRange;
use crate::models::Op;
use crate::models::restore::colorfix::ColorFix;
use crate::models::restore::prepare::Fit;
use crate::queue::{self, JobOptions, JobRequest, OpParameter};

/// Reads and checks the fields: the request the queue will take. `owner`, the token that submits: its
/// `callback_url` is the job's when neither the job nor its preset gives one.
pub fn job_request(fields: &JobFields, config: &Config, owner: Option<&str>) -> Result<JobRequest, ApiError> {
    let mut fields = super::presets::apply(fields, &config.presets)?;
    if fields.callback_url.is_none() {
        fields.callback_url = config.tokens.iter().find(|token| Some(token.name.as_str()) == owner).and_then(|token| token.callback_url.clone());
    }
    Ok(queue::check(&job_options(&fields, &config.models_dir)?, config)?)
}

pub fn job_options(fields: &JobFields, models_dir: &Path) -> Result<JobOptions, ApiError> {
    let op_name = fields.op.as_deref().unwrap_or("upscale");
    let op = Op::parse(op_name).ok_or_else(|| {
        let known: Vec<_> = Op::ALL.iter().map(|op| op.as_str()).collect();
        ApiError::bad_request(codes::UNKNOWN_OP, format!("unknown op `{op_name}`; expected one of {}", known.join(", ")))
    })?;
    refuse_fields_not_for(op, fields)?;
    let model = match &fields.model {
        Some(model) => model.clone(),
        None => queue::default_model(models_dir, op)?,
    };
    // The model comes first, as its refusals name what the box has; a scale's refusal names the model's scales.
    let entry = queue::find_model(models_dir, op, &model)?;
    let scale = match (op, &fields.scale) {
        (Op::Upscale | Op::Restore, Some(raw)) => Some(raw.trim().parse::<i64>().map_err(|_| queue::bad_scale(raw, &entry.scales))?),
        // Not given, or given to an op without a scale (refused above as not for the op).
        (Op::Upscale | Op::Restore, None) | (Op::VaeEncode | Op::VaeDecode | Op::VaeReconstruct | Op::Interpolate, _) => None,
    };
    let priority = match &fields.priority {
        None => 0,
        Some(raw) => raw.trim().parse::<i64>().map_err(|_| queue::bad_priority(raw))?,
    };
    let dtype = match &fields.dtype {
        None => DtypeChoice::Auto,
        Some(raw) => DtypeChoice::parse(raw)
            .ok_or_else(|| ApiError::bad_request(codes::INVALID_DTYPE, format!("dtype `{raw}` is not one of auto, f32, bf16, f16")))?,
    };
    let tile = fields.tile.as_deref().map(|raw| raw.trim().parse::<i64>().map_err(|_| queue::bad_tile(raw))).transpose()?;
    let normalize = boolean("normalize", &fields.normalize, codes::INVALID_NORMALIZE)?;
    let keep_audio = boolean("keep_audio", &fields.keep_audio, codes::INVALID_BOOLEAN)?;
    let metrics = boolean("metrics", &fields.metrics, codes::INVALID_BOOLEAN)?;
    let output_format = match fields.output_format.as_deref() {
        None => None,
        Some(raw) => Some(OutputFormat::parse(raw).ok_or_else(|| {
            let known: Vec<_> = OutputFormat::ALL.iter().map(|f| f.as_str()).collect();
            ApiError::bad_request(codes::INVALID_OUTPUT_FORMAT, format!("output_format `{raw}` is not one of {}", known.join(", ")))
        })?),
    };
    let memory_budget_mib =
        fields.memory_budget_mib.as_deref().map(|raw| raw.trim().parse::<u64>().map_err(|_| queue::bad_memory_budget(raw))).transpose()?;
    let restore = if op == Op::Restore { Some(restore_params(fields)?) } else { None };
    let interpolate = match op {
        Op::Interpolate => Some(interpolate_params(fields)?),
        // `interpolate=N` on an upscale: that factor, the other settings their defaults.
        Op::Upscale => number_field("interpolate", &fields.interpolate, codes::INVALID_INTERPOLATE_PARAMETER)?
            .map(InterpolateParams::upscale_factor),
        Op::VaeEncode | Op::VaeDecode | Op::VaeReconstruct | Op::Restore => None,
    };
    Ok(JobOptions {
        op,
        model: Some(model),
        scale,
        priority,
        dtype,
        tile,
        normalize,
        memory_budget_mib,
        output_format,
        keep_audio,
        metrics,
        restore,
        interpolate,
        range: input_range(fields)?,
        callback_url: fields.callback_url.clone(),
        // `interpolate`'s fps is its output rate (in `interpolate_params`); for these ops, a sequence's rate.
        sequence_fps: match op {
            Op::Upscale | Op::Restore => fields.fps.as_ref().map(|fps| fps.trim().to_string()),
            Op::VaeEncode | Op::VaeDecode | Op::VaeReconstruct | Op::Interpolate => None,
        },
    })
}

/// `start`/`start_frame` and `frames`/`duration`; the queue checks them together (`InputRange::check`).
fn input_range(fields: &JobFields) -> Result<Option<InputRange>, ApiError> {
    let code = codes::INVALID_RANGE;
    let range = InputRange {
        start: number_field("start", &fields.start, code)?,
        start_frame: number_field("start_frame", &fields.start_frame, code)?,
        frames: number_field("frames", &fields.frames, code)?,
        duration: number_field("duration", &fields.duration, code)?,
    };
    Ok((!range.is_empty()).then_some(range))
}

/// A field given that the op does not read is refused (400 `parameter-not-for-op`, by the queue's table).
fn refuse_fields_not_for(op: Op, fields: &JobFields) -> Result<(), ApiError> {
    // Every field by name, so that a new one does not compile until it is placed here.
    let JobFields {
        preset: _,
        op: _,
        model: _,
        priority: _,
        dtype: _,
        filename: _,
        // Every op takes a webhook.
        callback_url: _,
        scale,
        tile,
        normalize,
        memory_budget_mib,
        output_format,
        keep_audio,
        metrics,
        vae,
        height,
        width,
        resolution,
        max_resolution,
        fit,
        seed,
        color_fix,
        batch_frames,
        batch_overlap,
        input_noise_scale,
        latent_noise_scale,
        prepend_frames,
        factor,
        fps,
        scene_threshold,
        interpolate,
        start,
        start_frame,
        frames,
        duration,
    } = fields;
    let given = [
        (OpParameter::Scale, scale),
        (OpParameter::Tile, tile),
        (OpParameter::Normalize, normalize),
        (OpParameter::MemoryBudgetMib, memory_budget_mib),
        (OpParameter::OutputFormat, output_format),
        (OpParameter::KeepAudio, keep_audio),
        (OpParameter::Metrics, metrics),
        (OpParameter::Vae, vae),
        (OpParameter::Height, height),
        (OpParameter::Width, width),
        (OpParameter::Seed, seed),
        (OpParameter::ColorFix, color_fix),
        (OpParameter::BatchFrames, batch_frames),
        (OpParameter::BatchOverlap, batch_overlap),
        (OpParameter::Resolution, resolution),
        (OpParameter::MaxResolution, max_resolution),
        (OpParameter::Fit, fit),
        (OpParameter::InputNoiseScale, input_noise_scale),
        (OpParameter::LatentNoiseScale, latent_noise_scale),
        (OpParameter::PrependFrames, prepend_frames),
        (OpParameter::Factor, factor),
        (OpParameter::Fps, fps),
        (OpParameter::SceneThreshold, scene_threshold),
        (OpParameter::Interpolate, interpolate),
        (OpParameter::Start, start),
        (OpParameter::StartFrame, start_frame),
        (OpParameter::Frames, frames),
        (OpParameter::Duration, duration),
    ];
    Ok(queue::refuse_parameters_not_for(op, given.into_iter().filter(|(_, value)| value.is_some()).map(|(parameter, _)| parameter))?)
}

/// `true`/`1`/`yes` or `false`/`0`/`no`, any case.
fn boolean(name: &str, raw: &Option<String>, code: &'static str) -> Result<Option<bool>, ApiError> {
    match raw.as_deref().map(|v| v.trim().to_ascii_lowercase()) {
        None => Ok(None),
        Some(v) if matches!(v.as_str(), "true" | "1" | "yes") => Ok(Some(true)),
        Some(v) if matches!(v.as_str(), "false" | "0" | "no") => Ok(Some(false)),
        Some(v) => Err(ApiError::bad_request(code, format!("{name} `{v}` is not true or false"))),
    }
}

/// A number field, refused with the op's parameter code when it is not one.
fn number_field<T: std::str::FromStr>(name: &str, raw: &Option<String>, code: &'static str) -> Result<Option<T>, ApiError> {
    raw.as_deref()
        .map(|raw| raw.trim().parse::<T>().map_err(|_| ApiError::bad_request(code, format!("{name} `{raw}` is not a number"))))
        .transpose()
}

/// `interpolate`'s own fields; the queue checks them together (`InterpolateSettings::resolve`).
fn interpolate_params(fields: &JobFields) -> Result<InterpolateParams, ApiError> {
    let code = codes::INVALID_INTERPOLATE_PARAMETER;
    Ok(InterpolateParams {
        factor: number_field("factor", &fields.factor, code)?,
        fps: fields.fps.as_ref().map(|fps| fps.trim().to_string()),
        scene_threshold: number_field("scene_threshold", &fields.scene_threshold, code)?,
    })
}

/// `restore`'s own fields; the queue checks them together (`RestoreSettings::resolve`).
fn restore_params(fields: &JobFields) -> Result<RestoreParams, ApiError> {
    fn number<T: std::str::FromStr>(name: &str, raw: &Option<String>) -> Result<Option<T>, ApiError> {
        number_field(name, raw, codes::INVALID_RESTORE_PARAMETER)
    }
    let color_fix = match fields.color_fix.as_deref() {
        None => None,
        Some(raw) => Some(ColorFix::parse(raw.trim()).ok_or_else(|| {
            ApiError::bad_request(codes::INVALID_RESTORE_PARAMETER, format!("color_fix `{raw}` is not one of {}", ColorFix::ALL.map(ColorFix::as_str).join(", ")))
        })?),
    };
    let fit = match fields.fit.as_deref() {
        None => None,
        Some(raw) => Some(Fit::parse(raw.trim()).ok_or_else(|| {
            ApiError::bad_request(codes::INVALID_RESTORE_PARAMETER, format!("fit `{raw}` is not one of {}", Fit::ALL.map(Fit::as_str).join(", ")))
        })?),
    };
    Ok(RestoreParams {
        vae: fields.vae.clone(),
        height: number("height", &fields.height)?,
        width: number("width", &fields.width)?,
        resolution: number("resolution", &fields.resolution)?,
        max_resolution: number("max_resolution", &fields.max_resolution)?,
        fit,
        seed: number("seed", &fields.seed)?,
        color_fix,
        batch_frames: number("batch_frames", &fields.batch_frames)?,
        batch_overlap: number("batch_overlap", &fields.batch_overlap)?,
        input_noise_scale: number("input_noise_scale", &fields.input_noise_scale)?,
        latent_noise_scale: number("latent_noise_scale", &fields.latent_noise_scale)?,
        prepend_frames: number("prepend_frames", &fields.prepend_frames)?,
        scene_threshold: number("scene_threshold", &fields.scene_threshold)?,
    })
}
