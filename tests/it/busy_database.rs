//! A job's outcome is not lost when the database cannot take it at once: with another connection
//! holding SQLite's write lock past the server's busy timeout (10 s) as the job ends, the outcome is
//! written once the lock is released, and the caller waiting on the job gets its result.
use crate::common;

use std::time::{Duration, Instant};

use common::*;
use sqlx::Connection;

/// Longer than the server's busy timeout, so the first write of the outcome fails.
const LOCK_HELD: Duration = Duration::from_secs(40);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outcome_the_database_refuses_at_first_is_written_later() {
    let dir = tempfile::tempdir().unwrap();
    let models = models_with_small_wan21(dir.path());
    let server = Server::start(dir.path(), &[("VAEBOX_MODELS_DIR", models.to_str().unwrap())]);
    let client = client();

    let url = server.url("/v1/decode?model=wan21-small&shape=1&shape=16&shape=3&shape=32&shape=32&dtype=float32&output_type=pt");
    let latent: Vec<u8> = (0..16 * 3 * 32 * 32).flat_map(|i| (((i * 7919) % 401) as f32 / 100.0 - 2.0).to_le_bytes()).collect();
    let call = tokio::spawn({
        let client = client.clone();
        async move {
            let response = client.post(url).body(latent).send().await.unwrap();
            (response.status().as_u16(), response.bytes().await.unwrap().len())
        }
    });

    // Lock the database as soon as the job runs, and hold it past the job's end.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, list) = get_json(&client, &server.url("/v1/jobs?status=running")).await;
        if list["jobs"].as_array().is_some_and(|jobs| !jobs.is_empty()) {
            break;
        }
        assert!(Instant::now() < deadline, "the job did not start");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let database = server.data_dir.join("data/vaebox.db");
    let mut lock = sqlx::SqliteConnection::connect(&format!("sqlite://{}", database.display())).await.unwrap();
    sqlx::query("BEGIN EXCLUSIVE").execute(&mut lock).await.unwrap();
    let locked = Instant::now();
    tokio::time::sleep(LOCK_HELD).await;
    let (_, running) = get_json(&client, &server.url("/v1/jobs?status=running")).await;
    assert_eq!(running["jobs"].as_array().map(Vec::len), Some(1), "the job should still be recorded as running under the lock: {running}");
    sqlx::query("COMMIT").execute(&mut lock).await.unwrap();
    println!("database locked for {:.1} s", locked.elapsed().as_secs_f64());

    let (status, bytes) = tokio::time::timeout(Duration::from_secs(60), call).await.expect("the caller is still waiting").unwrap();
    assert_eq!(status, 200);
    assert_eq!(bytes, 4 * 3 * 9 * 256 * 256);
    let (_, done) = get_json(&client, &server.url("/v1/jobs?status=succeeded")).await;
    assert_eq!(done["jobs"].as_array().map(Vec::len), Some(1), "{done}");
}
