//! No budget on the CPU still means the host's memory. A VAE job with no budget of its own takes whole
//! frames at the configured push, which on a large frame (a zip of 4096² PNGs is 31 KB on the wire) needs
//! more memory than the machine has: it would swap or be killed. Such a job is planned under what the host
//! can give instead, less the push's frames held outside the model (their bytes, their float copies); one
//! whose smallest plan (one latent frame per push, the smallest tiles) would still not fit fails at once,
//! saying what it needs, instead of running into the out-of-memory killer.
use super::super::context::Executor;
use super::super::error::ExecError;
use super::super::replan::JobPlanning;
use crate::tiling::planner::{self, PlanRequest};

/// Bytes per pixel of each frame of a push held outside the model: the decoded RGB bytes, their float
/// copy and the model's [-1, 1] input (or, decoding, the output and its samples), with its padding.
const FRAME_BYTES_PER_PIXEL: u64 = 3 + 4 * 3 * 2;
const MIB: u64 = 1 << 20;

/// What the host gives a job with no budget, in bytes: the configured ceiling, else what is available
/// now less the margin.
fn host_ceiling_bytes(exec: &Executor) -> Option<u64> {
    match exec.config.host_memory_mib {
        0 => crate::device::host_memory::available_bytes().map(|bytes| bytes.saturating_sub(exec.config.device_memory_margin_mib * MIB)),
        mib => Some(mib * MIB),
    }
}

/// `planning` with a budget under the host's memory when its whole frames would not fit there, and the
/// line that says so; unchanged (no budget: whole frames) when they fit, on a GPU, or with a budget. An
/// error when not even the smallest plan fits.
pub(super) fn bound_by_host(exec: &Executor, planning: JobPlanning) -> Result<(JobPlanning, Option<String>), ExecError> {
    let Some(request) = planning.request.clone().filter(|_| planning.budget_mib == 0 && !exec.device.is_cuda()) else {
        return Ok((planning, None));
    };
    let Some(ceiling) = host_ceiling_bytes(exec) else { return Ok((planning, None)) };
    let frames = push_frame_bytes(&request);
    let whole = planner::plan(&PlanRequest { budget_bytes: u64::MAX, ..request.clone() });
    if whole.estimated_peak_bytes.saturating_add(frames) <= ceiling {
        return Ok((planning, None));
    }
    let budget_mib = (ceiling.saturating_sub(frames) / MIB).max(1);
    let bounded = JobPlanning { budget_mib, ..planning };
    let smallest = bounded.plan();
    if !smallest.fits {
        let (height, width) = (request.latent_height * request.spatial_factor, request.latent_width * request.spatial_factor);
        return Err(ExecError::ExceedsHostMemory(format!(
            "frames of {width}×{height} need at least {} MiB here (one latent frame per push, in the smallest tiles), and the host gives {} MiB: \
             send smaller frames, or free memory (host_memory_mib, when set, is the box's ceiling)",
            (smallest.estimated_peak_bytes + frames) / MIB,
            ceiling / MIB
        )));
    }
    let note = format!(
        "planned under the host's memory: whole frames would need about {} MiB, the host gives {} MiB (its frames take {} MiB of it)",
        (whole.estimated_peak_bytes + frames) / MIB,
        ceiling / MIB,
        frames / MIB
    );
    Ok((bounded, Some(note)))
}

/// The frames of the longest push the job could make, at full size.
fn push_frame_bytes(request: &PlanRequest) -> u64 {
    let frames = request.push_pixel_frames(request.max_latent_frames_per_chunk) as u64;
    let pixels = (request.latent_height * request.latent_width * request.spatial_factor * request.spatial_factor) as u64;
    frames * pixels * FRAME_BYTES_PER_PIXEL
}
