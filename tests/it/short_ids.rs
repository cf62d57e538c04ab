//! Short ids (issue 53): a job's first characters are looked up as a range of the id index, never by reading
//! the whole table (SQLite's and PostgreSQL's plans say so, with many rows); the caller's own jobs only, so
//! that another token's newer jobs with the same start do not hide the caller's; and a start several jobs
//! share is refused with how many there are, not a capped number.
use crate::common;

use std::sync::Arc;

use common::postgres::PgCluster;
use common::*;
use serde_json::Value;
use sqlx::Row;
use uuid::Uuid;
use vaebox::jobs::store::{id_prefix, IdPrefix};
use vaebox::jobs::{DatabaseTarget, JobStore, NewJob, SqliteStore};

const ALICE: &str = "alice-secret-0123";
const BOB: &str = "bob-secret-456789";

/// A queued upscale no worker takes (it needs more device memory than any has), of `owner`.
pub(crate) fn parked_job(id: &str, owner: Option<&str>) -> NewJob {
    NewJob {
        id: Uuid::parse_str(id).unwrap(),
        op: vaebox::models::Op::Upscale,
        model: "realesrgan-animevideov3".into(),
        priority: -1000,
        params: vaebox::jobs::JobParams::new(vaebox::device::DtypeChoice::Auto),
        input_name: "clip.mp4".into(),
        input_path: "/nowhere/clip.mp4".into(),
        input_bytes: 1,
        input_media: None,
        probe_s: None,
        owner: owner.map(str::to_string),
        device_bytes_needed: u64::MAX,
        answered_by: None,
        callback_url: None,
        from_try: None,
        estimate: None,
    }
}

/// `abcd1234-0000-4000-8000-{n:012}`: ids sharing their first 8 characters (and more).
fn shared_start(start: &str, n: usize) -> String {
    format!("{start}-0000-4000-8000-{n:012}")
}

/// One of Alice's, then 20 of Bob's newer with the same first 8 characters, then 20 more of Alice's sharing
/// another start.
async fn seed_owners(store: &dyn JobStore) -> String {
    let hers = shared_start("abcd1234", 0);
    store.insert(parked_job(&hers, Some("alice"))).await.unwrap();
    for n in 1..=20 {
        store.insert(parked_job(&shared_start("abcd1234", n), Some("bob"))).await.unwrap();
    }
    for n in 0..20 {
        store.insert(parked_job(&shared_start("ffee0000", n), Some("alice"))).await.unwrap();
    }
    hers
}

/// The store's lookup: by owner before the limit, with the whole count.
async fn lookups_are_by_owner_and_counted(store: &dyn JobStore) {
    let hers = seed_owners(store).await;
    let prefix = IdPrefix::parse("ABCD1234").unwrap();
    let found = store.jobs_with_id_prefix(&prefix, Some("alice"), 16).await.unwrap();
    assert_eq!((found.total, found.jobs.len()), (1, 1));
    assert_eq!(found.jobs[0].id.to_string(), hers);
    let everyone = store.jobs_with_id_prefix(&prefix, None, 16).await.unwrap();
    assert_eq!((everyone.total, everyone.jobs.len()), (21, 16));
    assert_eq!(everyone.jobs[0].id.to_string(), shared_start("abcd1234", 20), "newest first");
    let hers_too = store.jobs_with_id_prefix(&IdPrefix::parse("ffee0000-").unwrap(), Some("alice"), 16).await.unwrap();
    assert_eq!((hers_too.total, hers_too.jobs.len()), (20, 16));
    assert_eq!(store.jobs_with_id_prefix(&prefix, Some("carol"), 16).await.unwrap().total, 0);
    // The range ends where the start does: the next id up is not in it.
    store.insert(parked_job(&shared_start("abcd1235", 0), Some("alice"))).await.unwrap();
    assert_eq!(store.jobs_with_id_prefix(&prefix, Some("alice"), 16).await.unwrap().total, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_looks_a_short_id_up_in_the_id_index() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jobs.db");
    let store = SqliteStore::open(&path).await.unwrap();
    lookups_are_by_owner_and_counted(&store).await;
    let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}", path.display())).await.unwrap();
    // Many rows, and the statistics a long-lived database gathers: the plan must still search.
    sqlx::query(
        "WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < 20000)
         INSERT INTO jobs (id, status, op, model, params, input_name, input_path, input_bytes, created_at, owner)
         SELECT lower(hex(randomblob(4))) || '-0000-4000-8000-' || printf('%012d', x), 'succeeded', op, model, params,
                input_name, input_path, input_bytes, created_at, 'bob'
         FROM n, (SELECT * FROM jobs LIMIT 1)",
    )
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query("ANALYZE").execute(&pool).await.unwrap();
    for (sql, owner) in [(id_prefix::SQLITE_JOBS, None), (id_prefix::SQLITE_JOBS, Some("alice")), (id_prefix::SQLITE_COUNT, Some("alice"))] {
        let explained = format!("EXPLAIN QUERY PLAN {sql}");
        let mut query = sqlx::query(sqlx::AssertSqlSafe(explained)).bind("abcd1234").bind("abcd1235").bind(owner);
        if sql == id_prefix::SQLITE_JOBS {
            query = query.bind(16i64);
        }
        let plan: Vec<String> = query.fetch_all(&pool).await.unwrap().iter().map(|row| row.get::<String, _>("detail")).collect();
        let plan = plan.join("\n");
        assert!(plan.contains("SEARCH jobs USING") && plan.contains("id>? AND id<?"), "{sql}:\n{plan}");
        assert!(!plan.contains("SCAN jobs"), "{sql} reads the whole table:\n{plan}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_looks_a_short_id_up_in_the_id_index() {
    let cluster = PgCluster::start();
    let store = vaebox::jobs::store::open(&DatabaseTarget::Postgres(cluster.url())).await.unwrap();
    lookups_are_by_owner_and_counted(store.as_ref()).await;
    let pool = sqlx::PgPool::connect(&cluster.url()).await.unwrap();
    sqlx::query(
        "INSERT INTO jobs (id, status, op, model, params, input_name, input_path, input_bytes, created_at, owner)
         SELECT gen_random_uuid()::text, 'succeeded', op, model, params, input_name, input_path, input_bytes, created_at, 'bob'
         FROM generate_series(1, 50000), (SELECT * FROM jobs LIMIT 1) AS one",
    )
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query("ANALYZE jobs").execute(&pool).await.unwrap();
    let mut connection = pool.acquire().await.unwrap();
    for (name, sql, arguments) in [
        ("jobs", id_prefix::POSTGRES_JOBS, "('abcd1234', 'abcd1235', 'alice', 16)"),
        ("count", id_prefix::POSTGRES_COUNT, "('abcd1234', 'abcd1235', NULL)"),
    ] {
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("PREPARE {name} AS {sql}"))).execute(&mut *connection).await.unwrap();
        // A custom plan (the first runs of a statement) and the generic one PostgreSQL may settle on.
        for mode in ["force_custom_plan", "force_generic_plan"] {
            sqlx::raw_sql(sqlx::AssertSqlSafe(format!("SET plan_cache_mode = {mode}"))).execute(&mut *connection).await.unwrap();
            let rows = sqlx::raw_sql(sqlx::AssertSqlSafe(format!("EXPLAIN EXECUTE {name}{arguments}"))).fetch_all(&mut *connection).await.unwrap();
            let plan: Vec<String> = rows.iter().map(|row| row.get::<String, _>(0)).collect();
            let plan = plan.join("\n");
            assert!(plan.contains("Scan using jobs_id_c") || plan.contains("Bitmap Index Scan on jobs_id_c"), "{name}, {mode}:\n{plan}");
            assert!(!plan.contains("Seq Scan"), "{name}, {mode} reads the whole table:\n{plan}");
        }
    }
}

