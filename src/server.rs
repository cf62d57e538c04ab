//! Start-up: open the store, recover interrupted jobs, start the executor and scheduler, serve HTTP;
//! and the stop on SIGTERM or Ctrl-C (see `stop`).
mod connection_limits;
pub mod descriptors;
mod listen;
mod secured_io;
mod sweep;
pub mod runtime;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{broadcast, Notify};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::api::{self, metrics::Metrics, AppState};
use crate::config::Config;
use crate::executor::{ExecutorConfig, ExecutorHandle};
use crate::queue::scheduler::{CancelFlags, Scheduler, Worker};
use crate::jobs::retention::Retention;
use crate::jobs::disk::DiskReserve;
use anyhow::Context;

use crate::jobs::blobs::Blobs;
use crate::jobs::files::JobFiles;
use crate::jobs::{self, preflight, DatabaseTarget};
use crate::queue::leases::LeaseKeeper;
use crate::queue::{Queue, QueueParts};

pub async fn serve(config: Config) -> anyhow::Result<()> {
    let role = config.role;
    match descriptors::raise_soft_limit() {
        Ok(limit) => tracing::info!(limit, "open file descriptor limit"),
        Err(e) => tracing::warn!(error = %e, "cannot raise the open file descriptor limit"),
    }
    preflight::check_writable(&config.data_dir, "data_dir")?;
    preflight::check_default_output_format(&config)?;
    crate::api::presets::check(&config).map_err(|why| anyhow::anyhow!("invalid configuration: {why}"))?;
    crate::queue::callbacks::check_token_urls(&config).map_err(|why| anyhow::anyhow!("invalid configuration: {why}"))?;
    // Watch folders are an API's front door, like uploads: a worker-only process does not watch them.
    let watch_fields = match role.serves_http() {
        true => crate::api::watch::check(&config).map_err(|why| anyhow::anyhow!("invalid configuration: {why}"))?,
        false => Vec::new(),
    };
    let database = config.database_target();
    if let DatabaseTarget::Sqlite(path) = &database {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            preflight::check_writable(dir, "database")?;
        }
    }
    if role.serves_http() {
        // Half-received uploads from a previous process are never referenced by a job row.
        let _ = std::fs::remove_dir_all(config.data_dir.join("uploads"));
    }
    crate::redact::install(crate::redact::Redactor::new(&config.data_dir, &config.models_dir));
    let store = jobs::store::open(&database).await.map_err(|e| preflight::database_error(&database, e))?;
    let blobs = match config.storage.trim() {
        "" => None,
        url => Some(Arc::new(Blobs::open(url, &config.storage_options).context("invalid `storage`")?)),
    };
    if let Some(blobs) = &blobs {
        tracing::info!(storage = %blobs.url, "inputs and results are shared through the storage");
    }
    let files = JobFiles::new(&config.data_dir, blobs);
    if role.serves_http() {
        preflight::check_jobs_known(store.as_ref(), &database.to_string(), &config.data_dir.join("jobs")).await?;
    }
    let devices = if role.runs_jobs() { config.worker_devices() } else { Vec::new() };
    let worker_names: Vec<String> = match devices.len() {
        1 => vec![config.worker_name()],
        _ => (0..devices.len()).map(|index| format!("{}-{index}", config.worker_name())).collect(),
    };
    if role.serves_http() {
        let orphans = store.fail_unanswered_calls(&config.worker_name()).await?;
        for id in &orphans {
            files.remove(*id).await;
        }
        if !orphans.is_empty() {
            tracing::warn!(failed = ?orphans, "synchronous calls cut off by the last shutdown failed (caller-gone); their files are removed");
        }
    }
    for name in &worker_names {
        let interrupted = store.requeue_interrupted(name, i64::from(config.max_attempts)).await?;
        if !interrupted.requeued.is_empty() {
            tracing::warn!(requeued = ?interrupted.requeued, worker = %name, "jobs interrupted by the last shutdown were put back in the queue");
        }
        if !interrupted.failed.is_empty() {
            tracing::error!(failed = ?interrupted.failed, worker = %name, max_attempts = config.max_attempts, "jobs the server stopped in on every one of their attempts failed");
        }
    }
    // After the requeue above, which records a job cancelled while it ran as cancelled: its checkpoints go.
    tokio::spawn({
        let (store, jobs_dir) = (store.clone(), config.data_dir.join("jobs"));
        async move { sweep::ended_jobs_leftovers(store.as_ref(), jobs_dir).await }
    });

    let reserve = Arc::new(DiskReserve::new(&config.data_dir, config.disk_reserve_mib << 20));
    reserve.ensure();
    let wake = Arc::new(Notify::new());
    let (events, _) = broadcast::channel(1024);
    // Jobs queued and changed by other processes (a shared database) reach this one's scheduler and followers.
    store.forward_news(wake.clone(), events.clone()).await?;
    tokio::spawn(
        LeaseKeeper {
            store: store.clone(),
            max_attempts: config.max_attempts.into(),
            every: config.lease() / 3,
            changed: events.clone(),
            wake: wake.clone(),
        }
        .run(),
    );
    if !config.callback_secret.is_empty() {
        tokio::spawn(crate::queue::callbacks::Deliverer::new(&config, store.clone(), events.clone()).run());
    }
    let cancels = CancelFlags::default();
    let metrics = Metrics::install()?;
    let shutdown = CancellationToken::new();
    let (jobs, device) = if role.runs_jobs() {
        let mut schedulers = Vec::new();
        let mut names = Vec::new();
        for (device, name) in devices.iter().zip(&worker_names) {
            let executor = ExecutorHandle::spawn(ExecutorConfig::from_config(&config).on_device(*device));
            let device = executor.device().to_string();
            let name = name.clone();
            let worker = Worker {
                name: name.clone(),
                device: device.clone(),
                lease: config.lease(),
                models_dir: config.models_dir.clone(),
                device_memory_bytes: match config.device_memory_mib {
                    0 => executor.device_memory_bytes(),
                    mib => Some(mib.saturating_mul(1 << 20)),
                },
                short_job_s: config.short_job_s,
                fair_wait_s: config.fair_wait_s,
            };
            let scheduler = Scheduler {
                store: store.clone(),
                executor,
                worker,
                wake: wake.clone(),
                events: events.clone(),
                cancels: cancels.clone(),
                reserve: reserve.clone(),
                files: files.clone(),
                // An API in the same process serves (and previews) from these copies.
                keep_local_copies: role.serves_http(),
                storage_wait: Duration::from_secs(config.storage_wait_s),
                config: Arc::new(config.clone()),
            };
            tracing::info!(worker = %name, %device, database = %database, "worker ready");
            schedulers.push(tokio::spawn(scheduler.run()));
            names.push(device);
        }
        let all_stopped = tokio::spawn(async move {
            for scheduler in schedulers {
                let _ = scheduler.await;
            }
        });
        (all_stopped, names.join(","))
    } else {
        (tokio::spawn(async {}), "none".to_string())
    };

    let connections = if role.serves_http() {
        let config_shared = Arc::new(config.clone());
        let queue = Queue::new(QueueParts {
            config: config_shared.clone(),
            store: store.clone(),
            wake: wake.clone(),
            events: events.clone(),
            cancels: cancels.clone(),
            shutdown: shutdown.clone(),
            reserve: reserve.clone(),
            files: files.clone(),
        });
        // After the descriptor limit was raised: the connections' limit follows it, the streams' half of that.
        let limits = connection_limits::ConnectionLimits::new(config.max_connections, config.max_connections_per_client);
        let state = AppState {
            config: config_shared,
            queue,
            metrics,
            device,
            uploads: crate::api::upload_places::UploadPlaces::new(config.max_concurrent_uploads, config.max_uploads_per_client, config.min_upload_rate_kib_s),
            data_dir_bytes: Default::default(),
            streams: crate::api::stream_places::StreamPlaces::new(config.max_event_streams_per_client, limits.total_limit() / 2),
        };
        for watcher in crate::api::watch::Watcher::all(&state, watch_fields) {
            tokio::spawn(watcher.run());
        }
        if config.retention_hours > 0.0 {
            let keep = std::time::Duration::from_secs_f64(config.retention_hours * 3600.0);
            tokio::spawn(Retention { store: store.clone(), files: files.clone(), keep }.run());
        }
        Some(listen_http(&config, state, store.clone(), limits).await?)
    } else {
        // Scripts read this line to know the worker is claiming.
        println!("vaebox worker {} claiming jobs (device {device})", worker_names.join(","));
        None
    };

    shutdown_signal().await;
    tokio::spawn(async {
        shutdown_signal().await;
        tracing::warn!("a second signal: ending now; a running job is re-queued at the next start");
        end_now(130);
    });
    let stopping = Stopping { connections, shutdown, cancels, wake, grace: Duration::from_secs(config.shutdown_grace_s) };
    if !stopping.run(jobs).await {
        end_now(1);
    }
    tracing::info!("stopped");
    Ok(())
}

