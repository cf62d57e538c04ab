//! A job stopped hard (SIGKILL) on one box goes on from its last checkpoint on another box that shares no
//! disk with it: two workers with their own data dirs, a `file://` storage and one SQLite queue file. The
//! worker running the job puts its checkpoints into the storage as it makes them; the other worker fetches
//! the last one when it takes the job over, and the result equals an uninterrupted run's frame for frame: a
//! restore (its batches and held frames), an upscale (its segments; also through S3) and a VAE decode (its
//! causal caches).
use crate::common;
use crate::resume::{assert_same_frames, clip, result_frames, submit, HEIGHT, RESTORE, RESTORE_FRAMES, SETTINGS, WIDTH};

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::moto::MotoServer;
use common::*;
use serde_json::Value;
use vaebox::jobs::blobs::Blobs;

/// Run whole (`parts=1`): with two workers heard of, an upscale would be cut into parts (tests/it/parts_workers.rs).
const UPSCALE: &str = "op=upscale&model=realesrgan-animevideov3&scale=2&dtype=f32&output_format=ffv1&parts=1&filename=clip.mkv";

/// Where the boxes share their files.
enum Storage {
    /// A folder every box mounts (`file://`).
    Folder(PathBuf),
    /// A bucket on a throwaway S3 server, and the storage's own client for it (the server refuses unsigned
    /// reads of an object).
    S3(MotoServer, Blobs),
}

impl Storage {
    fn settings(&self) -> Vec<(String, String)> {
        match self {
            Storage::Folder(path) => vec![("VAEBOX_STORAGE".into(), format!("file://{}", path.display()))],
            Storage::S3(s3, _) => s3.storage_env(BUCKET, ""),
        }
    }

    fn s3(dir: &Path) -> Storage {
        let s3 = MotoServer::start(dir);
        s3.create_bucket(BUCKET);
        let settings = s3.storage_env(BUCKET, "");
        let options = settings.iter().filter(|(key, _)| key.starts_with("AWS_")).map(|(key, value)| (key.to_ascii_lowercase(), value.clone())).collect();
        let blobs = Blobs::open(&format!("s3://{BUCKET}/"), &options).unwrap();
        Storage::S3(s3, blobs)
    }

    /// The job's stored checkpoint.
    async fn checkpoint(&self, id: &str) -> Option<Value> {
        let text = match self {
            Storage::Folder(path) => std::fs::read(path.join("jobs").join(id).join("resume/checkpoint.json")).ok()?,
            Storage::S3(_, blobs) => blobs.get_bytes(uuid::Uuid::parse_str(id).unwrap(), "resume/checkpoint.json").await.ok()?.to_vec(),
        };
        serde_json::from_slice(&text).ok()
    }

    /// The files of the job's stored resume folder.
    fn resume_files(&self, id: &str) -> Vec<String> {
        match self {
            Storage::Folder(path) => files_under(&path.join("jobs").join(id).join("resume")).iter().map(|p| p.display().to_string()).collect(),
            Storage::S3(s3, _) => s3.keys(BUCKET, &format!("jobs/{id}/resume/")),
        }
    }
}

const BUCKET: &str = "vaebox";

/// An API and two workers, each process on its own data dir (`dir/NAME/data`), sharing only the queue file
/// and the storage.
struct Boxes {
    api: Server,
    workers: Vec<WorkerProcess>,
    storage: Storage,
    dir: PathBuf,
    log: PathBuf,
}

impl Boxes {
    /// On a `file://` folder.
    fn start(dir: &Path, extra: &[(&str, &str)]) -> Boxes {
        Self::start_on(dir, Storage::Folder(dir.join("shared")), extra)
    }

