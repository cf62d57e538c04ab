//! `/v1/jobs`: create, list, read, follow (SSE), download, cancel, delete.
use std::convert::Infallible;
use std::time::Duration;

use axum::extract::{Path, RawQuery, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use futures_util::Stream;
use serde::Serialize;
use utoipa::ToSchema;

use super::admission::{Limits, Ticket};
use super::auth::Caller;
use super::output_size::{check_output_size, InputSize};
use tokio::sync::broadcast::error::RecvError;
use tower::ServiceExt;
use uuid::Uuid;

use super::error::{ApiError, ErrorBody};
use super::openapi::{Binary, Faults};
use super::params::{self, JobFields, ListQuery, UploadForm};
use super::upload::{self, UploadLimits};
use super::AppState;
use crate::device::DtypeChoice;
use crate::error_codes as codes;
use crate::executor::restore::{self, RestoreSettings};
use crate::jobs::{CancelOutcome, DeleteOutcome, Job, JobParams, JobStatus, ListFilter, NewJob, Op, RestoreParams};
use crate::models::restore::colorfix::ColorFix;
use crate::media;
use crate::media::latent::{self, LatentError};
use crate::models::registry;

/// A job request as the client stated it, checked against what this box can do.
pub(super) struct JobRequest {
    pub op: Op,
    pub model: String,
    pub family: registry::Family,
    pub latent_channels: Option<i64>,
    pub priority: i64,
    pub params: JobParams,
}

impl JobRequest {
    pub fn from_fields(fields: &JobFields, models_dir: &std::path::Path) -> Result<JobRequest, ApiError> {
        let op_name = fields.op.as_deref().unwrap_or("upscale");
        let op = Op::parse(op_name).ok_or_else(|| {
            let known: Vec<_> = Op::ALL.iter().map(|op| op.as_str()).collect();
            ApiError::bad_request(codes::UNKNOWN_OP, format!("unknown op `{op_name}`; expected one of {}", known.join(", ")))
        })?;
        let model_name = fields.model.clone().unwrap_or_else(|| registry::DEFAULT_UPSCALE_MODEL.into());
        let entry = registry::find(models_dir, &model_name).ok_or_else(|| {
            let known: Vec<_> = registry::scan(models_dir).into_iter().map(|m| m.name).collect();
            ApiError::bad_request(codes::UNKNOWN_MODEL, format!("unknown model `{model_name}`; this box has {}", known.join(", ")))
        })?;
        if !entry.ops.contains(&op) {
            return Err(ApiError::bad_request(
                codes::UNSUPPORTED_OP,
                format!("model `{}` cannot do `{}`", entry.name, op.as_str()),
            ));
        }
        if !entry.present() {
            return Err(ApiError::bad_request(
                codes::MODEL_WEIGHTS_MISSING,
                format!("the weights of `{}` are not in the models folder of this box", entry.name),
            ));
        }
        let scale = match (op, &fields.scale) {
            (Op::Upscale | Op::Restore, raw) => {
                let scale = match raw {
                    None if op == Op::Restore => 2,
                    None => 4,
                    Some(raw) => raw.trim().parse::<i64>().map_err(|_| bad_scale(raw, &entry.scales))?,
                };
                if !entry.scales.contains(&scale) {
                    return Err(bad_scale(&scale.to_string(), &entry.scales));
                }
                Some(scale)
            }
            (_, _) => None,
        };
        let priority = match &fields.priority {
            None => 0,
            Some(raw) => raw.trim().parse::<i64>().ok().filter(|p| p.abs() <= 1000).ok_or_else(|| {
                ApiError::bad_request(codes::INVALID_PRIORITY, format!("priority `{raw}` is not an integer in -1000..=1000"))
            })?,
        };
        let dtype = match &fields.dtype {
            None => DtypeChoice::Auto,
            Some(raw) => DtypeChoice::parse(raw)
                .ok_or_else(|| ApiError::bad_request(codes::INVALID_DTYPE, format!("dtype `{raw}` is not one of auto, f32, bf16, f16")))?,
        };
        let tile = match &fields.tile {
            None => None,
            Some(raw) => Some(raw.trim().parse::<i64>().ok().filter(|t| *t == 0 || (16..=8192).contains(t)).ok_or_else(
                || ApiError::bad_request(codes::INVALID_TILE, format!("tile `{raw}` must be 0 or between 16 and 8192 pixels")),
            )?),
        };
        let normalize = match fields.normalize.as_deref().map(|v| v.trim().to_ascii_lowercase()) {
            None => None,
            Some(v) if matches!(v.as_str(), "true" | "1" | "yes") => Some(true),
            Some(v) if matches!(v.as_str(), "false" | "0" | "no") => Some(false),
            Some(v) => return Err(ApiError::bad_request(codes::INVALID_NORMALIZE, format!("normalize `{v}` is not true or false"))),
        };
        if op == Op::VaeEncode && normalize == Some(true) {
            registry::check_normalization(&entry.name, entry.family, entry.latent_channels, false)?;
        }
        let memory_budget_mib = match &fields.memory_budget_mib {
            None => None,
            Some(raw) => Some(raw.trim().parse::<u64>().ok().filter(|mib| *mib <= crate::config::MAX_MEMORY_BUDGET_MIB).ok_or_else(|| {
                let max = crate::config::MAX_MEMORY_BUDGET_MIB;
                ApiError::bad_request(codes::INVALID_MEMORY_BUDGET, format!("memory_budget_mib `{raw}` is not a whole number of MiB up to {max}"))
            })?),
        };
        let restore = if op == Op::Restore { Some(restore_params(fields, scale, &entry.name, models_dir)?) } else { None };
        let params = JobParams { scale, tile, normalize, memory_budget_mib, restore, ..JobParams::new(dtype) };
        Ok(JobRequest { op, latent_channels: entry.latent_channels, family: entry.family, model: entry.name, priority, params })
    }
}

/// `restore`'s own fields, checked as the executor will use them (the same `RestoreSettings::resolve`),
/// and its VAE and text embeddings looked up, so a job that cannot run is refused before it is queued.
fn restore_params(fields: &JobFields, scale: Option<i64>, model: &str, models_dir: &std::path::Path) -> Result<RestoreParams, ApiError> {
    fn number<T: std::str::FromStr>(name: &str, raw: &Option<String>) -> Result<Option<T>, ApiError> {
        raw.as_deref()
            .map(|raw| raw.trim().parse::<T>().map_err(|_| ApiError::bad_request(codes::INVALID_RESTORE_PARAMETER, format!("{name} `{raw}` is not a number"))))
            .transpose()
    }
    let color_fix = match fields.color_fix.as_deref() {
        None => None,
        Some(raw) => Some(ColorFix::parse(raw.trim()).ok_or_else(|| {
            ApiError::bad_request(codes::INVALID_RESTORE_PARAMETER, format!("color_fix `{raw}` is not one of wavelet, adain, none"))
        })?),
    };
    let params = RestoreParams {
        vae: fields.vae.clone(),
        height: number("height", &fields.height)?,
        width: number("width", &fields.width)?,
        seed: number("seed", &fields.seed)?,
        color_fix,
        batch_frames: number("batch_frames", &fields.batch_frames)?,
        batch_overlap: number("batch_overlap", &fields.batch_overlap)?,
    };
    RestoreSettings::resolve(scale, Some(&params)).map_err(|why| ApiError::bad_request(codes::INVALID_RESTORE_PARAMETER, why))?;
    restore::restore_files(models_dir, model, params.vae.as_deref()).map_err(|why| ApiError::bad_request(codes::UNKNOWN_MODEL, why.to_string()))?;
    Ok(params)
}

/// A latent upload is checked before it is queued: shape, finiteness, channels and the model it came from,
/// and what it decodes to. Returns its shape.
pub(super) async fn check_latent_upload(path: &std::path::Path, request: &JobRequest, limits: &media::MediaLimits) -> Result<[i64; 5], ApiError> {
    let path = path.to_path_buf();
    let latent::LatentSummary { shape, meta, .. } = tokio::task::spawn_blocking(move || latent::inspect_latent(&path))
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))??;
    if let Some(expected) = request.latent_channels {
        if shape[1] != expected {
            return Err(LatentError::ChannelMismatch { model: request.model.clone(), got: shape[1], expected }.into());
        }
    }
    if let Some(family) = meta.family.filter(|f| f != request.family.as_str()) {
        return Err(LatentError::ModelMismatch {
            made_by: meta.model.unwrap_or_default(),
            family,
            model: request.model.clone(),
            model_family: request.family.as_str().into(),
        }
        .into());
    }
    if meta.normalized {
        registry::check_normalization(&request.model, request.family, request.latent_channels, true)?;
    }
    let shape: [i64; 5] = shape.try_into().map_err(|shape| LatentError::BadShape { shape })?;
    check_output_size(request, &InputSize::Latent(shape), limits)?;
    Ok(shape)
}

