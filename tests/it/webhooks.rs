//! Webhooks (`callback_url`): the box POSTs the finished job to a receiver in this test, signed with
//! `callback_secret`; the signature is checked by the receiver snippet README shows (scripts/verify_webhook.py,
//! Python's own hmac), a refused try is retried, a try due while the box was down is made after start-up,
//! URLs the box must not call are refused at submission, receivers that hang hold no other webhook, and no
//! process of a split box (`role = api` and `role = worker`) posts into the box's API.
use crate::common;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use http_body_util::{BodyExt, Full};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::Value;

const SECRET: &str = "test-webhook-secret";

/// A request the receiver got.
#[derive(Clone, Debug)]
struct Received {
    target: String,
    signature: String,
    event: String,
    delivery: String,
    body: Bytes,
}

/// A webhook receiver on a loopback port: answers each request with the next of `answers` (then 200).
#[derive(Clone)]
struct Receiver {
    address: SocketAddr,
    received: Arc<Mutex<Vec<Received>>>,
}

impl Receiver {
    async fn start(answers: &[u16]) -> Receiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let received = Arc::new(Mutex::new(Vec::new()));
        let answers = Arc::new(Mutex::new(answers.to_vec()));
        let log = received.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { return };
                let (log, answers) = (log.clone(), answers.clone());
                tokio::spawn(async move {
                    let service = service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
                        let (log, answers) = (log.clone(), answers.clone());
                        async move {
                            let header = |name: &str| request.headers().get(name).and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
                            let (signature, event, delivery) = (header("vaebox-signature"), header("vaebox-event"), header("vaebox-delivery"));
                            let target = request.uri().to_string();
                            let body = request.into_body().collect().await.unwrap().to_bytes();
                            log.lock().unwrap().push(Received { target, signature, event, delivery, body });
                            let status = { let mut a = answers.lock().unwrap(); if a.is_empty() { 200 } else { a.remove(0) } };
                            Ok::<_, std::convert::Infallible>(hyper::Response::builder().status(status).body(Full::new(Bytes::from_static(b"ok"))).unwrap())
                        }
                    });
                    let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
                });
            }
        });
        Receiver { address, received }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.address)
    }

    fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }
}

/// A receiver on a loopback port that accepts connections and never answers (nor closes them): each try
/// there lasts the whole timeout.
fn silent_receiver() -> SocketAddr {
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = silent.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in silent.incoming().flatten() {
            held.push(stream);
        }
    });
    address
}

fn webhook_env(hosts: &'static str, retry_first_s: &'static str) -> Vec<(&'static str, &'static str)> {
    vec![("VAEBOX_CALLBACK_SECRET", SECRET), ("VAEBOX_CALLBACK_HOSTS", hosts), ("VAEBOX_CALLBACK_RETRY_FIRST_S", retry_first_s)]
}

