//! The box itself: health, models, metrics and the web page.
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::Json;
use serde::Serialize;
use utoipa::ToSchema;
use uuid::Uuid;

use super::error::ApiError;
use super::doc_types::ServerFault;
pub use super::data_dir_bytes::DataDirBytes;
use super::state::AppState;
use crate::jobs::{JobStatus, ListFilter};
use crate::models::registry::{self, ModelInfo};

/// The box's health: its device and queue.
#[derive(Serialize, ToSchema)]
pub struct Health {
    /// `ok` whenever the box answers at all (a store fault answers 500 instead).
    status: HealthStatus,
    /// This server's version.
    version: &'static str,
    /// The device jobs run on.
    device: String,
    /// Jobs waiting to run.
    queue_depth: i64,
    /// The job running now, if any.
    running_job: Option<Uuid>,
    /// Bytes the data dir holds (uploads, job folders, the database).
    data_dir_bytes: u64,
    /// Bytes free on the data dir's disk; uploads are refused below `min_free_disk_mib`.
    disk_free_bytes: Option<u64>,
    /// Whether the `disk_reserve_mib` reserve is in place; false while the disk has too little room to take it
    /// (then a full disk may stop the box from recording a job's end: free some space).
    disk_reserve_held: bool,
    /// Each `output_format` and whether this box's ffmpeg can write it (one that cannot is refused at submission).
    output_formats: std::collections::BTreeMap<crate::media::OutputFormat, bool>,
    /// The format of jobs that name none.
    default_output_format: crate::media::OutputFormat,
    /// The workers that run this box's jobs (this process's own when it runs jobs), as the job store last
    /// heard of them; one not heard of for three leases is left out.
    workers: Vec<crate::jobs::WorkerInfo>,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
enum HealthStatus {
    Ok,
}

/// The models this box knows.
#[derive(Serialize, ToSchema)]
pub struct ModelList {
    models: Vec<ModelInfo>,
}

/// Health: device and queue depth
#[utoipa::path(get, path = "/healthz", tag = "box", responses((status = 200, description = "Healthy", body = Health), ServerFault))]
pub async fn healthz(State(app): State<AppState>) -> Result<Json<Health>, ApiError> {
    let queue_depth = app.queue.store().count(JobStatus::Queued).await?;
    let running = app.queue.store().list(&ListFilter { status: Some(JobStatus::Running), limit: 1, ..ListFilter::default() }).await?;
    let data_dir = app.config.data_dir.clone();
    Ok(Json(Health {
        status: HealthStatus::Ok,
        version: env!("CARGO_PKG_VERSION"),
        device: app.device,
        queue_depth,
        running_job: running.first().map(|job| job.id),
        data_dir_bytes: app.data_dir_bytes.get(data_dir).await,
        disk_free_bytes: crate::jobs::disk::free_bytes(&app.config.data_dir),
        disk_reserve_held: app.queue.disk_reserve_held(),
        output_formats: crate::media::available_formats(&app.config.media_tools()).clone(),
        default_output_format: app.config.output_format,
        workers: app.queue.store().workers(app.config.lease() * 3).await?,
    }))
}

/// Models on this box
///
/// Every model the box knows, with the ops it can do and whether its files are in the models folder.
#[utoipa::path(get, path = "/v1/models", tag = "box", responses((status = 200, description = "Models", body = ModelList)))]
pub async fn models(State(app): State<AppState>) -> Json<ModelList> {
    Json(ModelList { models: registry::scan(&app.config.models_dir).iter().map(|m| m.info()).collect() })
}

/// Prometheus metrics
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "box",
    responses((status = 200, description = "Prometheus text format 0.0.4", body = String, content_type = "text/plain"), ServerFault)
)]
pub async fn metrics(State(app): State<AppState>) -> Result<impl IntoResponse, ApiError> {
    let mut counts = Vec::new();
    for status in [JobStatus::Queued, JobStatus::Running, JobStatus::Succeeded, JobStatus::Failed, JobStatus::Cancelled] {
        counts.push((status, app.queue.store().count(status).await?));
    }
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], app.metrics.render(&counts)))
}

/// The web page: upload, follow and download jobs
#[utoipa::path(get, path = "/", tag = "pages", responses((status = 200, description = "HTML", body = String, content_type = "text/html")))]
pub async fn index() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], include_str!("../../static/index.html"))
}

/// `(name, source)` for each named file of `static/js/`, read at compile time.
macro_rules! script_modules {
    ($($name:literal),* $(,)?) => {
        &[$(($name, include_str!(concat!("../../static/js/", $name)))),*]
    };
}

/// The web page's script, as ES modules (`static/js/`, loaded from `/js/main.js` by the page): each is served
/// as `/js/<file name>`. The list is built into the binary, so a module missing from `static/js/` fails the
/// build; a name not on it answers 404 not-found, as any path that is not here.
const SCRIPT_MODULES: &[(&str, &str)] = script_modules![
    "main.js",
    "dom.js",
    "format.js",
    "api.js",
    "access-token.js",
    "notices.js",
    "state.js",
    "health.js",
    "form-prefs.js",
    "presets.js",
    "form-choices.js",
    "file-choice.js",
    "form-fields.js",
    "form-estimate.js",
    "upload.js",
    "job-actions.js",
    "job-list.js",
    "op-filter.js",
    "event-stream.js",
    "job-progress.js",
    "queue-places.js",
    "card-head.js",
    "thumbnails.js",
    "compare.js",
    "card-facts.js",
    "timings-table.js",
    "plan-table.js",
    "metrics-table.js",
    "job-card.js",
];

/// One of the web page's script modules
#[utoipa::path(
    get,
    path = "/js/{name}",
    tag = "pages",
    params(("name" = String, Path, description = "The module's file name, as the page's imports give it (`main.js` is the entry)")),
    responses(
        (status = 200, description = "JavaScript (an ES module)", body = String, content_type = "text/javascript"),
        (status = 404, body = super::error::ErrorBody, description = "No module of that name (not-found)"),
    )
)]
pub async fn script_module(axum::extract::Path(name): axum::extract::Path<String>) -> Result<impl IntoResponse, ApiError> {
    let source = SCRIPT_MODULES.iter().find(|(served, _)| *served == name).map(|(_, source)| *source);
    let source = source.ok_or_else(|| ApiError::RouteNotFound { method: "GET".into(), path: format!("/js/{name}") })?;
    Ok(([(header::CONTENT_TYPE, "text/javascript; charset=utf-8")], source))
}

/// The web page's style
#[utoipa::path(
    get,
    path = "/static/style.css",
    tag = "pages",
    responses((status = 200, description = "CSS", body = String, content_type = "text/css"))
)]
pub async fn style_css() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], include_str!("../../static/style.css"))
}
