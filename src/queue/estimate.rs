//! What a job will take before it runs: its output's frames and size, and its time and bytes from this box's
//! own finished jobs of the same op and model. A job's work is counted in pixel-frames of its video side (the
//! input video's, a latent's decoded video's); its time is the model's load (the latest job's) plus a start-up
//! part and its work at a rate, the line through the recent jobs that match best (least squares; with one job,
//! or jobs of one size, its whole time at its rate). Time the stages do not count (conversions, checkpoints)
//! grows with the work as the rest does, so it is the rate's, not a fixed part's: counted fixed, a 600-frame
//! job's made a 12-frame job look 4 s long.
use super::output_size::{output_size, InputSize};
use super::{JobRequest, Queue};
use crate::jobs::{Estimate, Job, JobStatus, ListFilter};
use crate::stats::median;

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
    load_s: f64,
    /// Seconds from the model's load to the end, and the pixel-frames they were.
    run_s: f64,
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
        let load_s = timings.load_model.unwrap_or(0.0).min(total);
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
            load_s,
            run_s: total - load_s,
            work: work.pixel_frames(),
            output_bytes_per_pixel_frame: output.bytes as f64 / written.pixel_frames(),
            same_settings,
        })
    }
}

/// The start-up seconds and the seconds per pixel-frame of the runs: the least-squares line through their
/// (work, time), where it has a start-up of 0 or more and a positive rate; else their time over their work.
fn line_through(runs: &[&Run]) -> (f64, f64) {
    let n = runs.len() as f64;
    let (mean_work, mean_s) = (runs.iter().map(|r| r.work).sum::<f64>() / n, runs.iter().map(|r| r.run_s).sum::<f64>() / n);
    let spread: f64 = runs.iter().map(|r| (r.work - mean_work).powi(2)).sum();
    let together: f64 = runs.iter().map(|r| (r.work - mean_work) * (r.run_s - mean_s)).sum();
    if spread > 0.0 {
        let rate = together / spread;
        let start = mean_s - rate * mean_work;
        if rate > 0.0 && start >= 0.0 {
            return (start, rate);
        }
    }
    (0.0, runs.iter().map(|r| r.run_s).sum::<f64>() / runs.iter().map(|r| r.work).sum::<f64>())
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
        let (start_s, rate) = line_through(&basis);
        let load_s = basis[0].load_s;
        let bytes = median(basis.iter().map(|run| run.output_bytes_per_pixel_frame).collect());
        let settings = if basis[0].same_settings { "with these settings" } else { "with other settings" };
        let text = format!("{} finished {} job(s) of {} here, {settings}", basis.len(), request.op.as_str(), request.model);
        (Some(load_s + start_s + rate * planned.work.pixel_frames()), Some((bytes * output.pixel_frames()).round() as u64), Some(text))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn run(work: f64, run_s: f64) -> Run {
        Run { load_s: 0.0, run_s, work, output_bytes_per_pixel_frame: 1.0, same_settings: true }
    }

    /// Two sizes give the start-up and the rate; one size (or a line that would make no sense) its time over its work.
    #[test]
    fn the_line_through_the_runs_gives_start_up_and_rate() {
        let (small, large) = (run(100.0, 1.5), run(1000.0, 6.0));
        let (start, rate) = line_through(&[&small, &large]);
        assert!((start - 1.0).abs() < 1e-9 && (rate - 0.005).abs() < 1e-12, "{start} {rate}");
        assert_eq!(line_through(&[&large]), (0.0, 0.006));
        let (start, rate) = line_through(&[&run(100.0, 3.0), &run(1000.0, 2.0)]);
        assert_eq!((start, rate), (0.0, 5.0 / 1100.0), "a rate that falls with the work is no rate");
    }
}