fn bad_scale(raw: &str, scales: &[i64]) -> ApiError {
    ApiError::bad_request(codes::INVALID_SCALE, format!("scale `{raw}` is not supported; use one of {scales:?}"))
}

/// A place in the queue (see `admission`), held until the job is queued or the upload fails.
/// Refused before the body is read when the data dir's disk is below `min_free_disk_mib`.
pub(super) async fn admit(app: &AppState, caller: &Caller) -> Result<Ticket, ApiError> {
    let min_free = app.config.min_free_disk_mib << 20;
    if crate::jobs::preflight::free_bytes(&app.config.data_dir).is_some_and(|free| free < min_free) {
        return Err(ApiError::InsufficientStorage);
    }
    let limits = Limits { queued: app.config.max_queued_jobs, queued_per_token: app.config.max_queued_jobs_per_token };
    app.admission.admit(app.store.as_ref(), caller.owner(), &limits).await
}

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
            parameters (unknown-parameter: a name that is not one of the fields, named in the message; unknown-op, unknown-model, \
            unsupported-op, model-weights-missing, invalid-scale, invalid-restore-parameter, invalid-priority, invalid-dtype, \
            invalid-tile, invalid-normalize, invalid-memory-budget, normalize-unsupported, invalid-query, invalid-multipart, \
            missing-file, too-many-files, invalid-params, upload-interrupted)"),
        (status = 403, body = ErrorBody, description = "Sent by a page of another origin not in cors_origins (foreign-origin)"),
        (status = 408, body = ErrorBody, description = "The body stalled for body_idle_timeout_s (upload-stalled)"),
        (status = 413, body = ErrorBody, description = "Upload over the size limit (upload-too-large), or a form field other than \
            `file` over 16 KiB (field-too-large)"),
        (status = 422, body = ErrorBody, description = "Not a usable video or latent (empty-file, not-a-video, truncated-media, \
            media-too-large, not-a-latent, latent-bad-shape, latent-channel-mismatch, latent-not-finite, latent-model-mismatch, \
            latent-normalize-unsupported: a latent marked normalized for a VAE without published statistics)"),
        (status = 429, body = ErrorBody, description = "Queue full (queue-full)"),
        (status = 503, body = ErrorBody, description = "max_concurrent_uploads uploads are being received; refused before the body \
            is read (too-many-uploads)"),
        Faults,
    )
)]
pub async fn create(State(app): State<AppState>, Extension(caller): Extension<Caller>, request: Request) -> Result<Response, ApiError> {
    let _slot = upload::upload_slot(&app)?;
    let _ticket = match admit(&app, &caller).await {
        Ok(ticket) => ticket,
        Err(refusal) => return Err(upload::refuse_unread(request, refusal).await),
    };
    let limits = UploadLimits { dir: &app.uploads_dir(), max_bytes: app.config.max_upload_bytes };
    let (upload, job_request) = if upload::is_multipart(&request) {
        let upload = upload::receive_multipart(request, &limits).await?;
        let job_request = JobRequest::from_fields(&upload.fields, &app.config.models_dir)?;
        (upload, job_request)
    } else {
        // Query parameters are known before the body: refuse a bad request before receiving gigabytes.
        let checked = upload::query_fields(&request).and_then(|fields| {
            let job_request = JobRequest::from_fields(&fields, &app.config.models_dir)?;
            Ok((fields, job_request))
        });
        let (fields, job_request) = match checked {
            Ok(checked) => checked,
            Err(e) => return Err(upload::refuse_unread(request, e).await),
        };
        (upload::receive_raw(request, fields, &limits).await?, job_request)
    };

    let probe_started = std::time::Instant::now();
    let info = if job_request.op == Op::VaeDecode {
        check_latent_upload(&upload.file.path, &job_request, &app.config.media_limits()).await?;
        None
    } else {
        let tools = app.config.media_tools();
        let media_limits = app.config.media_limits();
        let temp_path = upload.file.path.clone();
        let info = tokio::task::spawn_blocking(move || media::probe(&tools, &temp_path, &media_limits))
            .await
            .map_err(|e| ApiError::Internal(e.to_string()))??;
        Some(info)
    };
    if let Some(info) = &info {
        let input = InputSize::Video { width: info.width, height: info.height, frames: info.frames };
        check_output_size(&job_request, &input, &app.config.media_limits())?;
    }
    let probed = Probed { media: info, seconds: Some(probe_started.elapsed().as_secs_f64()) };

    let job = enqueue(&app, upload.file, job_request, probed, caller.owner()).await?;
    Ok((StatusCode::ACCEPTED, Json(job)).into_response())
}

