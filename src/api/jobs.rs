//! `/v1/jobs`: create, list, read, follow (SSE), download, cancel, run a try's whole clip, delete; each
//! reads the request, asks the queue, and renders its answer.
use std::convert::Infallible;

use axum::extract::{Path, RawQuery, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use futures_util::{Stream, StreamExt};
use serde::Serialize;
use tower::ServiceExt;
use utoipa::ToSchema;
use uuid::Uuid;

use super::auth::Caller;
use super::error::{ApiError, ErrorBody};
use super::fields;
use super::doc_types::{Binary, Faults};
use super::params::{self, CancelQuery, EventsQuery, JobFields, ListQuery, ResultQuery, UploadForm};
use super::stored::StoredFile;
use super::upload::{self, UploadLimits};
use super::state::AppState;
use super::upload_places::ClientAddr;
use crate::error_codes as codes;
use crate::jobs::{Estimate, Job, JobStatus, ListFilter};
use crate::queue::{Followed, InputKind, QueueError, Submission, Whole};

/// Create a job from an upload
///
/// multipart/form-data with a `file` part and fields (or a `params` JSON part), or a raw body with the same
/// fields as query parameters (plus `filename`). Fields as query parameters are checked before the body is read.
#[utoipa::path(
    post,
    path = "/v1/jobs",
    tag = "jobs",
    params(JobFields),
    request_body(content((UploadForm = "multipart/form-data"), (Binary = "application/octet-stream"))),
    responses(
        (status = 202, description = "Queued", body = Job),
        (status = 400, body = ErrorBody, description = "Bad fields, refused before the upload is read when they come as query \
            parameters (unknown-parameter: a name that is not one of the fields, named in the message; parameter-not-for-op: a \
            field the op does not use, named with the ops that take it; unknown-op, unknown-model, \
            unsupported-op, model-weights-missing, invalid-scale, invalid-restore-parameter, invalid-priority, invalid-dtype, \
            invalid-tile, invalid-normalize, invalid-memory-budget, normalize-unsupported, invalid-query, invalid-multipart, \
            missing-file, too-many-files, invalid-params, upload-interrupted; callback_url: callback-not-configured, \
            callback-host-not-allowed, callback-https-unsupported, invalid-callback-url)"),
        (status = 403, body = ErrorBody, description = "Sent by a page of another origin not in cors_origins (foreign-origin)"),
        (status = 408, body = ErrorBody, description = "The body stalled for body_idle_timeout_s (upload-stalled)"),
        (status = 413, body = ErrorBody, description = "Upload over the size limit (upload-too-large), or a form field other than \
            `file` over 16 KiB (field-too-large)"),
        (status = 422, body = ErrorBody, description = "Not a usable video or latent (empty-file, not-a-video, truncated-media, \
            media-too-large, not-a-latent, latent-bad-shape, latent-channel-mismatch, latent-not-finite, latent-model-mismatch, \
            latent-normalize-unsupported: a latent marked normalized for a VAE without published statistics)"),
        (status = 429, body = ErrorBody, description = "Queue full (queue-full)"),
        (status = 503, body = ErrorBody, description = "No upload place for this address; refused before the body is read \
            (too-many-uploads): max_concurrent_uploads uploads are being received, or this address holds its share \
            (max_uploads_per_client), or it holds one and the last quarter of the free places is kept for other addresses, or \
            an upload from it was just cut as too slow (then with Retry-After)"),
        Faults,
    )
)]
pub async fn create(State(app): State<AppState>, Extension(caller): Extension<Caller>, request: Request) -> Result<Response, ApiError> {
    let (upload, job_request, ticket) = receive(&app, &caller, request, Queued::Yes).await?;
    let ticket = ticket.expect("a place in the queue was asked for");
    let submission = Submission { request: job_request, input: upload.file, kind: InputKind::File, owner: caller.owner(), ticket };
    let job = app.queue.submit(submission).await.map_err(|e| upload::explain(e.into(), upload.hint.as_deref()))?;
    Ok((StatusCode::ACCEPTED, Json(job)).into_response())
}

