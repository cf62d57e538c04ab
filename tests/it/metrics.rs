//! `/metrics` after one real upscale job: the upload and every stage the job went through appear as
//! Prometheus histograms, agreeing with the bytes sent and with the timings in the job's own record.
use crate::common;

use common::*;

/// The value of one exposition line, `series` being the name with its labels exactly as rendered.
fn value(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no `{series}` in /metrics:\n{text}"))
}

/// The `le` bounds and cumulative counts of one histogram series, in the order rendered.
fn buckets(text: &str, prefix: &str) -> Vec<(String, f64)> {
    text.lines()
        .filter_map(|line| {
            let rest = line.strip_prefix(prefix)?.strip_prefix(",le=\"")?;
            let (le, count) = rest.split_once("\"} ")?;
            Some((le.to_string(), count.parse().ok()?))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upscale_job_fills_the_stage_and_upload_histograms() {
    let dir = tempfile::tempdir().unwrap();
    let clip = dir.path().join("carphone2.mp4");
    make_clip(&media("carphone_pristine.mp4"), 2, false, &clip);
    let body = std::fs::read(&clip).unwrap();
    let sent = body.len() as f64;
    let server = Server::start(dir.path(), &[]);
    let client = client();

    let before = client.get(server.url("/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(!before.contains("vaebox_job_stage_seconds_count"), "no job ran yet:\n{before}");

    let job = run_job(&client, &server, "op=upscale&scale=2&model=realesrgan-animevideov3", body).await;
    let response = client.get(server.url("/metrics")).send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert!(response.headers()["content-type"].to_str().unwrap().starts_with("text/plain"));
    let text = response.text().await.unwrap();

    assert!(text.contains("# TYPE vaebox_job_stage_seconds histogram"), "{text}");
    assert!(text.contains("# TYPE vaebox_upload_bytes histogram"), "{text}");
    assert_eq!(value(&text, r#"vaebox_upload_bytes_count{op="upscale"}"#), 1.0);
    assert_eq!(value(&text, r#"vaebox_upload_bytes_sum{op="upscale"}"#), sent);
    assert_eq!(value(&text, r#"vaebox_upload_bytes_total{op="upscale"}"#), sent);
    let upload = buckets(&text, r#"vaebox_upload_bytes_bucket{op="upscale""#);
    // The clip is a few KiB: the first bound at or above its size holds it, every bound below does not.
    let first_holding = upload.iter().position(|(le, _)| le == "+Inf" || le.parse::<f64>().unwrap() >= sent).unwrap();
    assert!(upload[..first_holding].iter().all(|(_, n)| *n == 0.0), "{upload:?}");
    assert!(upload[first_holding..].iter().all(|(_, n)| *n == 1.0), "{upload:?}");
    assert_eq!(upload.first().map(|(le, _)| le.as_str()), Some("1024"), "{upload:?}");
    assert_eq!(upload.iter().rev().nth(1).map(|(le, _)| le.as_str()), Some("17179869184"), "{upload:?}");

    assert_eq!(value(&text, r#"vaebox_jobs_created_total{op="upscale"}"#), 1.0);
    assert_eq!(value(&text, r#"vaebox_jobs_finished_total{op="upscale",status="succeeded"}"#), 1.0);
    assert_eq!(value(&text, r#"vaebox_jobs{status="succeeded"}"#), 1.0);
    assert_eq!(value(&text, r#"vaebox_jobs{status="queued"}"#), 0.0);

    let timings = &job["timings"];
    for stage in ["queued", "load_model", "read", "compute", "write", "total"] {
        assert!(timings[stage].is_number(), "the job has no {stage} timing: {timings}");
    }
    // Every timing in seconds is a stage; a stage the job did not go through (null) has no series.
    let not_stages = ["fps", "peak_host_bytes", "peak_device_bytes", "device", "dtype"];
    for (stage, seconds) in timings.as_object().unwrap().iter().filter(|(key, _)| !not_stages.contains(&key.as_str())) {
        let Some(seconds) = seconds.as_f64() else {
            assert!(!text.contains(&format!(r#"stage="{stage}""#)), "{stage} is null in the job, yet it has a series:\n{text}");
            continue;
        };
        let series = format!(r#"vaebox_job_stage_seconds_count{{op="upscale",stage="{stage}"}}"#);
        assert_eq!(value(&text, &series), 1.0, "{stage}");
        let sum = value(&text, &format!(r#"vaebox_job_stage_seconds_sum{{op="upscale",stage="{stage}"}}"#));
        assert!((sum - seconds).abs() <= 1e-9 * seconds.max(1.0), "{stage}: histogram sum {sum} s, job's record {seconds} s");
        let stage_buckets = buckets(&text, &format!(r#"vaebox_job_stage_seconds_bucket{{op="upscale",stage="{stage}""#));
        assert_eq!(stage_buckets.first().map(|(le, _)| le.as_str()), Some("0.01"), "{stage}: {stage_buckets:?}");
        assert_eq!(stage_buckets.iter().rev().nth(1).map(|(le, _)| le.as_str()), Some("3600"), "{stage}: {stage_buckets:?}");
        for (le, count) in &stage_buckets {
            let holds = le == "+Inf" || seconds <= le.parse::<f64>().unwrap();
            assert_eq!(*count, if holds { 1.0 } else { 0.0 }, "{stage} = {seconds} s in bucket le={le}: {stage_buckets:?}");
        }
    }
    // The restore stages belong to restore jobs only.
    for stage in ["encode", "dit", "decode", "color_fix"] {
        assert!(!text.contains(&format!(r#"op="upscale",stage="{stage}""#)), "{stage} for an upscale:\n{text}");
    }
}
