//! Prometheus at `GET /metrics`: one process-wide recorder for the `metrics` facade (the job layer
//! records through it, see `jobs::telemetry`), rendered by our own router rather than a second listener.
use std::sync::Mutex;
use std::time::Duration;

use metrics::{describe_counter, describe_gauge, describe_histogram, gauge, Unit};
use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder, PrometheusHandle, PrometheusRecorder};

use crate::jobs::telemetry::{self, JOBS_CREATED, JOBS_FINISHED, STAGE_SECONDS, UPLOAD_BYTES, UPLOAD_BYTES_TOTAL};
use crate::jobs::JobStatus;

const JOBS: &str = "vaebox_jobs";

/// From a 10 ms probe to an hour-long restore; roughly ×2–2.5 apart so a distribution keeps its shape.
const SECONDS_BUCKETS: [f64; 18] =
    [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0];

/// 1 KiB to 16 GiB in steps of ×4: a latent of a few KiB up to the largest upload a config allows.
const BYTES_BUCKETS: [f64; 13] = {
    let mut buckets = [0.0; 13];
    let mut i = 0;
    while i < buckets.len() {
        buckets[i] = (1u64 << (10 + 2 * i)) as f64;
        i += 1;
    }
    buckets
};

/// Histograms are drained into their buckets at every scrape; between scrapes this keeps their
/// pending samples from growing without bound.
const UPKEEP_INTERVAL: Duration = Duration::from_secs(5);

#[derive(Clone)]
pub struct Metrics {
    handle: PrometheusHandle,
}

/// The recorder with vaebox's buckets, not installed: `install` makes it the process's, tests use it locally.
pub fn recorder() -> PrometheusRecorder {
    PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Full(STAGE_SECONDS.into()), &SECONDS_BUCKETS)
        .and_then(|builder| builder.set_buckets_for_metric(Matcher::Full(UPLOAD_BYTES.into()), &BYTES_BUCKETS))
        .expect("bucket lists are not empty")
        .build_recorder()
}

impl Metrics {
    /// Installs the process-wide recorder the first time (the `metrics` facade has one per process);
    /// later calls share it, so a second server in the same process reports into the same registry.
    pub fn install() -> Result<Metrics, BuildError> {
        static INSTALLED: Mutex<Option<PrometheusHandle>> = Mutex::new(None);
        let mut installed = INSTALLED.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(handle) = installed.as_ref() {
            return Ok(Metrics { handle: handle.clone() });
        }
        let recorder = recorder();
        let handle = recorder.handle();
        metrics::set_global_recorder(recorder)?;
        describe();
        telemetry::register_counters();
        let upkeep = handle.clone();
        std::thread::Builder::new()
            .name("metrics-upkeep".into())
            .spawn(move || loop {
                std::thread::sleep(UPKEEP_INTERVAL);
                upkeep.run_upkeep();
            })
            .expect("spawn the metrics upkeep thread");
        *installed = Some(handle.clone());
        Ok(Metrics { handle })
    }

    /// The exposition text; the jobs gauge is read from the store at each scrape, since jobs change
    /// status in other processes' eyes too (a restart re-queues them).
    pub fn render(&self, jobs_by_status: &[(JobStatus, i64)]) -> String {
        for (status, n) in jobs_by_status {
            gauge!(JOBS, "status" => status.as_str()).set(*n as f64);
        }
        self.handle.render()
    }
}