async fn listen_http(
    config: &Config,
    state: AppState,
    store: Arc<dyn jobs::JobStore>,
    limits: Arc<connection_limits::ConnectionLimits>,
) -> anyhow::Result<listen::Connections> {
    if !config.listen_addr().ip().is_loopback() && config.tokens.is_empty() {
        tracing::warn!(
            listen = %config.listen_addr(),
            "the API is open to everyone who can reach this address: no access tokens are configured (`tokens` in \
             config.toml or VAEBOX_TOKENS=name:secret[:admin],...)"
        );
        eprintln!("WARNING: listening on {} without access tokens: anyone on the network can submit, read and delete jobs", config.listen_addr());
    }
    let listener = tokio::net::TcpListener::bind(config.listen_addr()).await?;
    let addr = listener.local_addr()?;
    // Before it serves: every process's webhooks refuse the box's own API (a worker's as well).
    crate::queue::callbacks::api_listens::record(store, addr).await.context("cannot record where the API listens in the database")?;
    // Tests and scripts read this line to find the port when `listen` ends in :0.
    println!("vaebox listening on http://{addr} (device {})", state.device);
    tracing::info!(%addr, device = %state.device, "listening");
    let header_timeout = Duration::from_secs(config.header_timeout_s.max(1));
    tracing::info!(max_connections = limits.total_limit(), per_client = config.max_connections_per_client, "connection limits");
    Ok(listen::Connections::serve(listener, api::router(state), header_timeout, limits))
}

