//! Several workers on one queue: an API process (`serve --role api`) and two worker processes
//! (`serve --role worker`) on loopback, sharing a database — a throwaway PostgreSQL cluster, and the same
//! cases on one SQLite file — and either one data dir or, each with its own, a shared storage: a throwaway
//! S3 server (moto) or a `file://` folder. Jobs spread over both workers; a worker killed mid-job loses the
//! job to the other; a job whose worker is lost too often fails with the reasons; a database outage
//! answers 503 while workers wait.
use crate::common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::gate::Gate;
use common::moto::MotoServer;
use common::postgres::PgCluster;
use common::*;
use serde_json::Value;

const QUERY: &str = "op=upscale&model=realesrgan-animevideov3&scale=4&dtype=f32";

/// The processes of one service: the API and its workers on one database, and on one data dir unless
/// the settings name a shared storage (`VAEBOX_STORAGE`): then each has its own, `dir/NAME/data`.
struct Fleet {
    api: Server,
    workers: Vec<WorkerProcess>,
    settings: Vec<(String, String)>,
    log: PathBuf,
}

impl Fleet {
    /// `database`: a `postgres://` URL, or none for the SQLite file in the shared data dir.
    fn start(dir: &Path, database: Option<&str>, workers: &[&str], extra: &[(&str, &str)]) -> Fleet {
        let mut settings: Vec<(String, String)> = vec![
            ("VAEBOX_THREADS".into(), "1".into()),
            ("VAEBOX_LEASE_S".into(), "3".into()),
            ("VAEBOX_CHUNK_FRAMES".into(), "2".into()),
        ];
        if let Some(url) = database {
            settings.push(("VAEBOX_DATABASE".into(), url.into()));
        }
        settings.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let log = dir.join("fleet.log");
        let mut api_settings = settings.clone();
        api_settings.push(("VAEBOX_ROLE".into(), "api".into()));
        api_settings.extend(own_data_dir(dir, &settings, "api"));
        let api = Server::start_logged(dir, &pairs(&api_settings), &log);
        let mut fleet = Fleet { api, workers: Vec::new(), settings, log };
        for name in workers {
            fleet.add_worker(dir, name);
        }
        fleet
    }

    fn add_worker(&mut self, dir: &Path, name: &str) {
        self.add_worker_with(dir, name, &[]);
    }

