//! Shared on a LAN: pages of other origins cannot change anything, pages carry security headers and
//! render under them, answers name no server paths, slow or stalled clients are cut off, uploads at once
//! are bounded, and SIGTERM ends event streams, stops the running job after the grace (it runs again
//! after the restart) and exits in bounded time.
use crate::common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use reqwest::header::HeaderMap;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const ALLOWED: &str = "http://tools.example:3000";
const EVIL: &str = "http://evil.example";

fn junk() -> Vec<u8> {
    b"this is not a video, only words\n".repeat(20)
}

async fn post_junk(client: &reqwest::Client, server: &Server, origin: Option<&str>) -> (u16, HeaderMap, Value) {
    let mut request = client.post(server.url("/v1/jobs?op=upscale&model=realesrgan-animevideov3")).body(junk());
    if let Some(origin) = origin {
        request = request.header("Origin", origin);
    }
    let response = request.send().await.unwrap();
    let headers = response.headers().clone();
    let (status, body) = json_answer("POST", response).await;
    (status, headers, body)
}

fn allow_origin(headers: &HeaderMap) -> Option<&str> {
    headers.get("access-control-allow-origin").map(|v| v.to_str().unwrap())
}

/// The page at `url` rendered by headless Chromium, with what its console reported (CSP violations among it).
fn rendered_with_console(url: &str, profile: &std::path::Path) -> (String, String) {
    let out = std::process::Command::new("chromium")
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking"])
        .args(["--disable-component-update", "--disable-sync", "--virtual-time-budget=8000", "--enable-logging=stderr", "--v=0"])
        .arg("--dump-dom")
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(url)
        .output()
        .expect("chromium is installed by scripts/setup.sh --test");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_origins_cannot_change_anything_unless_listed_and_pages_carry_security_headers() {
    let dir = tempfile::tempdir().unwrap();
    // Server::start runs the server in this folder, where it finds this file.
    std::fs::write(dir.path().join("config.toml"), format!("cors_origins = [\"{ALLOWED}/\"]\n")).unwrap();
    let server = Server::start(dir.path(), &[]);
    let client = client();

    // A page elsewhere on the LAN (or a sandboxed one, "null") is refused before anything is read.
    for origin in [EVIL, "null", &server.base.replace("127.0.0.1", "localhost")] {
        let (status, headers, body) = post_junk(&client, &server, Some(origin)).await;
        assert_eq!((status, body["error"]["code"].as_str()), (403, Some("foreign-origin")), "{origin}: {body}");
        assert_eq!(allow_origin(&headers), None);
    }
    let id = uuid::Uuid::new_v4();
    for (method, path) in [(reqwest::Method::DELETE, format!("/v1/jobs/{id}")), (reqwest::Method::POST, format!("/v1/jobs/{id}/cancel"))] {
        let response = client.request(method.clone(), server.url(&path)).header("Origin", EVIL).send().await.unwrap();
        assert_eq!(response.status(), 403, "{method} {path}");
        let response = client.request(method.clone(), server.url(&path)).send().await.unwrap();
        assert_eq!(response.status(), 404, "{method} {path} without Origin");
    }
    // curl and scripts send no Origin; the box's own page sends its own; the listed origin gets CORS headers.
    for (origin, cors) in [(None, None), (Some(server.base.as_str()), None), (Some(ALLOWED), Some(ALLOWED))] {
        let (status, headers, body) = post_junk(&client, &server, origin).await;
        assert_eq!((status, body["error"]["code"].as_str()), (422, Some("not-a-video")), "{origin:?}: {body}");
        assert_eq!(allow_origin(&headers), cors, "{origin:?}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(!message.contains(dir.path().to_str().unwrap()), "a server path in the answer: {message}");
    }
    // Reading is not refused, but a foreign page's browser gets no CORS header to read it with.
    let response = client.get(server.url("/v1/jobs")).header("Origin", EVIL).send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(allow_origin(response.headers()), None);

    // Preflights: answered for the listed origin only.
    let preflight = |origin: &str| {
        client
            .request(reqwest::Method::OPTIONS, server.url("/v1/jobs"))
            .header("Origin", origin)
            .header("Access-Control-Request-Method", "POST")
            .header("Access-Control-Request-Headers", "content-type")
            .send()
    };
    let response = preflight(ALLOWED).await.unwrap();
    assert!(response.status().is_success(), "{}", response.status());
    assert_eq!(allow_origin(response.headers()), Some(ALLOWED));
    assert!(response.headers()["access-control-allow-methods"].to_str().unwrap().contains("POST"));
    let response = preflight(EVIL).await.unwrap();
    assert_eq!(allow_origin(response.headers()), None);

    // Security headers on the pages, their files and the API.
    for path in ["/", "/js/main.js", "/static/style.css", "/docs", "/docs/swagger-ui-bundle.js", "/v1/models", "/nowhere"] {
        let response = client.get(server.url(path)).send().await.unwrap();
        let headers = response.headers();
        let csp = headers.get("content-security-policy").unwrap_or_else(|| panic!("{path}: no CSP")).to_str().unwrap();
        assert!(csp.contains("default-src 'self'") && csp.contains("frame-ancestors 'none'"), "{path}: {csp}");
        assert!(!csp.contains("script-src 'self' 'unsafe-inline'"), "{path}: {csp}");
        assert_eq!(headers["x-content-type-options"], "nosniff", "{path}");
        assert_eq!(headers["referrer-policy"], "no-referrer", "{path}");
        assert_eq!(headers["x-frame-options"], "DENY", "{path}");
    }

    // Both pages work under their policy: a real browser fills them in and reports no violation.
    for (path, shown) in [("/", "<option value=\"realesrgan-x4plus\""), ("/docs", "Create a job from an upload")] {
        let (url, profile) = (server.url(path), dir.path().join(format!("profile{}", path.replace('/', "-"))));
        let (dom, console) = tokio::task::spawn_blocking(move || rendered_with_console(&url, &profile)).await.unwrap();
        assert!(dom.contains(shown), "{path} did not render `{shown}`:\n{dom}");
        assert!(!console.contains("Content Security Policy"), "{path} broke its CSP:\n{console}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_name_files_by_their_place_not_by_server_paths() {
    let dir = tempfile::tempdir().unwrap();
    let models = models_with_small_wan21(dir.path());
    // A damaged checkpoint: still a Wan 2.1 VAE by its names, but one convolution has its dimensions swapped.
    let weights = models.join("vae/wan21-small.safetensors");
    swap_first_dimensions(&weights, "encoder.head.2.weight");
    let clip = dir.path().join("clip.mp4");
    make_clip(&media("carphone_pristine.mp4"), 5, false, &clip);
    let server = Server::start(dir.path(), &[("VAEBOX_MODELS_DIR", models.to_str().unwrap())]);
    let client = client();
    let private = dir.path().to_str().unwrap();

    let (status, job) = upload_raw(&client, &server, "op=vae_encode&model=wan21-small", std::fs::read(&clip).unwrap()).await;
    assert_eq!(status, 202, "{job}");
    let job = wait_for_final(&client, &server, job["id"].as_str().unwrap(), Duration::from_secs(120)).await;
    assert_eq!(job["status"], "failed", "{job}");
    let message = job["error"]["message"].as_str().unwrap();
    assert!(message.contains("vae/wan21-small.safetensors"), "the model file is not named: {message}");
    assert!(!message.contains(private), "a server path in the job's error: {message}");

    let (status, refusal) = upload_raw(&client, &server, "op=vae_encode&model=wan21-small", junk()).await;
    assert_eq!(status, 422, "{refusal}");
    let message = refusal["error"]["message"].as_str().unwrap();
    assert!(message.contains("the upload") && !message.contains(private), "{message}");

    let (_, models) = get_json(&client, &server.url("/v1/models")).await;
    assert!(!models.to_string().contains(private), "{models}");
}

/// Rewrites the safetensors header of `path` so that `tensor`'s first two dimensions trade places.
fn swap_first_dimensions(path: &std::path::Path, tensor: &str) {
    let bytes = std::fs::read(path).unwrap();
    let length = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let mut header: Value = serde_json::from_slice(&bytes[8..8 + length]).unwrap();
    let shape = header[tensor]["shape"].as_array_mut().unwrap();
    assert_ne!(shape[0], shape[1]);
    shape.swap(0, 1);
    let header = serde_json::to_vec(&header).unwrap();
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend(header);
    out.extend(&bytes[8 + length..]);
    std::fs::write(path, out).unwrap();
}

fn address(server: &Server) -> String {
    server.base.trim_start_matches("http://").to_string()
}

/// Everything the server sends on `socket` until it closes it, or `None` if it is still open after `within`.
async fn read_until_closed(socket: &mut TcpStream, within: Duration) -> Option<String> {
    let mut received = Vec::new();
    match tokio::time::timeout(within, socket.read_to_end(&mut received)).await {
        Ok(_) => Some(String::from_utf8_lossy(&received).into_owned()),
        Err(_) => None,
    }
}

/// An upload that announces `length` bytes, sends a few, and goes on sending one byte every 200 ms until `stop`.
async fn trickling_upload(address: String, length: u64, stop: Arc<AtomicBool>) {
    let mut socket = TcpStream::connect(&address).await.unwrap();
    let head = format!("POST /v1/jobs?op=upscale&model=realesrgan-animevideov3 HTTP/1.1\r\nHost: {address}\r\nContent-Length: {length}\r\n\r\n");
    socket.write_all(head.as_bytes()).await.unwrap();
    while !stop.load(Ordering::Relaxed) {
        if socket.write_all(b"x").await.is_err() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_clients_are_cut_off_and_uploads_at_once_are_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let settings = [("VAEBOX_HEADER_TIMEOUT_S", "1"), ("VAEBOX_BODY_IDLE_TIMEOUT_S", "1"), ("VAEBOX_MAX_CONCURRENT_UPLOADS", "2")];
    let server = Server::start(dir.path(), &settings);
    let client = client();
    let address = address(&server);

    // Half a request head, then silence: closed after the header timeout, without an answer.
    let started = Instant::now();
    let mut socket = TcpStream::connect(&address).await.unwrap();
    socket.write_all(format!("POST /v1/jobs?op=upscale HTTP/1.1\r\nHost: {address}\r\nContent-Len").as_bytes()).await.unwrap();
    let answer = read_until_closed(&mut socket, Duration::from_secs(10)).await.expect("a stalled request head keeps its socket");
    let elapsed = started.elapsed();
    assert!(answer.is_empty(), "{answer}");
    assert!(elapsed > Duration::from_millis(900) && elapsed < Duration::from_secs(5), "closed after {elapsed:?}");

    // A body shorter than its Content-Length, then silence: 408 after the idle timeout, and closed.
    let started = Instant::now();
    let mut socket = TcpStream::connect(&address).await.unwrap();
    let head = format!("POST /v1/jobs?op=upscale&model=realesrgan-animevideov3 HTTP/1.1\r\nHost: {address}\r\nContent-Length: 100000\r\n\r\n");
    socket.write_all(head.as_bytes()).await.unwrap();
    socket.write_all(&[0u8; 1000]).await.unwrap();
    let answer = read_until_closed(&mut socket, Duration::from_secs(10)).await.expect("a stalled body keeps its socket");
    let elapsed = started.elapsed();
    assert!(answer.starts_with("HTTP/1.1 408") && answer.contains("upload-stalled"), "{answer}");
    assert!(elapsed > Duration::from_millis(900) && elapsed < Duration::from_secs(5), "answered after {elapsed:?}");

    // Two slow uploads hold both places: a third upload, and a synchronous decode, are refused at once.
    let stop = Arc::new(AtomicBool::new(false));
    let slow: Vec<_> = (0..2).map(|_| tokio::spawn(trickling_upload(address.clone(), 10_000_000, stop.clone()))).collect();
    tokio::time::sleep(Duration::from_millis(700)).await;
    let started = Instant::now();
    let mut socket = TcpStream::connect(&address).await.unwrap();
    let head = format!("POST /v1/jobs?op=upscale HTTP/1.1\r\nHost: {address}\r\nContent-Length: 5000000\r\n\r\n");
    socket.write_all(head.as_bytes()).await.unwrap();
    let answer = read_until_closed(&mut socket, Duration::from_secs(10)).await.expect("the extra upload got no answer");
    assert!(answer.starts_with("HTTP/1.1 503") && answer.contains("too-many-uploads"), "{answer}");
    assert!(started.elapsed() < Duration::from_secs(2), "refused after {:?}", started.elapsed());
    let response = client.post(server.url("/v1/decode?model=x&shape=1&shape=16&shape=1&shape=2&shape=2")).body(vec![0u8; 256]).send().await.unwrap();
    assert_eq!(response.status(), 503);
    stop.store(true, Ordering::Relaxed);
    for upload in slow {
        upload.await.unwrap();
    }
    // Their places come back once they are gone.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, _, body) = post_junk(&client, &server, None).await;
        if status != 503 {
            assert_eq!((status, body["error"]["code"].as_str()), (422, Some("not-a-video")), "{body}");
            break;
        }
        assert!(Instant::now() < deadline, "the upload places were not given back");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // A 1 MB form field is refused without being held; the box keeps serving.
    let form = reqwest::multipart::Form::new()
        .text("op", "upscale")
        .text("notes", "a".repeat(1 << 20))
        .part("file", reqwest::multipart::Part::bytes(junk()).file_name("clip.mp4"));
    let (status, body) = send_json(client.post(server.url("/v1/jobs")).multipart(form)).await;
    assert_eq!(status, 413, "{body}");
    assert_eq!(body["error"]["code"], "field-too-large", "{body}");
    let form = reqwest::multipart::Form::new()
        .text("op", "upscale")
        .part("file", reqwest::multipart::Part::bytes(junk()).file_name("clip.mp4"));
    let response = client.post(server.url("/v1/jobs")).multipart(form).send().await.unwrap();
    assert_eq!(response.status(), 422);
    let (status, _) = get_json(&client, &server.url("/healthz")).await;
    assert_eq!(status, 200);

    // No origins configured: no preflight is answered.
    let response = client
        .request(reqwest::Method::OPTIONS, server.url("/v1/jobs"))
        .header("Origin", ALLOWED)
        .header("Access-Control-Request-Method", "POST")
        .send()
        .await
        .unwrap();
    assert_eq!(allow_origin(response.headers()), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_ends_event_streams_stops_the_job_after_the_grace_and_it_runs_after_the_restart() {
    let dir = tempfile::tempdir().unwrap();
    // Long enough (2 frames a chunk, f32 even where bf16 is native) to outlast the one-second grace on a fast
    // CPU, short enough to rerun.
    let clip = dir.path().join("carphone32.mp4");
    make_clip(&media("carphone_pristine.mp4"), 32, false, &clip);
    let log = dir.path().join("server.log");
    let grace_s = 1;
    let settings = [("VAEBOX_CHUNK_FRAMES", "2"), ("VAEBOX_SHUTDOWN_GRACE_S", "1")];
    let mut server = Server::start_logged(dir.path(), &settings, &log);
    let client = client();
    let query = "op=upscale&model=realesrgan-animevideov3&scale=4&dtype=f32";
    let (status, job) = upload_raw(&client, &server, query, std::fs::read(&clip).unwrap()).await;
    assert_eq!(status, 202, "{job}");
    let id = job["id"].as_str().unwrap().to_string();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (_, job) = get_json(&client, &server.url(&format!("/v1/jobs/{id}"))).await;
        if job["status"] == "running" && job["progress"]["done"].as_u64().unwrap_or(0) > 0 {
            break;
        }
        assert!(Instant::now() < deadline, "the job never got going: {job}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Someone follows the job, and someone else's upload has stalled (the body timeout is a minute).
    let mut events = client.get(server.url(&format!("/v1/jobs/{id}/events"))).send().await.unwrap();
    assert_eq!(events.status(), 200);
    let first = tokio::time::timeout(Duration::from_secs(10), events.chunk()).await.unwrap().unwrap().unwrap();
    assert!(String::from_utf8_lossy(&first).contains("event: job"));
    let mut stalled = TcpStream::connect(address(&server)).await.unwrap();
    let head = format!("POST /v1/jobs?op=upscale&model=realesrgan-animevideov3 HTTP/1.1\r\nHost: {}\r\nContent-Length: 1000000\r\n\r\n", address(&server));
    stalled.write_all(head.as_bytes()).await.unwrap();
    stalled.write_all(&[0u8; 100]).await.unwrap();

    let signalled = Instant::now();
    server.sigterm();
    let mut rest = String::new();
    let ended = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(chunk) = events.chunk().await.unwrap() {
            rest.push_str(&String::from_utf8_lossy(&chunk));
        }
    })
    .await;
    assert!(ended.is_ok(), "the event stream stayed open: {rest}");
    assert!(rest.contains("event: shutdown"), "no final event: {rest}");
    let exit = tokio::task::block_in_place(|| server.wait_for_exit(Duration::from_secs(20)));
    let took = signalled.elapsed();
    let exit = exit.unwrap_or_else(|| panic!("still running {took:?} after SIGTERM"));
    assert!(exit.success(), "{exit}");
    // The grace, the stop at the next chunk, the drain: a few seconds at most.
    assert!(took < Duration::from_secs(grace_s + 7), "exited {took:?} after SIGTERM");
    assert!(read_until_closed(&mut stalled, Duration::from_secs(1)).await.is_some(), "the stalled upload is still connected");
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(logged.contains("stopped by the shutdown"), "the job was not stopped by the shutdown:\n{logged}");
    for sign in ["panic", "terminate called", "libtorch"] {
        assert!(!logged.to_lowercase().contains(sign), "`{sign}` in the log:\n{logged}");
    }

    // After the restart the job runs again from the start and succeeds.
    let server = server.restart_after_kill9();
    let job = wait_for_final(&client, &server, &id, Duration::from_secs(300)).await;
    assert_eq!(job["status"], "succeeded", "{job}");
    // The stop handed the job back without counting it against max_attempts: one counted start.
    assert_eq!(job["attempts"], 1, "{job}");
    assert!(logged.contains("it is back in the queue"), "the stopped job was not handed back:\n{logged}");
}

/// DNS rebinding: a page whose own name resolves to the box is same-origin for the browser, but its
/// requests name that host; the box answers only to its addresses, localhost, its host name and
/// `allowed_hosts`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_for_names_the_box_does_not_have_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[("VAEBOX_ALLOWED_HOSTS", "vae.example.lan")]);
    let client = client();
    let port = server.base.rsplit(':').next().unwrap().to_string();
    let get = |host: String, path: &'static str| {
        let request = client.get(server.url(path)).header(reqwest::header::HOST, host);
        async move {
            send_json(request).await
        }
    };
    for refused in [format!("evil.example:{port}"), format!("vae.example.lan.evil.example:{port}")] {
        for path in ["/", "/v1/jobs", "/healthz"] {
            let (status, body) = get(refused.clone(), path).await;
            assert_eq!((status, body["error"]["code"].as_str()), (403, Some("unknown-host")), "{refused}{path}: {body}");
        }
    }
    for accepted in [format!("127.0.0.1:{port}"), format!("localhost:{port}"), format!("VAE.example.lan:{port}")] {
        assert_eq!(get(accepted.clone(), "/v1/jobs").await.0, 200, "{accepted}");
    }
    // Two Host headers (a proxy may check one, the box read the other), or two Origin headers: refused.
    let address = address(&server);
    for (twice, method) in [(format!("Host: evil.example\r\nHost: {address}"), "GET"), (format!("Host: {address}\r\nOrigin: http://{address}\r\nOrigin: http://evil.example"), "DELETE")] {
        let mut socket = TcpStream::connect(&address).await.unwrap();
        let head = format!("{method} /v1/jobs/00000000-0000-0000-0000-000000000000 HTTP/1.1\r\n{twice}\r\nConnection: close\r\n\r\n");
        socket.write_all(head.as_bytes()).await.unwrap();
        let answer = read_until_closed(&mut socket, Duration::from_secs(10)).await.expect("the answer ends the connection");
        assert!(answer.starts_with("HTTP/1.1 400") && answer.contains("\"duplicate-header\""), "{twice}:\n{answer}");
        assert!(answer.to_ascii_lowercase().contains("x-content-type-options: nosniff"), "{answer}");
    }
    // Requests the HTTP layer cannot read are answered by it (400, 431), with the security headers too.
    for (unreadable, status) in [("GET a b c d\r\n\r\n".to_string(), "400"), (format!("GET / HTTP/1.1\r\nHost: {address}\r\nX-Big: {}\r\n\r\n", "a".repeat(2 << 20)), "431")] {
        let mut socket = TcpStream::connect(&address).await.unwrap();
        let (mut reader, mut writer) = socket.split();
        // Read while sending: the server answers a head over its limit before the head has all arrived.
        let (_, answer) = tokio::join!(async { writer.write_all(unreadable.as_bytes()).await }, async {
            let mut received = Vec::new();
            let _ = tokio::time::timeout(Duration::from_secs(10), reader.read_to_end(&mut received)).await;
            String::from_utf8_lossy(&received).into_owned()
        });
        assert!(answer.starts_with(&format!("HTTP/1.1 {status}")), "{answer}");
        let lower = answer.to_ascii_lowercase();
        for header in ["x-content-type-options: nosniff", "x-frame-options: deny", "referrer-policy: no-referrer", "content-security-policy: default-src 'self'"] {
            assert!(lower.contains(header), "{header} missing from:\n{answer}");
        }
    }
    // A name with a port or a scheme in the list stops start-up, naming the key.
    let bad = std::process::Command::new(env!("CARGO_BIN_EXE_vaebox"))
        .arg("serve")
        .env("VAEBOX_ALLOWED_HOSTS", "http://vae.example.lan")
        .env("VAEBOX_DATA_DIR", dir.path().join("other"))
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("allowed_hosts"), "{}", String::from_utf8_lossy(&bad.stderr));
}

/// An upload declared larger than the limit is refused from its header: a client that waits for
/// `100 Continue` gets the 413 instead, and sends nothing; one that does not wait is not read to the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_declared_too_large_is_refused_before_its_body() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[("VAEBOX_MAX_UPLOAD_BYTES", "1000000")]);
    let address = address(&server);
    for (content_type, expect) in [("video/mp4", true), ("multipart/form-data; boundary=x", true), ("video/mp4", false)] {
        let started = Instant::now();
        let mut socket = TcpStream::connect(&address).await.unwrap();
        let expect_header = if expect { "Expect: 100-continue\r\n" } else { "" };
        let head = format!(
            "POST /v1/jobs?op=upscale HTTP/1.1\r\nHost: {address}\r\nContent-Type: {content_type}\r\nContent-Length: 5000000000\r\n{expect_header}\r\n"
        );
        socket.write_all(head.as_bytes()).await.unwrap();
        if !expect {
            // A few bytes of the 5 GB, then silence: the answer must not wait for the rest.
            socket.write_all(&[0u8; 4096]).await.unwrap();
        }
        let mut answer = vec![0u8; 4096];
        let read = tokio::time::timeout(Duration::from_secs(15), socket.read(&mut answer)).await.expect("no answer").unwrap();
        let answer = String::from_utf8_lossy(&answer[..read]).into_owned();
        assert!(answer.starts_with("HTTP/1.1 413") && answer.contains("upload-too-large"), "{content_type} expect={expect}: {answer}");
        assert!(!answer.contains("100 Continue"), "{answer}");
        assert!(started.elapsed() < Duration::from_secs(3), "answered after {:?}", started.elapsed());
    }
}

/// Connects to the server from `source` (an address of the loopback range: another client).
async fn connect_from(source: &str, address: &str) -> TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(format!("{source}:0").parse().unwrap()).unwrap();
    socket.connect(address.parse().unwrap()).await.unwrap()
}

/// Slow bodies do not hold the upload places: one address gets only its share of them, and a body that
/// keeps trickling (a byte every 2 s, never silent long enough for the idle timeout) is cut with 408
/// `upload-too-slow` once a 10 s window carried less than the minimum rate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_uploads_are_cut_and_one_address_cannot_take_every_place() {
    let dir = tempfile::tempdir().unwrap();
    let settings = [("VAEBOX_MAX_CONCURRENT_UPLOADS", "4"), ("VAEBOX_MAX_UPLOADS_PER_CLIENT", "2"), ("VAEBOX_MIN_UPLOAD_RATE_KIB_S", "4")];
    let server = Server::start(dir.path(), &settings);
    let address = address(&server);
    let head = format!("POST /v1/jobs?op=upscale&filename=a.mp4 HTTP/1.1\r\nHost: {address}\r\nContent-Length: 1000000\r\n\r\n");
    let started = Instant::now();
    let mut trickles = Vec::new();
    for _ in 0..2 {
        let mut socket = connect_from("127.0.0.1", &address).await;
        socket.write_all(head.as_bytes()).await.unwrap();
        socket.write_all(&[0u8; 100]).await.unwrap();
        trickles.push(socket);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    // A third upload from the same address: refused at once, with the reason.
    let mut third = connect_from("127.0.0.1", &address).await;
    third.write_all(head.as_bytes()).await.unwrap();
    let answer = read_until_closed(&mut third, Duration::from_secs(5)).await.unwrap_or_default();
    assert!(answer.starts_with("HTTP/1.1 503") && answer.contains("its share"), "{answer}");
    // Another address still gets a place: its upload is read (and refused for what it is, not for room).
    let mut other = connect_from("127.0.0.2", &address).await;
    let body = b"not a video at all";
    let other_head = format!("POST /v1/jobs?op=upscale&filename=a.mp4 HTTP/1.1\r\nHost: {address}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len());
    other.write_all(other_head.as_bytes()).await.unwrap();
    other.write_all(body).await.unwrap();
    let answer = read_until_closed(&mut other, Duration::from_secs(10)).await.unwrap_or_default();
    assert!(answer.starts_with("HTTP/1.1 422") && answer.contains("not-a-video"), "{answer}");
    // The trickling ones: a byte every 2 s until the box cuts them.
    let mut answers = Vec::new();
    for mut socket in trickles {
        let cut = loop {
            if socket.write_all(b"x").await.is_err() {
                break None;
            }
            let mut buffer = vec![0u8; 4096];
            match tokio::time::timeout(Duration::from_secs(2), socket.read(&mut buffer)).await {
                Ok(Ok(n)) if n > 0 => break Some(String::from_utf8_lossy(&buffer[..n]).into_owned()),
                Ok(_) => break None,
                Err(_) => assert!(started.elapsed() < Duration::from_secs(40), "a trickling upload was never cut"),
            }
        };
        answers.push(cut.unwrap_or_default());
    }
    for answer in &answers {
        assert!(answer.starts_with("HTTP/1.1 408") && answer.contains("upload-too-slow"), "{answer}");
    }
    assert!(started.elapsed() < Duration::from_secs(30), "cut after {:?}", started.elapsed());
}
