//! Test support: start the real `vaebox` binary on a loopback port with a temporary data dir,
//! make real clips with ffmpeg from the real test media, and check outputs with ffprobe.
#![allow(dead_code)]

pub mod browser;
pub mod conformance;
pub mod gate;
pub mod moto;
pub mod postgres;
pub mod tensors;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

pub const REPO: &str = env!("CARGO_MANIFEST_DIR");

pub fn media(name: &str) -> PathBuf {
    let path = Path::new(REPO).join("tests/media").join(name);
    assert!(path.exists(), "{} is missing: run scripts/setup.sh --test", path.display());
    path
}

pub struct Server {
    child: Child,
    pub base: String,
    pub data_dir: PathBuf,
    env: Vec<(String, String)>,
    log: Option<PathBuf>,
}

impl Server {
    /// Starts a server on a fresh data dir; `env` adds `VAEBOX_*` overrides.
    pub fn start(data_dir: &Path, env: &[(&str, &str)]) -> Server {
        Self::spawn(data_dir.to_path_buf(), test_settings(data_dir, env), None)
    }

    /// As `start`, with the server's log (stderr) appended to `log` instead of the test's output.
    pub fn start_logged(data_dir: &Path, env: &[(&str, &str)], log: &Path) -> Server {
        Self::spawn(data_dir.to_path_buf(), test_settings(data_dir, env), Some(log.to_path_buf()))
    }

    /// `vaebox serve` as `scripts/run.sh` starts it, in `folder` (laid out as the repository root): on the
    /// `config.toml` there and its relative `data_dir` and `models_dir`, nothing overridden but the port
    /// (tests run side by side). `data_dir` is `folder`.
    pub fn start_as_the_readme_says(folder: &Path) -> Server {
        Self::spawn(folder.to_path_buf(), vec![("VAEBOX_LISTEN".into(), "127.0.0.1:0".into())], None)
    }

    fn spawn(data_dir: PathBuf, env: Vec<(String, String)>, log: Option<PathBuf>) -> Server {
        let (child, ready) = spawn_vaebox(&data_dir, &env, log.as_deref(), "vaebox listening on ");
        let base = ready.split_whitespace().next().unwrap().to_string();
        Server { child, base, data_dir, env, log }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    /// SIGKILL: no shutdown code runs, as in a crash or power cut.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Kills this process and starts a new one on the same data dir and settings.
    pub fn restart_after_kill9(mut self) -> Server {
        self.kill9();
        let (data_dir, env, log) = (self.data_dir.clone(), self.env.clone(), self.log.clone());
        Self::spawn(data_dir, env, log)
    }

    /// SIGTERM, as `systemctl stop` or `docker stop` send it.
    pub fn sigterm(&self) {
        let status = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status().expect("run kill");
        assert!(status.success());
    }

    /// The exit status once the process ends, or `None` if it is still running after `within`.
    pub fn wait_for_exit(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait for vaebox") {
                return Some(status);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// `vaebox serve` in `data_dir` with `VAEBOX_*` overrides; returns once it printed the line starting with
/// `ready` (the rest of that line is returned).
fn spawn_vaebox(data_dir: &Path, env: &[(String, String)], log: Option<&Path>, ready: &'static str) -> (Child, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_vaebox"));
    command
        .arg("serve")
        .current_dir(data_dir)
        .stdout(Stdio::piped())
        .stderr(match log {
            Some(path) => Stdio::from(std::fs::OpenOptions::new().create(true).append(true).open(path).expect("open the log file")),
            None => Stdio::inherit(),
        });
    for (k, v) in env {
        command.env(k, v);
    }
    let mut child = command.spawn().expect("start vaebox");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(rest) = line.strip_prefix(ready) {
                let _ = tx.send(rest.to_string());
            }
        }
    });
    let rest = rx.recv_timeout(Duration::from_secs(60)).unwrap_or_else(|_| panic!("vaebox did not print {ready:?}"));
    (child, rest)
}

