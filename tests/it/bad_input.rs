//! Bad input gets a 4xx with a stable code; nothing is left behind, the server keeps serving and
//! a good job submitted in between is untouched.
use crate::common;

use std::time::Duration;

use common::*;
use serde_json::Value;

fn assert_error(status: u16, body: &Value, want_status: u16, want_code: &str) {
    assert_eq!(status, want_status, "{body}");
    assert_eq!(body["error"]["code"], want_code, "{body}");
    assert!(body["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{body}");
}

async fn multipart(client: &reqwest::Client, server: &Server, form: reqwest::multipart::Form) -> (u16, Value) {
    send_json(client.post(server.url("/v1/jobs")).multipart(form)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_bad_input_gets_its_code_and_nothing_is_lost() {
    let dir = tempfile::tempdir().unwrap();
    let clip = dir.path().join("carphone4.mp4");
    make_clip(&media("carphone_pristine.mp4"), 4, false, &clip);
    let good = std::fs::read(&clip).unwrap();
    let big_clip = dir.path().join("bikes3.mp4");
    make_clip(&media("bikes.mp4"), 3, false, &big_clip);
    let server = Server::start(
        dir.path(),
        &[("VAEBOX_MAX_WIDTH", "600"), ("VAEBOX_MAX_FRAMES", "50"), ("VAEBOX_MAX_UPLOAD_BYTES", "300000")],
    );
    let client = client();
    // 176 × 144 ×2: 352 wide, within the limit that refuses the 640-wide clip below (×4 would not be).
    let query = "op=upscale&model=realesrgan-animevideov3&scale=2";

    // A good job first: it must finish untouched by everything below.
    let (status, good_job) = upload_raw(&client, &server, query, good.clone()).await;
    assert_eq!(status, 202, "{good_job}");

    let (s, b) = upload_raw(&client, &server, query, b"this is not a video, just some words\n".repeat(20)).await;
    assert_error(s, &b, 422, "not-a-video");
    let (s, b) = upload_raw(&client, &server, query, good[..good.len() / 2].to_vec()).await;
    assert_error(s, &b, 422, "truncated-media");
    let (s, b) = upload_raw(&client, &server, query, Vec::new()).await;
    assert_error(s, &b, 422, "empty-file");
    let (s, b) = upload_raw(&client, &server, "op=sharpen&model=realesrgan-animevideov3", good.clone()).await;
    assert_error(s, &b, 400, "unknown-op");
    let (s, b) = upload_raw(&client, &server, "op=upscale&model=nosuchmodel", good.clone()).await;
    assert_error(s, &b, 400, "unknown-model");
    let (s, b) = upload_raw(&client, &server, "op=upscale&model=realesrgan-animevideov3&scale=3", good.clone()).await;
    assert_error(s, &b, 400, "invalid-scale");
    let (s, b) = upload_raw(&client, &server, "op=upscale&model=realesrgan-animevideov3&scale=four", good.clone()).await;
    assert_error(s, &b, 400, "invalid-scale");
    // A parameter another op takes is refused, naming the ops that take it, in the query and in a form.
    let (s, b) = upload_raw(&client, &server, "op=upscale&seed=3", good.clone()).await;
    assert_error(s, &b, 400, "parameter-not-for-op");
    assert!(b["error"]["message"].as_str().unwrap().contains("`seed` (only restore)"), "{b}");
    let (s, b) = upload_raw(&client, &server, "op=upscale&normalize=true", good.clone()).await;
    assert_error(s, &b, 400, "parameter-not-for-op");
    assert!(b["error"]["message"].as_str().unwrap().contains("`normalize` (only vae_encode)"), "{b}");
    let form = reqwest::multipart::Form::new()
        .part("file", reqwest::multipart::Part::bytes(good.clone()).file_name("a.mp4"))
        .text("op", "upscale")
        .text("batch_frames", "5");
    let (s, b) = multipart(&client, &server, form).await;
    assert_error(s, &b, 400, "parameter-not-for-op");
    // A field given both in the form and in `params` is refused, not settled silently by whichever came last.
    let form = reqwest::multipart::Form::new()
        .part("file", reqwest::multipart::Part::bytes(good.clone()).file_name("a.mp4"))
        .text("scale", "2")
        .text("params", r#"{"scale": 4}"#);
    let (s, b) = multipart(&client, &server, form).await;
    assert_error(s, &b, 400, "invalid-params");
    assert!(b["error"]["message"].as_str().unwrap().contains("`scale` given twice"), "{b}");
    // bikes.mp4 is 640 wide; the limit here is 600.
    let (s, b) = upload_raw(&client, &server, query, std::fs::read(&big_clip).unwrap()).await;
    assert_error(s, &b, 422, "media-too-large");
    assert!(b["error"]["message"].as_str().unwrap().contains("width"), "{b}");
    // 60 frames of carphone: over the 50-frame limit.
    let long_clip = dir.path().join("carphone60.mp4");
    make_clip(&media("carphone_pristine.mp4"), 60, false, &long_clip);
    let (s, b) = upload_raw(&client, &server, query, std::fs::read(&long_clip).unwrap()).await;
    assert_error(s, &b, 422, "media-too-large");
    assert!(b["error"]["message"].as_str().unwrap().contains("frames"), "{b}");
    // Over the byte limit, as a raw body and as a multipart part.
    let (s, b) = upload_raw(&client, &server, query, vec![0u8; 400_000]).await;
    assert_error(s, &b, 413, "upload-too-large");
    let form = reqwest::multipart::Form::new().part("file", reqwest::multipart::Part::bytes(vec![0u8; 400_000]).file_name("x.mp4"));
    let (s, b) = multipart(&client, &server, form).await;
    assert_error(s, &b, 413, "upload-too-large");
    let form = reqwest::multipart::Form::new().text("op", "upscale").text("model", "realesrgan-animevideov3");
    let (s, b) = multipart(&client, &server, form).await;
    assert_error(s, &b, 400, "missing-file");
    let form = reqwest::multipart::Form::new()
        .part("file", reqwest::multipart::Part::bytes(good.clone()).file_name("a.mp4"))
        .text("params", "{not json");
    let (s, b) = multipart(&client, &server, form).await;
    assert_error(s, &b, 400, "invalid-params");

    let missing = "00000000-0000-4000-8000-000000000000";
    let (s, b) = get_json(&client, &server.url(&format!("/v1/jobs/{missing}"))).await;
    assert_error(s, &b, 404, "job-not-found");
    let (s, b) = get_json(&client, &server.url("/v1/jobs/not-a-uuid")).await;
    assert_error(s, &b, 404, "job-not-found");
    let response = client.post(server.url(&format!("/v1/jobs/{missing}/cancel"))).send().await.unwrap();
    assert_eq!(response.status(), 404);
    let response = client.delete(server.url(&format!("/v1/jobs/{missing}"))).send().await.unwrap();
    assert_eq!(response.status(), 404);
    let (s, b) = get_json(&client, &server.url(&format!("/v1/jobs/{missing}/result"))).await;
    assert_error(s, &b, 404, "job-not-found");
    let (s, b) = get_json(&client, &server.url("/v1/jobs?status=sleeping")).await;
    assert_error(s, &b, 400, "invalid-status");

    // The server still serves, the good job finishes, and only it exists.
    let id = good_job["id"].as_str().unwrap();
    let job = wait_for_final(&client, &server, id, Duration::from_secs(300)).await;
    assert_eq!(job["status"], "succeeded", "{job}");
    let (_, list) = get_json(&client, &server.url("/v1/jobs")).await;
    assert_eq!(list["jobs"].as_array().unwrap().len(), 1, "refused uploads must not become jobs: {list}");
    let uploads = files_under(&server.data_dir.join("data/uploads"));
    assert!(uploads.is_empty(), "refused uploads left files behind: {uploads:?}");
    let job_dirs: Vec<_> = std::fs::read_dir(server.data_dir.join("data/jobs")).unwrap().flatten().collect();
    assert_eq!(job_dirs.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_answers_429() {
    let dir = tempfile::tempdir().unwrap();
    let clip = dir.path().join("carphone30.mp4");
    make_clip(&media("carphone_pristine.mp4"), 30, false, &clip);
    let server = Server::start(dir.path(), &[("VAEBOX_MAX_QUEUED_JOBS", "1")]);
    let client = client();
    let body = std::fs::read(&clip).unwrap();
    let query = "op=upscale&model=realesrgan-animevideov3&scale=4&dtype=f32";
    let (status, first) = upload_raw(&client, &server, query, body.clone()).await;
    assert_eq!(status, 202, "{first}");
    // The queue counts jobs not yet started: once the first one runs, one more fits.
    let url = server.url(&format!("/v1/jobs/{}", first["id"].as_str().unwrap()));
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while get_json(&client, &url).await.1["status"] == "queued" {
        assert!(std::time::Instant::now() < deadline, "the first job never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut codes = vec![(status, first["error"]["code"].clone())];
    for _ in 0..3 {
        let (status, body) = upload_raw(&client, &server, query, body.clone()).await;
        codes.push((status, body["error"]["code"].clone()));
    }
    // One runs, one waits; the rest are refused while the queue is full.
    assert!(codes.iter().any(|(s, c)| *s == 429 && c == "queue-full"), "{codes:?}");
    assert!(codes.iter().filter(|(s, _)| *s == 202).count() >= 2, "{codes:?}");
}

/// The limit holds under concurrency: 50 uploads at once against `max_queued_jobs = 10` while the
/// executor is busy. Only what the queue can hold is accepted (plus jobs that left it by starting).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_uploads_do_not_overrun_the_queue_limit() {
    const LIMIT: usize = 10;
    const UPLOADS: usize = 50;
    let dir = tempfile::tempdir().unwrap();
    let clip = dir.path().join("carphone30.mp4");
    make_clip(&media("carphone_pristine.mp4"), 30, false, &clip);
    // Every upload gets a place to be received in (tests/it/lan_safety.rs covers that bound): the queue limit is under test.
    let settings = [
        ("VAEBOX_MAX_QUEUED_JOBS", LIMIT.to_string()),
        ("VAEBOX_MAX_CONCURRENT_UPLOADS", UPLOADS.to_string()),
        // All from one address: no share per address here.
        ("VAEBOX_MAX_UPLOADS_PER_CLIENT", "0".to_string()),
    ];
    let server = Server::start(dir.path(), &settings.each_ref().map(|(k, v)| (*k, v.as_str())));
    let client = client();
    let body = std::fs::read(&clip).unwrap();
    let query = "op=upscale&model=realesrgan-animevideov3&scale=4&dtype=f32";
    let uploads = (0..UPLOADS).map(|_| {
        let (client, body, url) = (client.clone(), body.clone(), server.url(&format!("/v1/jobs?{query}")));
        tokio::spawn(async move {
            let response = client.post(url).body(body).send().await.unwrap();
            let status = response.status().as_u16();
            (status, response.json::<serde_json::Value>().await.unwrap_or_default())
        })
    });
    let mut results = Vec::new();
    for upload in uploads.collect::<Vec<_>>() {
        results.push(upload.await.unwrap());
    }
    let accepted = results.iter().filter(|(s, _)| *s == 202).count();
    let refused = results.iter().filter(|(s, b)| *s == 429 && b["error"]["code"] == "queue-full").count();
    assert_eq!(accepted + refused, UPLOADS, "{results:?}");
    let (_, list) = get_json(&client, &server.url("/v1/jobs")).await;
    let started = list["jobs"].as_array().unwrap().iter().filter(|j| j["status"] != "queued").count();
    println!("{accepted} accepted, {refused} refused, {started} started meanwhile");
    assert!(accepted <= LIMIT + started, "{accepted} accepted with a limit of {LIMIT} and {started} started");
    assert!(accepted >= LIMIT, "the queue should fill up: {accepted}");
}

/// Sizes are checked before anything is queued: shapes whose element count wraps, outputs past the box's
/// limits (a latent that decodes to 8192² frames, an upscale past `max_width`), budgets whose bytes would
/// wrap, and tensors of NaN for `/v1/encode`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sizes_that_overflow_or_exceed_the_limits_are_refused_before_queueing() {
    let dir = tempfile::tempdir().unwrap();
    let models = models_with_small_wan21(dir.path());
    std::os::unix::fs::symlink(std::path::Path::new(REPO).join("models/realesrgan"), models.join("realesrgan")).unwrap();
    let server = Server::start(dir.path(), &[("VAEBOX_MODELS_DIR", models.to_str().unwrap()), ("VAEBOX_MAX_WIDTH", "600")]);
    let client = client();
    let post = |path: String, body: Vec<u8>| {
        let client = client.clone();
        async move {
            send_json(client.post(path).body(body)).await
        }
    };
    // 2^21 cubed times 16 is 2^67: wraps to 0 in 64 bits.
    let big = 1u64 << 21;
    let (status, body) = post(server.url(&format!("/v1/decode?model=wan21-small&shape=1&shape=16&shape={big}&shape={big}&shape={big}")), vec![]).await;
    assert_error(status, &body, 400, "invalid-shape");
    // 1 latent frame of 128 × 128 cells: 1024 × 1024 pixels, past max_width 600.
    let (status, body) = post(server.url("/v1/decode?model=wan21-small&shape=1&shape=16&shape=1&shape=128&shape=128"), vec![0u8; 16]).await;
    assert_error(status, &body, 422, "output-too-large");
    assert!(body["error"]["message"].as_str().unwrap().contains("width 1024 (max 600)"), "{body}");
    // The same latent as an uploaded file.
    let latent = dir.path().join("wide.safetensors");
    let tensor = tch::Tensor::zeros([1, 16, 1, 8, 80], (tch::Kind::Float, tch::Device::Cpu));
    tch::Tensor::write_safetensors(&[("latent", &tensor)], &latent).unwrap();
    let (status, body) = upload_raw(&client, &server, "op=vae_decode&model=wan21-small", std::fs::read(&latent).unwrap()).await;
    assert_error(status, &body, 422, "output-too-large");
    // An upscale ×4 of a 176-pixel-wide clip: 704 > 600.
    let clip = dir.path().join("clip.mp4");
    make_clip(&media("carphone_pristine.mp4"), 2, false, &clip);
    let (status, body) = upload_raw(&client, &server, "op=upscale&model=realesrgan-animevideov3&scale=4", std::fs::read(&clip).unwrap()).await;
    assert_error(status, &body, 422, "output-too-large");
    // 2^44 MiB is 2^64 bytes.
    let (status, body) = upload_raw(&client, &server, "op=vae_encode&model=wan21-small&memory_budget_mib=17592186044416", vec![]).await;
    assert_error(status, &body, 400, "invalid-memory-budget");
    // NaN pixels for /v1/encode.
    let nan: Vec<u8> = (0..3 * 16 * 16).flat_map(|_| f32::NAN.to_le_bytes()).collect();
    let (status, body) = post(server.url("/v1/encode?model=wan21-small&shape=1&shape=3&shape=16&shape=16"), nan).await;
    assert_error(status, &body, 400, "tensor-not-finite");
    // None of it was queued, and the server still works.
    let (_, list) = get_json(&client, &server.url("/v1/jobs")).await;
    let statuses: Vec<&str> = list["jobs"].as_array().unwrap().iter().filter_map(|j| j["status"].as_str()).collect();
    assert!(statuses.is_empty(), "{statuses:?}");
    let (status, body) = upload_raw(&client, &server, "op=upscale&model=realesrgan-animevideov3&scale=2", std::fs::read(&clip).unwrap()).await;
    assert_eq!(status, 202, "{body}");
}

/// Below `min_free_disk_mib` an upload is refused before its body is read (507), and the rest of the API
/// (listing, deleting) keeps working so space can be freed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uploads_are_refused_when_the_disk_is_below_the_free_space_floor() {
    let dir = tempfile::tempdir().unwrap();
    // More free space than any disk has.
    let server = Server::start(dir.path(), &[("VAEBOX_MIN_FREE_DISK_MIB", "1099511627776")]);
    let client = client();
    let (status, body) = upload_raw(&client, &server, "op=upscale&model=realesrgan-animevideov3&scale=2", vec![0u8; 1 << 20]).await;
    assert_error(status, &body, 507, "insufficient-storage");
    let uploads = files_under(&server.data_dir.join("data/uploads"));
    assert!(uploads.is_empty(), "{uploads:?}");
    let (status, _) = get_json(&client, &server.url("/v1/jobs")).await;
    assert_eq!(status, 200);
}

/// A picture larger than the box takes is refused as too large, naming the side (a 20000×20000 PNG was
/// refused as not a video: ffprobe gives up on such a picture before it says its size).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_picture_past_the_size_limits_is_refused_as_too_large() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let client = client();
    let mut header = Vec::new();
    header.extend_from_slice(&20000u32.to_be_bytes());
    header.extend_from_slice(&20000u32.to_be_bytes());
    header.extend_from_slice(&[8, 2, 0, 0, 0]);
    // One zlib-compressed empty row is enough for ffprobe to look at the picture.
    let png = [&b"\x89PNG\r\n\x1a\n"[..], &png_chunk(b"IHDR", &header), &png_chunk(b"IDAT", &[0x78, 0x9c, 0x63, 0, 0, 0, 1, 0, 1]), &png_chunk(b"IEND", &[])].concat();
    let (s, b) = upload_raw(&client, &server, "op=upscale&scale=2&filename=huge.png", png).await;
    assert_error(s, &b, 422, "media-too-large");
    assert!(b["error"]["message"].as_str().unwrap().contains("width is 20000, the limit is 4096"), "{b}");
}
