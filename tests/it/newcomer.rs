//! What a newcomer hit first: a misspelt parameter ran the defaults, an unknown path said 400, the
//! `probe` timing of HTTP jobs was always null, and the README's VAE examples did not run as pasted.
use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::*;
use serde_json::{json, Value};

fn assert_refused(status: u16, body: &Value, names: &[&str]) {
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "unknown-parameter", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    for name in names {
        assert!(message.contains(&format!("`{name}`")), "the message does not name `{name}`: {message}");
    }
}

async fn send(request: reqwest::RequestBuilder) -> (u16, Value) {
    send_json(request).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_parameters_are_refused_by_name_everywhere() {
    let dir = tempfile::tempdir().unwrap();
    let clip = dir.path().join("carphone3.mp4");
    make_clip(&media("carphone_pristine.mp4"), 3, false, &clip);
    let good = std::fs::read(&clip).unwrap();
    let server = Server::start(dir.path(), &[]);
    let client = client();

    // The raw body's query, the form's fields, the keys of its `params` part.
    let (s, b) = upload_raw(&client, &server, "op=upscale&scal=2&modle=x", good.clone()).await;
    assert_refused(s, &b, &["scal", "modle"]);
    assert!(b["error"]["message"].as_str().unwrap().contains("did you mean `scale`"), "{b}");
    let file = || reqwest::multipart::Part::bytes(good.clone()).file_name("a.mp4");
    let form = reqwest::multipart::Form::new().text("op", "upscale").text("scal", "2").part("file", file());
    let (s, b) = send(client.post(server.url("/v1/jobs")).multipart(form)).await;
    assert_refused(s, &b, &["scal"]);
    let form = reqwest::multipart::Form::new().part("file", file()).text("params", r#"{"op": "upscale", "sacle": 2}"#);
    let (s, b) = send(client.post(server.url("/v1/jobs")).multipart(form)).await;
    assert_refused(s, &b, &["sacle"]);
    // `filename` names a raw body; a form's file part carries its own name.
    let form = reqwest::multipart::Form::new().part("file", file()).text("filename", "b.mp4");
    let (s, b) = send(client.post(server.url("/v1/jobs")).multipart(form)).await;
    assert_refused(s, &b, &["filename"]);
    let (s, b) = get_json(&client, &server.url("/v1/jobs?stauts=queued")).await;
    assert_refused(s, &b, &["stauts"]);

    // The synchronous endpoints take diffusers' own names; anything else is refused before the model is looked up.
    let tensor = vec![0u8; 16 * 2 * 2 * 4];
    let shape = "shape=1&shape=16&shape=1&shape=2&shape=2&dtype=float32";
    let (s, b) = send(client.post(server.url(&format!("/v1/decode?model=nosuch&{shape}&output_tipe=pt"))).body(tensor.clone())).await;
    assert_refused(s, &b, &["output_tipe"]);
    let (s, b) = send(client.post(server.url(&format!("/v1/encode?model=nosuch&{shape}&op=upscale"))).body(tensor.clone())).await;
    assert_refused(s, &b, &["op"]);
    // Everything diffusers' remote_decode sends passes the name check (and reaches the model lookup).
    let diffusers = "image_format=jpg&output_type=pt&partial_postprocess=False&do_scaling=True&height=16&width=16";
    let (s, b) = send(client.post(server.url(&format!("/v1/decode?model=nosuch&{shape}&{diffusers}"))).body(tensor)).await;
    assert_eq!((s, &b["error"]["code"]), (400, &json!("unknown-model")), "{b}");

    // Nothing was queued or left behind.
    let (_, list) = get_json(&client, &server.url("/v1/jobs")).await;
    assert_eq!(list["jobs"], json!([]), "{list}");
    let uploads = files_under(&server.data_dir.join("data/uploads"));
    assert!(uploads.is_empty(), "refused uploads left files behind: {uploads:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_paths_and_methods_answer_json_errors() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let client = client();
    for path in ["/v1/job", "/v2/jobs", "/v1/jobs/00000000-0000-4000-8000-000000000000/output"] {
        let (s, b) = get_json(&client, &server.url(path)).await;
        assert_eq!((s, &b["error"]["code"]), (404, &json!("not-found")), "{path}: {b}");
        assert!(b["error"]["message"].as_str().unwrap().contains(path), "{b}");
    }
    for (method, path, allowed) in [
        (reqwest::Method::POST, "/healthz", "GET"),
        (reqwest::Method::DELETE, "/v1/jobs", "POST"),
        (reqwest::Method::GET, "/v1/decode", "POST"),
    ] {
        let response = client.request(method.clone(), server.url(path)).send().await.unwrap();
        let status = response.status().as_u16();
        let allow = response.headers().get("allow").map(|v| v.to_str().unwrap().to_string()).unwrap_or_default();
        let (_, body) = json_answer(method.as_str(), response).await;
        assert_eq!((status, &body["error"]["code"]), (405, &json!("method-not-allowed")), "{method} {path}: {body}");
        assert!(allow.contains(allowed), "{method} {path}: Allow is `{allow}`");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_job_records_how_long_its_upload_was_probed() {
    let dir = tempfile::tempdir().unwrap();
    let clip = dir.path().join("carphone3.mp4");
    make_clip(&media("carphone_pristine.mp4"), 3, false, &clip);
    let server = Server::start(dir.path(), &[]);
    let client = client();
    let (status, queued) = upload_raw(&client, &server, "op=upscale&scale=2", std::fs::read(&clip).unwrap()).await;
    assert_eq!(status, 202, "{queued}");
    assert!(queued["timings"]["probe"].as_f64().is_some_and(|s| s > 0.0), "not in the queued job: {queued}");
    let job = wait_for_final(&client, &server, queued["id"].as_str().unwrap(), Duration::from_secs(300)).await;
    assert_eq!(job["status"], "succeeded", "{job}");
    // The number measured at the upload is the one the finished job keeps.
    assert_eq!(job["timings"]["probe"], queued["timings"]["probe"], "{job}");
    let probe = job["timings"]["probe"].as_f64().unwrap();
    assert!(probe < 30.0, "ffprobe of a 3-frame clip took {probe} s?");
    println!("probe of a 3-frame clip: {probe:.4} s");
}

/// The fenced blocks of the README's "Use it" section in `language`.
fn readme_blocks(language: &str) -> Vec<String> {
    let readme = std::fs::read_to_string(Path::new(REPO).join("README.md")).unwrap();
    let section = readme.split("\n## Use it\n").nth(1).expect("README has a `## Use it` section");
    let section = section.split("\n## ").next().unwrap();
    let fence = format!("```{language}\n");
    section.split(&fence).skip(1).map(|rest| rest.split("```").next().unwrap().to_string()).collect()
}

fn python() -> PathBuf {
    std::env::var_os("VAEBOX_PYTHON").map(PathBuf::from).unwrap_or_else(|| Path::new(REPO).join(".venv/bin/python"))
}

/// The VAE examples, pasted in order into a shell and into Python, against a box whose `wan_2.1_vae`
/// is the small reference Wan 2.1 (same architecture, random weights, width 12).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_vae_examples_run_as_pasted() {
    let dir = tempfile::tempdir().unwrap();
    let models = dir.path().join("models");
    std::fs::create_dir_all(models.join("vae")).unwrap();
    let small_wan21 = Path::new(REPO).join("../shared/reference/wan21_original/weights.safetensors");
    std::fs::copy(small_wan21, models.join("vae/wan_2.1_vae.safetensors")).unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    make_clip(&media("carphone_pristine.mp4"), 5, false, &work.join("clip.mp4"));
    let server = Server::start(dir.path(), &[("VAEBOX_MODELS_DIR", models.to_str().unwrap())]);
    let client = client();

    let shell = readme_blocks("sh").into_iter().find(|b| b.contains("op=vae_encode")).expect("a shell block with the encode example");
    let script = shell.replace("http://127.0.0.1:8080", &server.base);
    let out = Command::new("bash").args(["-e", "-o", "pipefail", "-c", &script]).current_dir(&work).output().unwrap();
    assert!(out.status.success(), "the shell example failed:\n{script}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(work.join("clip.latent.safetensors").is_file(), "the encode example saved no clip.latent.safetensors");
    let (_, list) = get_json(&client, &server.url("/v1/jobs")).await;
    let jobs = list["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 3, "encode, decode, reconstruct: {list}");
    for job in jobs {
        let job = wait_for_final(&client, &server, job["id"].as_str().unwrap(), Duration::from_secs(300)).await;
        assert_eq!(job["status"], "succeeded", "{job}");
    }

    let example = readme_blocks("python").into_iter().find(|b| b.contains("remote_decode")).expect("a Python block with remote_decode");
    let program = format!(
        "from safetensors.torch import load_file\nlatents = load_file('clip.latent.safetensors')['latent']\nchannels = latents.shape[1]\n\
         {}\nassert mp4[4:8] == b'ftyp', mp4[:16]\nassert video.shape[:2] == (1, 3), video.shape\nassert latents.shape[1] == channels\n",
        example.replace("http://box:8080", &server.base)
    );
    let out = Command::new(python()).args(["-c", &program]).current_dir(&work).output().unwrap();
    assert!(out.status.success(), "the Python example failed:\n{program}\n{}", String::from_utf8_lossy(&out.stderr));
}
