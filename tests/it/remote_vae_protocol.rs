//! `/v1/decode` and `/v1/encode` as ComfyUI's remote-VAE nodes (kijai/ComfyUI-HFRemoteVae, over diffusers'
//! protocol) use them: batches, 4-D latents, Hugging Face's trailing-slash URLs, `normalize`, the other
//! query parameters each applied or refused, and a client that hangs up mid-decode. The small reference
//! Wan 2.1 (random weights) keeps every decode fast on a CPU.
use crate::common;

use std::time::{Duration, Instant};

use common::*;
use tokio::io::AsyncWriteExt;

/// Deterministic values in [-1, 1): the same latent in every run.
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((state >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

fn bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn floats(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()
}

fn max_abs_difference(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

fn shape_query(shape: &[usize]) -> String {
    shape.iter().map(|d| format!("shape={d}")).collect::<Vec<_>>().join("&")
}

struct Answer {
    status: u16,
    shape: Option<Vec<usize>>,
    jobs: Vec<String>,
    body: Vec<u8>,
}

impl Answer {
    fn error_code(&self) -> String {
        let body: serde_json::Value = serde_json::from_slice(&self.body).unwrap_or_default();
        body["error"]["code"].as_str().unwrap_or_default().to_string()
    }

    fn tensor(&self) -> Vec<f32> {
        assert_eq!(self.status, 200, "{}", String::from_utf8_lossy(&self.body));
        floats(&self.body)
    }
}

async fn call(client: &reqwest::Client, server: &Server, path: &str, query: &str, body: Vec<u8>) -> Answer {
    let response = client.post(server.url(&format!("{path}?{query}"))).body(body).send().await.unwrap();
    let status = response.status().as_u16();
    let header = |name: &str| response.headers().get(name).map(|v| v.to_str().unwrap().to_string());
    let shape = header("shape").map(|s| serde_json::from_str(&s).unwrap());
    let jobs = header("x-vaebox-job").map(|s| s.split(',').map(str::to_string).collect()).unwrap_or_default();
    let body = response.bytes().await.unwrap().to_vec();
    Answer { status, shape, jobs, body }
}

async fn decode(client: &reqwest::Client, server: &Server, extra: &str, shape: &[usize], latent: &[f32]) -> Answer {
    let query = format!("model=wan21-small&dtype=f32&{extra}{}{}&dtype=float32", if extra.is_empty() { "" } else { "&" }, shape_query(shape));
    call(client, server, "/v1/decode", &query, bytes(latent)).await
}

fn start(dir: &std::path::Path) -> Server {
    let models = models_with_small_wan21(dir);
    Server::start(dir, &[("VAEBOX_MODELS_DIR", models.to_str().unwrap())])
}

/// A batch of two latents comes back as one tensor with the batch dimension, each item exactly what it
/// decodes to alone; an MP4 holds one video, so a batch asking for one is refused by name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_decodes_item_by_item() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    let client = client();
    let item = 16 * 2 * 4 * 6;
    let latent = values(2 * item, 1);
    let batch = decode(&client, &server, "", &[2, 16, 2, 4, 6], &latent).await;
    assert_eq!(batch.shape, Some(vec![2, 3, 5, 32, 48]), "{}", String::from_utf8_lossy(&batch.body));
    assert_eq!(batch.jobs.len(), 2);
    let batch = batch.tensor();
    let half = batch.len() / 2;
    for (index, part) in [&latent[..item], &latent[item..]].into_iter().enumerate() {
        let alone = decode(&client, &server, "", &[1, 16, 2, 4, 6], part).await;
        assert_eq!(alone.shape, Some(vec![1, 3, 5, 32, 48]));
        let difference = max_abs_difference(&batch[index * half..(index + 1) * half], &alone.tensor());
        assert!(difference <= 1e-6, "item {index}: {difference}");
    }
    let mp4 = decode(&client, &server, "output_type=mp4", &[2, 16, 2, 4, 6], &latent).await;
    assert_eq!((mp4.status, mp4.error_code().as_str()), (400, "unsupported-option"), "{}", String::from_utf8_lossy(&mp4.body));
    assert!(String::from_utf8_lossy(&mp4.body).contains("batch of 2"));
}

/// `[B, C, h, w]` is one frame per item, answered as images `[B, 3, H, W]` with the values of `[B, C, 1, h, w]`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_four_dimensional_latent_is_one_frame_per_item() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    let client = client();
    let latent = values(2 * 16 * 4 * 4, 2);
    let images = decode(&client, &server, "", &[2, 16, 4, 4], &latent).await;
    assert_eq!(images.shape, Some(vec![2, 3, 32, 32]), "{}", String::from_utf8_lossy(&images.body));
    let video = decode(&client, &server, "", &[2, 16, 1, 4, 4], &latent).await;
    assert_eq!(video.shape, Some(vec![2, 3, 1, 32, 32]));
    assert_eq!(images.tensor(), video.tensor());
    // Packed latents are named as such, not as a batch.
    let packed = decode(&client, &server, "", &[1, 16, 16], &latent[..256]).await;
    assert_eq!((packed.status, packed.error_code().as_str()), (400, "invalid-shape"));
    assert!(String::from_utf8_lossy(&packed.body).contains("packed"));
}

/// Hugging Face endpoint URLs end in a slash, and clients append the query to them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_trailing_slash_urls_answer() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    let client = client();
    let latent = bytes(&values(16 * 2 * 2, 3));
    let decoded = call(&client, &server, "/v1/decode/", &format!("model=wan21-small&{}&dtype=float32", shape_query(&[1, 16, 1, 2, 2])), latent).await;
    assert_eq!((decoded.status, decoded.shape), (200, Some(vec![1, 3, 1, 16, 16])), "{}", String::from_utf8_lossy(&decoded.body));
    let sample = bytes(&values(3 * 16 * 16, 4));
    let encoded = call(&client, &server, "/v1/encode/", &format!("model=wan21-small&{}&dtype=float32", shape_query(&[1, 3, 16, 16])), sample).await;
    assert_eq!((encoded.status, encoded.shape), (200, Some(vec![1, 16, 1, 2, 2])), "{}", String::from_utf8_lossy(&encoded.body));
}

