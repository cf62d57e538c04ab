//! What a job's life reports through the `metrics` facade: the server installs a Prometheus recorder
//! (`api::metrics`); without one (`vaebox run`, benches) every call here is a no-op.
use metrics::{counter, histogram};

use super::model::{JobStatus, Timings};
use crate::models::Op;

pub const JOBS_CREATED: &str = "vaebox_jobs_created_total";
pub const JOBS_FINISHED: &str = "vaebox_jobs_finished_total";
pub const UPLOAD_BYTES_TOTAL: &str = "vaebox_upload_bytes_total";
/// A histogram: one observation per accepted upload.
pub const UPLOAD_BYTES: &str = "vaebox_upload_bytes";
/// A histogram labelled `op` and `stage`: one observation per stage a succeeded job went through.
pub const STAGE_SECONDS: &str = "vaebox_job_stage_seconds";

/// The statuses a job can finish in, in the order `vaebox_jobs_finished_total` lists them.
pub const FINISHED_STATUSES: [JobStatus; 3] = [JobStatus::Succeeded, JobStatus::Failed, JobStatus::Cancelled];

/// Every stage a job's timings can hold, by its label; the restore-only ones are `None` for other ops.
pub fn stages(t: &Timings) -> [(&'static str, Option<f64>); 11] {
    [
        ("queued", t.queued),
        ("probe", t.probe),
        ("load_model", t.load_model),
        ("read", t.read),
        ("compute", t.compute),
        ("write", t.write),
        ("total", t.total),
        ("encode", t.encode),
        ("dit", t.dit),
        ("decode", t.decode),
        ("color_fix", t.color_fix),
    ]
}

/// A job was queued, with the bytes received for it: none for a try's whole clip, which runs on the input
/// the box kept.
pub fn job_created(op: Op, upload_bytes: Option<u64>) {
    counter!(JOBS_CREATED, "op" => op.as_str()).increment(1);
    if let Some(upload_bytes) = upload_bytes {
        counter!(UPLOAD_BYTES_TOTAL, "op" => op.as_str()).increment(upload_bytes);
        histogram!(UPLOAD_BYTES, "op" => op.as_str()).record(upload_bytes as f64);
    }
}

/// A job left the executor. Only a succeeded job's stages enter the histograms: a job that failed
/// or was cancelled part-way would pull the latency distributions towards its early stop.
pub fn job_finished(op: Op, status: JobStatus, timings: &Timings) {
    counter!(JOBS_FINISHED, "op" => op.as_str(), "status" => status.as_str()).increment(1);
    if status != JobStatus::Succeeded {
        return;
    }
    for (stage, seconds) in stages(timings) {
        if let Some(seconds) = seconds.filter(|s| s.is_finite()) {
            histogram!(STAGE_SECONDS, "op" => op.as_str(), "stage" => stage).record(seconds);
        }
    }
}

/// Counters that exist from the start at zero, so a rate over the first job is not lost to a series
/// that appears only with its first increment.
pub fn register_counters() {
    for op in Op::ALL {
        counter!(JOBS_CREATED, "op" => op.as_str()).absolute(0);
        counter!(UPLOAD_BYTES_TOTAL, "op" => op.as_str()).absolute(0);
        for status in FINISHED_STATUSES {
            counter!(JOBS_FINISHED, "op" => op.as_str(), "status" => status.as_str()).absolute(0);
        }
    }
}
