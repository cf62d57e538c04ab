//! One job in parts that several workers run at once. A part is a range of the job's frames on the segment
//! boundaries its op already has; it is a row of its own (`parent_id`), claimed, leased, checkpointed and
//! retried like a job by any worker that can run the job, and writes its segments into its own folder inside
//! the job's resume folder (or the shared storage). When every part succeeded the job is queued again, and the
//! worker that takes it joins the parts' segments, with the input's audio, into the result.
//!
//! What this module holds is what every store and the scheduler share: the parts a job is cut into
//! (`plan_parts`) and what a job becomes as its parts end (`settle`).
use uuid::Uuid;

use super::model::{JobError, JobStatus, Progress};
pub use super::model::{JobPart, PartView, SplitState};

/// `parts`: `auto` (as many as the workers that could take the job, when its frames make that many
/// segments) or a number (1: never split).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartsChoice {
    Auto,
    Count(usize),
}

/// The most parts one job is cut into.
pub const MAX_PARTS: usize = 64;

impl PartsChoice {
    /// `auto` or 1 to `MAX_PARTS`; `None` for anything else.
    pub fn parse(text: &str) -> Option<PartsChoice> {
        let text = text.trim();
        if text.eq_ignore_ascii_case("auto") {
            return Some(PartsChoice::Auto);
        }
        text.parse::<usize>().ok().filter(|n| (1..=MAX_PARTS).contains(n)).map(PartsChoice::Count)
    }

    /// How many parts, with `workers` able to take the job: `auto` asks for one per worker.
    pub fn wanted(self, workers: usize) -> usize {
        match self {
            PartsChoice::Auto => workers.max(1),
            PartsChoice::Count(count) => count,
        }
    }
}

/// A job of `frames` frames in segments of `segment_frames`, cut into at most `wanted` parts of whole
/// segments, as even as whole segments allow: each part's `(first_frame, frames)`, the last one's frames
/// `None` (to the end). One part (or none cut) when there are fewer than two segments.
pub fn plan_parts(frames: u64, segment_frames: u64, wanted: usize) -> Vec<(u64, Option<u64>)> {
    let segment_frames = segment_frames.max(1);
    let segments = frames.div_ceil(segment_frames);
    let count = (wanted as u64).min(segments).max(1);
    (0..count)
        .map(|k| {
            let first_segment = k * segments / count;
            let end_segment = (k + 1) * segments / count;
            let first = first_segment * segment_frames;
            let frames = (k + 1 < count).then(|| (end_segment - first_segment) * segment_frames);
            (first, frames)
        })
        .collect()
}

/// A part's row as `settle` reads it.
#[derive(Debug, Clone)]
pub struct PartState {
    pub id: Uuid,
    pub part: JobPart,
    pub status: JobStatus,
    pub error: Option<JobError>,
}

/// What a split job becomes as its parts stand.
#[derive(Debug, Clone, PartialEq)]
pub enum Settled {
    /// Parts are still to run: nothing changes.
    Running,
    /// Every part succeeded: the job is queued to be joined.
    Join,
    /// A part failed for good: the job fails with that part named; the other parts are cancelled.
    Failed(JobError),
    /// The job was cancelled: the parts not running are cancelled, the running ones asked to stop; the job
    /// is cancelled once none runs.
    Cancelled { parts_running: bool },
}

impl Settled {
    /// The status a split job's row takes, and the error it records: failed with the part's, cancelled once
    /// no part runs, else still running (its running parts asked to stop); none while it waits for a join or
    /// its parts.
    pub fn job_status(&self) -> Option<(JobStatus, Option<&JobError>)> {
        match self {
            Settled::Running | Settled::Join => None,
            Settled::Failed(error) => Some((JobStatus::Failed, Some(error))),
            Settled::Cancelled { parts_running: false } => Some((JobStatus::Cancelled, None)),
            Settled::Cancelled { parts_running: true } => Some((JobStatus::Running, None)),
        }
    }
}