/// Whether a received upload becomes a job (and so needs a place in the queue before its body is read).
#[derive(PartialEq)]
enum Queued {
    Yes,
    No,
}

/// An upload with its fields, as `POST /v1/jobs` takes it: a place for it first (and in the queue, for a
/// job), the fields checked before the body when they come as query parameters.
async fn receive(app: &AppState, caller: &Caller, request: Request, queued: Queued) -> Result<(upload::Upload, crate::queue::JobRequest, Option<crate::queue::Ticket>), ApiError> {
    if let Some(declared) = upload::declared_too_large(&request, app.config.max_upload_bytes) {
        return Err(upload::refuse_declared_too_large(request, declared, app.config.max_upload_bytes).await);
    }
    let slot = upload::upload_slot(app, &request)?;
    let ticket = match queued {
        Queued::No => None,
        Queued::Yes => match app.queue.admit(caller.owner()).await {
            Ok(ticket) => Some(ticket),
            Err(refusal) => return Err(upload::refuse_unread(request, refusal.into()).await),
        },
    };
    let limits = UploadLimits {
        dir: &app.uploads_dir(),
        max_bytes: app.config.max_upload_bytes,
        min_kib_s: app.config.min_upload_rate_kib_s,
        place: &slot,
    };
    let (upload, job_request) = if upload::is_multipart(&request) {
        let upload = upload::receive_multipart(request, &limits).await?;
        let job_request = fields::job_request(&upload.fields, &app.config, caller.owner().as_deref())?;
        (upload, job_request)
    } else {
        // Query parameters are known before the body: refuse a bad request before receiving gigabytes.
        let checked = upload::query_fields(&request).and_then(|fields| {
            let job_request = fields::job_request(&fields, &app.config, caller.owner().as_deref())?;
            Ok((fields, job_request))
        });
        let (fields, job_request) = match checked {
            Ok(checked) => checked,
            Err(e) => return Err(upload::refuse_unread(request, e).await),
        };
        (upload::receive_raw(request, fields, &limits).await?, job_request)
    };
    Ok((upload, job_request, ticket))
}

/// Estimate a job before submitting it
///
/// The same body and fields as `POST /v1/jobs`, checked the same way; nothing is queued and the upload is not
/// kept. Answers what the job would write and take on this box: its output's frames and size, its time from
/// this box's own finished jobs of that op and model (null before the first; `basis` says which), the result's
/// bytes and the disk it takes while it runs.
#[utoipa::path(
    post,
    path = "/v1/estimate",
    tag = "jobs",
    params(JobFields),
    request_body(content((UploadForm = "multipart/form-data"), (Binary = "application/octet-stream"))),
    responses(
        (status = 200, description = "What the job would take", body = Estimate),
        (status = 400, body = ErrorBody, description = "Bad fields, as for POST /v1/jobs"),
        (status = 413, body = ErrorBody, description = "Upload over the size limit (upload-too-large)"),
        (status = 422, body = ErrorBody, description = "Not a usable video or latent, as for POST /v1/jobs"),
        Faults,
    )
)]
pub async fn estimate(State(app): State<AppState>, Extension(caller): Extension<Caller>, request: Request) -> Result<Json<Estimate>, ApiError> {
    let (upload, job_request, _) = receive(&app, &caller, request, Queued::No).await?;
    let estimate = app.queue.estimate_upload(job_request, upload.file).await;
    Ok(Json(estimate.map_err(|e| upload::explain(e.into(), upload.hint.as_deref()))?))
}

/// `GET /v1/jobs`: a page of jobs, newest first.
#[derive(Serialize, ToSchema)]
pub struct JobList {
    jobs: Vec<Job>,
    /// The `offset` of the next page; null on the last one.
    next_offset: Option<i64>,
}

