//! Prometheus text metrics: counters kept here from the same numbers that go into each job's row.
use std::fmt::Write;
use std::sync::Mutex;

use crate::jobs::{JobStatus, Timings};

#[derive(Default)]
pub struct Metrics {
    inner: Mutex<Counters>,
}

#[derive(Default)]
struct Counters {
    created: u64,
    upload_bytes: u64,
    probe_seconds: f64,
    finished: [u64; 3],
    stage_seconds: [f64; STAGES.len()],
    frames_per_second_sum: f64,
}

const STAGES: [&str; 6] = ["queued", "load_model", "read", "compute", "write", "total"];

fn stage_values(t: &Timings) -> [Option<f64>; STAGES.len()] {
    [t.queued, t.load_model, t.read, t.compute, t.write, t.total]
}

impl Metrics {
    pub fn record_created(&self, bytes: u64, probe_s: f64) {
        let mut c = self.inner.lock().unwrap();
        c.created += 1;
        c.upload_bytes += bytes;
        c.probe_seconds += probe_s;
    }

    pub fn record_finished(&self, status: JobStatus, timings: &Timings) {
        let mut c = self.inner.lock().unwrap();
        let slot = match status {
            JobStatus::Succeeded => 0,
            JobStatus::Failed => 1,
            _ => 2,
        };
        c.finished[slot] += 1;
        for (sum, value) in c.stage_seconds.iter_mut().zip(stage_values(timings)) {
            *sum += value.unwrap_or(0.0);
        }
        c.frames_per_second_sum += timings.fps.unwrap_or(0.0);
    }

    pub fn render(&self, jobs_by_status: &[(JobStatus, i64)]) -> String {
        let c = self.inner.lock().unwrap();
        let mut out = String::new();
        let _ = writeln!(out, "# HELP vaebox_jobs Jobs in the store by status.\n# TYPE vaebox_jobs gauge");
        for (status, n) in jobs_by_status {
            let _ = writeln!(out, "vaebox_jobs{{status=\"{}\"}} {n}", status.as_str());
        }
        let _ = writeln!(out, "# HELP vaebox_jobs_created_total Jobs accepted since start.\n# TYPE vaebox_jobs_created_total counter");
        let _ = writeln!(out, "vaebox_jobs_created_total {}", c.created);
        let _ = writeln!(out, "# HELP vaebox_upload_bytes_total Bytes accepted in uploads.\n# TYPE vaebox_upload_bytes_total counter");
        let _ = writeln!(out, "vaebox_upload_bytes_total {}", c.upload_bytes);
        let _ = writeln!(out, "# HELP vaebox_probe_seconds_total Time spent probing uploads.\n# TYPE vaebox_probe_seconds_total counter");
        let _ = writeln!(out, "vaebox_probe_seconds_total {}", c.probe_seconds);
        let _ = writeln!(out, "# HELP vaebox_jobs_finished_total Jobs finished since start.\n# TYPE vaebox_jobs_finished_total counter");
        for (status, n) in ["succeeded", "failed", "cancelled"].iter().zip(c.finished) {
            let _ = writeln!(out, "vaebox_jobs_finished_total{{status=\"{status}\"}} {n}");
        }
        let _ = writeln!(out, "# HELP vaebox_job_stage_seconds_total Wall-clock seconds per job stage, summed over finished jobs.\n# TYPE vaebox_job_stage_seconds_total counter");
        for (stage, sum) in STAGES.iter().zip(c.stage_seconds) {
            let _ = writeln!(out, "vaebox_job_stage_seconds_total{{stage=\"{stage}\"}} {sum}");
        }
        out
    }
}
