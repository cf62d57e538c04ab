//! What a job will write, checked against the box's limits before it is queued: the limits on inputs
//! alone let a small latent decode to an 8192×8192 video or a restore scale past them.
use super::{JobRequest, QueueError};
use crate::executor::interpolate::schedule::{FrameRate, Retiming};
use crate::executor::interpolate::settings::InterpolateSettings;
use crate::executor::flashvsr::geometry::FlashVsrGeometry;
use crate::executor::flashvsr::settings::FlashVsrSettings;
use crate::executor::restore::RestoreSettings;
use crate::media::MediaLimits;
use crate::models::registry;
use crate::models::restore::prepare::target_size;
use crate::models::{OutputSize, Retimes};

/// What the checks before queueing know of the input.
pub enum InputSize {
    Video { width: u32, height: u32, frames: u64, fps_rational: String },
    /// `[1, C, t, h, w]`, already checked positive and not overflowing.
    Latent([i64; 5]),
}

/// The output's `(width, height, frames)`, where it can grow past the input (the op's `size` and
/// `retimes` say how); `None` for ops whose output is no larger than what was already admitted.
pub fn output_size(request: &JobRequest, input: &InputSize) -> Result<Option<(u64, u64, u64)>, QueueError> {
    let spec = request.op.spec();
    Ok(match input {
        InputSize::Video { width, height, frames, fps_rational } => match frame_size(request, spec.size, *width, *height)? {
            Some((width, height)) => Some((width, height, output_frames(request, spec.retimes, fps_rational, *frames)?)),
            None => None,
        },
        // A latent sent to an op that reads videos is refused by its own checks before this.
        InputSize::Latent(shape) => match spec.size {
            OutputSize::DecodedLatent => decoded_size(request, shape),
            OutputSize::NoLarger | OutputSize::Same | OutputSize::Scaled | OutputSize::RestoreTarget => None,
        },
    })
}

/// A video's frames become `(width, height)`; `None` where the op writes no larger (or reads no video: a
/// video sent to one that reads latents is refused by its own checks before this).
fn frame_size(request: &JobRequest, size: OutputSize, width: u32, height: u32) -> Result<Option<(u64, u64)>, QueueError> {
    let (width, height) = (u64::from(width), u64::from(height));
    Ok(match size {
        OutputSize::Same => Some((width, height)),
        OutputSize::Scaled => {
            let scale = request.params.scale.unwrap_or(1).max(1) as u64;
            Some((width * scale, height * scale))
        }
        OutputSize::RestoreTarget if request.family == crate::models::family::Family::FlashVsr => {
            let settings = FlashVsrSettings::resolve(None, request.params.restore.as_ref())
                .map_err(|why| QueueError::refused(crate::error_codes::INVALID_RESTORE_PARAMETER, why))?;
            let g = FlashVsrGeometry::new(height as i64, width as i64, settings.fit);
            Some((g.out_w.max(0) as u64, g.out_h.max(0) as u64))
        }
        OutputSize::RestoreTarget => {
            let settings = RestoreSettings::resolve(request.params.scale, request.params.restore.as_ref())
                .map_err(|why| QueueError::refused(crate::error_codes::INVALID_RESTORE_PARAMETER, why))?;
            let g = target_size(height as i64, width as i64, settings.target, settings.fit);
            Some((g.crop_w.max(0) as u64, g.crop_h.max(0) as u64))
        }
        OutputSize::NoLarger | OutputSize::DecodedLatent => None,
    })
}

fn output_frames(request: &JobRequest, retimes: Retimes, fps_rational: &str, frames: u64) -> Result<u64, QueueError> {
    match (retimes, &request.params.interpolate) {
        (Retimes::Always, _) | (Retimes::WhenAsked, Some(_)) => retimed_frames(request, fps_rational, frames),
        (Retimes::WhenAsked, None) | (Retimes::Never, _) => Ok(frames),
    }
}

/// A latent `[1, C, t, h, w]` decodes to its cells times the VAE's factors (`None`: the model is no VAE
/// whose factors its header gave, and the decode itself finds out).
fn decoded_size(request: &JobRequest, &[_, _, t, h, w]: &[i64; 5]) -> Option<(u64, u64, u64)> {
    let (spatial, temporal) = request.vae_factors?;
    let (spatial, temporal) = (spatial as u64, temporal as u64);
    Some((w as u64 * spatial, h as u64 * spatial, 1 + (t as u64 - 1) * temporal))
}

/// The frames an interpolation writes from `frames` at `fps_rational`, or why it cannot reach its rate.
fn retimed_frames(request: &JobRequest, fps_rational: &str, frames: u64) -> Result<u64, QueueError> {
    let refused = |why: String| QueueError::refused(crate::error_codes::INVALID_INTERPOLATE_PARAMETER, why);
    let settings = InterpolateSettings::resolve(request.params.interpolate.as_ref()).map_err(refused)?;
    let input = FrameRate::parse(fps_rational).ok_or_else(|| refused(format!("the input's frame rate {fps_rational} cannot be read")))?;
    let output = settings.output_rate(input).map_err(refused)?;
    Ok(Retiming::new(input, output, frames).output_frames())
}