/// The settings every test server starts with (a loopback port of its own, `DIR/data`, the repository's
/// models, two threads), then the test's own `VAEBOX_*` overrides.
fn test_settings(data_dir: &Path, env: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut settings: Vec<(String, String)> = vec![
        ("VAEBOX_LISTEN".into(), "127.0.0.1:0".into()),
        ("VAEBOX_DATA_DIR".into(), data_dir.join("data").display().to_string()),
        ("VAEBOX_MODELS_DIR".into(), Path::new(REPO).join("models").display().to_string()),
        ("VAEBOX_THREADS".into(), "2".into()),
        ("VAEBOX_LOG".into(), "info,tower_http=warn,sqlx=warn".into()),
    ];
    settings.extend(env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    settings
}

/// `vaebox serve --role worker`: claims jobs from the shared database, serves no HTTP; killed on drop.
pub struct WorkerProcess {
    child: Child,
    pub name: String,
}

impl WorkerProcess {
    /// Starts a worker on `data_dir` (the API's, shared) under `name`; `env` adds `VAEBOX_*` overrides.
    pub fn start(data_dir: &Path, name: &str, env: &[(&str, &str)], log: Option<&Path>) -> WorkerProcess {
        let mut env = test_settings(data_dir, env);
        env.push(("VAEBOX_ROLE".into(), "worker".into()));
        env.push(("VAEBOX_WORKER_NAME".into(), name.into()));
        let (child, _) = spawn_vaebox(data_dir, &env, log, "vaebox worker ");
        WorkerProcess { child, name: name.into() }
    }

    /// SIGKILL: no shutdown code runs; its lease is left to expire.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn is_running(&mut self) -> bool {
        self.child.try_wait().expect("wait for the worker").is_none()
    }

    /// SIGTERM, as `systemctl stop` sends it: the worker stops claiming and hands its running job back once
    /// its `shutdown_grace_s` is over.
    pub fn sigterm(&self) {
        let status = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status().expect("run kill");
        assert!(status.success());
    }
}

