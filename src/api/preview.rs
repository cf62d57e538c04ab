//! `/v1/jobs/{id}/thumbnail` and `/v1/jobs/{id}/preview`: what the page shows of a job. Both are made
//! once by the queue and served from the job's folder, inline, with Range.
use axum::extract::{Path, RawQuery, Request, State};
use axum::http::{header, HeaderValue};
use axum::response::Response;
use axum::Extension;

use super::auth::Caller;
use super::error::{ApiError, ErrorBody};
use super::jobs::{find, serve_file, JobId};
use super::doc_types::Faults;
use super::params::{self, PreviewQuery, TokenQuery};
use super::state::AppState;
use crate::error_codes as codes;
use crate::queue::PreviewSide;

/// A still of the job (PNG)
///
/// A middle frame of the output once the job succeeded, before that of the input; at most 320 px wide.
#[utoipa::path(
    get,
    path = "/v1/jobs/{id}/thumbnail",
    tag = "jobs",
    params(JobId, TokenQuery),
    responses(
        (status = 200, description = "PNG", content((Vec<u8> = "image/png"))),
        (status = 404, body = ErrorBody, description = "job-not-found"),
        (status = 409, body = ErrorBody, description = "Neither side is a video yet (preview-unavailable)"),
        Faults,
    )
)]
pub async fn thumbnail(
    State(app): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
    request: Request,
) -> Result<Response, ApiError> {
    let _: TokenQuery = params::from_query(query.as_deref().unwrap_or(""))?;
    let job = find(&app, &caller, &id).await?;
    let png = app.queue.thumbnail(&job).await?;
    let mut response = serve_file(&png, request, Some("inline"), &id).await?;
    // One URL, two stills (the input's, then the output's): revalidate, the file's date tells which.
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    Ok(response)
}

/// A video of the input or the output that plays in a browser
///
/// An H.264 output as it is; other outputs (ProRes, FFV1, 10-bit) and every input as a small H.264 proxy,
/// made once on the first request (this one waits for it). Both sides come at the output's width (at most
/// 1280 px), frame for frame, for a before/after view. Supports Range.
#[utoipa::path(
    get,
    path = "/v1/jobs/{id}/preview",
    tag = "jobs",
    params(JobId, PreviewQuery),
    responses(
        (status = 200, description = "MP4 (H.264)", content((Vec<u8> = "video/mp4"))),
        (status = 206, description = "Partial content (a Range request)"),
        (status = 404, body = ErrorBody, description = "job-not-found"),
        (status = 409, body = ErrorBody, description = "That side is not a video (yet): preview-unavailable"),
        Faults,
    )
)]
pub async fn preview(
    State(app): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
    request: Request,
) -> Result<Response, ApiError> {
    let query: PreviewQuery = params::from_query(query.as_deref().unwrap_or(""))?;
    let side = match query.side.as_deref() {
        None | Some("output") => PreviewSide::Output,
        Some("input") => PreviewSide::Input,
        Some(other) => return Err(ApiError::bad_request(codes::INVALID_QUERY, format!("`side` is input or output, not `{other}`"))),
    };
    let job = find(&app, &caller, &id).await?;
    let mp4 = app.queue.preview_video(&job, side).await?;
    serve_file(&mp4, request, Some("inline"), &id).await
}
