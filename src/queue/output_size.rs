//! What a job will write, checked against the box's limits before it is queued: the limits on inputs
//! alone let a small latent decode to an 8192×8192 video or a restore scale past them.
use super::{JobRequest, QueueError};
use crate::executor::interpolate::schedule::{FrameRate, Retiming};
use crate::executor::interpolate::settings::InterpolateSettings;
use crate::executor::restore::RestoreSettings;
use crate::models::Op;
use crate::media::MediaLimits;
use crate::models::family::Family;
use crate::models::restore::prepare::target_size;

/// What the checks before queueing know of the input.
pub enum InputSize {
    Video { width: u32, height: u32, frames: u64, fps_rational: String },
    /// `[1, C, t, h, w]`, already checked positive and not overflowing.
    Latent([i64; 5]),
}

/// The output's `(width, height, frames)`, where it can grow past the input; `None` for ops whose output
/// is no larger than what was already admitted (encode, reconstruct).
pub fn output_size(request: &JobRequest, input: &InputSize) -> Result<Option<(u64, u64, u64)>, QueueError> {
    let scale = request.params.scale.unwrap_or(1).max(1) as u64;
    Ok(match (request.op, input) {
        (Op::Upscale, InputSize::Video { width, height, frames, fps_rational }) => {
            let frames = match request.params.interpolate {
                Some(_) => retimed_frames(request, fps_rational, *frames)?,
                None => *frames,
            };
            Some((u64::from(*width) * scale, u64::from(*height) * scale, frames))
        }
        (Op::Interpolate, InputSize::Video { width, height, frames, fps_rational }) => {
            Some((u64::from(*width), u64::from(*height), retimed_frames(request, fps_rational, *frames)?))
        }
        (Op::Restore, InputSize::Video { width, height, frames, .. }) => {
            let settings = RestoreSettings::resolve(request.params.scale, request.params.restore.as_ref())
                .map_err(|why| QueueError::refused(crate::error_codes::INVALID_RESTORE_PARAMETER, why))?;
            let g = target_size(i64::from(*height), i64::from(*width), settings.target, settings.fit);
            Some((g.crop_w.max(0) as u64, g.crop_h.max(0) as u64, *frames))
        }
        (Op::VaeDecode, InputSize::Latent([_, _, t, h, w])) => {
            // Wan 2.2's VAE folds 2×2 pixels into channels on top of the 8× of the others.
            let spatial: u64 = if request.family == Family::Wan22 { 16 } else { 8 };
            let frames = 1 + (*t as u64 - 1) * 4;
            Some((*w as u64 * spatial, *h as u64 * spatial, frames))
        }
        // Encode and reconstruct write no more than they read; a video sent to vae_decode or a latent to
        // another op is refused by its own checks before this.
        (Op::VaeEncode | Op::VaeReconstruct, _) | (Op::Upscale | Op::Restore | Op::Interpolate, InputSize::Latent(_)) | (Op::VaeDecode, InputSize::Video { .. }) => None,
    })
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
    Err(QueueError::OutputTooLarge(format!("the {} would write {width}×{height}×{frames} frames: {}", request.op.as_str(), over.join(", "))))
}