async fn get_as(client: &reqwest::Client, server: &Server, path: &str, token: &str) -> (u16, Value) {
    send_json(client.get(server.url(path)).bearer_auth(token)).await
}

/// Over HTTP: Alice's short id finds her job behind 20 of Bob's newer ones, Bob's the newest of his, and a
/// start 20 of Alice's share is refused as 20 jobs (16 listed), not as the 16 looked at.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_tokens_jobs_do_not_hide_yours_and_ambiguity_counts_them_all() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = format!("alice:{ALICE},bob:{BOB}");
    // Seeded and paused before the box starts: its worker would otherwise claim the jobs (a loaded machine
    // let it take Alice's before her cancel, which then answered `running`).
    std::fs::create_dir_all(dir.path().join("data")).unwrap();
    let store = Arc::new(SqliteStore::open(&dir.path().join("data/vaebox.db")).await.unwrap());
    let hers = seed_owners(store.as_ref()).await;
    for start in ["abcd1234", "ffee0000"] {
        for job in store.jobs_with_id_prefix(&IdPrefix::parse(start).unwrap(), None, 64).await.unwrap().jobs {
            store.set_paused(job.id, true).await.unwrap();
        }
    }
    let server = Server::start(dir.path(), &[("VAEBOX_TOKENS", &tokens)]);
    let client = client();

    let (status, job) = get_as(&client, &server, "/v1/jobs/abcd1234", ALICE).await;
    assert_eq!((status, job["id"].as_str()), (200, Some(hers.as_str())), "{job}");
    let (status, body) = send_json(client.post(server.url("/v1/jobs/ABCD1234/cancel")).bearer_auth(ALICE)).await;
    assert_eq!((status, body["id"].as_str(), body["status"].as_str()), (200, Some(hers.as_str()), Some("cancelled")), "{body}");

    let (status, body) = get_as(&client, &server, "/v1/jobs/abcd1234", BOB).await;
    assert_eq!((status, body["error"]["code"].as_str()), (400, Some("ambiguous-job-id")), "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("starts 20 jobs' ids") && message.contains("the newest 16"), "{message}");
    assert!(!message.contains(&hers), "Bob is told of Alice's job: {message}");

    let (status, body) = get_as(&client, &server, "/v1/jobs/ffee0000", ALICE).await;
    assert_eq!((status, body["error"]["code"].as_str()), (400, Some("ambiguous-job-id")), "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("starts 20 jobs' ids"), "{message}");
    assert_eq!(message.matches("ffee0000-0000-4000-8000-").count(), 16, "{message}");
    let (status, body) = get_as(&client, &server, "/v1/jobs/ffee0000", BOB).await;
    assert_eq!((status, body["error"]["code"].as_str()), (404, Some("job-not-found")), "{body}");
    // Not a start of any id: not found, as before.
    let (status, body) = get_as(&client, &server, "/v1/jobs/abcd%25", ALICE).await;
    assert_eq!((status, body["error"]["code"].as_str()), (404, Some("job-not-found")), "{body}");
}