/// `normalize=true` on a decode undoes what it does on an encode: a clip encoded normalized decodes with it
/// to what the raw encoding decodes to.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn normalize_on_decode_undoes_the_encoders_normalisation() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    let client = client();
    let sample = values(3 * 5 * 16 * 16, 5);
    let query = |normalize: bool| format!("model=wan21-small&dtype=f32&normalize={normalize}&{}&dtype=float32", shape_query(&[1, 3, 5, 16, 16]));
    let raw = call(&client, &server, "/v1/encode", &query(false), bytes(&sample)).await;
    let normalized = call(&client, &server, "/v1/encode", &query(true), bytes(&sample)).await;
    assert_eq!(raw.shape, Some(vec![1, 16, 2, 2, 2]), "{}", String::from_utf8_lossy(&raw.body));
    let (raw, normalized) = (raw.tensor(), normalized.tensor());
    assert!(max_abs_difference(&raw, &normalized) > 0.1, "normalize changed nothing on encode");
    let shape = [1, 16, 2, 2, 2];
    let expected = decode(&client, &server, "", &shape, &raw).await.tensor();
    let undone = decode(&client, &server, "normalize=true", &shape, &normalized).await.tensor();
    let difference = max_abs_difference(&expected, &undone);
    assert!(difference <= 1e-4, "{difference}");
    // The scaling a client applied on top comes off first, as encode put it on last.
    let scaled: Vec<f32> = normalized.iter().map(|v| (v - 0.25) * 0.5).collect();
    let both = decode(&client, &server, "normalize=true&scaling_factor=0.5&shift_factor=0.25", &shape, &scaled).await.tensor();
    let difference = max_abs_difference(&expected, &both);
    assert!(difference <= 1e-4, "{difference}");
    let refused = decode(&client, &server, "normalize=perhaps", &shape, &raw).await;
    assert_eq!((refused.status, refused.error_code().as_str()), (400, "invalid-normalize"));
}

/// Every other parameter diffusers sends is applied or refused, never read and dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_query_parameter_is_applied_or_refused() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    let client = client();
    let shape = [1, 16, 2, 4, 6];
    let latent = values(16 * 2 * 4 * 6, 6);
    let full = decode(&client, &server, "", &shape, &latent).await.tensor();
    // height and width (a packed latent's image size in diffusers) leave a 5-D latent's frames whole.
    let sized = decode(&client, &server, "height=24&width=40", &shape, &latent).await;
    assert_eq!(sized.shape, Some(vec![1, 3, 5, 32, 48]), "{}", String::from_utf8_lossy(&sized.body));
    assert_eq!(sized.tensor(), full);
    // diffusers' defaults (do_scaling=True, image_format=jpg) decode the latent as sent.
    let defaults = decode(&client, &server, "do_scaling=True&image_format=jpg&partial_postprocess=False", &shape, &latent).await;
    assert_eq!(defaults.tensor(), full);
    let refusals = [
        ("/v1/decode", "height=-40", "invalid-query"),
        ("/v1/decode", "width=0", "invalid-query"),
        ("/v1/decode", "do_scaling=false&scaling_factor=0.5", "invalid-query"),
        ("/v1/decode", "do_scaling=sometimes", "invalid-boolean"),
        ("/v1/decode", "image_format=gif", "invalid-query"),
        ("/v1/decode", "partial_postprocess=true", "unsupported-option"),
        ("/v1/decode", "output_type=pil", "unsupported-option"),
        ("/v1/decode", "tile=256", "parameter-not-for-op"),
        ("/v1/encode", "output_type=pt", "parameter-not-for-op"),
        ("/v1/encode", "height=16&width=16", "parameter-not-for-op"),
    ];
    for (path, extra, code) in refusals {
        let query = format!("model=wan21-small&{extra}&{}&dtype=float32", shape_query(&shape));
        let answer = call(&client, &server, path, &query, bytes(&latent)).await;
        assert_eq!((answer.status, answer.error_code().as_str()), (400, code), "{path}?{extra}: {}", String::from_utf8_lossy(&answer.body));
    }
}

