//! A job as one short line, for `GET /v1/jobs/{id}/events?compact=1` followed in a terminal with `curl -N`:
//! what it does now and how far it is, or how it ended.
use crate::jobs::{Job, JobStatus, Progress};

pub fn line(job: &Job) -> String {
    match job.status {
        JobStatus::Queued => {
            let place = job.queue.as_ref().map(|place| format!(" · position {}", place.position)).unwrap_or_default();
            let start = job.queue.as_ref().and_then(|place| place.starts_in_s).map(|s| format!(" · starts in about {s:.0}s")).unwrap_or_default();
            format!("queued: {} with {}{place}{start}", job.op.as_str(), job.model)
        }
        JobStatus::Paused => match &job.progress {
            Some(progress) if progress.done > 0 => format!("paused at {}/{} {}", progress.done, progress.total, progress.unit),
            _ => "paused".into(),
        },
        JobStatus::Running if job.pausing => "running · pausing at the next checkpoint".into(),
        JobStatus::Running => match &job.progress {
            Some(progress) => format!("running {}", progress_words(progress)),
            None => "running".into(),
        },
        JobStatus::Succeeded => {
            let took = job.timings.as_ref().and_then(|t| t.total).map(|s| format!(" in {s:.1} s")).unwrap_or_default();
            match &job.output {
                Some(output) => format!("succeeded{took}: {} ({}) at {}", output.file_name, size(output.bytes), output.url),
                None => format!("succeeded{took}"),
            }
        }
        JobStatus::Failed => match &job.error {
            // One line: an ffmpeg message may hold several.
            Some(error) => format!("failed: {}: {}", error.code, error.message.replace('\n', " ")),
            None => "failed".into(),
        },
        JobStatus::Cancelled => match (&job.output, job.partial) {
            (Some(output), true) => format!("cancelled: the finished frames kept as {} ({}) at {}", output.file_name, size(output.bytes), output.url),
            _ => "cancelled".into(),
        },
    }
}

/// `42% · dit batch 2/5 · 12/40 frames · ETA 13s` (`ETA 2h 17m`: as the page writes it).
fn progress_words(progress: &Progress) -> String {
    let mut parts = vec![format!("{:.0}%", progress.fraction * 100.0)];
    parts.extend(progress.stage.clone());
    if progress.total > 0 {
        parts.push(format!("{}/{} {}", progress.done, progress.total, progress.unit));
    }
    parts.extend(progress.eta_s.map(|s| format!("ETA {}", crate::stats::duration_words(s))));
    parts.join(" · ")
}

fn size(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 20 => format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64),
        b if b >= 1 << 10 => format!("{:.1} KiB", b as f64 / 1024.0),
        b => format!("{b} bytes"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_reads_as_words() {
        let progress = Progress { done: 12, total: 40, unit: "frames".into(), fraction: 0.42, eta_s: Some(13.2), stage: Some("dit batch 2/5".into()) };
        assert_eq!(progress_words(&progress), "42% · dit batch 2/5 · 12/40 frames · ETA 13s");
        let long = Progress { eta_s: Some(8266.0), ..progress.clone() };
        assert_eq!(progress_words(&long), "42% · dit batch 2/5 · 12/40 frames · ETA 2h 17m");
        let minutes = Progress { eta_s: Some(187.4), ..progress.clone() };
        assert!(progress_words(&minutes).ends_with("ETA 3m 07s"), "{}", progress_words(&minutes));
        let starting = Progress { total: 0, eta_s: None, stage: None, fraction: 0.0, ..progress };
        assert_eq!(progress_words(&starting), "0%");
    }

    #[test]
    fn sizes_are_in_the_unit_that_fits() {
        assert_eq!((size(512), size(2048), size(3 << 20)), ("512 bytes".into(), "2.0 KiB".into(), "3.0 MiB".into()));
    }
}
