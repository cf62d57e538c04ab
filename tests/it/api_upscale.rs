//! End to end over HTTP: upload the first frames of a real clip, follow the job, download the result.
use crate::common;

use std::time::Duration;

use common::*;
use serde_json::Value;

async fn download(client: &reqwest::Client, server: &Server, job: &Value, dir: &std::path::Path) -> std::path::PathBuf {
    let url = server.url(job["output"]["url"].as_str().expect("output url"));
    let response = client.get(&url).send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "video/mp4");
    let disposition = response.headers()["content-disposition"].to_str().unwrap().to_string();
    assert!(disposition.contains(job["output"]["file_name"].as_str().unwrap()), "{disposition}");
    let bytes = response.bytes().await.unwrap();
    assert_eq!(bytes.len() as u64, job["output"]["bytes"].as_u64().unwrap());
    let path = dir.join("result.mp4");
    std::fs::write(&path, &bytes).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multipart_upload_runs_to_a_4x_video_with_progress_events_and_timings() {
    let dir = tempfile::tempdir().unwrap();
    let clip = dir.path().join("carphone8.mp4");
    make_clip(&media("carphone_pristine.mp4"), 8, true, &clip);
    let source = ffprobe(&clip);
    let server = Server::start(dir.path(), &[]);
    let client = client();

    let form = reqwest::multipart::Form::new()
        .part("file", reqwest::multipart::Part::bytes(std::fs::read(&clip).unwrap()).file_name("carphone8.mp4"))
        .text("op", "upscale")
        .text("model", "realesrgan-animevideov3")
        .text("scale", "4");
    let (status, job) = send_json(client.post(server.url("/v1/jobs")).multipart(form)).await;
    assert_eq!(status, 202, "{job}");
    assert_eq!(job["status"], "queued");
    assert_eq!(job["input"]["media"]["width"], 176);
    assert_eq!(job["input"]["media"]["frames"], 8);
    let id = job["id"].as_str().unwrap().to_string();

    let snapshots = follow_events(&client, &server, &id).await;
    let last = snapshots.last().expect("at least one event");
    assert_eq!(last["status"], "succeeded", "{last}");
    assert!(
        snapshots.iter().any(|s| s["status"] == "running" && s["progress"]["done"].as_u64().unwrap_or(0) > 0),
        "no progress was streamed: {snapshots:?}"
    );
    let progress = &last["progress"];
    assert_eq!(progress["done"], 8);
    assert_eq!(progress["total"], 8);
    assert_eq!(progress["fraction"], 1.0);

    let timings = &last["timings"];
    for stage in ["queued", "load_model", "read", "compute", "write", "total", "fps"] {
        assert!(timings[stage].as_f64().is_some_and(|v| v >= 0.0), "timing {stage} missing: {timings}");
    }
    assert!(timings["compute"].as_f64().unwrap() > 0.0);
    assert!(timings["total"].as_f64().unwrap() >= timings["compute"].as_f64().unwrap());
    assert!(timings["peak_host_bytes"].as_u64().unwrap() > 0);
    assert_eq!(timings["device"], "cpu");
    assert_eq!(last["plan"]["scale"], 4);

    let result = download(&client, &server, last, dir.path()).await;
    let out = ffprobe(&result);
    assert_eq!((out.width, out.height), (source.width * 4, source.height * 4));
    assert_eq!(out.frames, source.frames);
    assert_eq!(out.fps, source.fps);
    assert!(out.has_audio, "the input's audio was not carried over");
}

