//! The box itself: health, models, metrics, the OpenAPI document and the web page.
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::Json;
use serde_json::json;

use super::error::ApiError;
use super::AppState;
use crate::jobs::{JobStatus, ListFilter};
use crate::models::registry;

pub async fn healthz(State(app): State<AppState>) -> Result<Json<serde_json::Value>, ApiError> {
    let queue_depth = app.store.count(JobStatus::Queued).await?;
    let running = app.store.list(&ListFilter { status: Some(JobStatus::Running), limit: 1, offset: 0 }).await?;
    Ok(Json(json!({
        "status": "ok",
        "version": env!("CARGO_PKG_VERSION"),
        "device": app.device,
        "queue_depth": queue_depth,
        "running_job": running.first().map(|job| job.id),
    })))
}

pub async fn models(State(app): State<AppState>) -> Json<serde_json::Value> {
    let models: Vec<_> = registry::scan(&app.config.models_dir).iter().map(|m| m.info()).collect();
    Json(json!({ "models": models }))
}

pub async fn metrics(State(app): State<AppState>) -> Result<impl IntoResponse, ApiError> {
    let mut counts = Vec::new();
    for status in [JobStatus::Queued, JobStatus::Running, JobStatus::Succeeded, JobStatus::Failed, JobStatus::Cancelled] {
        counts.push((status, app.store.count(status).await?));
    }
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], app.metrics.render(&counts)))
}

pub async fn openapi() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], include_str!("openapi.json"))
}

pub async fn index() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], include_str!("../../static/index.html"))
}

pub async fn app_js() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/javascript; charset=utf-8")], include_str!("../../static/app.js"))
}

pub async fn style_css() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], include_str!("../../static/style.css"))
}
