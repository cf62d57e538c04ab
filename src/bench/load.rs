//! `vaebox bench load`: how the box answers many pollers while a job runs, and what they cost the job.
//! The same job runs twice against a running server on loopback: once watched by a single poller every
//! 250 ms (the baseline, like one open page), once with `--pollers` clients each polling
//! `GET /v1/jobs/{id}` on its own keep-alive connection, back to back unless `--interval-ms` says.
//! The clients run on the same machine, so on a small CPU their own work is part of the job's slowdown. Reports the poll latencies (p50/p90/p99/max) and the job's timings in both runs.
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use axum::body::Bytes;
use axum::http::{header, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::{handshake, SendRequest};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::TcpStream;

/// Latency samples kept per poller; past it a poller keeps polling but stops recording (bounded memory).
const MAX_SAMPLES_PER_POLLER: usize = 200_000;
const MAX_POLLERS: usize = 2_000;
/// One request or upload may take at most this long before the bench gives up on it.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(clap::Args, Debug)]
pub struct LoadBenchArgs {
    /// A running vaebox on loopback (other hosts are refused: this is a load generator).
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub server: SocketAddr,
    /// The clip each of the two jobs processes.
    #[arg(long, default_value = "tests/media/carphone_pristine.mp4")]
    pub input: PathBuf,
    /// The job's query string, as for `POST /v1/jobs` with a raw body.
    #[arg(long, default_value = "op=upscale&scale=2&dtype=bf16")]
    pub job: String,
    /// Concurrent pollers during the second run.
    #[arg(long, default_value_t = 200)]
    pub pollers: usize,
    /// Pause of each poller between its requests in the loaded run (0: back to back, the stress case).
    #[arg(long, default_value_t = 0)]
    pub interval_ms: u64,
    /// Give up on a job (and cancel it) after this long.
    #[arg(long, default_value_t = 600)]
    pub max_seconds: u64,
    /// Bearer token, when the server has tokens.
    #[arg(long, env = "VAEBOX_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
}

struct Client {
    server: SocketAddr,
    token: Option<String>,
}

struct Reply {
    status: StatusCode,
    body: Bytes,
}

impl Client {
    async fn connect(&self) -> anyhow::Result<SendRequest<Full<Bytes>>> {
        let stream = TcpStream::connect(self.server).await.with_context(|| format!("connecting to {}", self.server))?;
        stream.set_nodelay(true)?;
        let (sender, connection) = handshake(TokioIo::new(stream)).await?;
        tokio::spawn(connection);
        Ok(sender)
    }

    async fn send(&self, sender: &mut SendRequest<Full<Bytes>>, method: Method, path: &str, body: Bytes) -> anyhow::Result<Reply> {
        let mut request = Request::builder().method(method).uri(path).header(header::HOST, self.server.to_string());
        if let Some(token) = &self.token {
            request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
        }
        let request = request.body(Full::new(body))?;
        let exchange = async {
            sender.ready().await?;
            let response = sender.send_request(request).await?;
            let status = response.status();
            let body = response.into_body().collect().await?.to_bytes();
            anyhow::Ok(Reply { status, body })
        };
        tokio::time::timeout(REQUEST_TIMEOUT, exchange).await.with_context(|| format!("{path}: no answer in {REQUEST_TIMEOUT:?}"))?
    }

    async fn json(&self, method: Method, path: &str, body: Bytes) -> anyhow::Result<Value> {
        let mut sender = self.connect().await?;
        let reply = self.send(&mut sender, method, path, body).await?;
        if !reply.status.is_success() {
            bail!("{path}: {} {}", reply.status, String::from_utf8_lossy(&reply.body));
        }
        Ok(serde_json::from_slice(&reply.body)?)
    }
}

fn is_final(job: &Value) -> bool {
    matches!(job["status"].as_str(), Some("succeeded" | "failed" | "cancelled"))
}

/// Latencies of one run, in microseconds, sorted.
struct PollStats {
    latencies_us: Vec<u32>,
    errors: usize,
    seconds: f64,
}

impl PollStats {
    fn percentile_ms(&self, p: f64) -> f64 {
        if self.latencies_us.is_empty() {
            return f64::NAN;
        }
        let rank = ((p / 100.0) * (self.latencies_us.len() - 1) as f64).round() as usize;
        self.latencies_us[rank] as f64 / 1000.0
    }

    fn json(&self) -> Value {
        serde_json::json!({
            "requests": self.latencies_us.len(),
            "errors": self.errors,
            "requests_per_s": self.latencies_us.len() as f64 / self.seconds,
            "p50_ms": self.percentile_ms(50.0),
            "p90_ms": self.percentile_ms(90.0),
            "p99_ms": self.percentile_ms(99.0),
            "max_ms": self.percentile_ms(100.0),
        })
    }
}

const BASELINE_INTERVAL: Duration = Duration::from_millis(250);

/// One poller: GETs on one connection, `interval` apart, until `done`; reconnects after an error.
async fn poll_until_done(client: Arc<Client>, path: String, done: Arc<AtomicBool>, interval: Duration) -> (Vec<u32>, usize, bool) {
    let (mut latencies, mut errors, mut saw_final) = (Vec::new(), 0usize, false);
    let mut sender = None;
    while !done.load(Ordering::Relaxed) {
        if sender.is_none() {
            match client.connect().await {
                Ok(s) => sender = Some(s),
                Err(_) => {
                    errors += 1;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            }
        }
        let started = Instant::now();
        match client.send(sender.as_mut().expect("connected above"), Method::GET, &path, Bytes::new()).await {
            Ok(reply) if reply.status == StatusCode::OK => {
                if latencies.len() < MAX_SAMPLES_PER_POLLER {
                    latencies.push(started.elapsed().as_micros().min(u32::MAX as u128) as u32);
                }
                if serde_json::from_slice::<Value>(&reply.body).is_ok_and(|job| is_final(&job)) {
                    saw_final = true;
                    done.store(true, Ordering::Relaxed);
                }
            }
            _ => {
                errors += 1;
                sender = None;
            }
        }
        if !interval.is_zero() {
            tokio::time::sleep(interval).await;
        }
    }
    (latencies, errors, saw_final)
}

struct Run {
    job: Value,
    polls: PollStats,
}

async fn run_job(client: &Arc<Client>, args: &LoadBenchArgs, clip: &Bytes, (pollers, interval): (usize, Duration)) -> anyhow::Result<Run> {
    let name = args.input.file_name().and_then(|n| n.to_str()).unwrap_or("clip.mp4");
    let created = client.json(Method::POST, &format!("/v1/jobs?{}&filename={name}", args.job), clip.clone()).await?;
    let id = created["id"].as_str().context("the created job has no id")?.to_string();
    let path = format!("/v1/jobs/{id}");
    let done = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let tasks: Vec<_> = (0..pollers).map(|_| tokio::spawn(poll_until_done(client.clone(), path.clone(), done.clone(), interval))).collect();
    let deadline = Duration::from_secs(args.max_seconds);
    while !done.load(Ordering::Relaxed) && started.elapsed() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    done.store(true, Ordering::Relaxed);
    let seconds = started.elapsed().as_secs_f64();
    let (mut latencies_us, mut errors) = (Vec::new(), 0);
    for task in tasks {
        let (samples, failed, _) = task.await?;
        latencies_us.extend(samples);
        errors += failed;
    }
    latencies_us.sort_unstable();
    let job = client.json(Method::GET, &path, Bytes::new()).await?;
    if !is_final(&job) {
        let _ = client.json(Method::POST, &format!("{path}/cancel"), Bytes::new()).await;
        bail!("job {id} did not finish in {}s (status {})", args.max_seconds, job["status"]);
    }
    if job["status"] != "succeeded" {
        bail!("job {id} ended {}: {}", job["status"], job["error"]);
    }
    Ok(Run { job, polls: PollStats { latencies_us, errors, seconds } })
}

fn timing(job: &Value, key: &str) -> f64 {
    job["timings"][key].as_f64().unwrap_or(f64::NAN)
}

pub async fn run(args: &LoadBenchArgs) -> anyhow::Result<()> {
    if !args.server.ip().is_loopback() {
        bail!("--server {}: the load bench only talks to a server on this machine (loopback)", args.server);
    }
    if args.pollers == 0 || args.pollers > MAX_POLLERS {
        bail!("--pollers must be 1..={MAX_POLLERS}");
    }
    let clip = Bytes::from(std::fs::read(&args.input).with_context(|| format!("reading {}", args.input.display()))?);
    let client = Arc::new(Client { server: args.server, token: args.token.clone() });
    eprintln!("baseline: one job watched by 1 poller every {BASELINE_INTERVAL:?}");
    let baseline = run_job(&client, args, &clip, (1, BASELINE_INTERVAL)).await?;
    eprintln!("loaded: the same job watched by {} pollers", args.pollers);
    let loaded = run_job(&client, args, &clip, (args.pollers, Duration::from_millis(args.interval_ms))).await?;

    let pace = if args.interval_ms == 0 { "back to back".to_string() } else { format!("every {} ms", args.interval_ms) };
    println!("\nLoad bench: {} | job `{}` on {} | {} pollers, each {pace} on its own connection", args.server, args.job, args.input.display(), args.pollers);
    println!("| run | polls | errors | polls/s | p50 ms | p90 ms | p99 ms | max ms | job compute s | job total s |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (name, run) in [("1 poller every 250 ms", &baseline), (&format!("{} pollers", args.pollers)[..], &loaded)] {
        let p = &run.polls;
        println!(
            "| {name} | {} | {} | {:.0} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} |",
            p.latencies_us.len(),
            p.errors,
            p.latencies_us.len() as f64 / p.seconds,
            p.percentile_ms(50.0),
            p.percentile_ms(90.0),
            p.percentile_ms(99.0),
            p.percentile_ms(100.0),
            timing(&run.job, "compute"),
            timing(&run.job, "total"),
        );
    }
    let slowdown = timing(&loaded.job, "total") / timing(&baseline.job, "total");
    println!("job slowdown under load (total, loaded / baseline): {slowdown:.2}×");
    let summary = serde_json::json!({
        "bench": "load",
        "job": args.job,
        "pollers": args.pollers,
        "interval_ms": args.interval_ms,
        "baseline": {"polls": baseline.polls.json(), "timings": baseline.job["timings"]},
        "loaded": {"polls": loaded.polls.json(), "timings": loaded.job["timings"]},
        "slowdown_total": slowdown,
    });
    println!("\n{summary}");
    Ok(())
}