/// What the checks before queueing learnt of the upload, and how long they took (the job's `probe` timing).
pub(super) struct Probed {
    pub media: Option<media::MediaInfo>,
    pub seconds: Option<f64>,
}

/// Moves a checked upload into its job folder and queues the job; the folder goes if the row cannot be written.
pub(super) async fn enqueue(
    app: &AppState,
    file: upload::TempUpload,
    job_request: JobRequest,
    probed: Probed,
    owner: Option<String>,
) -> Result<Job, ApiError> {
    let id = Uuid::new_v4();
    let job_dir = app.job_dir(id);
    tokio::fs::create_dir_all(&job_dir).await?;
    let extension = std::path::Path::new(&file.file_name)
        .extension()
        .map(|e| e.to_string_lossy().into_owned())
        .unwrap_or_else(|| "mp4".into());
    let input_path = job_dir.join(format!("input.{extension}"));
    let (file_name, bytes) = (file.file_name.clone(), file.bytes);
    file.keep_as(&input_path).await?;
    let new_job = NewJob {
        id,
        op: job_request.op,
        model: job_request.model,
        priority: job_request.priority,
        params: job_request.params,
        input_name: file_name,
        input_path: input_path.to_string_lossy().into_owned(),
        input_bytes: bytes,
        input_media: probed.media,
        probe_s: probed.seconds,
        owner,
    };
    let job = match app.store.insert(new_job).await {
        Ok(job) => job,
        Err(e) => {
            let _ = tokio::fs::remove_dir_all(&job_dir).await;
            return Err(e.into());
        }
    };
    crate::jobs::telemetry::job_created(job.op, bytes);
    app.wake.notify_one();
    let _ = app.events.send(id);
    tracing::info!(%id, op = job.op.as_str(), model = %job.model, bytes, "job queued");
    Ok(job)
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
            let message = format!("status `{raw}` is not one of queued, running, succeeded, failed, cancelled");
            ApiError::bad_request(codes::INVALID_STATUS, message)
        })?),
    };
    let limit = query.limit.unwrap_or(50).clamp(1, 500);
    let offset = query.offset.unwrap_or(0).max(0);
    let jobs = app.store.list(&ListFilter { status, owner: caller.listing_owner(), limit, offset }).await?;
    let next_offset = (jobs.len() as i64 == limit).then_some(offset + limit);
    Ok(Json(JobList { jobs, next_offset }))
}

