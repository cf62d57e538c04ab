//! Synchronous `POST /v1/decode` and `POST /v1/encode`, speaking the protocol of diffusers'
//! `remote_decode` / `remote_encode`: raw tensor bytes in the body, `shape` and `dtype` in the query,
//! tensors back as raw bytes with `shape` and `dtype` headers, JSON errors. Each call is an ordinary
//! job (queued, serialised on the executor, listed), answered when it finishes.
use std::collections::BTreeMap;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use futures_util::StreamExt;
use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};
use uuid::Uuid;

use super::auth::Caller;
use super::error::{ApiError, ErrorBody};
use super::fields;
use super::openapi::{Binary, Faults};
use super::params::{self, JobFields, RemoteQuery};
use super::upload::refuse_unread;
use super::AppState;
use crate::error_codes as codes;
use crate::jobs::{Job, JobError, JobStatus, OutputFormat};
use crate::models::Op;
use crate::media::safetensors::{self, single_tensor_prefix, Dtype};
use crate::queue::{check_output_size, InputKind, InputSize, JobRequest, JobResult, StagedFile, Submission};

const REMOTE_REFUSALS: &str = "unknown-parameter, missing-model, invalid-shape, invalid-dtype, invalid-query, \
    unsupported-option, tensor-size-mismatch, upload-interrupted, and the job fields' codes as for POST /v1/jobs";

/// What the client sent besides the tensor.
struct RemoteCall {
    job: JobRequest,
    dtype: Dtype,
    shape: Vec<i64>,
}

fn bad(code: &'static str, message: impl Into<String>) -> ApiError {
    ApiError::bad_request(code, message)
}

/// `requests` sends a list as repeated keys (`shape=1&shape=16&...`); a JSON list is accepted too.
fn parse_shape(values: &[String]) -> Result<Vec<i64>, ApiError> {
    let shape: Option<Vec<i64>> = match values {
        [one] if one.trim_start().starts_with('[') => serde_json::from_str(one).ok(),
        many => many.iter().map(|v| v.trim().parse().ok()).collect(),
    };
    match shape {
        Some(shape) if !shape.is_empty() && shape.iter().all(|d| *d > 0) => Ok(shape),
        _ => Err(bad(codes::INVALID_SHAPE, format!("`shape` must list positive integers, got {values:?}"))),
    }
}

/// The query as named values, and the precision the VAE runs in. `shape` collects its repeats; any other
/// repeated name keeps its last value. `dtype` is the body's tensor dtype, which diffusers' clients always
/// append; an endpoint URL that names one itself (`?model=m&dtype=f32`) puts it first, and that first one
/// is the compute precision. Without it the job runs at the box's `dtype` (bf16 on CUDA): the tensor's
/// float32 made every remote decode run in f32, 53.7 s instead of about 1.3 s for 480p×81 on an H100.
fn read_query(request: &Request) -> Result<(RemoteQuery, Option<String>), ApiError> {
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(request.uri().query().unwrap_or(""))
        .map_err(|e| bad(codes::INVALID_QUERY, e.to_string()))?;
    let mut fields = serde_json::Map::new();
    let mut shape = Vec::new();
    let mut dtypes = Vec::new();
    for (key, value) in pairs {
        match key.as_str() {
            "shape" => shape.push(serde_json::Value::from(value)),
            "dtype" => {
                dtypes.push(value.clone());
                fields.insert(key, value.into());
            }
            _ => {
                fields.insert(key, value.into());
            }
        }
    }
    if !shape.is_empty() {
        fields.insert("shape".into(), shape.into());
    }
    let compute = if dtypes.len() > 1 { dtypes.first().cloned() } else { None };
    Ok((params::from_map(fields)?, compute))
}

