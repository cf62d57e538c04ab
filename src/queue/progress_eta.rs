//! A running job's progress on its way to the store and the followers, with an ETA from the work this run did.
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{broadcast, watch};
use uuid::Uuid;

use crate::jobs::model::Progress;
use crate::jobs::store::{JobStore, Lease};

/// Progress reaches the database at most this often; SSE listeners see the same rate.
const PROGRESS_INTERVAL: Duration = Duration::from_millis(250);

/// Stores each progress the executor sends and announces it on `events` (the scheduler's `JobEvents`).
/// `part_of`: the job a part belongs to, whose followers see the part's progress in it.
pub(super) async fn forward_progress(store: Arc<dyn JobStore>, events: broadcast::Sender<Uuid>, lease: Lease, mut rx: watch::Receiver<Progress>, estimate_s: Option<f64>, part_of: Option<Uuid>) {
    let id = lease.id;
    let mut rate = RunRate { estimate_s, ..RunRate::default() };
    while rx.changed().await.is_ok() {
        let mut progress = rx.borrow_and_update().clone();
        rate.set_eta(&mut progress, Instant::now());
        if let Err(e) = store.set_progress(&lease, &progress).await {
            tracing::warn!(%id, error = %e, "cannot store progress");
        }
        let _ = events.send(id);
        if let Some(job) = part_of {
            let _ = events.send(job);
        }
        tokio::time::sleep(PROGRESS_INTERVAL).await;
    }
}

/// An ETA is given once this run's rate was measured over at least this long (a few chunks' noise is not a rate).
const ETA_MEASURE_S: f64 = 1.0;
/// Until this run's rate was measured this long, its ETA leans on the job's estimate (the box's rate for the
/// op and model), the more the shorter the measure: the first seconds of a run (encoder start, caches) are
/// slower than the rest.
const ETA_TRUST_S: f64 = 10.0;

/// A job's ETA from the work this run did: a job that goes on from a checkpoint first passes over what it
/// had finished (read again, not computed), so its rate is measured from its first progress past that (the
/// first with any work done, after any `load` or `resume` stage), not from its start (once 3–30× short).
#[derive(Debug, Default)]
struct RunRate {
    /// When the measure starts, and the fraction done then.
    since: Option<(Instant, f64)>,
    /// The whole job's estimate when it was queued.
    estimate_s: Option<f64>,
}

impl RunRate {
    fn set_eta(&mut self, progress: &mut Progress, now: Instant) {
        if progress.fraction >= 1.0 {
            progress.eta_s = Some(0.0);
            return;
        }
        let passing = matches!(progress.stage.as_deref(), Some("load" | "resume")) || progress.fraction <= 0.0;
        progress.eta_s = match self.since {
            _ if passing => {
                self.since = None;
                None
            }
            Some((started, from)) if progress.fraction >= from => {
                let (gained, seconds) = (progress.fraction - from, now.duration_since(started).as_secs_f64());
                let measured = (gained > 0.0 && seconds >= ETA_MEASURE_S).then(|| seconds / gained * (1.0 - progress.fraction));
                let estimated = self.estimate_s.map(|whole| whole * (1.0 - progress.fraction));
                match (measured, estimated) {
                    (Some(measured), Some(estimated)) => {
                        let trust = (seconds / ETA_TRUST_S).min(1.0);
                        Some(trust * measured + (1.0 - trust) * estimated)
                    }
                    (Some(measured), None) => Some(measured),
                    (None, estimated) => estimated,
                }
            }
            // The first progress past the passing over (or one that went back): the measure starts here.
            _ => {
                self.since = Some((now, progress.fraction));
                None
            }
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ETA counts only the work this run did: a resumed job's frames passed over do not shorten it.
    #[test]
    fn an_eta_after_a_resume_counts_only_what_this_run_computed() {
        let start = Instant::now();
        let at = |s: f64| start + Duration::from_secs_f64(s);
        let mut rate = RunRate { estimate_s: Some(200.0), ..RunRate::default() };
        let mut step = |fraction: f64, stage: &str, t: f64| {
            let mut progress = Progress { fraction, stage: Some(stage.into()), eta_s: Some(0.1), ..Progress::default() };
            rate.set_eta(&mut progress, at(t));
            progress.eta_s
        };
        assert_eq!(step(0.0, "load", 0.0), None);
        // Half the clip passed over in a second, then 10 % computed in 10 s: 40 % left at that rate is 40 s.
        assert_eq!(step(0.3, "resume", 0.5), None);
        assert_eq!(step(0.5, "resume", 1.0), None);
        assert_eq!(step(0.5, "upscale", 1.0), None, "the first progress past the passing over starts the measure");
        // Measured over 10 s: the measure alone. Over 1 s: mostly the estimate (200 s for the whole, 80 s left).
        let eta = step(0.6, "upscale", 11.0).unwrap();
        assert!((eta - 40.0).abs() < 1e-6, "{eta}");
        let mut early = RunRate { estimate_s: Some(200.0), ..RunRate::default() };
        let mut progress = |fraction: f64, t: f64| {
            let mut progress = Progress { fraction, stage: Some("upscale".into()), ..Progress::default() };
            early.set_eta(&mut progress, at(t));
            progress.eta_s
        };
        progress(0.5, 0.0);
        let eta = progress(0.51, 1.0).unwrap();
        let (measured, estimated) = (1.0 / 0.01 * 0.49, 200.0 * 0.49);
        assert!((eta - (0.1 * measured + 0.9 * estimated)).abs() < 1e-6, "{eta}");
    }
}