/// `cancel_requested`: a user cancelled the job (or it went on without a worker that could stop it).
pub fn settle(parts: &[PartState], cancel_requested: bool) -> Settled {
    let running = parts.iter().any(|p| p.status == JobStatus::Running);
    if let Some(failed) = parts.iter().find(|p| p.status == JobStatus::Failed) {
        let error = failed.error.clone().unwrap_or(JobError { code: crate::error_codes::PART_FAILED.into(), message: String::new() });
        return Settled::Failed(JobError { code: error.code, message: format!("{} failed: {}", failed.part.describe(), error.message) });
    }
    let cancelled = parts.iter().any(|p| p.status == JobStatus::Cancelled);
    if cancel_requested || cancelled {
        return Settled::Cancelled { parts_running: running };
    }
    if !parts.is_empty() && parts.iter().all(|p| p.status == JobStatus::Succeeded) {
        return Settled::Join;
    }
    Settled::Running
}

/// The job's progress from its parts': frames done over every part's, with the ETA of the part that ends
/// last (they run at once).
pub fn progress_of(parts: &[PartView]) -> Option<Progress> {
    if parts.is_empty() {
        return None;
    }
    let progresses: Vec<&Progress> = parts.iter().filter_map(|p| p.progress.as_ref()).collect();
    let done: u64 = parts.iter().map(|p| if p.status == JobStatus::Succeeded { p.progress.as_ref().map_or(p.frames.unwrap_or(0), |q| q.total.max(q.done)) } else { p.progress.as_ref().map_or(0, |q| q.done) }).sum();
    let total: u64 = parts.iter().map(|p| p.progress.as_ref().map(|q| q.total).filter(|t| *t > 0).or(p.frames).unwrap_or(0)).sum();
    let eta_s = progresses.iter().filter_map(|p| p.eta_s).fold(None, |max: Option<f64>, eta| Some(max.map_or(eta, |m| m.max(eta))));
    let fraction = if total > 0 { (done as f64 / total as f64).min(1.0) } else { 0.0 };
    Some(Progress { done, total, unit: "frames".into(), fraction, eta_s, stage: Some("parts".into()) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_are_whole_segments_as_even_as_they_can_be() {
        // 4 segments of 10 frames (the last one short) over 2 workers: 2 segments each.
        assert_eq!(plan_parts(37, 10, 2), vec![(0, Some(20)), (20, None)]);
        // 5 segments over 2: 2 and 3.
        assert_eq!(plan_parts(50, 10, 2), vec![(0, Some(20)), (20, None)]);
        assert_eq!(plan_parts(50, 10, 3), vec![(0, Some(10)), (10, Some(20)), (30, None)]);
        // Never more parts than segments; one segment is one part.
        assert_eq!(plan_parts(25, 10, 8).len(), 3);
        assert_eq!(plan_parts(9, 10, 4), vec![(0, None)]);
    }

    #[test]
    fn parts_choice_reads_auto_and_counts() {
        assert_eq!(PartsChoice::parse("auto"), Some(PartsChoice::Auto));
        assert_eq!(PartsChoice::parse(" 3 "), Some(PartsChoice::Count(3)));
        assert_eq!(PartsChoice::parse("0"), None);
        assert_eq!(PartsChoice::parse("65"), None);
        assert_eq!(PartsChoice::parse("two"), None);
        assert_eq!(PartsChoice::Auto.wanted(3), 3);
        assert_eq!(PartsChoice::Count(2).wanted(5), 2);
    }

    fn part(index: usize, status: JobStatus) -> PartState {
        PartState { id: Uuid::from_u128(index as u128), part: JobPart { of: Uuid::nil(), index, count: 3, first_frame: index as u64 * 10, frames: Some(10) }, status, error: None }
    }

    #[test]
    fn a_job_follows_its_parts() {
        use JobStatus::*;
        assert_eq!(settle(&[part(0, Succeeded), part(1, Running), part(2, Queued)], false), Settled::Running);
        assert_eq!(settle(&[part(0, Succeeded), part(1, Succeeded), part(2, Succeeded)], false), Settled::Join);
        assert_eq!(settle(&[part(0, Succeeded), part(1, Running), part(2, Queued)], true), Settled::Cancelled { parts_running: true });
        assert_eq!(settle(&[part(0, Succeeded), part(1, Cancelled), part(2, Cancelled)], true), Settled::Cancelled { parts_running: false });
        let mut failed = part(1, Failed);
        failed.error = Some(JobError { code: "attempts-exhausted".into(), message: "lost 3 times".into() });
        let Settled::Failed(error) = settle(&[part(0, Running), failed, part(2, Queued)], false) else { panic!("a failed part fails the job") };
        assert_eq!(error.code, "attempts-exhausted");
        assert_eq!(error.message, "part 2 of 3 (frames 10–19) failed: lost 3 times");
    }
}
