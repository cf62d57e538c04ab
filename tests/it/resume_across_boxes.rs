//! A job stopped hard (SIGKILL) on one box goes on from its last checkpoint on another box that shares no
//! disk with it: two workers with their own data dirs, a `file://` storage and one SQLite queue file. The
//! worker running the job puts its checkpoints into the storage as it makes them; the other worker fetches
//! the last one when it takes the job over, and the result equals an uninterrupted run's frame for frame.
use crate::common;
use crate::resume::{assert_same_frames, clip, result_frames, submit, HEIGHT, RESTORE, RESTORE_FRAMES, SETTINGS, WIDTH};

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

const UPSCALE: &str = "op=upscale&model=realesrgan-animevideov3&scale=2&dtype=f32&output_format=ffv1&filename=clip.mkv";

/// An API and two workers, each process on its own data dir (`dir/NAME/data`), sharing only the queue file
/// and the storage folder.
struct Boxes {
    api: Server,
    workers: Vec<WorkerProcess>,
    dir: PathBuf,
    log: PathBuf,
}

impl Boxes {
    fn start(dir: &Path, extra: &[(&str, &str)]) -> Boxes {
        let database = dir.join("queue.db").to_string_lossy().into_owned();
        let storage = format!("file://{}", dir.join("shared").display());
        let mut settings = SETTINGS.to_vec();
        settings.extend([("VAEBOX_LEASE_S", "3"), ("VAEBOX_THREADS", "1"), ("VAEBOX_DATABASE", &database), ("VAEBOX_STORAGE", &storage)]);
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
        Boxes { api, workers, dir: dir.to_path_buf(), log }
    }

    /// The job's resume folder in the storage.
    fn stored_folder(&self, id: &str) -> PathBuf {
        self.dir.join("shared/jobs").join(id).join("resume")
    }

    fn stored_checkpoint(&self, id: &str) -> Option<Value> {
        read_checkpoint(&self.stored_folder(id).join("checkpoint.json"))
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

    /// Waits until the storage holds a checkpoint that satisfies `reached`, while the worker's own goes no
    /// further than `past` allows (it would, without the checkpoints put into the storage).
    async fn wait_for_stored(&self, id: &str, what: &str, reached: impl Fn(&Value) -> bool, past: impl Fn(&Value) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(300);
        loop {
            if self.stored_checkpoint(id).is_some_and(|c| reached(&c)) {
                return;
            }
            if let Some(local) = self.local_checkpoint(id).filter(|c| past(c)) {
                panic!("the worker's checkpoint went past {what} ({local}) before the storage had it: {:?}", self.stored_checkpoint(id));
            }
            assert!(Instant::now() < deadline, "never saw a stored checkpoint {what}\n{}", self.log());
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// SIGKILL to the worker that runs job `id`; returns the job as it was then.
    async fn kill_its_worker(&mut self, client: &reqwest::Client, id: &str) -> Value {
        let (_, running) = get_json(client, &self.api.url(&format!("/v1/jobs/{id}"))).await;
        let first = running["worker"].as_str().expect("the running job names its worker").to_string();
        self.workers.iter_mut().find(|w| first.contains(&w.name)).expect("one of the two workers").kill9();
        running
    }

    /// The job, succeeded on the other worker than `running`'s, its checkpoints gone from the storage.
    async fn finished_elsewhere(&self, client: &reqwest::Client, id: &str, running: &Value) -> Value {
        let job = wait_for_final(client, &self.api, id, Duration::from_secs(300)).await;
        assert_eq!(job["status"], "succeeded", "{job}\n{}", self.log());
        assert_ne!(job["worker"], running["worker"], "the other worker finished it: {job}");
        assert_eq!(files_under(&self.stored_folder(id)), Vec::<PathBuf>::new(), "a finished job's checkpoints are removed from the storage");
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
    assert_eq!(files_under(&boxes.stored_folder(whole["id"].as_str().unwrap())), Vec::<PathBuf>::new(), "a finished job's checkpoints are removed");

    let id = submit(&client, &boxes.api, RESTORE, input).await;
    boxes.wait_for_stored(&id, "after batch 2", |c| batches(c) == 2, |c| batches(c) > 2).await;
    let running = boxes.kill_its_worker(&client, &id).await;
    let job = boxes.finished_elsewhere(&client, &id, &running).await;
    assert_eq!(job["plan"]["resumed_from"]["batch"], 2, "{}\n{}", job["plan"], boxes.log());
    assert_same_frames(&result_frames(&client, &boxes.api, &job, dir.path(), WIDTH, HEIGHT).await, &whole_frames);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upscale_whose_worker_is_killed_goes_on_from_its_stored_segments_on_a_worker_with_its_own_data_dir() {
    let dir = tempfile::tempdir().unwrap();
    let mut boxes = Boxes::start(dir.path(), &[]);
    let client = client();
    let input = clip(dir.path(), 12);

    let whole = run_job(&client, &boxes.api, UPSCALE, input.clone()).await;
    let whole_frames = result_frames(&client, &boxes.api, &whole, dir.path(), 2 * WIDTH, 2 * HEIGHT).await;
    assert_eq!(whole_frames.len(), 12);

    let id = submit(&client, &boxes.api, UPSCALE, input).await;
    let frames = |c: &Value| c["frames"].as_u64().unwrap_or(0);
    boxes.wait_for_stored(&id, "of 4 to 9 frames", |c| (4..10).contains(&frames(c)), |c| frames(c) >= 10).await;
    let running = boxes.kill_its_worker(&client, &id).await;
    let job = boxes.finished_elsewhere(&client, &id, &running).await;
    let kept = job["plan"]["resumed_from"]["frame"].as_u64().unwrap_or(0);
    assert!((4..12).contains(&kept), "the other worker kept no stored segment: {}\n{}", job["plan"], boxes.log());
    assert_same_frames(&result_frames(&client, &boxes.api, &job, dir.path(), 2 * WIDTH, 2 * HEIGHT).await, &whole_frames);
}