fn parse_call(request: &Request, op: Op, app: &AppState) -> Result<RemoteCall, ApiError> {
    let (query, compute_dtype) = read_query(request)?;
    if query.model.is_none() {
        return Err(bad(codes::MISSING_MODEL, "choose the VAE in the endpoint URL, e.g. /v1/decode?model=NAME (see /v1/models)"));
    }
    let dtype_name = query.dtype.as_deref().unwrap_or("float32");
    let dtype = Dtype::parse_torch(dtype_name)
        .filter(|d| *d != Dtype::U8)
        .ok_or_else(|| bad(codes::INVALID_DTYPE, format!("tensor dtype `{dtype_name}` is not float32, float16 or bfloat16")))?;
    let mut shape = parse_shape(&query.shape)?;
    if op == Op::VaeEncode && shape.len() == 4 {
        shape.insert(2, 1); // an image is a one-frame video
    }
    let expected_rank = if op == Op::VaeDecode { "[1, C, t, h, w]" } else { "[1, 3, T, H, W] or [1, 3, H, W]" };
    if shape.len() != 5 || shape[0] != 1 {
        return Err(bad(codes::INVALID_SHAPE, format!("shape {shape:?}: expected {expected_rank} (packed latents are not supported)")));
    }
    if safetensors::checked_numel(&shape).and_then(|n| n.checked_mul(dtype.size())).is_none() {
        return Err(bad(codes::INVALID_SHAPE, format!("shape {shape:?} has more elements than a tensor can hold")));
    }
    if query.partial_postprocess.as_deref().is_some_and(|v| v.eq_ignore_ascii_case("true")) {
        return Err(bad(codes::UNSUPPORTED_OPTION, "partial_postprocess is not supported; use output_type=pt or mp4"));
    }
    let number = |key: &str, value: &Option<String>| -> Result<Option<f64>, ApiError> {
        value.as_deref().map(|v| v.parse::<f64>().map_err(|_| bad(codes::INVALID_QUERY, format!("`{key}` must be a number")))).transpose()
    };
    let latent_scaling = number("scaling_factor", &query.scaling_factor)?;
    if latent_scaling == Some(0.0) {
        return Err(bad(codes::INVALID_QUERY, "`scaling_factor` must not be 0"));
    }
    let latent_shift = number("shift_factor", &query.shift_factor)?;
    let fields = JobFields {
        op: Some(op.as_str().into()),
        model: query.model.clone(),
        dtype: compute_dtype,
        priority: query.priority.clone(),
        tile: query.tile.clone(),
        normalize: query.normalize.clone(),
        memory_budget_mib: query.memory_budget_mib.clone(),
        ..JobFields::default()
    };
    let mut job = fields::job_request(&fields, &app.config)?;
    job.params.latent_scaling = latent_scaling;
    job.params.latent_shift = latent_shift;
    if op == Op::VaeDecode {
        job.params.output_format = Some(match query.output_type.as_deref().unwrap_or("pt") {
            "pt" => OutputFormat::Safetensors,
            "mp4" => OutputFormat::H264,
            other => {
                return Err(bad(codes::UNSUPPORTED_OPTION, format!("output_type `{other}` is not supported for video; use pt or mp4")))
            }
        });
    }
    if op == Op::VaeDecode {
        let latent: [i64; 5] = shape.clone().try_into().expect("rank checked above");
        check_output_size(&job, &InputSize::Latent(latent), &app.config.media_limits())?;
    }
    Ok(RemoteCall { job, dtype, shape })
}