impl Drop for WorkerProcess {
    fn drop(&mut self) {
        self.kill9();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// `dir/models` holding the small reference Wan 2.1 (width 12, random weights) as `wan21-small`.
pub fn models_with_small_wan21(dir: &Path) -> PathBuf {
    let models = dir.join("models");
    std::fs::create_dir_all(models.join("vae")).unwrap();
    std::fs::copy(Path::new(REPO).join("../shared/reference/wan21_original/weights.safetensors"), models.join("vae/wan21-small.safetensors")).unwrap();
    models
}

/// `dir/models` laid out for `restore` as a user would: the small reference SeedVR2 DiTs (random weights,
/// real structure) as `seedvr2-3b-small` and `seedvr2-7b-small` with the shipped text embeddings in `dit/`,
/// and the small SeedVR2 VAE as `seedvr2-vae-small` in `vae/`.
pub fn models_with_small_seedvr2(dir: &Path) -> PathBuf {
    let models = dir.join("models");
    for sub in ["dit", "vae"] {
        std::fs::create_dir_all(models.join(sub)).unwrap();
    }
    let reference = Path::new(REPO).join("../shared/reference");
    for variant in ["3b", "7b"] {
        std::fs::copy(reference.join(format!("seedvr2_dit/small_{variant}_weights.safetensors")), models.join(format!("dit/seedvr2-{variant}-small.safetensors"))).unwrap();
    }
    std::fs::copy(reference.join("seedvr2_dit/text_embeds.safetensors"), models.join("dit/text_embeds.safetensors")).unwrap();
    std::fs::copy(reference.join("seedvr2/small_weights.safetensors"), models.join("vae/seedvr2-vae-small.safetensors")).unwrap();
    models
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder().timeout(Duration::from_secs(600)).build().unwrap()
}

/// The first `frames` frames of a real clip, re-encoded (so the cut is exact), optionally with a tone.
pub fn make_clip(source: &Path, frames: u32, with_audio: bool, out: &Path) {
    let mut command = Command::new("ffmpeg");
    command.args(["-nostdin", "-v", "error", "-y", "-i"]).arg(source);
    if with_audio {
        command.args(["-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000", "-map", "0:v:0", "-map", "1:a:0", "-c:a", "aac", "-shortest"]);
    }
    command
        .args(["-frames:v", &frames.to_string(), "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p"])
        .arg(out);
    let status = command.status().expect("run ffmpeg");
    assert!(status.success(), "ffmpeg could not make the test clip");
}

#[derive(Debug)]
pub struct Probed {
    pub width: u64,
    pub height: u64,
    pub frames: u64,
    pub fps: String,
    pub has_audio: bool,
    /// `128:117`; None for square pixels or none stored.
    pub sample_aspect_ratio: Option<String>,
}

/// ffprobe, counting frames by decoding them (the container's own count is not trusted).
pub fn ffprobe(path: &Path) -> Probed {
    let out = Command::new("ffprobe")
        .args(["-v", "error", "-count_frames", "-show_streams", "-of", "json"])
        .arg(path)
        .output()
        .expect("run ffprobe");
    assert!(out.status.success(), "ffprobe failed on {}: {}", path.display(), String::from_utf8_lossy(&out.stderr));
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    let streams = json["streams"].as_array().unwrap();
    let video = streams.iter().find(|s| s["codec_type"] == "video").expect("a video stream");
    Probed {
        width: video["width"].as_u64().unwrap(),
        height: video["height"].as_u64().unwrap(),
        frames: video["nb_read_frames"].as_str().unwrap().parse().unwrap(),
        fps: video["r_frame_rate"].as_str().unwrap().to_string(),
        has_audio: streams.iter().any(|s| s["codec_type"] == "audio"),
        sample_aspect_ratio: video["sample_aspect_ratio"].as_str().filter(|sar| !["1:1", "0:1", "N/A"].contains(sar)).map(str::to_string),
    }
}

/// The status and JSON body (null when there is none) of an answer to `method`, checked against
/// /openapi.json (`conformance`).
pub async fn json_answer(method: &str, response: reqwest::Response) -> (u16, Value) {
    let status = response.status().as_u16();
    let url = response.url().to_string();
    let body = response.json().await.unwrap_or(Value::Null);
    if !body.is_null() {
        conformance::check(method, &url, status, &body);
    }
    (status, body)
}

/// Sends a request; its answer as `json_answer` gives it.
pub async fn send_json(request: reqwest::RequestBuilder) -> (u16, Value) {
    let (client, request) = request.build_split();
    let request = request.unwrap();
    let method = request.method().to_string();
    json_answer(&method, client.execute(request).await.unwrap()).await
}

pub async fn get_json(client: &reqwest::Client, url: &str) -> (u16, Value) {
    send_json(client.get(url)).await
}

/// Polls a job until it reaches a final status.
pub async fn wait_for_final(client: &reqwest::Client, server: &Server, id: &str, within: Duration) -> Value {
    let deadline = Instant::now() + within;
    loop {
        let (status, job) = get_json(client, &server.url(&format!("/v1/jobs/{id}"))).await;
        assert_eq!(status, 200, "{job}");
        if matches!(job["status"].as_str(), Some("succeeded" | "failed" | "cancelled")) {
            return job;
        }
        assert!(Instant::now() < deadline, "job {id} did not finish in time: {job}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

pub async fn upload_raw(client: &reqwest::Client, server: &Server, query: &str, body: Vec<u8>) -> (u16, Value) {
    send_json(client.post(server.url(&format!("/v1/jobs?{query}"))).body(body)).await
}

pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                out.extend(files_under(&path));
            } else {
                out.push(path);
            }
        }
    }
    out
}

/// A safetensors file written here, independently of the server's own writer.
pub fn write_safetensors(path: &Path, name: &str, shape: &[usize], values: &[f32], metadata: Value) {
    assert_eq!(shape.iter().product::<usize>(), values.len());
    let mut header = json!({ name: { "dtype": "F32", "shape": shape, "data_offsets": [0, values.len() * 4] } });
    if !metadata.is_null() {
        header["__metadata__"] = metadata;
    }
    let header = serde_json::to_vec(&header).unwrap();
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend(header);
    for v in values {
        bytes.extend(v.to_le_bytes());
    }
    std::fs::write(path, bytes).unwrap();
}

/// Keys of a real job (and of its timings and metrics, and of its plan all the way down) that /openapi.json does not
/// describe, as `Schema.key` (`Plan.key.key` inside the plan). The plan is checked against its op's schema.
pub fn undescribed_keys(openapi: &Value, job: &Value) -> Vec<String> {
    let mut missing = Vec::new();
    for (schema, part) in [("Job", job), ("Timings", &job["timings"]), ("QualityMetrics", &job["metrics"])] {
        let described = &openapi["components"]["schemas"][schema]["properties"];
        assert!(described.is_object(), "/openapi.json has no {schema} schema");
        for key in part.as_object().map(|o| o.keys().collect()).unwrap_or_else(Vec::new) {
            if described.get(key).is_none() {
                missing.push(format!("{schema}.{key}"));
            }
        }
    }
    let plan_schema = match job["op"].as_str() {
        Some("upscale") => "UpscalePlan",
        Some("restore") => "RestorePlan",
        _ => "VaePlan",
    };
    let reference = json!({ "$ref": format!("#/components/schemas/{plan_schema}") });
    let plans = openapi["components"]["schemas"]["JobPlan"]["anyOf"].as_array().expect("a JobPlan schema");
    assert!(plans.contains(&reference), "JobPlan does not offer {plan_schema}");
    undescribed_under(openapi, &reference, &job["plan"], plan_schema, &mut missing);
    missing
}

/// The properties `schema` describes, through `$ref`s and the parts of `allOf`, `oneOf` and `anyOf`.
fn schema_properties<'a>(openapi: &'a Value, schema: &'a Value, out: &mut Vec<(&'a str, &'a Value)>) {
    if let Some(name) = schema["$ref"].as_str().and_then(|r| r.strip_prefix("#/components/schemas/")) {
        let named = &openapi["components"]["schemas"][name];
        assert!(named.is_object(), "{name} is referenced but not in /openapi.json");
        return schema_properties(openapi, named, out);
    }
    out.extend(schema["properties"].as_object().into_iter().flatten().map(|(key, property)| (key.as_str(), property)));
    for parts in ["allOf", "oneOf", "anyOf"] {
        for part in schema[parts].as_array().into_iter().flatten() {
            schema_properties(openapi, part, out);
        }
    }
}

