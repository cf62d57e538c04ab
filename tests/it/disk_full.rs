//! A data dir on a small tmpfs that fills up while a job writes its output: the job fails with
//! `disk-full` and that outcome is recorded (it is neither left running nor run again), uploads are
//! refused with 507, `DELETE` frees the space, and once there is room again the box works as before.
//! Mounting needs root (CI runs as root); elsewhere the test says so and passes without running.
use crate::common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;

/// The tmpfs mounted for the test, unmounted however the test ends.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: &Path, mib: u32) -> Option<Tmpfs> {
        std::fs::create_dir_all(at).unwrap();
        let status = Command::new("mount").args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"]).arg(at).status().ok()?;
        status.success().then(|| Tmpfs(at.to_path_buf()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Writes zeros into `path` until the file system refuses more; returns how many bytes it took.
fn fill(path: &Path) -> u64 {
    let mut file = std::fs::File::create(path).unwrap();
    let mut written = 0u64;
    for block in [1 << 20, 4096, 512] {
        let zeros = vec![0u8; block];
        while file.write_all(&zeros).is_ok() {
            written += block as u64;
        }
    }
    let _ = file.sync_all();
    written
}

async fn wait_for_status(client: &reqwest::Client, server: &Server, id: &str, status: &str, within: Duration) -> serde_json::Value {
    let deadline = Instant::now() + within;
    loop {
        let (_, job) = get_json(client, &server.url(&format!("/v1/jobs/{id}"))).await;
        if job["status"] == status {
            return job;
        }
        assert!(Instant::now() < deadline, "job {id} did not become {status}: {job}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_that_fills_the_disk_fails_with_disk_full_once_and_delete_frees_it() {
    let dir = tempfile::tempdir().unwrap();
    let Some(_tmpfs) = Tmpfs::mount(&dir.path().join("data"), 48) else {
        eprintln!("SKIPPED: mounting a tmpfs needs root");
        return;
    };
    let clip = dir.path().join("clip.mp4");
    make_clip(&media("carphone_pristine.mp4"), 3, false, &clip);
    let server = Server::start(dir.path(), &[("VAEBOX_MIN_FREE_DISK_MIB", "0"), ("VAEBOX_DISK_RESERVE_MIB", "4")]);
    let client = client();
    let data = server.data_dir.join("data");
    let reserve_bytes = || -> u64 {
        let slices = std::fs::read_dir(&data).unwrap().flatten().filter(|e| e.file_name().to_string_lossy().starts_with(".vaebox-disk-reserve"));
        slices.map(|e| e.metadata().unwrap().len()).sum()
    };
    assert_eq!(reserve_bytes(), 4 << 20, "no disk reserve at start");

    // The slow RRDB model, so that the disk can be filled while the job computes its first frames.
    let (status, job) = upload_raw(&client, &server, "op=upscale&model=realesrgan-x4plus&scale=4&filename=clip.mp4", std::fs::read(&clip).unwrap()).await;
    assert_eq!(status, 202, "{job}");
    let id = job["id"].as_str().unwrap().to_string();
    wait_for_status(&client, &server, &id, "running", Duration::from_secs(60)).await;
    let filler = dir.path().join("data/filler");
    let taken = fill(&filler);
    assert!(taken > 1 << 20, "the tmpfs was already full ({taken} bytes taken)");

    let job = wait_for_final(&client, &server, &id, Duration::from_secs(300)).await;
    assert_eq!((job["status"].as_str(), job["error"]["code"].as_str()), (Some("failed"), Some("disk-full")), "{job}");
    assert_eq!(job["attempts"], 1, "{job}");
    let message = job["error"]["message"].as_str().unwrap();
    assert!(!message.contains(data.to_str().unwrap()), "the message shows a server path: {message}");
    let leftovers: Vec<_> = files_under(&data.join("jobs").join(&id)).into_iter().filter(|p| !p.file_name().unwrap().to_string_lossy().starts_with("input")).collect();
    assert!(leftovers.is_empty(), "partial output left behind: {leftovers:?}");

    // Neither re-run nor stuck: the outcome stays as recorded.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (_, again) = get_json(&client, &server.url(&format!("/v1/jobs/{id}"))).await;
    assert_eq!((again["status"].as_str(), again["attempts"].as_i64()), (Some("failed"), Some(1)), "{again}");

    // While full (filled again: deleting the partial output and releasing the reserve freed some
    // room): uploads are refused with 507, reads still answer, DELETE still works.
    let second_filler = dir.path().join("data/filler-2");
    fill(&second_filler);
    let (status, body) = upload_raw(&client, &server, "op=upscale&model=realesrgan-animevideov3&scale=2&filename=clip.mp4", std::fs::read(&clip).unwrap()).await;
    assert_eq!((status, body["error"]["code"].as_str()), (507, Some("insufficient-storage")), "{body}");
    assert_eq!(get_json(&client, &server.url("/healthz")).await.0, 200);
    let deleted = client.delete(server.url(&format!("/v1/jobs/{id}"))).send().await.unwrap();
    assert!(deleted.status().is_success(), "DELETE on a full disk: {}", deleted.status());
    assert_eq!(get_json(&client, &server.url(&format!("/v1/jobs/{id}"))).await.0, 404);
    assert!(!data.join("jobs").join(&id).exists());

    // Room again: the reserve is taken back and jobs run.
    std::fs::remove_file(&filler).unwrap();
    std::fs::remove_file(&second_filler).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while reserve_bytes() != 4 << 20 {
        assert!(Instant::now() < deadline, "the disk reserve was not taken back");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let job = run_job(&client, &server, "op=upscale&model=realesrgan-animevideov3&scale=2&filename=clip.mp4", std::fs::read(&clip).unwrap()).await;
    assert_eq!(job["status"], "succeeded", "{job}");
    assert!(!fetch(&client, &server, &job).await.is_empty());
}

/// A start with less free space than the reserve needs goes on, but says so in the log and in `/healthz`;
/// a start on a full disk stops with a message that says the disk is full.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_short_of_room_reports_the_missing_reserve_and_a_full_disk_says_full() {
    let dir = tempfile::tempdir().unwrap();
    let Some(_tmpfs) = Tmpfs::mount(&dir.path().join("data"), 24) else {
        eprintln!("SKIPPED: mounting a tmpfs needs root");
        return;
    };
    // Leave about 10 MiB: the 16 MiB reserve takes a slice only with twice its 8 MiB free.
    let filler = dir.path().join("data/filler");
    std::fs::write(&filler, vec![1u8; 14 << 20]).unwrap();
    let log = dir.path().join("server.log");
    let server = Server::start_logged(dir.path(), &[("VAEBOX_MIN_FREE_DISK_MIB", "0"), ("VAEBOX_DISK_RESERVE_MIB", "16")], &log);
    let (_, health) = get_json(&client(), &server.url("/healthz")).await;
    assert_eq!(health["disk_reserve_held"], false, "{health}");
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(logged.contains("the disk reserve is not in place"), "the missing reserve is not logged:\n{logged}");
    drop(server);

    // Full to the last block: the start-up error says so instead of asking for write access.
    fill(&dir.path().join("data/filler-2"));
    let refused = Command::new(env!("CARGO_BIN_EXE_vaebox"))
        .arg("serve")
        .env("VAEBOX_LISTEN", "127.0.0.1:0")
        .env("VAEBOX_DATA_DIR", dir.path().join("data/second"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "started on a full disk:\n{stderr}");
    assert!(stderr.contains("is full") && !stderr.contains("write access"), "{stderr}");
}