/// List jobs, newest first
#[utoipa::path(
    get,
    operation_id = "list_jobs",
    path = "/v1/jobs",
    tag = "jobs",
    params(ListQuery),
    responses(
        (status = 200, description = "Jobs", body = JobList),
        (status = 400, body = ErrorBody, description = "unknown-parameter (a name other than status, limit, offset), \
            invalid-status, invalid-query (limit or offset not an integer)"),
        Faults,
    )
)]
pub async fn list(State(app): State<AppState>, Extension(caller): Extension<Caller>, RawQuery(query): RawQuery) -> Result<Json<JobList>, ApiError> {
    let query: ListQuery = params::from_query(query.as_deref().unwrap_or(""))?;
    let status = match query.status.as_deref() {
        None | Some("") => None,
        Some(raw) => Some(JobStatus::parse(raw).ok_or_else(|| {
            let message = format!("status `{raw}` is not one of queued, paused, running, succeeded, failed, cancelled");
            ApiError::bad_request(codes::INVALID_STATUS, message)
        })?),
    };
    let limit = query.limit.unwrap_or(50).clamp(1, 500);
    let offset = query.offset.unwrap_or(0).max(0);
    let jobs = app.queue.list(&ListFilter { status, owner: caller.listing_owner(), limit, offset }).await?;
    let jobs = app.queue.placed(jobs).await;
    let next_offset = (jobs.len() as i64 == limit).then_some(offset + limit);
    Ok(Json(JobList { jobs, next_offset }))
}

/// The `{id}` of the job routes.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)] // described, never built: the handlers read the id as text
pub(super) struct JobId {
    /// The job's id (an unknown or malformed one answers 404 job-not-found).
    id: Uuid,
}

/// The job, if this caller may see it (another token's job is as unknown as a missing one).
pub(super) async fn find(app: &AppState, caller: &Caller, raw: &str) -> Result<Job, ApiError> {
    Ok(app.queue.find(raw, caller.listing_owner().as_deref()).await?)
}

/// One job
#[utoipa::path(
    get,
    path = "/v1/jobs/{id}",
    operation_id = "get_job",
    tag = "jobs",
    params(JobId),
    responses((status = 200, description = "The job", body = Job), (status = 404, body = ErrorBody, description = "job-not-found"), Faults)
)]
pub async fn get(State(app): State<AppState>, Extension(caller): Extension<Caller>, Path(id): Path<String>) -> Result<Json<Job>, ApiError> {
    let job = find(&app, &caller, &id).await?;
    Ok(Json(app.queue.placed_one(job).await))
}

/// Download the output (supports Range)
///
/// The output file: an MP4, or a safetensors latent (vae_encode) or tensor (vae_decode with output tensor).
#[utoipa::path(
    get,
    path = "/v1/jobs/{id}/result",
    tag = "jobs",
    params(JobId, ResultQuery),
    responses(
        (status = 200, description = "The file, with a Content-Disposition naming it",
            content((Binary = "video/mp4"), (Binary = "application/octet-stream"))),
        (status = 206, description = "Partial content (a Range request)"),
        (status = 404, body = ErrorBody, description = "job-not-found"),
        (status = 409, body = ErrorBody, description = "No result yet (job-not-finished)"),
        Faults,
    )
)]
pub async fn result(
    State(app): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
    request: Request,
) -> Result<Response, ApiError> {
    let query: ResultQuery = params::from_query(query.as_deref().unwrap_or(""))?;
    let inline = params::flag("inline", query.inline.as_deref())?;
    let job = find(&app, &caller, &id).await?;
    let output = app.queue.result(&job, &id)?;
    let disposition = format!("{}; filename=\"{}\"", if inline { "inline" } else { "attachment" }, output.file_name);
    if let Some(blobs) = app.queue.shared_files().filter(|_| !output.path.exists()) {
        let file_name = crate::jobs::blobs::file_name(&output.path);
        return super::stored::serve(blobs, StoredFile { id: job.id, file_name: &file_name, disposition: Some(&disposition) }, request).await;
    }
    serve_file(&output.path, request, Some(&disposition), &id).await
}

/// A file with Range support (`ServeFile`), named by `disposition`; a file that went away is `result-gone`.
pub(super) async fn serve_file(path: &std::path::Path, request: Request, disposition: Option<&str>, id: &str) -> Result<Response, ApiError> {
    let mut response =
        tower_http::services::ServeFile::new(path).oneshot(request).await.map_err(|e| ApiError::Internal(e.to_string()))?.into_response();
    if response.status().is_success() || response.status() == StatusCode::PARTIAL_CONTENT {
        if let Some(value) = disposition.and_then(|d| HeaderValue::from_str(d).ok()) {
            response.headers_mut().insert(header::CONTENT_DISPOSITION, value);
        }
    } else if response.status() == StatusCode::NOT_FOUND {
        return Err(QueueError::ResultGone(id.to_string()).into());
    }
    Ok(response)
}