fn undescribed_under(openapi: &Value, schema: &Value, value: &Value, path: &str, missing: &mut Vec<String>) {
    let Some(object) = value.as_object() else { return };
    let mut described = Vec::new();
    schema_properties(openapi, schema, &mut described);
    for (key, inner) in object {
        let of_key: Vec<Value> = described.iter().filter(|(k, _)| k == key).map(|(_, s)| (*s).clone()).collect();
        if of_key.is_empty() {
            missing.push(format!("{path}.{key}"));
        } else {
            undescribed_under(openapi, &json!({ "anyOf": of_key }), inner, &format!("{path}.{key}"), missing);
        }
    }
}

/// The page at `url` after its scripts ran, as headless Chromium serialises it.
pub fn rendered_dom(url: &str, profile: &Path) -> String {
    // The flags keep Chromium off the (closed) network and out of first-run work.
    let out = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--virtual-time-budget=8000",
            "--dump-dom",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(url)
        .output()
        .expect("chromium is installed by scripts/setup.sh --test");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Every directory below `dir`, deepest first.
pub fn dirs_under(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let children: Vec<_> = std::fs::read_dir(dir).into_iter().flatten().flatten().map(|e| e.path()).filter(|p| p.is_dir()).collect();
    children.iter().flat_map(|d| dirs_under(d)).chain(children.clone()).collect()
}

/// The project's Python (`VAEBOX_PYTHON`, else `.venv/bin/python`), for fixtures made by outside libraries.
pub fn python() -> PathBuf {
    std::env::var_os("VAEBOX_PYTHON").map(PathBuf::from).unwrap_or_else(|| Path::new(REPO).join(".venv/bin/python"))
}

/// Runs one of the repository's Python scripts to completion; panics with its stderr if it fails.
pub fn run_python(script: &str, args: &[&std::ffi::OsStr]) -> String {
    let output = Command::new(python()).arg(Path::new(REPO).join(script)).args(args).output().expect("python runs (set VAEBOX_PYTHON)");
    assert!(output.status.success(), "{script} failed: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Uploads, waits, and requires success.
pub async fn run_job(client: &reqwest::Client, server: &Server, query: &str, body: Vec<u8>) -> Value {
    let (status, job) = upload_raw(client, server, query, body).await;
    assert_eq!(status, 202, "{job}");
    let job = wait_for_final(client, server, job["id"].as_str().unwrap(), Duration::from_secs(300)).await;
    assert_eq!(job["status"], "succeeded", "{job}");
    job
}

/// The frames of an MP4 as packed RGB bytes, decoded by ffmpeg.
pub fn rgb_frames(mp4: &[u8], path: &Path) -> Vec<u8> {
    std::fs::write(path, mp4).unwrap();
    let output = std::process::Command::new("ffmpeg")
        .args(["-nostdin", "-v", "error", "-i"])
        .arg(path)
        .args(["-f", "rawvideo", "-pix_fmt", "rgb24", "-"])
        .output()
        .expect("run ffmpeg");
    assert!(output.status.success(), "ffmpeg: {}", String::from_utf8_lossy(&output.stderr));
    output.stdout
}

/// Every frame of a result as it is stored (none dropped or repeated to make a constant rate), written to
/// `path` first, as raw `pix_fmt` (`rgb24`, `rgb48le`) bytes frame after frame.
pub fn stored_frames(result: &[u8], path: &Path, pix_fmt: &str) -> Vec<u8> {
    std::fs::write(path, result).unwrap();
    let output = std::process::Command::new("ffmpeg")
        .args(["-nostdin", "-v", "error", "-i"])
        .arg(path)
        .args(["-fps_mode", "passthrough", "-f", "rawvideo", "-pix_fmt", pix_fmt, "-"])
        .output()
        .expect("run ffmpeg");
    assert!(output.status.success(), "ffmpeg: {}", String::from_utf8_lossy(&output.stderr));
    output.stdout
}

pub async fn fetch(client: &reqwest::Client, server: &Server, job: &Value) -> Vec<u8> {
    let url = server.url(job["output"]["url"].as_str().unwrap());
    client.get(url).send().await.unwrap().bytes().await.unwrap().to_vec()
}

/// Follows `/events` to the end; returns every job snapshot the server sent.
pub async fn follow_events(client: &reqwest::Client, server: &Server, id: &str) -> Vec<Value> {
    let response = client.get(server.url(&format!("/v1/jobs/{id}/events"))).send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert!(response.headers()["content-type"].to_str().unwrap().starts_with("text/event-stream"));
    let mut stream = response.bytes_stream();
    let mut buffer = String::new();
    let mut snapshots = Vec::new();
    let read = async {
        while let Some(chunk) = futures_util::StreamExt::next(&mut stream).await {
            buffer.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
            while let Some(end) = buffer.find("\n\n") {
                let event: String = buffer.drain(..end + 2).collect();
                for line in event.lines() {
                    if let Some(data) = line.strip_prefix("data:") {
                        snapshots.push(serde_json::from_str::<Value>(data.trim()).unwrap());
                    }
                }
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(300), read).await.expect("the event stream did not end");
    snapshots
}

/// A PNG's chunk: length, type, data, CRC-32 of type and data.
pub fn png_chunk(kind: &[u8; 4], data: &[u8]) -> Vec<u8> {
    let mut crc = 0xffff_ffffu32;
    for byte in kind.iter().chain(data) {
        crc ^= u32::from(*byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 { (crc >> 1) ^ 0xedb8_8320 } else { crc >> 1 };
        }
    }
    [&(data.len() as u32).to_be_bytes()[..], kind, data, &(!crc).to_be_bytes()].concat()
}

/// A zip of the first `frames` frames of `clip` as PNGs scaled to `size` (`W:H`), in frame order, as a
/// user's image sequence arrives.
pub fn png_zip_of_clip(dir: &Path, clip: &Path, frames: u32, size: &str) -> Vec<u8> {
    let pngs = dir.join("frames");
    std::fs::create_dir(&pngs).unwrap();
    let status = Command::new("ffmpeg")
        .args(["-nostdin", "-v", "error", "-i"])
        .arg(clip)
        .args(["-frames:v", &frames.to_string(), "-vf", &format!("scale={size}")])
        .arg(pngs.join("f%03d.png"))
        .status()
        .unwrap();
    assert!(status.success(), "ffmpeg could not cut the frames");
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let mut names: Vec<_> = std::fs::read_dir(&pngs).unwrap().map(|e| e.unwrap().path()).collect();
    names.sort();
    for path in &names {
        zip.start_file(path.file_name().unwrap().to_str().unwrap(), zip::write::FileOptions::default()).unwrap();
        std::io::Write::write_all(&mut zip, &std::fs::read(path).unwrap()).unwrap();
    }
    zip.finish().unwrap().into_inner()
}

/// A 64 × 48 crop of a real photograph (scikit-image's astronaut) at `x`, `y`, as an RGB PNG.
pub fn crop_of_astronaut(out: &Path, x: usize, y: usize) -> PathBuf {
    let status = Command::new("ffmpeg")
        .args(["-nostdin", "-v", "error", "-y", "-i"])
        .arg(media("astronaut.png"))
        .args(["-vf", &format!("crop=64:48:{x}:{y}"), "-pix_fmt", "rgb24"])
        .arg(out)
        .status()
        .expect("run ffmpeg");
    assert!(status.success(), "ffmpeg could not cut the picture");
    out.to_path_buf()
}