/// The synchronous call's job lives as long as its connection: a client that hangs up mid-decode leaves
/// the job cancelled, not running on for no one, and the box goes on answering.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_hangs_up_cancels_its_decode() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    let client = client();
    // Long enough to be caught running on a fast CPU too: 161 frames of 256×256 (5 s of 2-core CPU for the first 81).
    let shape = [1, 16, 41, 32, 32];
    let body = bytes(&values(shape.iter().product(), 7));
    let address = server.base.trim_start_matches("http://").to_string();
    let mut socket = tokio::net::TcpStream::connect(&address).await.unwrap();
    let head = format!(
        "POST /v1/decode?model=wan21-small&{}&dtype=float32 HTTP/1.1\r\nHost: {address}\r\nContent-Type: tensor/binary\r\nContent-Length: {}\r\n\r\n",
        shape_query(&shape),
        body.len()
    );
    socket.write_all(head.as_bytes()).await.unwrap();
    socket.write_all(&body).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    let job = loop {
        let (_, list) = get_json(&client, &server.url("/v1/jobs?status=running")).await;
        let running = list["jobs"].as_array().and_then(|jobs| jobs.first().cloned());
        if let Some(job) = running.filter(|job| job["progress"]["done"].as_u64().unwrap_or(0) >= 1) {
            break job;
        }
        assert!(Instant::now() < deadline, "the decode never ran: {list}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    drop(socket);
    let id = job["id"].as_str().unwrap();
    let job = wait_for_final(&client, &server, id, Duration::from_secs(60)).await;
    assert_eq!(job["status"], "cancelled", "{job}");
    assert!(job["progress"]["done"].as_u64().unwrap() < job["progress"]["total"].as_u64().unwrap(), "{job}");
    let after = decode(&client, &server, "", &[1, 16, 1, 2, 2], &values(64, 8)).await;
    assert_eq!(after.shape, Some(vec![1, 3, 1, 16, 16]), "{}", String::from_utf8_lossy(&after.body));
}

/// Exactly what ComfyUI-HFRemoteVae (d904d40) sends, through diffusers' `remote_decode`: `do_scaling=False`,
/// `output_type=pt`, `partial_postprocess=False`, the shape and dtype, `height = shape[2]·8` and
/// `width = shape[3]·8` — for a video latent the frame count and the rows — and a `tensor/binary` body (the
/// endpoint URL names f32, as a user does to compare). The
/// frames come back whole: read as a crop, 9×64×64 came back 9×24×64 and 33 frames of 64×64 were refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hf_remote_vae_nodes_get_whole_frames() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    let client = client();
    for (shape, decoded) in [
        (vec![1usize, 16, 3, 8, 8], vec![1usize, 3, 9, 64, 64]),
        (vec![1, 16, 9, 8, 8], vec![1, 3, 33, 64, 64]),
        (vec![1, 16, 8, 8], vec![1, 3, 64, 64]),
    ] {
        let latent = values(shape.iter().product(), 9);
        let query = format!(
            "do_scaling=False&output_type=pt&partial_postprocess=False&{}&dtype=float32&height={}&width={}",
            shape_query(&shape),
            shape[2] * 8,
            shape[3] * 8
        );
        let response = client
            .post(server.url(&format!("/v1/decode/?model=wan21-small&dtype=f32&{query}")))
            .header("Content-Type", "tensor/binary")
            .header("Accept", "tensor/binary")
            .body(bytes(&latent))
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        let header = response.headers().get("shape").map(|v| v.to_str().unwrap().to_string());
        let body = response.bytes().await.unwrap();
        assert_eq!(status, 200, "{shape:?}: {}", String::from_utf8_lossy(&body));
        let answered: Vec<usize> = serde_json::from_str(&header.unwrap()).unwrap();
        assert_eq!(answered, decoded, "{shape:?}");
        // Whole frames are what the same latent decodes to without height and width.
        let plain = decode(&client, &server, "", &shape, &latent).await;
        assert_eq!(floats(&body), plain.tensor(), "{shape:?}");
        // Its job shows no preview, and says why without promising one ("yet").
        let (status, answer) = get_json(&client, &server.url(&format!("/v1/jobs/{}/preview?side=output", plain.jobs[0]))).await;
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert_eq!((status, answer["error"]["code"].as_str()), (409, Some("preview-unavailable")), "{answer}");
        assert!(message.contains("went back to the caller") && !message.contains("yet"), "{message}");
    }
}