/// Cancel; a running job stops at the next chunk
///
/// With `keep=true` the frames it finished (the segments of its last checkpoint) are kept as its result.
#[utoipa::path(
    post,
    path = "/v1/jobs/{id}/cancel",
    tag = "jobs",
    params(JobId, CancelQuery),
    responses(
        (status = 200, description = "The job, cancelled or with its cancellation under way", body = Job),
        (status = 400, body = ErrorBody, description = "The job already ended (job-already-finished); keep=true for a job \
            that makes no video segments (nothing-to-keep); invalid-query"),
        (status = 404, body = ErrorBody, description = "job-not-found"),
        Faults,
    )
)]
pub async fn cancel(
    State(app): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<Json<Job>, ApiError> {
    let query: CancelQuery = params::from_query(query.as_deref().unwrap_or(""))?;
    let keep = params::flag("keep", query.keep.as_deref())?;
    Ok(Json(app.queue.cancel(&id, caller.listing_owner().as_deref(), keep).await?))
}

/// Pause: a queued job is passed over, a running one stops at its next checkpoint
///
/// A paused job holds no executor and stays paused across restarts; `…/resume` puts it back in line where it
/// was, and a job that had run goes on from its checkpoint, its result the one an undisturbed run writes. A
/// running job that makes no checkpoints (a still, a synchronous call) runs to its end.
#[utoipa::path(
    post,
    path = "/v1/jobs/{id}/pause",
    tag = "jobs",
    params(JobId),
    responses(
        (status = 200, description = "The job: paused, or running with `pausing: true` until its next checkpoint", body = Job),
        (status = 400, body = ErrorBody, description = "The job already ended (job-not-pausable)"),
        (status = 404, body = ErrorBody, description = "job-not-found"),
        Faults,
    )
)]
pub async fn pause(State(app): State<AppState>, Extension(caller): Extension<Caller>, Path(id): Path<String>) -> Result<Json<Job>, ApiError> {
    Ok(Json(app.queue.pause(&id, caller.listing_owner().as_deref()).await?))
}

/// Resume a paused job
#[utoipa::path(
    post,
    path = "/v1/jobs/{id}/resume",
    tag = "jobs",
    params(JobId),
    responses(
        (status = 200, description = "The job, queued again (or running on, if it had not stopped yet)", body = Job),
        (status = 400, body = ErrorBody, description = "The job is not paused (job-not-pausable)"),
        (status = 404, body = ErrorBody, description = "job-not-found"),
        Faults,
    )
)]
pub async fn resume(State(app): State<AppState>, Extension(caller): Extension<Caller>, Path(id): Path<String>) -> Result<Json<Job>, ApiError> {
    let job = app.queue.resume(&id, caller.listing_owner().as_deref()).await?;
    Ok(Json(app.queue.placed_one(job).await))
}

