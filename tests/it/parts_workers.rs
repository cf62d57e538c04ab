//! One job in parts over worker processes: two boxes on a PostgreSQL queue, each with its own data dir and a
//! `file://` storage between them. A worker killed (SIGKILL) mid-part loses its part to the other, which goes
//! on from the part's stored checkpoint and joins the parts: the result equals one worker's, frame for frame.
//! With `max_attempts=1` the lost part fails the job, naming the part.
use crate::common;
use crate::parts::{all_parts_running, clip_with_audio, parts, result_of, wait_until, SETTINGS, UPSCALE};

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::postgres::PgCluster;
use common::*;
use serde_json::Value;

/// An API and two workers, each on its own data dir, on one database (and a shared storage, when given).
struct Boxes {
    api: Server,
    workers: Vec<WorkerProcess>,
    log: PathBuf,
}

impl Boxes {
    fn start(dir: &Path, database: &str, storage: Option<&Path>, extra: &[(&str, &str)]) -> Boxes {
        let mut settings: Vec<(String, String)> = SETTINGS.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        settings.extend([("VAEBOX_LEASE_S".into(), "3".into()), ("VAEBOX_DATABASE".into(), database.into()), ("VAEBOX_CHECKPOINT_S".into(), "0.4".into())]);
        if let Some(storage) = storage {
            settings.push(("VAEBOX_STORAGE".into(), format!("file://{}", storage.display())));
        }
        settings.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let log = dir.join("boxes.log");
        let own = |name: &str| -> Vec<(String, String)> {
            match storage {
                Some(_) => vec![("VAEBOX_DATA_DIR".into(), dir.join(name).join("data").to_string_lossy().into_owned())],
                None => Vec::new(),
            }
        };
        let pairs = |extra: Vec<(String, String)>| -> Vec<(String, String)> { settings.iter().cloned().chain(extra).collect() };
        let api_settings = pairs([vec![("VAEBOX_ROLE".into(), "api".into())], own("api")].concat());
        let api = Server::start_logged(dir, &borrowed(&api_settings), &log);
        let workers = ["worker-a", "worker-b"]
            .iter()
            .map(|name| {
                let worker_settings = pairs(own(name));
                WorkerProcess::start(dir, name, &borrowed(&worker_settings), Some(&log))
            })
            .collect();
        Boxes { api, workers, log }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGKILL to the worker that runs `part`.
    fn kill_worker_of(&mut self, part: &Value) -> String {
        let name = part["worker"].as_str().expect("a running part names its worker").to_string();
        self.workers.iter_mut().find(|w| name.contains(&w.name)).expect("one of the two workers").kill9();
        name
    }
}

fn borrowed(owned: &[(String, String)]) -> Vec<(&str, &str)> {
    owned.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}

/// The stored checkpoint of part `id`, once it names at least one finished segment.
fn stored_segments(storage: &Path, id: &str) -> u64 {
    let text = std::fs::read(storage.join("jobs").join(id).join("resume/checkpoint.json")).unwrap_or_default();
    serde_json::from_slice::<Value>(&text).ok().and_then(|c| c["segments"].as_u64()).unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_two_boxes_a_part_whose_worker_is_killed_goes_on_elsewhere_and_the_result_equals_one_workers() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = PgCluster::start();
    let storage = dir.path().join("shared");
    let mut boxes = Boxes::start(dir.path(), &cluster.url(), Some(&storage), &[]);
    let client = client();
    let body = clip_with_audio(dir.path(), 48);
    let whole = run_job(&client, &boxes.api, &format!("{UPSCALE}&parts=1"), body.clone()).await;

    let (status, job) = upload_raw(&client, &boxes.api, UPSCALE, body).await;
    assert_eq!(status, 202, "{job}");
    let id = job["id"].as_str().unwrap().to_string();
    let running = wait_until(&client, &boxes.api, &id, "running in parts", all_parts_running).await;
    // The part goes on from what the storage holds: kill its worker once a segment of it is there.
    let victim = parts(&running)[0].clone();
    let victim_id = victim["id"].as_str().unwrap().to_string();
    let deadline = Instant::now() + Duration::from_secs(120);
    while stored_segments(&storage, &victim_id) == 0 {
        assert!(Instant::now() < deadline, "the part never stored a checkpoint\n{}", boxes.log());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let killed = boxes.kill_worker_of(&victim);

    let split = wait_for_final(&client, &boxes.api, &id, Duration::from_secs(300)).await;
    assert_eq!(split["status"], "succeeded", "{split}\n{}", boxes.log());
    let lost = parts(&split).into_iter().find(|p| p["id"] == victim_id.as_str()).unwrap();
    assert_eq!(lost["attempts"], 2, "the lost part ran again: {split}");
    assert_ne!(lost["worker"].as_str(), Some(killed.as_str()), "the other box finished it: {split}");
    assert!(boxes.log().contains("the job's last checkpoint came from the shared storage"), "the part went on from its stored checkpoint\n{}", boxes.log());

    let (whole_frames, _) = result_of(&client, &boxes.api, &whole, dir.path(), "whole").await;
    let (split_frames, probe) = result_of(&client, &boxes.api, &split, dir.path(), "split").await;
    assert_eq!(probe.frames, 48, "no frame lost or doubled");
    assert!(split_frames == whole_frames, "the joined parts' frames differ from one worker's");
    assert!(probe.has_audio);
    // The parts' checkpoints are gone from the storage once joined.
    let deadline = Instant::now() + Duration::from_secs(30);
    let stored = |id: &str| files_under(&storage.join("jobs").join(id).join("resume"));
    while parts(&split).iter().any(|p| !stored(p["id"].as_str().unwrap()).is_empty()) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for part in parts(&split) {
        assert_eq!(stored(part["id"].as_str().unwrap()), Vec::<PathBuf>::new(), "a joined part's checkpoints are removed from the storage");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_part_lost_past_max_attempts_fails_the_job_with_the_part_named() {
    let dir = tempfile::tempdir().unwrap();
    let database = dir.path().join("queue.db").to_string_lossy().into_owned();
    let mut boxes = Boxes::start(dir.path(), &database, None, &[("VAEBOX_MAX_ATTEMPTS", "1")]);
    let client = client();
    let (status, job) = upload_raw(&client, &boxes.api, UPSCALE, clip_with_audio(dir.path(), 48)).await;
    assert_eq!(status, 202, "{job}");
    let id = job["id"].as_str().unwrap().to_string();
    let running = wait_until(&client, &boxes.api, &id, "running in parts", all_parts_running).await;
    let victim = parts(&running)[1].clone();
    boxes.kill_worker_of(&victim);
    let failed = wait_for_final(&client, &boxes.api, &id, Duration::from_secs(120)).await;
    assert_eq!(failed["status"], "failed", "{failed}\n{}", boxes.log());
    assert_eq!(failed["error"]["code"], "attempts-exhausted", "{failed}");
    let message = failed["error"]["message"].as_str().unwrap();
    assert!(message.starts_with("part 2 of 2 (frames 24–the end) failed: "), "{message}");
    // The other part stops too.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, job) = get_json(&client, &boxes.api.url(&format!("/v1/jobs/{id}"))).await;
        let first = parts(&job)[0]["status"].as_str().unwrap().to_string();
        if first == "cancelled" || first == "succeeded" {
            break;
        }
        assert!(Instant::now() < deadline, "the other part ran on: {job}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