/// Refuses (422 `output-too-large`) a job whose output would exceed `max_width`/`max_height`/`max_frames`.
pub fn check_output_size(request: &JobRequest, input: &InputSize, limits: &MediaLimits) -> Result<(), QueueError> {
    let Some((width, height, frames)) = output_size(request, input)? else { return Ok(()) };
    let over = [("width", width, u64::from(limits.max_width)), ("height", height, u64::from(limits.max_height)), ("frames", frames, limits.max_frames)]
        .into_iter()
        .filter(|(_, value, max)| value > max)
        .map(|(name, value, max)| format!("{name} {value} (max {max})"))
        .collect::<Vec<_>>();
    if over.is_empty() {
        return Ok(());
    }
    let frame_over = width > u64::from(limits.max_width) || height > u64::from(limits.max_height);
    let hint = match input {
        InputSize::Video { width, height, .. } if frame_over && request.op.spec().size == OutputSize::Scaled => scale_hint(request, *width, *height, limits),
        InputSize::Video { .. } | InputSize::Latent(_) => String::new(),
    };
    Err(QueueError::OutputTooLarge(format!("the {} would write {width}×{height}×{frames} frames: {}{hint}", request.op.as_str(), over.join(", "))))
}

/// For a scaled output over the size limits: the model's scales that fit (`; scale 2 fits`), or that none does.
fn scale_hint(request: &JobRequest, width: u32, height: u32, limits: &MediaLimits) -> String {
    let scales: Vec<i64> = registry::upscaler_family(request.family)
        .and_then(|family| family.models.iter().find(|model| model.name == request.model))
        .map(|model| model.scales.to_vec())
        .unwrap_or_default();
    let fits = |scale: &&i64| u64::from(width) * **scale as u64 <= u64::from(limits.max_width) && u64::from(height) * **scale as u64 <= u64::from(limits.max_height);
    match scales.iter().filter(fits).max() {
        Some(scale) => format!("; scale {scale} fits (`scale={scale}`)"),
        None => format!("; no scale of `{}` fits a {width}×{height} input (scales {scales:?})", request.model),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::DtypeChoice;
    use crate::jobs::{InterpolateParams, JobParams};
    use crate::models::family::Family;
    use crate::models::Op;

    fn request(op: Op, family: Family, params: JobParams) -> JobRequest {
        JobRequest {
            op,
            model: "m".into(),
            family,
            latent_channels: None,
            vae_factors: registry::vae_factors(family),
            priority: 0,
            params,
            device_bytes_needed: 0,
            callback_url: None,
            output_format_given: false,
        }
    }

    fn video() -> InputSize {
        InputSize::Video { width: 176, height: 144, frames: 10, fps_rational: "30/1".into() }
    }

    /// Each op's spec decides: scaled, retimed, decoded by the VAE's own factors, or not checked.
    #[test]
    fn each_op_sizes_its_output_from_its_spec() {
        let plain = || JobParams::new(DtypeChoice::Auto);
        let twice = || JobParams { interpolate: Some(InterpolateParams { factor: Some(2), ..Default::default() }), ..plain() };
        let size = |op, family, params, input: &InputSize| output_size(&request(op, family, params), input).unwrap();
        assert_eq!(size(Op::Upscale, Family::Realesrgan, JobParams { scale: Some(2), ..plain() }, &video()), Some((352, 288, 10)));
        let retimed = size(Op::Interpolate, Family::Rife, twice(), &video()).unwrap();
        assert_eq!((retimed.0, retimed.1), (176, 144));
        assert!(retimed.2 > 10, "{retimed:?}");
        assert_eq!(size(Op::Upscale, Family::Realesrgan, JobParams { scale: Some(2), ..twice() }, &video()), Some((352, 288, retimed.2)));
        assert_eq!(size(Op::VaeEncode, Family::Wan21, plain(), &video()), None);
        assert_eq!(size(Op::VaeReconstruct, Family::Wan21, plain(), &video()), None);
        let latent = InputSize::Latent([1, 16, 3, 4, 5]);
        assert_eq!(size(Op::VaeDecode, Family::Wan21, plain(), &latent), Some((40, 32, 9)));
        assert_eq!(size(Op::VaeDecode, Family::Wan22, plain(), &latent), Some((80, 64, 9)), "Wan 2.2 folds 2×2 pixels too");
        assert_eq!(size(Op::Upscale, Family::Realesrgan, plain(), &latent), None, "refused by the latent checks, not here");
    }
}