fn describe() {
    describe_gauge!(JOBS, "Jobs in the store by status.");
    describe_counter!(JOBS_CREATED, "Jobs accepted since start, by op.");
    describe_counter!(UPLOAD_BYTES_TOTAL, Unit::Bytes, "Bytes accepted in uploads, by op.");
    describe_counter!(JOBS_FINISHED, "Jobs finished since start, by op and status.");
    describe_histogram!(UPLOAD_BYTES, Unit::Bytes, "Size of each accepted upload, by op.");
    describe_histogram!(
        STAGE_SECONDS,
        Unit::Seconds,
        "Wall-clock seconds per stage of each succeeded job, by op and stage (queued is the wait in the queue)."
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jobs::telemetry::{job_created, job_finished};
    use crate::jobs::Timings;
use crate::models::Op;

    fn line_value(text: &str, series: &str) -> Option<f64> {
        text.lines().find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
    }

    #[test]
    fn stages_and_uploads_land_in_their_buckets() {
        let recorder = recorder();
        let upscale = Timings { queued: Some(0.004), compute: Some(0.3), total: Some(2.0), ..Timings::default() };
        let restore = Timings { compute: Some(700.0), dit: Some(650.0), color_fix: Some(0.02), ..Timings::default() };
        metrics::with_local_recorder(&recorder, || {
            job_created(Op::Upscale, Some(5_000));
            job_created(Op::Upscale, Some(3 << 30));
            job_finished(Op::Upscale, JobStatus::Succeeded, &upscale);
            job_finished(Op::Upscale, JobStatus::Failed, &Timings { total: Some(0.001), ..Timings::default() });
            job_finished(Op::Restore, JobStatus::Succeeded, &restore);
        });
        let text = recorder.handle().render();
        let value = |series: &str| line_value(&text, series).unwrap_or_else(|| panic!("no `{series}` in:\n{text}"));

        // Prometheus buckets are cumulative and their bound is inclusive.
        assert_eq!(value(r#"vaebox_upload_bytes_bucket{op="upscale",le="4096"}"#), 0.0);
        assert_eq!(value(r#"vaebox_upload_bytes_bucket{op="upscale",le="16384"}"#), 1.0);
        assert_eq!(value(r#"vaebox_upload_bytes_bucket{op="upscale",le="1073741824"}"#), 1.0);
        assert_eq!(value(r#"vaebox_upload_bytes_bucket{op="upscale",le="4294967296"}"#), 2.0);
        assert_eq!(value(r#"vaebox_upload_bytes_bucket{op="upscale",le="17179869184"}"#), 2.0);
        assert_eq!(value(r#"vaebox_upload_bytes_sum{op="upscale"}"#), 5_000.0 + (3u64 << 30) as f64);
        assert_eq!(value(r#"vaebox_upload_bytes_total{op="upscale"}"#), 5_000.0 + (3u64 << 30) as f64);
        assert_eq!(value(r#"vaebox_jobs_created_total{op="upscale"}"#), 2.0);

        assert_eq!(value(r#"vaebox_job_stage_seconds_bucket{op="upscale",stage="queued",le="0.01"}"#), 1.0);
        assert_eq!(value(r#"vaebox_job_stage_seconds_bucket{op="upscale",stage="compute",le="0.25"}"#), 0.0);
        assert_eq!(value(r#"vaebox_job_stage_seconds_bucket{op="upscale",stage="compute",le="0.5"}"#), 1.0);
        assert_eq!(value(r#"vaebox_job_stage_seconds_bucket{op="upscale",stage="total",le="1"}"#), 0.0);
        assert_eq!(value(r#"vaebox_job_stage_seconds_bucket{op="upscale",stage="total",le="2.5"}"#), 1.0);
        assert_eq!(value(r#"vaebox_job_stage_seconds_bucket{op="upscale",stage="total",le="+Inf"}"#), 1.0);
        // The failed job is counted as finished but kept out of the latency distributions.
        assert_eq!(value(r#"vaebox_job_stage_seconds_count{op="upscale",stage="total"}"#), 1.0);
        assert_eq!(value(r#"vaebox_jobs_finished_total{op="upscale",status="failed"}"#), 1.0);
        assert!(!text.contains(r#"op="upscale",stage="dit""#), "an upscale has no DiT stage:\n{text}");

        assert_eq!(value(r#"vaebox_job_stage_seconds_bucket{op="restore",stage="dit",le="600"}"#), 0.0);
        assert_eq!(value(r#"vaebox_job_stage_seconds_bucket{op="restore",stage="dit",le="1200"}"#), 1.0);
        assert_eq!(value(r#"vaebox_job_stage_seconds_bucket{op="restore",stage="color_fix",le="0.025"}"#), 1.0);
        assert_eq!(value(r#"vaebox_job_stage_seconds_sum{op="restore",stage="compute"}"#), 700.0);
    }
}
