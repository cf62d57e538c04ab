//! The SQLite store's own tests: plans stored by earlier versions, and transactions beside concurrent writes.
use serde_json::json;

use super::*;
use crate::device::DtypeChoice;
use crate::jobs::plan::{JobPlan, UpscalePlan};

/// An upscale of a one-byte clip nobody will read.
fn new_job(id: Uuid) -> NewJob {
    NewJob {
        id,
        op: Op::Upscale,
        model: "realesrgan-animevideov3".into(),
        priority: 0,
        params: JobParams::new(DtypeChoice::Auto),
        input_name: "clip.mp4".into(),
        input_path: "/nowhere/clip.mp4".into(),
        input_bytes: 1,
        input_media: None,
        probe_s: None,
        owner: None,
        device_bytes_needed: 0,
        answered_by: None,
        callback_url: None,
        from_try: None,
        estimate: None,
    }
}

async fn succeeded_job(store: &SqliteStore, plan: JobPlan) -> Uuid {
    let id = Uuid::new_v4();
    store.insert(new_job(id)).await.unwrap();
    let claim = Claim { worker: "here".into(), lease: Duration::from_secs(60), models: None, device_memory_bytes: None, lane: Lane::Any };
    let claimed = store.claim_next(&claim).await.unwrap().unwrap();
    assert_eq!(claimed.id, id);
    let outcome = JobOutcome {
        output_name: "out.mp4".into(),
        output_path: "/nowhere/out.mp4".into(),
        output_bytes: 1,
        output_media: None,
        timings: Timings::default(),
        plan: Some(plan),
        metrics: Some(QualityMetrics { psnr_db: None, ssim: Some(0.5), frames_compared: 2 }),
    };
    store.succeed(&Lease { id, worker: "here".into(), attempt: claimed.attempts }, &outcome).await.unwrap();
    id
}

#[tokio::test]
async fn plans_written_by_an_earlier_version_are_listed_as_they_were_stored() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&dir.path().join("jobs.db")).await.unwrap();
    let plan = UpscalePlan {
        chunk_frames: 8,
        tile: 0,
        overlap: 19,
        receptive_radius: 19,
        exact: true,
        blend: false,
        tiles_per_frame: 1,
        scale: 4,
        frames: 2,
        fallbacks: vec![],
        frame_workers: 1,
        interpolation: None,
        resumed_from: None,
    };
    let current = succeeded_job(&store, JobPlan::Upscale(plan.clone())).await;
    // An upscale plan as versions before the out-of-memory fallbacks, blending and frame workers wrote it.
    let earlier = succeeded_job(&store, JobPlan::Upscale(plan.clone())).await;
    let stored =
        r#"{"chunk_frames":8,"exact":true,"frames":2,"overlap":19,"receptive_radius":19,"scale":4,"tile":0,"tiles_per_frame":1}"#;
    sqlx::query("UPDATE jobs SET plan = ? WHERE id = ?").bind(stored).bind(earlier.to_string()).execute(&store.pool).await.unwrap();

    let listed = store.list(&ListFilter { limit: 10, ..ListFilter::default() }).await.unwrap();
    let plan_of = |id| listed.iter().find(|job| job.id == id).unwrap().plan.clone().unwrap();
    assert_eq!(plan_of(current), JobPlan::Upscale(plan));
    assert_eq!(plan_of(earlier), JobPlan::Other(serde_json::from_str(stored).unwrap()));
    assert_eq!(serde_json::to_string(&plan_of(earlier)).unwrap(), stored);
    let metrics = listed[0].metrics.unwrap();
    assert_eq!(serde_json::to_value(metrics).unwrap(), json!({"psnr_db": null, "ssim": 0.5, "frames_compared": 2}));
}

// CI once answered a cancel with 500 "database is locked": its read-then-write transaction met the
// executor's progress writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_beside_a_stream_of_progress_writes_is_never_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = std::sync::Arc::new(SqliteStore::open(&dir.path().join("jobs.db")).await.unwrap());
    let (writing, cancelled) = (Uuid::new_v4(), Uuid::new_v4());
    store.insert(new_job(writing)).await.unwrap();
    let claim = Claim { worker: "here".into(), lease: Duration::from_secs(60), models: None, device_memory_bytes: None, lane: Lane::Any };
    let claimed = store.claim_next(&claim).await.unwrap().unwrap();
    store.insert(new_job(cancelled)).await.unwrap();
    store.claim_next(&claim).await.unwrap().unwrap();
    let lease = Lease { id: writing, worker: "here".into(), attempt: claimed.attempts };
    let writer = {
        let store = store.clone();
        tokio::spawn(async move {
            for done in 0..2000 {
                store.set_progress(&lease, &Progress::starting(done)).await.unwrap();
            }
        })
    };
    let mut cancels = 0;
    while !writer.is_finished() {
        let outcome = store.request_cancel(cancelled, false).await;
        assert!(matches!(outcome, Ok(CancelOutcome::Requested(_))), "cancel {cancels}: {:?}", outcome.err());
        cancels += 1;
    }
    writer.await.unwrap();
    assert!(cancels > 10, "the cancels ran beside the writes: {cancels}");
}

/// Webhooks: first tries before tries again (a failed one put back stays a first try), tries again only
/// when asked for (issue 53); and where the APIs listen, as recently recorded.
#[tokio::test]
async fn first_tries_are_claimed_before_tries_again_and_api_addresses_age() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&dir.path().join("jobs.db")).await.unwrap();
    let plan = JobPlan::Other(json!({}));
    let (older, newer) = (succeeded_job(&store, plan.clone()).await, succeeded_job(&store, plan).await);
    sqlx::query("UPDATE jobs SET callback_url = 'http://hooks.lan/x', callback_state = 'pending'").execute(&store.pool).await.unwrap();
    let hold = Duration::from_secs(60);
    assert_eq!(store.claim_callback("a", hold, true).await.unwrap().unwrap().id, older);
    let failed = [Delivery { at: now_rfc3339(), status: Some(500), error: Some("500".into()), attempt: 1 }];
    store.record_delivery(older, "a", &failed, &CallbackNext::RetryAt(now_rfc3339())).await.unwrap();
    assert_eq!(store.claim_callback("a", hold, true).await.unwrap().unwrap().id, newer, "the first try first");
    store.record_delivery(newer, "a", &[], &CallbackNext::RetryAt(now_rfc3339())).await.unwrap();
    assert_eq!(store.claim_callback("a", hold, false).await.unwrap().unwrap().id, newer, "put back: still a first try");
    assert!(store.claim_callback("a", hold, false).await.unwrap().is_none(), "no try again unless asked for");
    assert_eq!(store.claim_callback("a", hold, true).await.unwrap().unwrap().id, older);

    store.api_listening(&["127.0.0.1:8080".into(), "10.0.0.2:8080".into()]).await.unwrap();
    store.api_listening(&["127.0.0.1:8080".into()]).await.unwrap();
    assert_eq!(store.api_addresses(Duration::from_secs(60)).await.unwrap(), ["10.0.0.2:8080", "127.0.0.1:8080"]);
    sqlx::query("UPDATE api_listens SET seen_at = '2000-01-01T00:00:00.000Z' WHERE address = '10.0.0.2:8080'").execute(&store.pool).await.unwrap();
    assert_eq!(store.api_addresses(Duration::from_secs(60)).await.unwrap(), ["127.0.0.1:8080"]);
}