    fn start_on(dir: &Path, storage: Storage, extra: &[(&str, &str)]) -> Boxes {
        let database = dir.join("queue.db").to_string_lossy().into_owned();
        let storage_settings = storage.settings();
        let mut settings = SETTINGS.to_vec();
        settings.extend([("VAEBOX_LEASE_S", "3"), ("VAEBOX_THREADS", "1"), ("VAEBOX_DATABASE", &database)]);
        settings.extend(storage_settings.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        settings.extend_from_slice(extra);
        let log = dir.join("boxes.log");
        let own = |name: &str| dir.join(name).join("data").to_string_lossy().into_owned();
        let api_dir = own("api");
        let mut api_settings = settings.clone();
        api_settings.extend([("VAEBOX_ROLE", "api"), ("VAEBOX_DATA_DIR", &api_dir)]);
        let api = Server::start_logged(dir, &api_settings, &log);
        let workers = ["worker-a", "worker-b"]
            .iter()
            .map(|name| {
                let data_dir = own(name);
                let mut worker_settings = settings.clone();
                worker_settings.push(("VAEBOX_DATA_DIR", &data_dir));
                WorkerProcess::start(dir, name, &worker_settings, Some(&log))
            })
            .collect();
        Boxes { api, workers, storage, dir: dir.to_path_buf(), log }
    }

    async fn stored_checkpoint(&self, id: &str) -> Option<Value> {
        self.storage.checkpoint(id).await
    }

    /// The newest checkpoint in a worker's own data dir.
    fn local_checkpoint(&self, id: &str) -> Option<Value> {
        self.workers
            .iter()
            .filter_map(|worker| {
                let job_dir = self.dir.join(&worker.name).join("data/jobs").join(id);
                let folder = std::fs::read_dir(job_dir).ok()?.flatten().map(|e| e.path()).find(|p| p.to_string_lossy().ends_with(".resume"))?;
                read_checkpoint(&folder.join("checkpoint.json"))
            })
            .max_by_key(|checkpoint| checkpoint["frames"].as_u64())
    }

    /// Waits until the storage holds a checkpoint that satisfies `reached`, and returns it; fails if the
    /// worker's own checkpoint is `past` it first (as it would be if checkpoints were not put into the storage).
    async fn wait_for_stored(&self, id: &str, what: &str, reached: impl Fn(&Value) -> bool, past: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(300);
        loop {
            if let Some(stored) = self.stored_checkpoint(id).await.filter(|c| reached(c)) {
                return stored;
            }
            if let Some(local) = self.local_checkpoint(id).filter(|c| past(c)) {
                panic!("the worker's checkpoint went beyond the one {what} ({local}) before the storage had that one: {:?}\n{}", self.stored_checkpoint(id).await, self.log());
            }
            assert!(Instant::now() < deadline, "never saw a stored checkpoint {what}\n{}", self.log());
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// SIGKILL to the worker that runs job `id`; returns the job as it was then.
    async fn kill_its_worker(&mut self, client: &reqwest::Client, id: &str) -> Value {
        self.stop_its_worker(client, id, WorkerProcess::kill9).await
    }

    async fn stop_its_worker(&mut self, client: &reqwest::Client, id: &str, stop: impl FnOnce(&mut WorkerProcess)) -> Value {
        let (_, running) = get_json(client, &self.api.url(&format!("/v1/jobs/{id}"))).await;
        let first = running["worker"].as_str().expect("the running job names its worker").to_string();
        stop(self.workers.iter_mut().find(|w| first.contains(&w.name)).expect("one of the two workers"));
        running
    }

    /// The job, succeeded on the other worker than `running`'s, its checkpoints gone from the storage.
    async fn finished_elsewhere(&self, client: &reqwest::Client, id: &str, running: &Value) -> Value {
        let job = wait_for_final(client, &self.api, id, Duration::from_secs(300)).await;
        assert_eq!(job["status"], "succeeded", "{job}\n{}", self.log());
        assert_ne!(job["worker"], running["worker"], "the other worker finished it: {job}");
        // The worker removes them right after it records the success, which the API may show first.
        let deadline = Instant::now() + Duration::from_secs(60);
        while !self.storage.resume_files(id).is_empty() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(self.storage.resume_files(id), Vec::<String>::new(), "a finished job's checkpoints are removed from the storage");
        job
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

fn read_checkpoint(path: &Path) -> Option<Value> {
    serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()
}

fn batches(checkpoint: &Value) -> i64 {
    checkpoint["restore"]["batches"].as_i64().unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_whose_worker_is_killed_goes_on_from_its_stored_checkpoint_on_a_worker_with_its_own_data_dir() {
    let dir = tempfile::tempdir().unwrap();
    let models = models_with_small_seedvr2(dir.path());
    let mut boxes = Boxes::start(dir.path(), &[("VAEBOX_MODELS_DIR", models.to_str().unwrap())]);
    let client = client();
    let input = clip(dir.path(), RESTORE_FRAMES);

    let whole = run_job(&client, &boxes.api, RESTORE, input.clone()).await;
    let whole_frames = result_frames(&client, &boxes.api, &whole, dir.path(), WIDTH, HEIGHT).await;
    assert_eq!(boxes.storage.resume_files(whole["id"].as_str().unwrap()), Vec::<String>::new(), "a finished job's checkpoints are removed");

    let id = submit(&client, &boxes.api, RESTORE, input).await;
    boxes.wait_for_stored(&id, "after batch 2", |c| batches(c) == 2, |c| batches(c) > 2).await;
    let running = boxes.kill_its_worker(&client, &id).await;
    let job = boxes.finished_elsewhere(&client, &id, &running).await;
    assert_eq!(job["plan"]["resumed_from"]["batch"], 2, "{}\n{}", job["plan"], boxes.log());
    assert_same_frames(&result_frames(&client, &boxes.api, &job, dir.path(), WIDTH, HEIGHT).await, &whole_frames);
}

/// A graceful stop with no grace left (SIGTERM, `shutdown_grace_s = 0`) hands the job back to the queue once
/// its last checkpoint is in the storage; the other worker goes on from it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_whose_worker_stops_gracefully_is_handed_over_with_its_last_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let models = models_with_small_seedvr2(dir.path());
    let mut boxes = Boxes::start(dir.path(), &[("VAEBOX_MODELS_DIR", models.to_str().unwrap()), ("VAEBOX_SHUTDOWN_GRACE_S", "0")]);
    let client = client();
    let input = clip(dir.path(), RESTORE_FRAMES);

    let whole = run_job(&client, &boxes.api, RESTORE, input.clone()).await;
    let whole_frames = result_frames(&client, &boxes.api, &whole, dir.path(), WIDTH, HEIGHT).await;

    let id = submit(&client, &boxes.api, RESTORE, input).await;
    boxes.wait_for_stored(&id, "after batch 2", |c| batches(c) == 2, |c| batches(c) > 2).await;
    let running = boxes.stop_its_worker(&client, &id, |worker| worker.sigterm()).await;
    let job = boxes.finished_elsewhere(&client, &id, &running).await;
    let resumed = job["plan"]["resumed_from"]["batch"].as_i64().unwrap_or(0);
    assert!((2..5).contains(&resumed), "{}\n{}", job["plan"], boxes.log());
    assert!(boxes.log().contains("job stopped by the shutdown; it is back in the queue"), "{}", boxes.log());
    assert_same_frames(&result_frames(&client, &boxes.api, &job, dir.path(), WIDTH, HEIGHT).await, &whole_frames);
}

/// An upscale killed once the storage holds a checkpoint of 4 to 9 of its 12 frames.
async fn an_upscale_goes_on_from_its_stored_segments(dir: &Path, mut boxes: Boxes) {
    let client = client();
    let input = clip(dir, 12);

    let whole = run_job(&client, &boxes.api, UPSCALE, input.clone()).await;
    let whole_frames = result_frames(&client, &boxes.api, &whole, dir, 2 * WIDTH, 2 * HEIGHT).await;
    assert_eq!(whole_frames.len(), 12);

    let id = submit(&client, &boxes.api, UPSCALE, input).await;
    let frames = |c: &Value| c["frames"].as_u64().unwrap_or(0);
    boxes.wait_for_stored(&id, "of 4 to 9 frames", |c| (4..10).contains(&frames(c)), |c| frames(c) >= 10).await;
    let running = boxes.kill_its_worker(&client, &id).await;
    let job = boxes.finished_elsewhere(&client, &id, &running).await;
    let kept = job["plan"]["resumed_from"]["frame"].as_u64().unwrap_or(0);
    assert!((4..12).contains(&kept), "the other worker kept no stored segment: {}\n{}", job["plan"], boxes.log());
    assert_same_frames(&result_frames(&client, &boxes.api, &job, dir, 2 * WIDTH, 2 * HEIGHT).await, &whole_frames);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upscale_whose_worker_is_killed_goes_on_from_its_stored_segments_on_a_worker_with_its_own_data_dir() {
    let dir = tempfile::tempdir().unwrap();
    an_upscale_goes_on_from_its_stored_segments(dir.path(), Boxes::start(dir.path(), &[])).await;
}

/// The same through S3 (the storage's API is the same for both).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_an_upscale_whose_worker_is_killed_goes_on_from_its_stored_segments_on_a_worker_with_its_own_data_dir() {
    let dir = tempfile::tempdir().unwrap();
    an_upscale_goes_on_from_its_stored_segments(dir.path(), Boxes::start_on(dir.path(), Storage::s3(dir.path()), &[])).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vae_decode_whose_worker_is_killed_goes_on_from_its_stored_state_on_a_worker_with_its_own_data_dir() {
    const LATENT_FRAMES: i64 = 16;
    let dir = tempfile::tempdir().unwrap();
    let models = models_with_small_wan21(dir.path());
    let mut boxes = Boxes::start(dir.path(), &[("VAEBOX_MODELS_DIR", models.to_str().unwrap())]);
    let client = client();
    // 12 × 16 latent cells: 96 × 128 pixels; a push (and a checkpoint) per latent frame.
    tch::manual_seed(3);
    let latent = tch::Tensor::randn([1, 16, LATENT_FRAMES, 12, 16], (tch::Kind::Float, tch::Device::Cpu));
    let path = dir.path().join("latent.safetensors");
    tch::Tensor::write_safetensors(&[("latent", &latent)], &path).unwrap();
    let input = std::fs::read(&path).unwrap();
    let query = "op=vae_decode&model=wan21-small&dtype=f32&output_format=ffv1&filename=latent.safetensors";
    let total = 1 + 4 * (LATENT_FRAMES as u64 - 1);

    let whole = run_job(&client, &boxes.api, query, input.clone()).await;
    let whole_frames = result_frames(&client, &boxes.api, &whole, dir.path(), WIDTH, HEIGHT).await;
    assert_eq!(whole_frames.len() as u64, total);

    let id = submit(&client, &boxes.api, query, input).await;
    let inputs = |c: &Value| c["vae"]["inputs"].as_i64().unwrap_or(0);
    let stored = boxes.wait_for_stored(&id, "after 4 to 11 latent frames", |c| (4..12).contains(&inputs(c)), |c| inputs(c) >= 12).await;
    let running = boxes.kill_its_worker(&client, &id).await;
    let job = boxes.finished_elsewhere(&client, &id, &running).await;
    let (seen, kept) = (stored["frames"].as_u64().unwrap(), job["plan"]["resumed_from"]["frame"].as_u64().unwrap_or(0));
    assert!(kept >= seen && kept < total, "kept {kept} frames, the stored checkpoint seen had {seen}: {}\n{}", job["plan"], boxes.log());
    assert_same_frames(&result_frames(&client, &boxes.api, &job, dir.path(), WIDTH, HEIGHT).await, &whole_frames);
}