/// Decode a latent tensor synchronously
///
/// diffusers' remote-VAE protocol: raw little-endian tensor bytes in the body; the call is queued as an ordinary job
/// and answered when it finishes (header x-vaebox-job). Parameters not listed here are refused with 400 unknown-parameter.
#[utoipa::path(
    post,
    path = "/v1/decode",
    tag = "remote VAE",
    params(RemoteQuery),
    request_body(content((Binary = "tensor/binary"))),
    responses(
        (status = 200, description = "tensor/binary with `shape` (JSON list) and `dtype` headers, or video/mp4 (output_type=mp4)",
            headers(("shape" = String, description = "the tensor's shape as a JSON list"),
                ("dtype" = String, description = "the tensor's dtype (float32, float16, bfloat16)"),
                ("x-vaebox-job" = Uuid, description = "the job that ran")),
            content((Binary = "tensor/binary"), (Binary = "video/mp4"))),
        (status = 400, body = ErrorBody, description = REMOTE_REFUSALS),
        (status = 409, body = ErrorBody, description = "The job was cancelled (cancelled, with `job`)"),
        (status = 413, body = ErrorBody, description = "The tensor is over the upload limit (upload-too-large)"),
        (status = 422, body = ErrorBody, description = "The job failed: its code, with `job`"),
        (status = 429, body = ErrorBody, description = "Queue full (queue-full)"),
        (status = 503, body = ErrorBody, description = "Too many uploads at once, refused before the body is read (too-many-uploads)"),
        Faults,
    )
)]
pub async fn decode(State(app): State<AppState>, Extension(caller): Extension<Caller>, request: Request) -> Result<Response, ApiError> {
    run(app, caller, request, Op::VaeDecode).await
}

/// Encode a pixel tensor synchronously
///
/// diffusers' remote-VAE protocol: raw little-endian tensor bytes in the body; the call is queued as an ordinary job
/// and answered when it finishes (header x-vaebox-job). Parameters not listed here are refused with 400 unknown-parameter.
#[utoipa::path(
    post,
    path = "/v1/encode",
    tag = "remote VAE",
    params(RemoteQuery),
    request_body(content((Binary = "tensor/binary"))),
    responses(
        (status = 200, description = "tensor/binary: the latent, with `shape` (JSON list) and `dtype` headers",
            headers(("shape" = String, description = "the tensor's shape as a JSON list"),
                ("dtype" = String, description = "the tensor's dtype (float32, float16, bfloat16)"),
                ("x-vaebox-job" = Uuid, description = "the job that ran")),
            content((Binary = "tensor/binary"))),
        (status = 400, body = ErrorBody, description = REMOTE_REFUSALS),
        (status = 409, body = ErrorBody, description = "The job was cancelled (cancelled, with `job`)"),
        (status = 413, body = ErrorBody, description = "The tensor is over the upload limit (upload-too-large)"),
        (status = 422, body = ErrorBody, description = "The job failed: its code, with `job`"),
        (status = 429, body = ErrorBody, description = "Queue full (queue-full)"),
        (status = 503, body = ErrorBody, description = "Too many uploads at once, refused before the body is read (too-many-uploads)"),
        Faults,
    )
)]
pub async fn encode(State(app): State<AppState>, Extension(caller): Extension<Caller>, request: Request) -> Result<Response, ApiError> {
    run(app, caller, request, Op::VaeEncode).await
}

async fn run(app: AppState, caller: Caller, request: Request, op: Op) -> Result<Response, ApiError> {
    let slot = super::upload::upload_slot(&app, &request)?;
    let admitted = match app.queue.admit(caller.owner()).await {
        Ok(ticket) => parse_call(&request, op, &app).map(|call| (ticket, call)),
        Err(refusal) => Err(refusal.into()),
    };
    let (ticket, call) = match admitted {
        Ok(admitted) => admitted,
        Err(e) => return Err(refuse_unread(request, e).await),
    };
    let name = if op == Op::VaeDecode { "latent" } else { "sample" };
    let file = receive_tensor(&app, request, name, &call).await?;
    // Subscribed before queueing so that the job's last change cannot be missed.
    let mut changes = app.queue.changes();
    let submission = Submission { request: call.job, input: file, kind: InputKind::Tensor, owner: caller.owner(), ticket };
    let job = app.queue.submit(submission).await?;
    // Queued: waiting for the job is not an upload.
    drop(slot);
    let job = app.queue.wait(job.id, &mut changes).await?;
    match job.status {
        JobStatus::Succeeded => {
            let response = result_response(&job, app.queue.local_result(&job, &job.id.to_string()).await?).await;
            app.queue.discard_files(job.id).await;
            response
        }
        _ => {
            let error = job.error.clone().unwrap_or(JobError { code: codes::CANCELLED.into(), message: "the job was cancelled".into() });
            let status = match error.code.as_str() {
                codes::CANCELLED => StatusCode::CONFLICT,
                codes::DISK_FULL => StatusCode::INSUFFICIENT_STORAGE,
                _ => StatusCode::UNPROCESSABLE_ENTITY,
            };
            let mut body = ErrorBody::new(error.code, error.message);
            body.error.job = Some(job.id);
            Ok((status, Json(body)).into_response())
        }
    }
}

