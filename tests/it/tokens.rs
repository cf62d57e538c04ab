//! Access tokens: with tokens configured every /v1 call needs one, a job belongs to the token that made
//! it (others get 404 and do not list it), admins see all, and the page shell and /healthz stay open.
use crate::common;

use common::*;
use serde_json::Value;

const ALICE: &str = "alice-secret-0123";
const BOB: &str = "bob-secret-456789";
const ROOT: &str = "root-secret-abcdef";

async fn call(client: &reqwest::Client, method: reqwest::Method, url: &str, token: Option<&str>, body: Option<Vec<u8>>) -> (u16, Value) {
    let mut request = client.request(method, url);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(body) = body {
        request = request.body(body);
    }
    send_json(request).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_belong_to_their_token() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = format!("alice:{ALICE},bob:{BOB},root:{ROOT}:admin");
    let server = Server::start(dir.path(), &[("VAEBOX_TOKENS", &tokens), ("VAEBOX_MAX_QUEUED_JOBS_PER_TOKEN", "1")]);
    let client = client();
    let (get, post, delete) = (reqwest::Method::GET, reqwest::Method::POST, reqwest::Method::DELETE);

    // Open without a token: the page and health. Closed: every /v1 call.
    assert_eq!(client.get(server.url("/")).send().await.unwrap().status(), 200);
    assert_eq!(call(&client, get.clone(), &server.url("/healthz"), None, None).await.0, 200);
    for token in [None, Some("not-a-token-at-all")] {
        let (status, body) = call(&client, get.clone(), &server.url("/v1/jobs"), token, None).await;
        assert_eq!((status, body["error"]["code"].as_str()), (401, Some("unauthorized")), "{body}");
    }
    let response = client.get(server.url("/v1/models")).send().await.unwrap();
    assert_eq!(response.headers()["www-authenticate"], "Bearer");

    // Alice's job: hers and the admin's to see; Bob gets 404 for it and an empty list.
    let clip = dir.path().join("clip.mp4");
    // Long enough (30 frames) to keep the executor busy while Bob queues below.
    make_clip(&media("carphone_pristine.mp4"), 30, false, &clip);
    let upload = |token: &'static str| {
        let (client, url, body) = (client.clone(), server.url("/v1/jobs?op=upscale&model=realesrgan-animevideov3&scale=2"), std::fs::read(&clip).unwrap());
        async move { call(&client, reqwest::Method::POST, &url, Some(token), Some(body)).await }
    };
    let (status, job) = upload(ALICE).await;
    assert_eq!(status, 202, "{job}");
    assert_eq!(job["owner"], "alice");
    let url = server.url(&format!("/v1/jobs/{}", job["id"].as_str().unwrap()));
    assert_eq!(call(&client, get.clone(), &url, Some(ALICE), None).await.0, 200);
    assert_eq!(call(&client, get.clone(), &url, Some(ROOT), None).await.0, 200);
    let (status, body) = call(&client, get.clone(), &url, Some(BOB), None).await;
    assert_eq!((status, body["error"]["code"].as_str()), (404, Some("job-not-found")), "{body}");
    assert_eq!(call(&client, post.clone(), &format!("{url}/cancel"), Some(BOB), None).await.0, 404);
    assert_eq!(call(&client, delete.clone(), &url, Some(BOB), None).await.0, 404);
    let listed = |token: &'static str| {
        let (client, url) = (client.clone(), server.url("/v1/jobs"));
        async move { call(&client, reqwest::Method::GET, &url, Some(token), None).await.1["jobs"].as_array().unwrap().len() }
    };
    assert_eq!((listed(ALICE).await, listed(BOB).await, listed(ROOT).await), (1, 0, 1));

    // One queued job per token: while Alice's job runs, Bob's first waits and his second is refused.
    let (first, _) = upload(BOB).await;
    assert_eq!(first, 202);
    let (second, body) = upload(BOB).await;
    let running = call(&client, get.clone(), &url, Some(ALICE), None).await.1["status"] == "running";
    if running {
        assert_eq!((second, body["error"]["code"].as_str()), (429, Some("queue-full")), "{body}");
    }

    // Where a browser cannot send headers (event streams, download links) a GET may carry the token in
    // the query; nothing that changes a job may.
    let events = client.get(format!("{url}/events?access_token={ALICE}")).send().await.unwrap();
    assert_eq!(events.status(), 200);
    drop(events);
    // The list too (it answered 400 unknown-parameter): every GET takes it.
    let (status, list) = send_json(client.get(server.url(&format!("/v1/jobs?access_token={ALICE}")))).await;
    assert_eq!((status, list["jobs"].as_array().map(Vec::len)), (200, Some(1)), "{list}");
    assert_eq!(call(&client, post.clone(), &format!("{url}/cancel?access_token={ALICE}"), None, None).await.0, 401);

    // The job finishes for Alice, who may download and delete it.
    let job = wait_for_final_with(&client, &url, ALICE).await;
    assert_eq!(job["status"], "succeeded", "{job}");
    assert_eq!(call(&client, delete, &url, Some(ALICE), None).await.0, 204);
}