fn encoded(text: &str) -> String {
    url::form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

fn tiny_clip(dir: &std::path::Path) -> Vec<u8> {
    let clip = dir.join("clip.mp4");
    make_clip(&media("carphone_pristine.mp4"), 2, false, &clip);
    std::fs::read(&clip).unwrap()
}

/// Polls the job until its webhook has `tries` deliveries recorded (and is no longer pending when `settled`).
async fn wait_for_tries(client: &reqwest::Client, server: &Server, id: &str, tries: usize, settled: bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, job) = get_json(client, &server.url(&format!("/v1/jobs/{id}"))).await;
        let count = job["callback"]["deliveries"].as_array().map_or(0, Vec::len);
        if count >= tries && (!settled || job["callback"]["state"] != "pending") {
            return job;
        }
        assert!(Instant::now() < deadline, "no {tries} webhook tries within 60 s: {job}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The receiver's check: README's snippet, run by Python on the body exactly as received.
fn signed_by_the_box(received: &Received, dir: &std::path::Path) -> bool {
    static BODIES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let body = dir.join(format!("body-{}.json", BODIES.fetch_add(1, std::sync::atomic::Ordering::Relaxed)));
    std::fs::write(&body, &received.body).unwrap();
    let out = std::process::Command::new(python())
        .arg(std::path::Path::new(REPO).join("scripts/verify_webhook.py"))
        .args([SECRET, received.signature.as_str()])
        .arg(&body)
        .output()
        .expect("python runs (set VAEBOX_PYTHON)");
    out.status.success() && String::from_utf8_lossy(&out.stdout).trim() == "ok"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_delivery_is_tried_again_and_each_try_is_recorded_and_signed() {
    let dir = tempfile::tempdir().unwrap();
    let receiver = Receiver::start(&[500]).await;
    let server = Server::start(dir.path(), &webhook_env("127.0.0.1", "1"));
    let client = client();

    let query = format!("op=upscale&scale=2&dtype=f32&callback_url={}", encoded(&receiver.url("/hooks/vaebox?box=1")));
    let (status, job) = upload_raw(&client, &server, &query, tiny_clip(dir.path())).await;
    assert_eq!(status, 202, "{job}");
    let id = job["id"].as_str().unwrap().to_string();
    assert_eq!((job["callback"]["url"].as_str(), job["callback"]["state"].as_str()), (Some(receiver.url("/hooks/vaebox?box=1").as_str()), Some("pending")), "{job}");

    let job = wait_for_tries(&client, &server, &id, 2, true).await;
    assert_eq!(job["status"], "succeeded", "{job}");
    let callback = &job["callback"];
    assert_eq!(callback["state"], "delivered", "{job}");
    let deliveries = callback["deliveries"].as_array().unwrap();
    let summary: Vec<(Option<u64>, Option<u64>, bool)> =
        deliveries.iter().map(|d| (d["attempt"].as_u64(), d["status"].as_u64(), d["error"].is_null())).collect();
    assert_eq!(summary, [(Some(1), Some(500), false), (Some(2), Some(200), true)], "{job}");

    let received = receiver.received();
    assert_eq!(received.len(), 2, "one request per try: {received:?}");
    for request in &received {
        assert_eq!(request.target, "/hooks/vaebox?box=1");
        assert_eq!((request.event.as_str(), request.delivery.as_str()), ("job.succeeded", id.as_str()));
        assert!(signed_by_the_box(request, dir.path()), "the signature does not check: {request:?}");
        let sent: Value = serde_json::from_slice(&request.body).unwrap();
        assert_eq!((sent["id"].as_str(), sent["status"].as_str()), (Some(id.as_str()), Some("succeeded")), "{sent}");
        assert_eq!(sent["output"], job["output"], "the body is the job as GET /v1/jobs/{{id}} serves it");
    }
    // A body changed in transit no longer checks.
    let forged = Received { body: Bytes::from(String::from_utf8_lossy(&received[1].body).replace("succeeded", "failed")), ..received[1].clone() };
    assert!(!signed_by_the_box(&forged, dir.path()));
    let first: Value = serde_json::from_slice(&received[0].body).unwrap();
    let second: Value = serde_json::from_slice(&received[1].body).unwrap();
    assert_eq!((first["callback"]["deliveries"].as_array().map(Vec::len), second["callback"]["deliveries"].as_array().map(Vec::len)), (Some(0), Some(1)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn urls_the_box_must_not_call_are_refused_and_a_name_leading_to_the_box_is_not_called() {
    let dir = tempfile::tempdir().unwrap();
    let receiver = Receiver::start(&[]).await;
    let clip = tiny_clip(dir.path());
    let client = client();

    std::fs::create_dir_all(dir.path().join("plain")).unwrap();
    let no_secret = Server::start(&dir.path().join("plain"), &[("VAEBOX_CALLBACK_HOSTS", "127.0.0.1")]);
    let query = format!("op=upscale&scale=2&callback_url={}", encoded(&receiver.url("/")));
    let (status, refused) = upload_raw(&client, &no_secret, &query, clip.clone()).await;
    assert_eq!((status, refused["error"]["code"].as_str()), (400, Some("callback-not-configured")), "{refused}");
    drop(no_secret);

    // Only the name `localhost` is listed: its address is not, and a name must not lead to the box itself.
    let server = Server::start(dir.path(), &webhook_env("localhost", "1"));
    for (url, code) in [
        (receiver.url("/"), "callback-host-not-allowed"),
        ("http://10.1.2.3/hook".to_string(), "callback-host-not-allowed"),
        (format!("https://localhost:{}/", receiver.address.port()), "callback-https-unsupported"),
        ("localhost/hook".to_string(), "invalid-callback-url"),
        (format!("http://user:pw@localhost:{}/", receiver.address.port()), "invalid-callback-url"),
    ] {
        let (status, refused) = upload_raw(&client, &server, &format!("op=upscale&scale=2&callback_url={}", encoded(&url)), clip.clone()).await;
        assert_eq!((status, refused["error"]["code"].as_str()), (400, Some(code)), "{url}: {refused}");
    }
    // The same field in a multipart form's `params`, and on another op.
    let params = serde_json::json!({"op": "interpolate", "callback_url": "http://10.1.2.3/hook"}).to_string();
    let form = reqwest::multipart::Form::new()
        .part("file", reqwest::multipart::Part::bytes(clip.clone()).file_name("clip.mp4"))
        .text("params", params);
    let (status, refused) = send_json(client.post(server.url("/v1/jobs")).multipart(form)).await;
    assert_eq!((status, refused["error"]["code"].as_str()), (400, Some("callback-host-not-allowed")), "{refused}");

    let url = format!("http://localhost:{}/hook", receiver.address.port());
    let (status, job) = upload_raw(&client, &server, &format!("op=upscale&scale=2&callback_url={}", encoded(&url)), clip).await;
    assert_eq!(status, 202, "{job}");
    let job = wait_for_tries(&client, &server, job["id"].as_str().unwrap(), 1, false).await;
    let first = &job["callback"]["deliveries"][0];
    assert!(first["status"].is_null(), "{job}");
    let error = first["error"].as_str().unwrap_or_default();
    assert!(error.contains("resolves to") && (error.contains("127.0.0.1") || error.contains("::1")), "{job}");
    assert_eq!(job["callback"]["state"], "pending", "tried again later: {job}");
    assert!(receiver.received().is_empty(), "nothing reached the box's own address");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_try_due_while_the_box_was_down_is_made_after_start_up() {
    let dir = tempfile::tempdir().unwrap();
    let receiver = Receiver::start(&[503]).await;
    let mut server = Server::start(dir.path(), &webhook_env("127.0.0.1", "2"));
    let client = client();
    let query = format!("op=upscale&scale=2&dtype=f32&callback_url={}", encoded(&receiver.url("/hook")));
    let (status, job) = upload_raw(&client, &server, &query, tiny_clip(dir.path())).await;
    assert_eq!(status, 202, "{job}");
    let id = job["id"].as_str().unwrap().to_string();
    let job = wait_for_tries(&client, &server, &id, 1, false).await;
    assert_eq!((job["callback"]["state"].as_str(), job["callback"]["deliveries"][0]["status"].as_u64()), (Some("pending"), Some(503)), "{job}");

    server.kill9();
    // The second try falls due while nothing runs.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(receiver.received().len(), 1);
    let server = server.restart_after_kill9();
    let job = wait_for_tries(&client, &server, &id, 2, true).await;
    assert_eq!(job["callback"]["state"], "delivered", "{job}");
    assert_eq!(job["callback"]["deliveries"][1]["status"], 200, "{job}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(receiver.received().len(), 2, "each try once");
}

/// Three processes on one PostgreSQL queue (an API and two workers) each send webhooks: every job's is sent
/// by one of them, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_shared_queue_each_webhook_is_sent_once() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = common::postgres::PgCluster::start();
    let receiver = Receiver::start(&[]).await;
    let url = cluster.url();
    let mut env = webhook_env("127.0.0.1", "1");
    env.extend([("VAEBOX_DATABASE", url.as_str()), ("VAEBOX_THREADS", "1")]);
    let mut api_env = env.clone();
    api_env.push(("VAEBOX_ROLE", "api"));
    let api = Server::start(dir.path(), &api_env);
    let _workers: Vec<WorkerProcess> = ["w1", "w2"].iter().map(|name| WorkerProcess::start(dir.path(), name, &env, None)).collect();
    let client = client();
    let clip = tiny_clip(dir.path());
    let mut ids = Vec::new();
    for n in 0..4 {
        let query = format!("op=upscale&scale=2&dtype=f32&callback_url={}", encoded(&receiver.url(&format!("/job/{n}"))));
        let (status, job) = upload_raw(&client, &api, &query, clip.clone()).await;
        assert_eq!(status, 202, "{job}");
        ids.push(job["id"].as_str().unwrap().to_string());
    }
    for id in &ids {
        let job = wait_for_tries(&client, &api, id, 1, true).await;
        assert_eq!((job["status"].as_str(), job["callback"]["state"].as_str()), (Some("succeeded"), Some("delivered")), "{job}");
        assert_eq!(job["callback"]["deliveries"].as_array().map(Vec::len), Some(1), "{job}");
    }
    // Three pollers a second each: long enough for a second send to have happened if one could.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut delivered: Vec<String> = receiver.received().into_iter().map(|r| r.delivery).collect();
    delivered.sort();
    let mut expected = ids.clone();
    expected.sort();
    assert_eq!(delivered, expected, "one request per job");
}

/// A token's own `callback_url` (`[[tokens]]`) is the webhook of its jobs that give none; a job's own wins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_can_bring_its_webhook() {
    let dir = tempfile::tempdir().unwrap();
    let receiver = Receiver::start(&[]).await;
    let config = format!(
        "callback_secret = {SECRET:?}\ncallback_hosts = [\"127.0.0.1\"]\n[[tokens]]\nname = \"alice\"\nsecret = \"alice-secret-0123\"\ncallback_url = {:?}\n[[tokens]]\nname = \"bob\"\nsecret = \"bob-secret-01234\"\n",
        receiver.url("/alice")
    );
    std::fs::write(dir.path().join("config.toml"), config).unwrap();
    let server = Server::start(dir.path(), &[]);
    let client = client();
    let clip = tiny_clip(dir.path());
    let submit = |secret: &'static str, query: String| {
        let request = client.post(server.url(&format!("/v1/jobs?{query}"))).bearer_auth(secret).body(clip.clone());
        send_json(request)
    };
    let (status, job) = submit("alice-secret-0123", "op=upscale&scale=2".into()).await;
    assert_eq!((status, job["callback"]["url"].as_str()), (202, Some(receiver.url("/alice").as_str())), "{job}");
    let own = receiver.url("/own");
    let (status, job) = submit("alice-secret-0123", format!("op=upscale&scale=2&callback_url={}", encoded(&own))).await;
    assert_eq!((status, job["callback"]["url"].as_str()), (202, Some(own.as_str())), "{job}");
    let (status, job) = submit("bob-secret-01234", "op=upscale&scale=2".into()).await;
    assert_eq!((status, &job["callback"]), (202, &Value::Null), "{job}");

    // A token's URL the box may not call stops start-up, naming it.
    let bad = tempfile::tempdir().unwrap();
    let config = format!("callback_secret = {SECRET:?}\n[[tokens]]\nname = \"carol\"\nsecret = \"carol-secret-012\"\ncallback_url = \"http://10.9.9.9/\"\n");
    std::fs::write(bad.path().join("config.toml"), config).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_vaebox"))
        .arg("serve")
        .current_dir(bad.path())
        .env("VAEBOX_LISTEN", "127.0.0.1:0")
        .env("VAEBOX_DATA_DIR", bad.path().join("data"))
        .env("VAEBOX_MODELS_DIR", std::path::Path::new(REPO).join("models"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("tokens.carol.callback_url"), "{stderr}");
}

/// A `callback_hosts` that holds the box's own address does not let a webhook POST into the box's API (it
/// made a job on a box without tokens): the address is refused at submission, a name that leads there at the
/// try; and a receiver that cannot be reached is recorded in the same words whether its port was closed or
/// silent, so that deliveries do not map the ports of allowed hosts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_never_calls_the_box_itself_and_records_no_port_state() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &webhook_env("127.0.0.1,localhost", "3600"));
    let client = client();
    let clip = tiny_clip(dir.path());
    let port = server.base.rsplit(':').next().unwrap().to_string();
    let into_the_box = format!("http://127.0.0.1:{port}/v1/jobs?op=upscale&scale=2");
    let (status, refused) = upload_raw(&client, &server, &format!("op=upscale&scale=2&callback_url={}", encoded(&into_the_box)), clip.clone()).await;
    assert_eq!((status, refused["error"]["code"].as_str()), (400, Some("callback-host-not-allowed")), "{refused}");
    let by_name = format!("http://localhost:{port}/v1/jobs?op=upscale&scale=2");
    let (status, job) = upload_raw(&client, &server, &format!("op=upscale&scale=2&callback_url={}", encoded(&by_name)), clip.clone()).await;
    assert_eq!(status, 202, "{job}");
    let job = wait_for_tries(&client, &server, job["id"].as_str().unwrap(), 1, false).await;
    let error = job["callback"]["deliveries"][0]["error"].as_str().unwrap_or_default().to_string();
    assert!(error.contains("this box's own API"), "{job}");
    let (_, listed) = get_json(&client, &server.url("/v1/jobs")).await;
    assert_eq!(listed["jobs"].as_array().unwrap().len(), 1, "the webhook made a job: {listed}");

    // A port nobody listens on: the generic words, not "Connection refused".
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let nowhere = format!("http://127.0.0.1:{closed}/hook");
    let (_, job) = upload_raw(&client, &server, &format!("op=upscale&scale=2&callback_url={}", encoded(&nowhere)), clip).await;
    let job = wait_for_tries(&client, &server, job["id"].as_str().unwrap(), 1, false).await;
    let error = job["callback"]["deliveries"][0]["error"].as_str().unwrap_or_default();
    assert_eq!(error, "the receiver could not be reached or did not answer in time", "{job}");
}

/// Webhooks go out side by side, a few at a time per host: ten jobs whose receiver never answers do not hold
/// another receiver's webhook behind their tries (one at a time, oldest first, they held it 8 min 30 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_receiver_does_not_hold_another_hosts_webhook() {
    let dir = tempfile::tempdir().unwrap();
    let silent_url = format!("http://{}/hook", silent_receiver());
    let receiver = Receiver::start(&[]).await;
    // The healthy receiver by name, the silent one by address: two hosts.
    let server = Server::start(dir.path(), &webhook_env("127.0.0.1,localhost", "3600"));
    let client = client();
    let clip = tiny_clip(dir.path());
    for _ in 0..10 {
        let (status, job) = upload_raw(&client, &server, &format!("op=upscale&scale=2&callback_url={}", encoded(&silent_url)), clip.clone()).await;
        assert_eq!(status, 202, "{job}");
    }
    let healthy = format!("http://localhost:{}/hook", receiver.address.port());
    let (_, job) = upload_raw(&client, &server, &format!("op=upscale&scale=2&callback_url={}", encoded(&healthy)), clip).await;
    let id = job["id"].as_str().unwrap().to_string();
    wait_for_final(&client, &server, &id, Duration::from_secs(120)).await;
    let ended = Instant::now();
    while receiver.received().is_empty() {
        assert!(ended.elapsed() < Duration::from_secs(20), "the healthy receiver's webhook waited behind the silent one's tries");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(receiver.received()[0].delivery, id);
}

/// Sixteen webhooks whose receiver accepts and never answers, then one to the same host whose receiver
/// answers: it arrives within seconds of its job's end (it came 3 min 02 s after, held behind the hanging
/// tries), and each hanging try ends within `callback_timeout_s`, not minutes later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hanging_tries_do_not_hold_a_webhook_to_the_same_host() {
    let dir = tempfile::tempdir().unwrap();
    let silent = silent_receiver();
    let receiver = Receiver::start(&[]).await;
    // Retried a second after each failed try: the hanging ones come back again and again meanwhile.
    let server = Server::start(dir.path(), &webhook_env("127.0.0.1", "1"));
    let client = client();
    let clip = tiny_clip(dir.path());
    let mut hanging = Vec::new();
    for n in 0..16 {
        let url = format!("http://{silent}/hook/{n}");
        let (status, job) = upload_raw(&client, &server, &format!("op=upscale&scale=2&callback_url={}", encoded(&url)), clip.clone()).await;
        assert_eq!(status, 202, "{job}");
        hanging.push(job["id"].as_str().unwrap().to_string());
    }
    for id in &hanging {
        wait_for_final(&client, &server, id, Duration::from_secs(180)).await;
    }
    let (_, job) = upload_raw(&client, &server, &format!("op=upscale&scale=2&callback_url={}", encoded(&receiver.url("/good"))), clip).await;
    let id = job["id"].as_str().unwrap().to_string();
    wait_for_final(&client, &server, &id, Duration::from_secs(120)).await;
    let ended = Instant::now();
    while receiver.received().is_empty() {
        assert!(ended.elapsed() < Duration::from_secs(5), "the webhook waited behind the hanging tries to its host");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(receiver.received()[0].delivery, id);
    // Every hanging webhook has had its first try, ended by the timeout, by now or within its length.
    for id in &hanging {
        loop {
            let (_, job) = get_json(&client, &server.url(&format!("/v1/jobs/{id}"))).await;
            if let Some(first) = job["callback"]["deliveries"].as_array().and_then(|tries| tries.first()) {
                assert_eq!(first["error"], "the receiver could not be reached or did not answer in time", "{job}");
                break;
            }
            assert!(ended.elapsed() < Duration::from_secs(8), "a hanging try still unrecorded: {job}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// An API process and a worker process on one store (SQLite, then PostgreSQL): every process knows where the
/// API listens, so a `callback_url` into it is refused at submission when it names the address, and by the
/// worker at delivery when a name leads there (the worker's webhook went into the API: 202, and a job ran).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_process_of_a_split_box_posts_into_its_api() {
    split_box_refuses_its_api(None).await;
    let cluster = common::postgres::PgCluster::start();
    split_box_refuses_its_api(Some(&cluster.url())).await;
}

async fn split_box_refuses_its_api(database: Option<&str>) {
    let dir = tempfile::tempdir().unwrap();
    let mut env = webhook_env("localhost,127.0.0.1", "3600");
    env.push(("VAEBOX_THREADS", "1"));
    if let Some(url) = database {
        env.push(("VAEBOX_DATABASE", url));
    }
    let mut api_env = env.clone();
    api_env.push(("VAEBOX_ROLE", "api"));
    let api = Server::start(dir.path(), &api_env);
    let log = dir.path().join("worker.log");
    let _worker = WorkerProcess::start(dir.path(), "w1", &env, Some(&log));
    let client = client();
    let clip = tiny_clip(dir.path());
    let port = api.base.rsplit(':').next().unwrap().to_string();

    // The API's address: refused at submission.
    let into_the_api = format!("http://127.0.0.1:{port}/v1/jobs?op=upscale&scale=2");
    let (status, refused) = upload_raw(&client, &api, &format!("op=upscale&scale=2&callback_url={}", encoded(&into_the_api)), clip.clone()).await;
    assert_eq!((status, refused["error"]["code"].as_str()), (400, Some("callback-host-not-allowed")), "{refused}");
    assert!(refused["error"]["message"].as_str().unwrap_or_default().contains("own API"), "{refused}");

    // A name that leads there: accepted, and the worker alone may send it (the API process is stopped).
    let by_name = format!("http://localhost:{port}/v1/jobs?op=upscale&scale=2");
    let (status, job) = upload_raw(&client, &api, &format!("op=upscale&scale=2&callback_url={}", encoded(&by_name)), clip).await;
    assert_eq!(status, 202, "{job}");
    let id = job["id"].as_str().unwrap().to_string();
    let signal = |name: &str| assert!(std::process::Command::new("kill").args([name, &api.pid().to_string()]).status().unwrap().success());
    signal("-STOP");
    let deadline = Instant::now() + Duration::from_secs(90);
    let tried = |log: &str| log.lines().any(|line| line.contains("webhook try") && line.contains(&id));
    while !tried(&std::fs::read_to_string(&log).unwrap_or_default()) {
        if Instant::now() > deadline {
            signal("-CONT");
            panic!("the worker made no webhook try within 90 s");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    signal("-CONT");
    let job = wait_for_tries(&client, &api, &id, 1, false).await;
    let error = job["callback"]["deliveries"][0]["error"].as_str().unwrap_or_default().to_string();
    assert!(error.contains("own API"), "{job}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (_, listed) = get_json(&client, &api.url("/v1/jobs")).await;
    assert_eq!(listed["jobs"].as_array().unwrap().len(), 1, "the webhook made a job: {listed}");
}