/// Streams the raw body behind a safetensors prefix, so the executor reads it like any tensor file.
async fn receive_tensor(app: &AppState, request: Request, name: &str, call: &RemoteCall) -> Result<StagedFile, ApiError> {
    // Checked not to overflow when the call was parsed.
    let expected = safetensors::checked_numel(&call.shape).unwrap_or(u64::MAX).saturating_mul(call.dtype.size());
    if expected > app.config.max_upload_bytes {
        return Err(refuse_unread(request, ApiError::UploadTooLarge { limit: app.config.max_upload_bytes }).await);
    }
    let dir = app.uploads_dir();
    tokio::fs::create_dir_all(&dir).await?;
    let mut file = StagedFile::new(dir.join(format!("{}.part", Uuid::new_v4())), format!("{name}.safetensors"));
    let mut out = tokio::io::BufWriter::new(tokio::fs::File::create(&file.path).await?);
    out.write_all(&single_tensor_prefix(name, call.dtype, &call.shape, &BTreeMap::new())).await?;
    let mut stream = request.into_body().into_data_stream();
    let mut rate = super::upload_places::RateCheck::new(app.config.min_upload_rate_kib_s);
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| super::upload::body_error(&e))?;
        rate.add(chunk.len()).map_err(|slow| ApiError::UploadTooSlow(slow.to_string()))?;
        file.bytes += chunk.len() as u64;
        if file.bytes > expected {
            break;
        }
        out.write_all(&chunk).await?;
    }
    out.flush().await?;
    if file.bytes != expected {
        return Err(bad(
            codes::TENSOR_SIZE_MISMATCH,
            format!("the body has {} bytes; shape {:?} in {} needs {expected}", file.bytes, call.shape, call.dtype.torch_name()),
        ));
    }
    Ok(file)
}

/// The result leaves in the response and nowhere else (the caller then discards the job's files).
async fn result_response(job: &Job, output: JobResult) -> Result<Response, ApiError> {
    let path = output.path;
    let job_header = HeaderValue::from_str(&job.id.to_string()).expect("uuid is ascii");
    if path.extension().is_none_or(|e| e != "safetensors") {
        let file = tokio::fs::File::open(&path).await?;
        let body = Body::from_stream(tokio_util::io::ReaderStream::new(file));
        let mut response = (StatusCode::OK, [(header::CONTENT_TYPE, "video/mp4")], body).into_response();
        response.headers_mut().insert("x-vaebox-job", job_header);
        return Ok(response);
    }
    let header_path = path.clone();
    let parsed = tokio::task::spawn_blocking(move || safetensors::read_header(&header_path))
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))?
        .map_err(|e| ApiError::Internal(format!("result of job {}: {e}", job.id)))?;
    let (_, entry) = parsed.tensors.into_iter().next().ok_or_else(|| ApiError::Internal("empty result tensor file".into()))?;
    let mut file = tokio::fs::File::open(&path).await?;
    file.seek(std::io::SeekFrom::Start(entry.start)).await?;
    let body = Body::from_stream(tokio_util::io::ReaderStream::new(file.take(entry.end - entry.start)));
    let shape = serde_json::to_string(&entry.shape).expect("shape serializes");
    let mut response = (StatusCode::OK, [(header::CONTENT_TYPE, "tensor/binary")], body).into_response();
    let headers = response.headers_mut();
    headers.insert("shape", HeaderValue::from_str(&shape).expect("digits and commas"));
    headers.insert("dtype", HeaderValue::from_static(entry.dtype.torch_name()));
    headers.insert("x-vaebox-job", job_header);
    Ok(response)
}