/// Ends the process without the C++ static destructors a normal exit runs: libtorch may still be at work
/// on the executor thread, and pulling its memory away mid-operation crashes it (noise in the log). The
/// store is safe (SQLite, WAL) and the job stays `running` there, to be re-queued at the next start.
fn end_now(code: i32) -> ! {
    use std::io::Write;
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    // SAFETY: _exit only ends the process; nothing runs after it.
    unsafe { libc::_exit(code) }
}

/// What is stopped, in order, when the signal comes.
struct Stopping {
    /// None on a worker: it serves no HTTP.
    connections: Option<listen::Connections>,
    shutdown: CancellationToken,
    cancels: CancelFlags,
    wake: Arc<Notify>,
    grace: Duration,
}

/// After the running job has stopped, the connections still open (a stalled upload, a client that does
/// not hang up) get this long to finish before they are cut.
const DRAIN_AFTER_JOBS: Duration = Duration::from_secs(2);
/// A job whose flag is raised stops at its next chunk; this bounds the wait for it.
const STOP_WAIT: Duration = Duration::from_secs(5);

impl Stopping {
    /// Stops accepting, ends event streams, lets the running job reach its next checkpoint (or finish) for the
    /// grace period, then stops it (it stays `running` in the store and is re-queued at the next start), and
    /// closes the connections. Returns whether the executor is idle.
    async fn run(self, jobs: JobHandle) -> bool {
        tracing::info!(grace_s = self.grace.as_secs(), "stopping: no new connections or jobs; a running job may finish");
        if let Some(connections) = &self.connections {
            connections.stop();
        }
        self.shutdown.cancel();
        self.cancels.stop_claiming();
        self.wake.notify_one();
        let jobs_stopped = CancellationToken::new();
        let (executor_idle, ()) = tokio::join!(
            async {
                let idle = stop_jobs(jobs, &self.cancels, self.grace).await;
                jobs_stopped.cancel();
                idle
            },
            async {
                let Some(connections) = &self.connections else { return };
                tokio::select! {
                    _ = connections.closed() => {}
                    _ = async {
                        jobs_stopped.cancelled().await;
                        tokio::time::sleep(DRAIN_AFTER_JOBS).await;
                    } => {
                        tracing::info!("cutting the connections still open");
                        connections.cut().await;
                    }
                }
            }
        );
        executor_idle
    }
}

type JobHandle = JoinHandle<()>;

/// Waits for the scheduler to return: at once when idle, when the running job ends, or after the grace
/// when its flag stops it. Returns whether it did.
async fn stop_jobs(mut jobs: JobHandle, cancels: &CancelFlags, grace: Duration) -> bool {
    if tokio::time::timeout(grace, &mut jobs).await.is_ok() {
        return true;
    }
    tracing::warn!(grace_s = grace.as_secs(), "the running job did not finish within shutdown_grace_s; stopping it");
    cancels.stop_running();
    if tokio::time::timeout(STOP_WAIT, &mut jobs).await.is_ok() {
        return true;
    }
    tracing::error!("the running job did not stop within {STOP_WAIT:?}; ending the process anyway");
    false
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("signal handler");
    tokio::select! {
        _ = ctrl_c => {},
        _ = term.recv() => {},
    }
}