/// How the CPU is shared changes when work runs, not what it makes. `media_priority = "idle"` runs ffmpeg
/// only in the model's gaps; `cpu_frame_workers = 2` splits each chunk's frames between two threads of
/// one intra-op thread each (a chunk of 3 frames: 2 + 1). The same job gives the same frames either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn media_priority_and_frame_workers_make_the_same_video() {
    let dir = tempfile::tempdir().unwrap();
    let clip = dir.path().join("carphone5.mp4");
    make_clip(&media("carphone_pristine.mp4"), 5, false, &clip);
    let client = client();
    let mut frames = Vec::new();
    for (priority, workers) in [("normal", 1), ("idle", 1), ("normal", 2)] {
        let data = dir.path().join(format!("{priority}-{workers}"));
        std::fs::create_dir_all(&data).unwrap();
        let workers_text = workers.to_string();
        let env = [("VAEBOX_MEDIA_PRIORITY", priority), ("VAEBOX_CPU_FRAME_WORKERS", workers_text.as_str()), ("VAEBOX_CHUNK_FRAMES", "3")];
        let server = Server::start(&data, &env);
        let job = run_job(&client, &server, "op=upscale&model=realesrgan-animevideov3&scale=2&dtype=f32", std::fs::read(&clip).unwrap()).await;
        assert_eq!(job["plan"]["frame_workers"], workers, "{job}");
        let video = fetch(&client, &server, &job).await;
        frames.push(rgb_frames(&video, &data.join("out.mp4")));
    }
    assert_eq!(frames[0].len(), 352 * 288 * 3 * 5);
    assert!(frames[0] == frames[1], "the idle-priority encoder made different frames");
    assert!(frames[0] == frames[2], "frames split between workers came out different");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_body_upload_with_query_parameters_and_range_download() {
    let dir = tempfile::tempdir().unwrap();
    let clip = dir.path().join("carphone5.mp4");
    make_clip(&media("carphone_pristine.mp4"), 5, false, &clip);
    let server = Server::start(dir.path(), &[]);
    let client = client();

    let (status, job) = upload_raw(
        &client,
        &server,
        "op=upscale&model=realesrgan-animevideov3&scale=2&filename=phone.mp4",
        std::fs::read(&clip).unwrap(),
    )
    .await;
    assert_eq!(status, 202, "{job}");
    let id = job["id"].as_str().unwrap();
    let job = wait_for_final(&client, &server, id, Duration::from_secs(300)).await;
    assert_eq!(job["status"], "succeeded", "{job}");
    assert_eq!(job["output"]["file_name"], "phone_x2.mp4");

    let url = server.url(&format!("/v1/jobs/{id}/result"));
    let partial = client.get(&url).header("range", "bytes=10-109").send().await.unwrap();
    assert_eq!(partial.status(), 206);
    let total = job["output"]["bytes"].as_u64().unwrap();
    assert_eq!(partial.headers()["content-range"], format!("bytes 10-109/{total}").as_str());
    let piece = partial.bytes().await.unwrap();
    let path = download(&client, &server, &job, dir.path()).await;
    let whole = std::fs::read(&path).unwrap();
    assert_eq!(&piece[..], &whole[10..110]);
    let out = ffprobe(&path);
    assert_eq!((out.width, out.height, out.frames), (352, 288, 5));

    // Listing, then deleting a finished job removes its row and its files.
    let (_, list) = get_json(&client, &server.url("/v1/jobs?status=succeeded")).await;
    assert!(list["jobs"].as_array().unwrap().iter().any(|j| j["id"] == id));
    let deleted = client.delete(server.url(&format!("/v1/jobs/{id}"))).send().await.unwrap();
    assert_eq!(deleted.status(), 204);
    let (status, _) = get_json(&client, &server.url(&format!("/v1/jobs/{id}"))).await;
    assert_eq!(status, 404);
    assert!(!server.data_dir.join("data/jobs").join(id).exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_stops_a_running_job_and_a_queued_one() {
    let dir = tempfile::tempdir().unwrap();
    let clip = dir.path().join("carphone60.mp4");
    make_clip(&media("carphone_pristine.mp4"), 60, false, &clip);
    // Small chunks so that the running job reaches a chunk boundary quickly.
    let server = Server::start(dir.path(), &[("VAEBOX_CHUNK_FRAMES", "1")]);
    let client = client();
    let body = std::fs::read(&clip).unwrap();
    let query = "op=upscale&model=realesrgan-animevideov3&scale=4&dtype=f32";
    let (_, running) = upload_raw(&client, &server, query, body.clone()).await;
    let (_, queued) = upload_raw(&client, &server, query, body).await;
    let (running_id, queued_id) = (running["id"].as_str().unwrap(), queued["id"].as_str().unwrap());

    // Wait until the first job is really computing.
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        let (_, job) = get_json(&client, &server.url(&format!("/v1/jobs/{running_id}"))).await;
        if job["status"] == "running" && job["progress"]["done"].as_u64().unwrap_or(0) > 0 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "job never started: {job}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (status, cancelled) = send_json(client.post(server.url(&format!("/v1/jobs/{queued_id}/cancel")))).await;
    assert_eq!(status, 200, "{cancelled}");
    assert_eq!(cancelled["status"], "cancelled");

    let cancel = client.post(server.url(&format!("/v1/jobs/{running_id}/cancel"))).send().await.unwrap();
    assert_eq!(cancel.status(), 200);
    let job = wait_for_final(&client, &server, running_id, Duration::from_secs(60)).await;
    assert_eq!(job["status"], "cancelled", "{job}");
    assert!(job["progress"]["done"].as_u64().unwrap() < 60, "it ran to the end: {job}");
    // No output, complete or partial, is left behind.
    let leftovers: Vec<_> = files_under(&server.data_dir.join("data/jobs").join(running_id))
        .into_iter()
        .filter(|p| !p.file_name().unwrap().to_string_lossy().starts_with("input."))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    let result = client.get(server.url(&format!("/v1/jobs/{running_id}/result"))).send().await.unwrap();
    assert_eq!(result.status(), 409);
}

/// A cancel takes effect between tiles, not at the end of the chunk: an 8-frame chunk of 720p in 64 px tiles is
/// well over half a minute of 2-core CPU, and the job stops within seconds of the cancel, still in its first chunk,
/// leaving no output (ComfyUI's interrupt reached a job that then ran 28 s to its chunk's end).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_stops_a_job_in_the_middle_of_its_chunk() {
    let dir = tempfile::tempdir().unwrap();
    let clip = dir.path().join("wide.mp4");
    let status = std::process::Command::new("ffmpeg")
        .args(["-nostdin", "-v", "error", "-y", "-i"])
        .arg(media("carphone_pristine.mp4"))
        .args(["-frames:v", "8", "-vf", "scale=1280:720", "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p"])
        .arg(&clip)
        .status()
        .unwrap();
    assert!(status.success());
    let server = Server::start(dir.path(), &[("VAEBOX_CHUNK_FRAMES", "8")]);
    let client = client();
    let (_, job) = upload_raw(&client, &server, "op=upscale&model=realesrgan-animevideov3&scale=2&tile=64&dtype=f32", std::fs::read(&clip).unwrap()).await;
    let id = job["id"].as_str().unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        let (_, job) = get_json(&client, &server.url(&format!("/v1/jobs/{id}"))).await;
        if job["progress"]["stage"] == "upscale" {
            break;
        }
        assert!(std::time::Instant::now() < deadline && job["status"] != "succeeded", "the job never reached its chunk: {job}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let asked = std::time::Instant::now();
    assert_eq!(client.post(server.url(&format!("/v1/jobs/{id}/cancel"))).send().await.unwrap().status(), 200);
    let job = wait_for_final(&client, &server, id, Duration::from_secs(120)).await;
    let took = asked.elapsed();
    assert_eq!((job["status"].as_str(), job["progress"]["done"].as_u64()), (Some("cancelled"), Some(0)), "{job}");
    assert!(took < Duration::from_secs(6), "the cancel took {took:?}: the chunk ran on to its end");
    let leftovers: Vec<_> =
        files_under(&server.data_dir.join("data/jobs").join(id)).into_iter().filter(|p| !p.file_name().unwrap().to_string_lossy().starts_with("input.")).collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_models_metrics_openapi_and_page_are_served() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let client = client();
    let (status, health) = get_json(&client, &server.url("/healthz")).await;
    assert_eq!(status, 200);
    assert_eq!(health["device"], "cpu");
    assert_eq!(health["queue_depth"], 0);

    let (_, models) = get_json(&client, &server.url("/v1/models")).await;
    let models = models["models"].as_array().unwrap();
    for name in ["realesrgan-animevideov3", "realesrgan-x4plus"] {
        let model = models.iter().find(|m| m["name"] == name).unwrap_or_else(|| panic!("{name} not listed"));
        assert_eq!(model["present"], true, "{model}");
        assert!(model["ops"].as_array().unwrap().contains(&Value::from("upscale")));
    }

    let metrics = client.get(server.url("/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("vaebox_jobs{status=\"queued\"} 0"), "{metrics}");
    let (status, openapi) = get_json(&client, &server.url("/openapi.json")).await;
    assert_eq!(status, 200);
    assert!(openapi["paths"]["/v1/jobs"]["post"].is_object());
    // Every key of a real upscale job, its plan and timings is described (tests/it/api_vae.rs does the VAE ops).
    let clip = dir.path().join("carphone2.mp4");
    make_clip(&media("carphone_pristine.mp4"), 2, false, &clip);
    let (_, job) = upload_raw(&client, &server, "op=upscale&scale=2", std::fs::read(&clip).unwrap()).await;
    let job = wait_for_final(&client, &server, job["id"].as_str().unwrap(), Duration::from_secs(120)).await;
    assert_eq!(job["status"], "succeeded", "{job}");
    assert_eq!(undescribed_keys(&openapi, &job), Vec::<String>::new());
    // RRDB's receptive radius (349 px) rules out exact tiles: the job blends them.
    let frame = dir.path().join("carphone1.mp4");
    make_clip(&media("carphone_pristine.mp4"), 1, false, &frame);
    let (_, job) = upload_raw(&client, &server, "op=upscale&model=realesrgan-x4plus&scale=4&dtype=f32&tile=96", std::fs::read(&frame).unwrap()).await;
    let job = wait_for_final(&client, &server, job["id"].as_str().unwrap(), Duration::from_secs(300)).await;
    assert_eq!(job["status"], "succeeded", "{job}");
    let plan = &job["plan"];
    assert_eq!((plan["exact"].as_bool(), plan["blend"].as_bool(), plan["tiles_per_frame"].as_u64()), (Some(false), Some(true), Some(4)), "{plan}");
    let probed = ffprobe(&download(&client, &server, &job, dir.path()).await);
    assert_eq!((probed.width, probed.height, probed.frames), (704, 576, 1));
    let page = client.get(server.url("/")).send().await.unwrap();
    assert!(page.headers()["content-type"].to_str().unwrap().starts_with("text/html"));
    let html = page.text().await.unwrap();
    assert!(html.contains("/js/main.js"));
    let js = client.get(server.url("/js/main.js")).send().await.unwrap();
    assert_eq!(js.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn higher_priority_runs_first_then_fifo() {
    let dir = tempfile::tempdir().unwrap();
    let long_clip = dir.path().join("carphone20.mp4");
    let short_clip = dir.path().join("carphone2.mp4");
    make_clip(&media("carphone_pristine.mp4"), 20, false, &long_clip);
    make_clip(&media("carphone_pristine.mp4"), 2, false, &short_clip);
    let server = Server::start(dir.path(), &[]);
    let client = client();
    let short = std::fs::read(&short_clip).unwrap();
    let query = "op=upscale&model=realesrgan-animevideov3&scale=2&dtype=f32";
    // The first job occupies the executor while the others queue up behind it.
    let (_, first) = upload_raw(&client, &server, query, std::fs::read(&long_clip).unwrap()).await;
    let (_, low_a) = upload_raw(&client, &server, query, short.clone()).await;
    let (_, low_b) = upload_raw(&client, &server, query, short.clone()).await;
    let (_, high) = upload_raw(&client, &server, &format!("{query}&priority=5"), short).await;
    let mut started = Vec::new();
    for job in [&first, &low_a, &low_b, &high] {
        let id = job["id"].as_str().unwrap();
        let done = wait_for_final(&client, &server, id, Duration::from_secs(300)).await;
        assert_eq!(done["status"], "succeeded", "{done}");
        started.push((done["started_at"].as_str().unwrap().to_string(), id.to_string()));
    }
    started.sort();
    let order: Vec<_> = started.into_iter().map(|(_, id)| id).collect();
    let expected: Vec<String> = [&first, &high, &low_a, &low_b].iter().map(|j| j["id"].as_str().unwrap().to_string()).collect();
    assert_eq!(order, expected, "expected: the running job, then priority 5, then the rest in arrival order");
}