/// The `{id}` of the job routes.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)] // described, never built: the handlers read the id as text
pub struct JobId {
    /// The job's id (an unknown or malformed one answers 404 job-not-found).
    id: Uuid,
}

fn parse_id(raw: &str) -> Result<Uuid, ApiError> {
    Uuid::parse_str(raw).map_err(|_| ApiError::JobNotFound(raw.into()))
}

/// The job, if this caller may see it (another token's job is as unknown as a missing one).
async fn find(app: &AppState, caller: &Caller, raw: &str) -> Result<Job, ApiError> {
    let id = parse_id(raw)?;
    app.store.get(id).await?.filter(|job| caller.sees(job)).ok_or_else(|| ApiError::JobNotFound(raw.into()))
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
    Ok(Json(find(&app, &caller, &id).await?))
}

/// Download the output (supports Range)
///
/// The output file: an MP4, or a safetensors latent (vae_encode) or tensor (vae_decode with output tensor).
#[utoipa::path(
    get,
    path = "/v1/jobs/{id}/result",
    tag = "jobs",
    params(JobId),
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
    request: Request,
) -> Result<Response, ApiError> {
    let job = find(&app, &caller, &id).await?;
    let (Some(output), Some(path), JobStatus::Succeeded) = (&job.output, &job.output_path, job.status) else {
        return Err(ApiError::Conflict(format!("job {id} has no result (status {})", job.status.as_str())));
    };
    let mut response = tower_http::services::ServeFile::new(path)
        .oneshot(request)
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))?
        .into_response();
    if response.status().is_success() || response.status() == StatusCode::PARTIAL_CONTENT {
        let disposition = format!("attachment; filename=\"{}\"", output.file_name);
        if let Ok(value) = HeaderValue::from_str(&disposition) {
            response.headers_mut().insert(header::CONTENT_DISPOSITION, value);
        }
    } else if response.status() == StatusCode::NOT_FOUND {
        return Err(ApiError::ResultGone(id));
    }
    Ok(response)
}