    /// A worker whose settings differ from the others' by `overrides`.
    fn add_worker_with(&mut self, dir: &Path, name: &str, overrides: &[(&str, &str)]) {
        let mut settings = self.settings.clone();
        settings.extend(own_data_dir(dir, &self.settings, name));
        settings.extend(overrides.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        self.workers.push(WorkerProcess::start(dir, name, &pairs(&settings), Some(&self.log)));
    }

    fn worker(&mut self, name: &str) -> &mut WorkerProcess {
        self.workers.iter_mut().find(|w| w.name == name).unwrap()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// With a shared storage, the process's own data dir.
fn own_data_dir(dir: &Path, settings: &[(String, String)], name: &str) -> Option<(String, String)> {
    let shared_storage = settings.iter().any(|(key, _)| key == "VAEBOX_STORAGE");
    shared_storage.then(|| ("VAEBOX_DATA_DIR".into(), dir.join(name).join("data").to_string_lossy().into_owned()))
}

fn pairs(settings: &[(String, String)]) -> Vec<(&str, &str)> {
    settings.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}

fn clip(dir: &Path, frames: u32) -> Vec<u8> {
    let path = dir.join(format!("carphone{frames}.mp4"));
    make_clip(&media("carphone_pristine.mp4"), frames, false, &path);
    std::fs::read(&path).unwrap()
}

async fn submit(client: &reqwest::Client, fleet: &Fleet, body: &[u8], name: &str) -> String {
    let (status, job) = upload_raw(client, &fleet.api, &format!("{QUERY}&filename={name}"), body.to_vec()).await;
    assert_eq!(status, 202, "{job}");
    job["id"].as_str().unwrap().to_string()
}

/// Waits until the job runs its `attempt`th time with at least one chunk done; returns it.
async fn running_with_progress(client: &reqwest::Client, fleet: &Fleet, id: &str, attempt: i64) -> Value {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (_, job) = get_json(client, &fleet.api.url(&format!("/v1/jobs/{id}"))).await;
        if job["status"] == "running" && job["attempts"] == attempt && job["progress"]["done"].as_u64().unwrap_or(0) > 0 {
            return job;
        }
        assert!(Instant::now() < deadline, "the job never got going: {job}\n{}", fleet.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The result downloads from the API and is the whole upscaled clip.
async fn assert_result_downloads(client: &reqwest::Client, fleet: &Fleet, dir: &Path, job: &Value) {
    let id = job["id"].as_str().unwrap();
    let response = client.get(fleet.api.url(&format!("/v1/jobs/{id}/result"))).send().await.unwrap();
    assert_eq!(response.status(), 200, "{job}");
    let path = dir.join(format!("{id}.mp4"));
    std::fs::write(&path, response.bytes().await.unwrap()).unwrap();
    let probed = ffprobe(&path);
    assert_eq!((probed.width, probed.height), (704, 576));
    assert_eq!(probed.frames, job["input"]["media"]["frames"].as_u64().unwrap());
}

async fn jobs_spread_over_both_workers(dir: &Path, database: Option<&str>, extra: &[(&str, &str)], count: usize) -> (Fleet, Vec<String>) {
    let fleet = Fleet::start(dir, database, &["worker-a", "worker-b"], extra);
    let client = client();
    let body = clip(dir, 2);
    let mut ids = Vec::new();
    for i in 0..count {
        ids.push(submit(&client, &fleet, &body, &format!("clip{i}.mp4")).await);
    }
    let mut ran_on = BTreeSet::new();
    for id in &ids {
        let job = wait_for_final(&client, &fleet.api, id, Duration::from_secs(600)).await;
        assert_eq!(job["status"], "succeeded", "{job}\n{}", fleet.log());
        assert_eq!(job["attempts"], 1, "{job}");
        ran_on.insert(job["worker"].as_str().unwrap().to_string());
        assert_result_downloads(&client, &fleet, dir, &job).await;
    }
    assert_eq!(ran_on, BTreeSet::from(["worker-a".to_string(), "worker-b".to_string()]), "both workers should have run jobs");
    // A job's own outcome ends its lease: a beat after that write (woken by the write's news, at once on
    // PostgreSQL) once logged "lost the job's lease" and raised the job's cancel just before "job succeeded".
    let log = fleet.log();
    assert!(!log.contains("lost the job's lease"), "a worker took its own finished job for a lost lease:\n{log}");

    // The API runs no job itself and shows the workers it shares the queue with.
    let (status, health) = get_json(&client, &fleet.api.url("/healthz")).await;
    assert_eq!(status, 200);
    assert_eq!(health["device"], "none", "{health}");
    let workers: BTreeSet<&str> = health["workers"].as_array().unwrap().iter().map(|w| w["name"].as_str().unwrap()).collect();
    assert_eq!(workers, BTreeSet::from(["worker-a", "worker-b"]), "{health}");
    assert!(health["workers"].as_array().unwrap().iter().all(|w| w["device"] == "cpu" && w["last_heartbeat"].is_string()), "{health}");
    (fleet, ids)
}

async fn a_killed_worker_loses_its_job_to_the_other(dir: &Path, database: Option<&str>, extra: &[(&str, &str)]) {
    let mut fleet = Fleet::start(dir, database, &["worker-a", "worker-b"], extra);
    let client = client();
    let long = submit(&client, &fleet, &clip(dir, 40), "long.mp4").await;
    let job = running_with_progress(&client, &fleet, &long, 1).await;
    let first = job["worker"].as_str().unwrap().to_string();
    let other = if first == "worker-a" { "worker-b" } else { "worker-a" };
    fleet.worker(&first).kill9();
    // Work queued after the loss is not held up by it.
    let short = clip(dir, 2);
    let mut later = Vec::new();
    for i in 0..3 {
        later.push(submit(&client, &fleet, &short, &format!("after{i}.mp4")).await);
    }

    let job = wait_for_final(&client, &fleet.api, &long, Duration::from_secs(600)).await;
    assert_eq!(job["status"], "succeeded", "{job}\n{}", fleet.log());
    assert_eq!(job["worker"], other, "{job}");
    assert_eq!(job["attempts"], 2, "claimed once by each worker: {job}");
    assert_result_downloads(&client, &fleet, dir, &job).await;
    for id in &later {
        let job = wait_for_final(&client, &fleet.api, id, Duration::from_secs(300)).await;
        assert_eq!((job["status"].as_str(), job["worker"].as_str()), (Some("succeeded"), Some(other)), "{job}");
    }
    // The killed worker's heartbeats stopped; after three leases it is no longer listed.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let (_, health) = get_json(&client, &fleet.api.url("/healthz")).await;
    let workers: Vec<&str> = health["workers"].as_array().unwrap().iter().map(|w| w["name"].as_str().unwrap()).collect();
    assert_eq!(workers, vec![other], "{health}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_twenty_jobs_spread_over_two_workers_and_every_result_downloads() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = PgCluster::start();
    jobs_spread_over_both_workers(dir.path(), Some(&cluster.url()), &[], 20).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_twenty_jobs_spread_over_two_workers_and_every_result_downloads() {
    let dir = tempfile::tempdir().unwrap();
    jobs_spread_over_both_workers(dir.path(), None, &[], 20).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_worker_killed_mid_job_loses_it_to_the_other_which_completes_it_once() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = PgCluster::start();
    a_killed_worker_loses_its_job_to_the_other(dir.path(), Some(&cluster.url()), &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_worker_killed_mid_job_loses_it_to_the_other_which_completes_it_once() {
    let dir = tempfile::tempdir().unwrap();
    a_killed_worker_loses_its_job_to_the_other(dir.path(), None, &[]).await;
}

/// No disk in common: inputs go to S3 from the API, workers fetch them into their own data dirs and put
/// their results back; the API streams results (and Range requests) from S3 and previews from a copy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_twenty_jobs_on_two_workers_with_no_shared_disk_every_result_streams_from_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = PgCluster::start();
    let s3 = MotoServer::start(dir.path());
    s3.create_bucket("vaebox");
    let storage = s3.storage_env("vaebox", "box1");
    let (fleet, ids) = jobs_spread_over_both_workers(dir.path(), Some(&cluster.url()), &pairs(&storage), 20).await;
    let client = client();
    let id = &ids[0];
    let job_dir = |name: &str| dir.path().join(name).join("data/jobs").join(id);

    // Each job's input and result are in the bucket, and nowhere else but the API's copy of the input.
    let keys = s3.keys("vaebox", &format!("box1/jobs/{id}/"));
    assert_eq!(keys, vec![format!("box1/jobs/{id}/clip0_x4.mp4"), format!("box1/jobs/{id}/input.mp4")], "{keys:?}");
    assert!(job_dir("api").join("input.mp4").exists());
    assert!(!job_dir("api").join("clip0_x4.mp4").exists(), "the API streamed the result without a copy");
    for worker in ["worker-a", "worker-b"] {
        assert!(!job_dir(worker).exists(), "{worker} kept its copies after the job");
    }

    // A Range request is answered from the store with the bytes of the whole file.
    let url = fleet.api.url(&format!("/v1/jobs/{id}/result"));
    let whole = client.get(&url).send().await.unwrap().bytes().await.unwrap();
    let part = client.get(&url).header("Range", "bytes=100-1123").send().await.unwrap();
    assert_eq!(part.status(), 206);
    assert_eq!(part.headers()["content-range"].to_str().unwrap(), format!("bytes 100-1123/{}", whole.len()));
    assert_eq!(part.bytes().await.unwrap(), whole[100..1124]);
    let beyond = client.get(&url).header("Range", format!("bytes={}-", whole.len())).send().await.unwrap();
    assert_eq!(beyond.status(), 416);

    // The page's thumbnail of the output is made from a copy the API fetched.
    let thumbnail = client.get(fleet.api.url(&format!("/v1/jobs/{id}/thumbnail"))).send().await.unwrap();
    assert_eq!((thumbnail.status().as_u16(), thumbnail.headers()["content-type"].to_str().unwrap()), (200, "image/png"));

    // Deleting the job removes its files from the store too.
    let deleted = client.delete(fleet.api.url(&format!("/v1/jobs/{id}"))).send().await.unwrap();
    assert_eq!(deleted.status(), 204);
    assert_eq!(s3.keys("vaebox", &format!("box1/jobs/{id}/")), Vec::<String>::new());
    assert!(!job_dir("api").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_a_worker_killed_mid_job_loses_it_to_the_other_with_no_shared_disk() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = PgCluster::start();
    let s3 = MotoServer::start(dir.path());
    s3.create_bucket("vaebox");
    let storage = s3.storage_env("vaebox", "");
    a_killed_worker_loses_its_job_to_the_other(dir.path(), Some(&cluster.url()), &pairs(&storage)).await;
}

/// A shared mount as the storage, and one SQLite file as the queue: the same spread with no data dir in common.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_storage_jobs_spread_over_two_workers_with_their_own_data_dirs() {
    let dir = tempfile::tempdir().unwrap();
    let database = dir.path().join("queue.db").to_string_lossy().into_owned();
    let storage = format!("file://{}", dir.path().join("shared").display());
    let (_, ids) = jobs_spread_over_both_workers(dir.path(), Some(&database), &[("VAEBOX_STORAGE", &storage)], 6).await;
    for id in &ids {
        assert!(dir.path().join("shared/jobs").join(id).join("input.mp4").exists());
    }
}

/// An upload the storage cannot take is refused with 503 and nothing is queued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_the_storage_cannot_take_answers_503_and_queues_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let s3 = MotoServer::start(dir.path());
    // No bucket: every put fails.
    let storage = s3.storage_env("missing-bucket", "");
    let fleet = Fleet::start(dir.path(), Some(&dir.path().join("queue.db").to_string_lossy()), &[], &pairs(&storage));
    let client = client();
    let (status, refusal) = upload_raw(&client, &fleet.api, &format!("{QUERY}&filename=a.mp4"), clip(dir.path(), 2)).await;
    assert_eq!((status, refusal["error"]["code"].as_str()), (503, Some("storage-unavailable")), "{refusal}");
    let (_, list) = get_json(&client, &fleet.api.url("/v1/jobs")).await;
    assert_eq!(list["jobs"].as_array().map(Vec::len), Some(0), "{list}");
}

/// Claims that fit the device: a worker whose device offers less than a job needs (its weights plus the
/// working memory it asks for) leaves the job to one that can hold it, and a job no worker can hold is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_claims_only_jobs_its_device_can_hold() {
    let dir = tempfile::tempdir().unwrap();
    let mut fleet = Fleet::start(dir.path(), Some(&dir.path().join("queue.db").to_string_lossy()), &[], &[]);
    fleet.add_worker_with(dir.path(), "small", &[("VAEBOX_DEVICE_MEMORY_MIB", "256")]);
    fleet.add_worker_with(dir.path(), "large", &[("VAEBOX_DEVICE_MEMORY_MIB", "1024")]);
    let client = client();
    let deadline = Instant::now() + Duration::from_secs(60);
    let health = loop {
        let (_, health) = get_json(&client, &fleet.api.url("/healthz")).await;
        if health["workers"].as_array().is_some_and(|workers| workers.len() == 2) {
            break health;
        }
        assert!(Instant::now() < deadline, "the workers never showed: {health}\n{}", fleet.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let offers: Vec<(&str, u64)> =
        health["workers"].as_array().unwrap().iter().map(|w| (w["name"].as_str().unwrap(), w["device_memory_bytes"].as_u64().unwrap())).collect();
    assert_eq!(offers, vec![("large", 1024 << 20), ("small", 256 << 20)], "{health}");

    let body = clip(dir.path(), 2);
    let query = |budget_mib: u64, name: &str| format!("{QUERY}&memory_budget_mib={budget_mib}&filename={name}");
    let mut ids = Vec::new();
    for i in 0..6 {
        // Half need more than the small device offers.
        let budget = if i % 2 == 0 { 512 } else { 64 };
        let (status, job) = upload_raw(&client, &fleet.api, &query(budget, &format!("clip{i}.mp4")), body.clone()).await;
        assert_eq!(status, 202, "{job}");
        ids.push((budget, job["id"].as_str().unwrap().to_string()));
    }
    let mut ran_on = BTreeSet::new();
    for (budget, id) in &ids {
        let job = wait_for_final(&client, &fleet.api, id, Duration::from_secs(300)).await;
        assert_eq!(job["status"], "succeeded", "{job}\n{}", fleet.log());
        if *budget == 512 {
            assert_eq!(job["worker"], "large", "a job for more than 256 MiB ran on the small device: {job}");
        }
        ran_on.insert(job["worker"].as_str().unwrap().to_string());
    }
    println!("jobs ran on {ran_on:?}");

    let (status, refusal) = upload_raw(&client, &fleet.api, &query(2048, "huge.mp4"), body.clone()).await;
    assert_eq!((status, refusal["error"]["code"].as_str()), (422, Some("no-worker-fits")), "{refusal}");
    assert!(refusal["error"]["message"].as_str().unwrap().contains("the largest worker offers 1024 MiB"), "{refusal}");
}

/// A storage outage as a worker sees it: the claimed job waits for the storage instead of failing, and
/// completes once the storage answers again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_waits_out_a_storage_outage_and_then_completes_the_job() {
    let dir = tempfile::tempdir().unwrap();
    let s3 = MotoServer::start(dir.path());
    s3.create_bucket("vaebox");
    let gate = Gate::start(s3.port, false);
    let storage = s3.storage_env("vaebox", "");
    let mut fleet = Fleet::start(dir.path(), Some(&dir.path().join("queue.db").to_string_lossy()), &[], &pairs(&storage));
    let behind_gate = format!("http://127.0.0.1:{}", gate.port);
    fleet.add_worker_with(dir.path(), "worker-a", &[("AWS_ENDPOINT", &behind_gate)]);
    let client = client();
    let id = submit(&client, &fleet, &clip(dir.path(), 2), "a.mp4").await;

    let deadline = Instant::now() + Duration::from_secs(60);
    while !fleet.log().contains("the storage refused; waiting for it") {
        assert!(Instant::now() < deadline, "the worker never tried the storage:\n{}", fleet.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (_, job) = get_json(&client, &fleet.api.url(&format!("/v1/jobs/{id}"))).await;
    assert_eq!((job["status"].as_str(), job["worker"].as_str()), (Some("running"), Some("worker-a")), "the job should wait: {job}");

    gate.open();
    let job = wait_for_final(&client, &fleet.api, &id, Duration::from_secs(120)).await;
    assert_eq!((job["status"].as_str(), job["attempts"].as_i64()), (Some("succeeded"), Some(1)), "{job}\n{}", fleet.log());
    assert_result_downloads(&client, &fleet, dir.path(), &job).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_whose_worker_is_lost_max_attempts_times_fails_with_the_reasons() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = PgCluster::start();
    let mut fleet = Fleet::start(dir.path(), Some(&cluster.url()), &["worker-a"], &[("VAEBOX_MAX_ATTEMPTS", "2")]);
    let client = client();
    let id = submit(&client, &fleet, &clip(dir.path(), 40), "long.mp4").await;
    for (attempt, name) in [(1, "worker-a"), (2, "worker-b")] {
        let job = running_with_progress(&client, &fleet, &id, attempt).await;
        assert_eq!((job["attempts"].as_i64(), job["worker"].as_str()), (Some(attempt), Some(name)), "{job}");
        fleet.worker(name).kill9();
        if attempt == 1 {
            fleet.add_worker(dir.path(), "worker-b");
        }
    }
    // No worker is left: the API's lease keeper ends the job.
    let job = wait_for_final(&client, &fleet.api, &id, Duration::from_secs(60)).await;
    assert_eq!(job["status"], "failed", "{job}");
    assert_eq!(job["error"]["code"], "attempts-exhausted", "{job}");
    let message = job["error"]["message"].as_str().unwrap();
    assert!(message.contains("worker-a") && message.contains("worker-b") && message.contains("2 times"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_outage_answers_503_workers_wait_and_work_resumes_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = PgCluster::start();
    let mut fleet = Fleet::start(dir.path(), Some(&cluster.url()), &["worker-a"], &[]);
    let client = client();
    let body = clip(dir.path(), 2);
    let before = submit(&client, &fleet, &body, "before.mp4").await;
    let job = wait_for_final(&client, &fleet.api, &before, Duration::from_secs(120)).await;
    assert_eq!(job["status"], "succeeded", "{job}");

    cluster.stop_server();
    let (status, refusal) = upload_raw(&client, &fleet.api, &format!("{QUERY}&filename=during.mp4"), body.clone()).await;
    assert_eq!((status, refusal["error"]["code"].as_str()), (503, Some("store-unavailable")), "{refusal}");
    let (status, refusal) = get_json(&client, &fleet.api.url(&format!("/v1/jobs/{before}"))).await;
    assert_eq!((status, refusal["error"]["code"].as_str()), (503, Some("store-unavailable")), "{refusal}");
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(fleet.worker("worker-a").is_running(), "the worker stopped during the outage:\n{}", fleet.log());

    cluster.start_server();
    // The first requests after the outage may still meet a connection the server cut; within seconds they pass.
    let deadline = Instant::now() + Duration::from_secs(60);
    let after = loop {
        let (status, job) = upload_raw(&client, &fleet.api, &format!("{QUERY}&filename=after.mp4"), body.clone()).await;
        if status == 202 {
            break job["id"].as_str().unwrap().to_string();
        }
        assert!(Instant::now() < deadline, "uploads still fail after the database came back: {status} {job}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let job = wait_for_final(&client, &fleet.api, &after, Duration::from_secs(120)).await;
    assert_eq!((job["status"].as_str(), job["worker"].as_str()), (Some("succeeded"), Some("worker-a")), "{job}\n{}", fleet.log());
    // Jobs from before the outage are all still there.
    let (status, job) = get_json(&client, &fleet.api.url(&format!("/v1/jobs/{before}"))).await;
    assert_eq!((status, job["status"].as_str()), (200, Some("succeeded")), "{job}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_job_cancelled_through_the_api_stops_on_its_worker_within_seconds() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = PgCluster::start();
    // A long lease: the worker's next heartbeat is 20 s away, so only the database's announcement is this fast.
    let fleet = Fleet::start(dir.path(), Some(&cluster.url()), &["worker-a"], &[("VAEBOX_LEASE_S", "60")]);
    let client = client();
    let id = submit(&client, &fleet, &clip(dir.path(), 40), "long.mp4").await;
    running_with_progress(&client, &fleet, &id, 1).await;
    let asked = Instant::now();
    let (status, job) = send_json(client.post(fleet.api.url(&format!("/v1/jobs/{id}/cancel")))).await;
    assert_eq!(status, 200, "{job}");
    let job = wait_for_final(&client, &fleet.api, &id, Duration::from_secs(60)).await;
    assert_eq!(job["status"], "cancelled", "{job}");
    assert!(asked.elapsed() < Duration::from_secs(8), "the cancellation took {:?}", asked.elapsed());
    assert!(job["progress"]["done"].as_u64().unwrap_or(0) < 40, "{job}");
}

/// The store's side of "a job runs to completion once": a worker whose lease ran out and whose job another
/// worker claimed can no longer write progress or a result for it.
async fn a_lost_lease_fences_the_old_worker_out(store: std::sync::Arc<dyn vaebox::jobs::JobStore>) {
    use vaebox::jobs::*;
    use vaebox::models::Op;
    let new_job = |id| NewJob {
        id,
        op: Op::Upscale,
        model: "realesrgan-animevideov3".into(),
        priority: 0,
        params: JobParams::new(vaebox::device::DtypeChoice::Auto),
        input_name: "clip.mp4".into(),
        input_path: "/nowhere/clip.mp4".into(),
        input_bytes: 1,
        input_media: None,
        probe_s: None,
        owner: None,
        device_bytes_needed: 3 << 30,
        answered_by: None,
        callback_url: None,
        from_try: None,
        estimate: None,
    };
    let id = uuid::Uuid::new_v4();
    store.insert(new_job(id)).await.unwrap();
    let claim = |worker: &str, lease_ms| Claim { worker: worker.into(), lease: Duration::from_millis(lease_ms), models: None, device_memory_bytes: None, lane: Lane::Any };
    let (a, b) = (Lease { id, worker: "a".into(), attempt: 1 }, Lease { id, worker: "b".into(), attempt: 2 });
    // Another worker's models: not this job's.
    let elsewhere = Claim { models: Some(vec!["wan21".into()]), ..claim("b", 60_000) };
    assert!(store.claim_next(&elsewhere).await.unwrap().is_none());
    // A device smaller than the job needs (3 GiB): not claimed; one just large enough: claimed below.
    let small_device = Claim { device_memory_bytes: Some((3 << 30) - 1), ..claim("b", 60_000) };
    assert!(store.claim_next(&small_device).await.unwrap().is_none());
    let exact_fit = Claim { device_memory_bytes: Some(3 << 30), ..claim("a", 50) };
    assert_eq!(store.claim_next(&exact_fit).await.unwrap().unwrap().id, id);
    assert!(store.claim_next(&claim("b", 60_000)).await.unwrap().is_none(), "a running job is not claimed twice");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(store.expire_leases(3).await.unwrap(), Expired { requeued: vec![id], failed: vec![] });
    let job = store.claim_next(&claim("b", 60_000)).await.unwrap().unwrap();
    assert_eq!((job.attempts, job.worker.as_deref()), (2, Some("b")));

    assert_eq!(store.heartbeat(&a, Duration::from_secs(60)).await.unwrap(), LeaseState::Lost);
    assert_eq!(store.heartbeat(&b, Duration::from_secs(60)).await.unwrap(), LeaseState::Held { cancel_requested: false, pause_requested: false });
    let outcome = |name: &str| JobOutcome {
        output_name: name.into(),
        output_path: format!("/nowhere/{name}").into(),
        output_bytes: 1,
        output_media: None,
        timings: Timings::default(),
        plan: None,
        metrics: None,
    };
    store.set_progress(&a, &Progress { done: 7, total: 9, ..Progress::default() }).await.unwrap();
    store.succeed(&a, &outcome("from_a.mp4")).await.unwrap();
    let job = store.get(id).await.unwrap().unwrap();
    // A's progress did not land: the job shows B's, as B's claim set it.
    let progress = job.progress.as_ref().map(|p| (p.done, p.stage.clone()));
    assert_eq!((job.status, progress), (JobStatus::Running, Some((0, Some("load".to_string())))), "{job:?}");
    store.succeed(&b, &outcome("from_b.mp4")).await.unwrap();
    let job = store.get(id).await.unwrap().unwrap();
    assert_eq!((job.status, job.output.unwrap().file_name, job.worker.as_deref()), (JobStatus::Succeeded, "from_b.mp4".into(), Some("b")));

    // A success that arrives after the lease ran out, while nobody has claimed the job again (the store was
    // away while the worker finished): recorded, not thrown away to run the job from scratch.
    let late = uuid::Uuid::new_v4();
    store.insert(NewJob { id: late, device_bytes_needed: 0, ..new_job(late) }).await.unwrap();
    let claimed = store.claim_next(&claim("a", 50)).await.unwrap().unwrap();
    assert_eq!(claimed.id, late);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(store.expire_leases(3).await.unwrap(), Expired { requeued: vec![late], failed: vec![] });
    store.succeed(&Lease { id: late, worker: "a".into(), attempt: claimed.attempts }, &outcome("late.mp4")).await.unwrap();
    let job = store.get(late).await.unwrap().unwrap();
    assert_eq!((job.status, job.output.unwrap().file_name, job.worker.as_deref()), (JobStatus::Succeeded, "late.mp4".into(), Some("a")), "the late success was dropped");
    assert!(store.claim_next(&claim("b", 60_000)).await.unwrap().is_none(), "a recorded job is claimed again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_lost_lease_fences_the_old_worker_out() {
    let cluster = PgCluster::start();
    a_lost_lease_fences_the_old_worker_out(std::sync::Arc::new(vaebox::jobs::PgStore::open(&cluster.url()).await.unwrap())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_lost_lease_fences_the_old_worker_out() {
    let dir = tempfile::tempdir().unwrap();
    let store = vaebox::jobs::SqliteStore::open(&dir.path().join("jobs.db")).await.unwrap();
    a_lost_lease_fences_the_old_worker_out(std::sync::Arc::new(store)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_process_with_two_devices_runs_a_worker_on_each() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[("VAEBOX_DEVICES", "cpu,cpu"), ("VAEBOX_THREADS", "1"), ("VAEBOX_WORKER_NAME", "box")]);
    let client = client();
    let body = clip(dir.path(), 2);
    let mut ids = Vec::new();
    for i in 0..8 {
        let (status, job) = upload_raw(&client, &server, &format!("{QUERY}&filename=clip{i}.mp4"), body.clone()).await;
        assert_eq!(status, 202, "{job}");
        ids.push(job["id"].as_str().unwrap().to_string());
    }
    let mut ran_on = BTreeSet::new();
    for id in &ids {
        let job = wait_for_final(&client, &server, id, Duration::from_secs(300)).await;
        assert_eq!(job["status"], "succeeded", "{job}");
        ran_on.insert(job["worker"].as_str().unwrap().to_string());
    }
    assert_eq!(ran_on, BTreeSet::from(["box-0".to_string(), "box-1".to_string()]));
    let (_, health) = get_json(&client, &server.url("/healthz")).await;
    assert_eq!(health["device"], "cpu,cpu", "{health}");
    assert_eq!(health["workers"].as_array().unwrap().len(), 2, "{health}");
}
