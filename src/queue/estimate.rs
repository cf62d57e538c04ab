//! What a job will take before it runs: its output's frames and size, and its time and bytes from this box's
//! own finished jobs of the same op and model. A job's work is counted in pixel-frames of its video side (the
//! input video's, a latent's decoded video's); its time is a fixed part (load, start and finish of the
//! processes: the median over the recent jobs that match best) plus its work at their rate, weighted by their
//! work (a few frames' run is mostly start-up and says little of the rate; a 3-frame job once made a long
//! clip's estimate 3× too long).
use super::output_size::{output_size, InputSize};
use super::{JobRequest, Queue};
use crate::jobs::{Estimate, Job, JobStatus, ListFilter};

/// Finished jobs read for a basis, newest first.
const HISTORY: i64 = 200;
/// Jobs a basis takes at most (the newest that match).
const BASIS_JOBS: usize = 5;

/// The video side of a job: what it reads or writes as frames.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct VideoSide {
    pub width: u64,
    pub height: u64,
    pub frames: u64,
}

impl VideoSide {
    fn pixel_frames(self) -> f64 {
        (self.width * self.height * self.frames) as f64
    }
}

/// The video side of a job about to run, and its output's size.
pub struct Planned {
    pub work: VideoSide,
    pub output: VideoSide,
    pub input_bytes: u64,
}

impl Planned {
    /// From the checks' findings: a video's media, or a latent's shape.
    pub fn of(request: &JobRequest, input: &InputSize, input_bytes: u64) -> Option<Planned> {
        let out = output_size(request, input).ok().flatten();
        let (work, output) = match input {
            InputSize::Video { width, height, frames, .. } => {
                let work = VideoSide { width: u64::from(*width), height: u64::from(*height), frames: *frames };
                let output = out.map(|(width, height, frames)| VideoSide { width, height, frames }).unwrap_or(work);
                (work, output)
            }
            InputSize::Latent(_) => {
                let (width, height, frames) = out?;
                let decoded = VideoSide { width, height, frames };
                (decoded, decoded)
            }
        };
        Some(Planned { work, output, input_bytes })
    }
}

/// What one finished job says of its op and model on this box.
#[derive(Debug, Clone, PartialEq)]
struct Run {
    fixed_s: f64,
    /// Seconds streaming frames through (read, compute, write) and the pixel-frames they were.
    streaming_s: f64,
    work: f64,
    output_bytes_per_pixel_frame: f64,
    /// Whether it ran with the same settings that change the work (scale, precision, interpolation).
    same_settings: bool,
}

impl Run {
    fn of(job: &Job, request: &JobRequest) -> Option<Run> {
        if job.status != JobStatus::Succeeded || job.op != request.op || job.model != request.model {
            return None;
        }
        let timings = job.timings.as_ref()?;
        let total = timings.total?;
        let streaming = timings.read.unwrap_or(0.0) + timings.compute? + timings.write.unwrap_or(0.0);
        let output = job.output.as_ref()?;
        let work = match (&job.input.media, &output.media) {
            (Some(input), _) if !request.op.reads_latent() => VideoSide { width: u64::from(input.width), height: u64::from(input.height), frames: input.frames },
            (_, Some(decoded)) => VideoSide { width: u64::from(decoded.width), height: u64::from(decoded.height), frames: decoded.frames },
            _ => return None,
        };
        let written = output.media.as_ref().map(|m| VideoSide { width: u64::from(m.width), height: u64::from(m.height), frames: m.frames }).unwrap_or(work);
        if work.pixel_frames() <= 0.0 || written.pixel_frames() <= 0.0 {
            return None;
        }
        let same_settings = job.params.scale == request.params.scale
            && job.params.dtype == request.params.dtype
            && job.params.interpolate == request.params.interpolate
            && job.params.restore == request.params.restore;
        Some(Run {
            fixed_s: (total - streaming).max(0.0),
            streaming_s: streaming,
            work: work.pixel_frames(),
            output_bytes_per_pixel_frame: output.bytes as f64 / written.pixel_frames(),
            same_settings,
        })
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.len() % 2 == 1 {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2.0
    }
}

/// The estimate from the box's finished jobs `history` (newest first).
pub fn estimate_from(history: &[Job], request: &JobRequest, planned: &Planned) -> Estimate {
    let runs: Vec<Run> = history.iter().filter_map(|job| Run::of(job, request)).collect();
    // Jobs with the same settings if there are any, else any of this op and model.
    let same: Vec<&Run> = runs.iter().filter(|run| run.same_settings).take(BASIS_JOBS).collect();
    let basis: Vec<&Run> = if same.is_empty() { runs.iter().take(BASIS_JOBS).collect() } else { same };
    let output = planned.output;
    let (seconds, output_bytes, basis_text) = if basis.is_empty() {
        (None, None, None)
    } else {
        let fixed = median(basis.iter().map(|run| run.fixed_s).collect());
        let rate = basis.iter().map(|run| run.streaming_s).sum::<f64>() / basis.iter().map(|run| run.work).sum::<f64>();
        let bytes = median(basis.iter().map(|run| run.output_bytes_per_pixel_frame).collect());
        let settings = if basis[0].same_settings { "with these settings" } else { "with other settings" };
        let text = format!("{} finished {} job(s) of {} here, {settings}", basis.len(), request.op.as_str(), request.model);
        (Some(fixed + rate * planned.work.pixel_frames()), Some((bytes * output.pixel_frames()).round() as u64), Some(text))
    };
    // The input, the result, and the segments the result is joined from (as large as it).
    let disk_bytes = output_bytes.map(|bytes| planned.input_bytes + 2 * bytes);
    Estimate {
        frames: output.frames,
        width: output.width as u32,
        height: output.height as u32,
        seconds,
        output_bytes,
        disk_bytes,
        basis: basis_text,
    }
}

impl Queue {
    /// The estimate for a job of `request` over the upload `input`, checked as a submission is; nothing is
    /// queued and the upload goes.
    pub async fn estimate_upload(&self, mut request: JobRequest, input: super::StagedFile) -> Result<Estimate, super::QueueError> {
        let probed = super::inspect_input(&self.config, &mut request, &input.path, super::InputKind::File).await?;
        let planned = probed.size.as_ref().and_then(|size| Planned::of(&request, size, input.bytes));
        let planned = planned.ok_or_else(|| super::QueueError::Internal("the upload's size could not be read for an estimate".into()))?;
        Ok(self.estimate(&request, &planned).await)
    }

    /// The estimate for `request` over `planned`, from this box's recent finished jobs.
    pub async fn estimate(&self, request: &JobRequest, planned: &Planned) -> Estimate {
        let filter = ListFilter { status: Some(JobStatus::Succeeded), owner: None, limit: HISTORY, offset: 0 };
        let history = match self.store.list(&filter).await {
            Ok(history) => history,
            Err(error) => {
                tracing::warn!(%error, "cannot read finished jobs for an estimate");
                Vec::new()
            }
        };
        estimate_from(&history, request, planned)
    }
}
