//! A VAE job with no budget stays within the host's memory (issue 53, item 6): a zip of large PNG frames is
//! a few KB on the wire and tens of GB decoded through the model at whole frames (85 frames of 4096² took
//! 19.7 GB of this 24 GB machine before the bound). With `host_memory_mib` as the host's room, a job whose
//! whole frames would not fit is planned under it (the plan says so) and its measured peak stays there;
//! one that cannot fit at all fails at once, saying what it needs.
use crate::common;

use std::path::Path;
use std::time::Duration;

use common::*;
use serde_json::Value;

/// What the host gives a job here: under the 1.5 GB that whole 768² frames take, over their smallest plan.
const HOST_MIB: u64 = 1200;
const QUERY: &str = "op=vae_encode&model=wan21-small&dtype=f32&filename=frames.zip";

fn peak_mib(job: &Value) -> f64 {
    job["timings"]["peak_host_bytes"].as_f64().unwrap_or_else(|| panic!("no peak in {}", job["timings"])) / (1u64 << 20) as f64
}

async fn encode(client: &reqwest::Client, server: &Server, dir: &Path, size: &str) -> Value {
    let (status, job) = upload_raw(client, server, QUERY, png_zip_of_clip(dir, &media("carphone_pristine.mp4"), 5, size)).await;
    assert_eq!(status, 202, "{job}");
    wait_for_final(client, server, job["id"].as_str().unwrap(), Duration::from_secs(300)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vae_encode_of_large_frames_is_bounded_by_the_hosts_memory() {
    let dir = tempfile::tempdir().unwrap();
    let models = models_with_small_wan21(dir.path());
    let server = Server::start(dir.path(), &[("VAEBOX_MODELS_DIR", models.to_str().unwrap()), ("VAEBOX_HOST_MEMORY_MIB", &HOST_MIB.to_string())]);
    let client = client();
    let folder = |name: &str| {
        let path = dir.path().join(name);
        std::fs::create_dir(&path).unwrap();
        path
    };

    // The same job on a tiny frame: the model and the process, which a job's peak includes.
    let baseline = encode(&client, &server, &folder("tiny"), "64:64").await;
    assert_eq!(baseline["status"], "succeeded", "{baseline}");
    assert!(baseline["plan"]["fallbacks"].as_array().is_some_and(|f| f.is_empty()), "a small job was bounded: {}", baseline["plan"]);

    let job = encode(&client, &server, &folder("large"), "768:768").await;
    assert_eq!(job["status"], "succeeded", "{job}");
    let plan = &job["plan"];
    let note = plan["fallbacks"][0].as_str().unwrap_or_default();
    assert!(note.starts_with("planned under the host's memory"), "the plan does not say it was bounded by the host: {plan}");
    let budget = plan["memory_budget_mib"].as_u64().unwrap_or_else(|| panic!("no budget in {plan}"));
    assert!(budget < HOST_MIB && plan["fits_budget"] == true, "the plan is not under the host's {HOST_MIB} MiB: {plan}");
    let used = peak_mib(&job) - peak_mib(&baseline);
    println!("host {HOST_MIB} MiB, 768²: budget {budget} MiB, measured {used:.0} MiB over the tiny job's peak; plan {plan}");
    assert!(used <= HOST_MIB as f64, "the job took {used:.0} MiB, over the host's {HOST_MIB} MiB: {plan}");
    assert_eq!(plan["latent_shape"], serde_json::json!([1, 16, 2, 96, 96]), "{plan}");

    let too_large = encode(&client, &server, &folder("too-large"), "1024:1024").await;
    println!("1024²: {}", too_large["error"]);
    assert_eq!((too_large["status"].as_str(), too_large["error"]["code"].as_str()), (Some("failed"), Some("out-of-memory")), "{too_large}");
    let message = too_large["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("1024×1024 need at least") && message.contains(&format!("the host gives {HOST_MIB} MiB")), "{message}");
    assert_eq!(too_large["progress"]["done"].as_u64().unwrap_or(0), 0, "it ran before failing: {too_large}");
}