/// Run the whole clip of a try
///
/// A new job over the whole input of a job that ran over part of it (`start` or `start_frame`, `frames` or
/// `duration`): the same op, model, settings, priority and webhook, no range, and `from_try` naming the
/// short job. Its input is the one the short job kept on the server, so nothing is uploaded again. The short
/// job may be queued, running or ended; its input is kept as long as the job is (until it is deleted, or
/// `retention_hours` after it ended). The whole clip is checked as an upload is.
#[utoipa::path(
    post,
    path = "/v1/jobs/{id}/whole",
    operation_id = "run_whole",
    tag = "jobs",
    params(JobId),
    responses(
        (status = 202, description = "Queued: the whole-clip job", body = Job),
        (status = 200, description = "Nothing queued: the whole-clip job asked for before, queued, running or succeeded \
            (a failed or cancelled one is run again)", body = Job),
        (status = 400, body = ErrorBody, description = "The job ran over its whole input already (job-has-no-range); its model or \
            webhook is no longer taken by this box (unknown-model, model-weights-missing, callback-not-configured, \
            callback-host-not-allowed)"),
        (status = 404, body = ErrorBody, description = "job-not-found"),
        (status = 410, body = ErrorBody, description = "The job's input is no longer kept (input-gone)"),
        (status = 422, body = ErrorBody, description = "The whole clip is over the box's limits (media-too-large, output-too-large), \
            or no worker can hold the job (no-worker-fits)"),
        (status = 429, body = ErrorBody, description = "Queue full (queue-full)"),
        Faults,
    )
)]
pub async fn whole(State(app): State<AppState>, Extension(caller): Extension<Caller>, Path(id): Path<String>) -> Result<Response, ApiError> {
    let tried = find(&app, &caller, &id).await?;
    let ticket = app.queue.admit(caller.owner()).await?;
    Ok(match app.queue.submit_whole(&tried, caller.owner(), ticket).await? {
        Whole::Queued(job) => (StatusCode::ACCEPTED, Json(job)).into_response(),
        Whole::Already(job) => (StatusCode::OK, Json(job)).into_response(),
    })
}

/// Delete a finished job and its files
#[utoipa::path(
    delete,
    path = "/v1/jobs/{id}",
    operation_id = "delete_job",
    tag = "jobs",
    params(JobId),
    responses(
        (status = 204, description = "Deleted"),
        (status = 404, body = ErrorBody, description = "job-not-found"),
        (status = 409, body = ErrorBody, description = "Queued or running: cancel it first (job-not-finished)"),
        Faults,
    )
)]
pub async fn delete(State(app): State<AppState>, Extension(caller): Extension<Caller>, Path(id): Path<String>) -> Result<StatusCode, ApiError> {
    app.queue.delete(&id, caller.listing_owner().as_deref()).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Follow a job: Server-Sent Events
///
/// `event: job` with the whole job as data, at once and whenever it changes, until a final status; when the
/// server stops first, `event: shutdown` ends the stream. With `compact=1` (for a terminal), each change is
/// an event named by the job's status with one short line of data.
#[utoipa::path(
    get,
    path = "/v1/jobs/{id}/events",
    tag = "jobs",
    params(JobId, EventsQuery),
    responses(
        (status = 200, description = "Event stream; each event's data is a Job (with compact=1: a line of text)", body = String, content_type = "text/event-stream"),
        (status = 404, body = ErrorBody, description = "job-not-found"),
        (status = 429, body = ErrorBody, description = "too-many-streams: this address's share of event streams (max_event_streams_per_client), or the box's, is open"),
        Faults,
    )
)]
// The queue re-reads the job whenever it changes (or every few seconds); each is sent whole.
pub async fn events(
    State(app): State<AppState>,
    Extension(caller): Extension<Caller>,
    client: Option<Extension<ClientAddr>>,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let query: EventsQuery = params::from_query(query.as_deref().unwrap_or(""))?;
    let compact = params::flag("compact", query.compact.as_deref())?;
    let job = find(&app, &caller, &id).await?;
    // Held by the stream's closure, so freed when the stream ends or its client goes.
    let place = client.map(|Extension(ClientAddr(ip))| app.streams.take(ip)).transpose()?;
    let mut last_line = String::new();
    let stream = app.queue.follow(job).filter_map(move |followed| {
        let _held = &place;
        let event = match followed {
            Followed::Job(job) if compact => {
                // A change this line does not show (a heartbeat, a timing) is not worth a line of its own.
                let line = super::event_line::line(&job);
                let same = line == last_line;
                last_line = line.clone();
                (!same).then(|| Event::default().event(job.status.as_str()).data(line))
            }
            Followed::Job(job) => Some(Event::default().event("job").json_data(&job).unwrap_or_default()),
            Followed::Shutdown => Some(shutdown_event()),
        };
        std::future::ready(event.map(Ok))
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}

/// The last event of a stream cut short because the server is stopping; the job goes on after the restart.
fn shutdown_event() -> Event {
    Event::default().event("shutdown").data("the server is stopping; follow the job again once it is back")
}