async fn wait_for_final_with(client: &reqwest::Client, url: &str, token: &str) -> Value {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        let (_, job) = send_json(client.get(url).bearer_auth(token)).await;
        if ["succeeded", "failed", "cancelled"].contains(&job["status"].as_str().unwrap_or("")) {
            return job;
        }
        assert!(std::time::Instant::now() < deadline, "{job}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// diffusers' `remote_decode` takes only an endpoint URL; with the secret as the URL's password (sent as
/// HTTP Basic) the call is the token's job, and without it the client gets the 401 body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn diffusers_remote_decode_sends_the_token_in_the_url() {
    let reference = std::path::Path::new(REPO).join("../shared/reference/wan21_original");
    let dir = tempfile::tempdir().unwrap();
    let models = dir.path().join("models");
    std::fs::create_dir_all(models.join("vae")).unwrap();
    std::fs::copy(reference.join("weights.safetensors"), models.join("vae/wan21-tiny.safetensors")).unwrap();
    let tokens = format!("alice:{ALICE},root:{ROOT}:admin");
    let server = Server::start(dir.path(), &[("VAEBOX_TOKENS", &tokens), ("VAEBOX_MODELS_DIR", models.to_str().unwrap())]);
    let with_token = server.base.replacen("http://", &format!("http://alice:{ALICE}@"), 1);
    let out = tokio::process::Command::new(python())
        .arg(std::path::Path::new(REPO).join("tests/python/diffusers_remote_token.py"))
        .args([&with_token, &server.base])
        .arg(reference.join("case.safetensors"))
        .arg("latent_mu")
        .output()
        .await
        .expect("run python");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let result: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(result["shape"], serde_json::json!([1, 3, 9, 64, 96]), "{result}");
    assert_eq!(result["without_token"]["error"]["code"], "unauthorized", "{result}");

    let (status, list) = call(&client(), reqwest::Method::GET, &server.url("/v1/jobs"), Some(ROOT), None).await;
    assert_eq!(status, 200);
    let owners: Vec<&str> = list["jobs"].as_array().unwrap().iter().map(|job| job["owner"].as_str().unwrap_or("-")).collect();
    assert_eq!(owners, ["alice"], "{list}");
}

/// A token given in a link (`?access_token=`) stays out of the log, even at debug level, where every
/// request's path and query are logged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_in_a_link_is_not_logged() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("server.log");
    let tokens = format!("alice:{ALICE}");
    let server = Server::start_logged(dir.path(), &[("VAEBOX_TOKENS", &tokens), ("VAEBOX_LOG", "debug")], &log);
    let client = client();
    let id = "00000000-0000-4000-8000-000000000000";
    let (status, body) = get_json(&client, &server.url(&format!("/v1/jobs/{id}/preview?side=input&access_token={ALICE}"))).await;
    assert_eq!((status, body["error"]["code"].as_str()), (404, Some("job-not-found")), "the token let it through: {body}");
    drop(server);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("side=input&access_token=[redacted]"), "the request is not in the log: {text}");
    assert!(!text.contains(ALICE), "the token is in the log");
}