/// Cancel; a running job stops at the next chunk
#[utoipa::path(
    post,
    path = "/v1/jobs/{id}/cancel",
    tag = "jobs",
    params(JobId),
    responses(
        (status = 200, description = "The job, cancelled or with its cancellation under way", body = Job),
        (status = 400, body = ErrorBody, description = "The job already ended (job-already-finished)"),
        (status = 404, body = ErrorBody, description = "job-not-found"),
        Faults,
    )
)]
pub async fn cancel(State(app): State<AppState>, Extension(caller): Extension<Caller>, Path(id): Path<String>) -> Result<Json<Job>, ApiError> {
    let uuid = find(&app, &caller, &id).await?.id;
    let job = match app.store.request_cancel(uuid).await? {
        CancelOutcome::NotFound => return Err(ApiError::JobNotFound(id)),
        CancelOutcome::AlreadyFinished(job) => {
            return Err(ApiError::bad_request(
                codes::JOB_ALREADY_FINISHED,
                format!("job {id} already finished ({})", job.status.as_str()),
            ))
        }
        CancelOutcome::Cancelled(job) => job,
        CancelOutcome::Requested(job) => {
            app.cancels.raise(uuid);
            job
        }
    };
    let _ = app.events.send(uuid);
    Ok(Json(job))
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
    let uuid = find(&app, &caller, &id).await?.id;
    match app.store.delete(uuid).await? {
        DeleteOutcome::NotFound => Err(ApiError::JobNotFound(id)),
        DeleteOutcome::NotFinished(job) => Err(ApiError::Conflict(format!(
            "job {id} is {}; cancel it first, then delete it",
            job.status.as_str()
        ))),
        DeleteOutcome::Deleted(_) => {
            let dir = app.job_dir(uuid);
            if let Err(e) = tokio::fs::remove_dir_all(&dir).await {
                if e.kind() != std::io::ErrorKind::NotFound {
                    tracing::warn!(%uuid, error = %e, "job deleted but its files remain");
                }
            }
            Ok(StatusCode::NO_CONTENT)
        }
    }
}

/// Follow a job: Server-Sent Events
///
/// `event: job` with the whole job as data, at once and whenever it changes, until a final status; when the
/// server stops first, `event: shutdown` ends the stream.
#[utoipa::path(
    get,
    path = "/v1/jobs/{id}/events",
    tag = "jobs",
    params(JobId),
    responses(
        (status = 200, description = "Event stream; each event's data is a Job", body = String, content_type = "text/event-stream"),
        (status = 404, body = ErrorBody, description = "job-not-found"),
        Faults,
    )
)]
// Re-reads the job whenever it changes (or every few seconds) and sends it whole; ends after a final status.
pub async fn events(
    State(app): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let job = find(&app, &caller, &id).await?;
    let changes = app.events.subscribe();
    struct Follow {
        app: AppState,
        id: Uuid,
        changes: tokio::sync::broadcast::Receiver<Uuid>,
        first: Option<Job>,
        done: bool,
    }
    let state = Follow { id: job.id, app, changes, first: Some(job), done: false };
    let stream = futures_util::stream::unfold(state, |mut s| async move {
        if s.done {
            return None;
        }
        let job = match s.first.take() {
            Some(job) => job,
            None => {
                let waited = tokio::time::timeout(Duration::from_secs(5), wait_for_change(&mut s.changes, s.id));
                if s.app.shutdown.run_until_cancelled(waited).await.is_none() {
                    s.done = true;
                    return Some((Ok(shutdown_event()), s));
                }
                match s.app.store.get(s.id).await {
                    Ok(Some(job)) => job,
                    _ => return None,
                }
            }
        };
        s.done = job.status.is_terminal();
        let event = Event::default().event("job").json_data(&job).unwrap_or_default();
        Some((Ok(event), s))
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}

/// The last event of a stream cut short because the server is stopping; the job goes on after the restart.
fn shutdown_event() -> Event {
    Event::default().event("shutdown").data("the server is stopping; follow the job again once it is back")
}

async fn wait_for_change(changes: &mut tokio::sync::broadcast::Receiver<Uuid>, id: Uuid) {
    loop {
        match changes.recv().await {
            Ok(changed) if changed == id => return,
            Ok(_) => continue,
            Err(RecvError::Lagged(_)) | Err(RecvError::Closed) => return,
        }
    }
}
