//! Start-up: open the store, recover interrupted jobs, start the executor and scheduler, serve HTTP.
use std::sync::Arc;

use tokio::sync::{broadcast, Notify};

use crate::api::{self, metrics::Metrics, AppState};
use crate::config::Config;
use crate::executor::{ExecutorConfig, ExecutorHandle};
use crate::jobs::scheduler::{CancelFlags, Scheduler};
use crate::jobs::retention::Retention;
use crate::jobs::{preflight, JobStore, SqliteStore};

pub async fn serve(config: Config) -> anyhow::Result<()> {
    preflight::check_writable(&config.data_dir, "data_dir")?;
    let database = config.database_path();
    if let Some(dir) = database.parent().filter(|d| !d.as_os_str().is_empty()) {
        preflight::check_writable(dir, "database")?;
    }
    // Half-received uploads from a previous process are never referenced by a job row.
    let _ = std::fs::remove_dir_all(config.data_dir.join("uploads"));
    let store: Arc<dyn JobStore> =
        Arc::new(SqliteStore::open(&database).await.map_err(|e| preflight::database_error(&database, e))?);
    preflight::check_jobs_known(store.as_ref(), &database, &config.data_dir.join("jobs")).await?;
    let requeued = store.requeue_interrupted().await?;
    if requeued > 0 {
        tracing::warn!(requeued, "jobs interrupted by the last shutdown were put back in the queue");
    }

    let executor = ExecutorHandle::spawn(ExecutorConfig::from_config(&config));
    let wake = Arc::new(Notify::new());
    let (events, _) = broadcast::channel(1024);
    let cancels = CancelFlags::default();
    let metrics = Metrics::install()?;
    let state = AppState {
        config: Arc::new(config.clone()),
        store: store.clone(),
        wake: wake.clone(),
        events: events.clone(),
        cancels: cancels.clone(),
        metrics,
        device: executor.device().to_string(),
        admission: Default::default(),
    };
    if config.retention_hours > 0.0 {
        let keep = std::time::Duration::from_secs_f64(config.retention_hours * 3600.0);
        tokio::spawn(Retention { store: store.clone(), jobs_dir: config.data_dir.join("jobs"), keep }.run());
    }
    let scheduler = Scheduler { store, executor, wake, events, cancels };
    tokio::spawn(scheduler.run());

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
    // Tests and scripts read this line to find the port when `listen` ends in :0.
    println!("vaebox listening on http://{addr} (device {})", state.device);
    tracing::info!(%addr, device = %state.device, "listening");
    axum::serve(listener, api::router(state)).with_graceful_shutdown(shutdown_signal()).await?;
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("signal handler");
    tokio::select! {
        _ = ctrl_c => {},
        _ = term.recv() => {},
    }
    tracing::info!("shutting down; a running job is re-queued at the next start");
}
