//! `/v1/decode` and `/v1/encode` make one job per item of a batch: a batch over what the queue holds is
//! refused for its size, naming the limit (400 `batch-too-large`), not as a full queue (issue 53: a batch of
//! 1,000,000 answered "queue is full (256 waiting)").
use crate::common;

use common::*;

async fn post(client: &reqwest::Client, server: &Server, path: &str, shape: &[usize]) -> (u16, serde_json::Value) {
    let shape: Vec<String> = shape.iter().map(|d| format!("shape={d}")).collect();
    let url = server.url(&format!("{path}?model=wan21-small&{}&dtype=float32", shape.join("&")));
    // The body is never read: the call is refused on its query.
    send_json(client.post(url).body(vec![0u8; 64])).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_larger_than_the_queue_is_refused_naming_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let models = models_with_small_wan21(dir.path());
    let server = Server::start(dir.path(), &[("VAEBOX_MODELS_DIR", models.to_str().unwrap())]);
    let client = client();
    for (path, shape) in [("/v1/decode", [1_000_000, 16, 2, 4, 6]), ("/v1/decode", [257, 16, 2, 4, 6]), ("/v1/encode", [1_000_000, 3, 1, 16, 16])] {
        let (status, body) = post(&client, &server, path, &shape).await;
        assert_eq!((status, body["error"]["code"].as_str()), (400, Some("batch-too-large")), "{path} {shape:?}: {body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(&format!("a batch of {}", shape[0])) && message.contains("at most 256 (max_queued_jobs"), "{message}");
    }
    // Nothing was queued for them.
    let (status, list) = get_json(&client, &server.url("/v1/jobs")).await;
    assert_eq!((status, list["jobs"].as_array().map(Vec::len)), (200, Some(0)), "{list}");

    // A lower limit is the one named; a token's own, when lower, is that token's.
    drop(server);
    let dir = tempfile::tempdir().unwrap();
    let models = models_with_small_wan21(dir.path());
    let settings = [("VAEBOX_MODELS_DIR", models.to_str().unwrap()), ("VAEBOX_MAX_QUEUED_JOBS", "8"), ("VAEBOX_TOKENS", "alice:alice-secret-0123"), ("VAEBOX_MAX_QUEUED_JOBS_PER_TOKEN", "3")];
    let server = Server::start(dir.path(), &settings);
    let url = server.url("/v1/decode?model=wan21-small&shape=4&shape=16&shape=2&shape=4&shape=6&dtype=float32");
    let (status, body) = send_json(client.post(url).bearer_auth("alice-secret-0123").body(vec![0u8; 64])).await;
    assert_eq!((status, body["error"]["code"].as_str()), (400, Some("batch-too-large")), "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("at most 3 (max_queued_jobs_per_token"), "{body}");
}
