//! Synchronous `POST /v1/decode` and `POST /v1/encode`, speaking the protocol of diffusers'
//! `remote_decode` / `remote_encode`: raw tensor bytes in the body, `shape` and `dtype` in the query,
//! tensors back as raw bytes with `shape` and `dtype` headers, JSON errors. Each item of a call's batch
//! is an ordinary job (queued, serialised on the executor, listed); the call is answered when all have
//! finished, and cancels those still unfinished if it ends first (its client hung up).
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};

use super::auth::Caller;
use super::error::{ApiError, ErrorBody};
use super::doc_types::{Binary, Faults};
use super::params::RemoteQuery;
use super::remote_call::parse_call;
use super::remote_tensor::{answer, receive_items};
use super::upload::refuse_unread;
use super::state::AppState;
use crate::error_codes as codes;
use crate::jobs::{Job, JobError, JobStatus};
use crate::models::Op;
use crate::queue::{InputKind, JobResult, Submission, WaitedJobs};

const REMOTE_REFUSALS: &str = "unknown-parameter, missing-model, invalid-shape, invalid-dtype, invalid-query, \
    invalid-boolean, invalid-normalize, parameter-not-for-op (a decode-only parameter on /v1/encode), unsupported-option, \
    tensor-size-mismatch, upload-interrupted, and the job fields' codes as for POST /v1/jobs";

/// Decode a latent tensor synchronously
///
/// diffusers' remote-VAE protocol: raw little-endian tensor bytes in the body; the call is queued as an ordinary job
/// and answered when it finishes (header x-vaebox-job; a batch is one job per item, answered together).
/// Parameters not listed here are refused with 400 unknown-parameter.
#[utoipa::path(
    post,
    path = "/v1/decode",
    tag = "remote VAE",
    params(RemoteQuery),
    request_body(content((Binary = "tensor/binary"))),
    responses(
        (status = 200, description = "tensor/binary with `shape` (JSON list) and `dtype` headers: [B, 3, T, H, W], or [B, 3, H, W] \
            for a 4-D latent; or video/mp4 (output_type=mp4, one latent)",
            headers(("shape" = String, description = "the tensor's shape as a JSON list"),
                ("dtype" = String, description = "the tensor's dtype (float32, float16, bfloat16)"),
                ("x-vaebox-job" = String, description = "the jobs that ran, one per batch item, comma-separated")),
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
/// and answered when it finishes (header x-vaebox-job; a batch is one job per item, answered together).
/// Parameters not listed here are refused with 400 unknown-parameter.
#[utoipa::path(
    post,
    path = "/v1/encode",
    tag = "remote VAE",
    params(RemoteQuery),
    request_body(content((Binary = "tensor/binary"))),
    responses(
        (status = 200, description = "tensor/binary: the latents [B, C, t, h, w], with `shape` (JSON list) and `dtype` headers",
            headers(("shape" = String, description = "the tensor's shape as a JSON list"),
                ("dtype" = String, description = "the tensor's dtype (float32, float16, bfloat16)"),
                ("x-vaebox-job" = String, description = "the jobs that ran, one per batch item, comma-separated")),
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
    let (first_ticket, call) = match admitted {
        Ok(admitted) => admitted,
        Err(e) => return Err(refuse_unread(request, e).await),
    };
    // Each item of a batch is a job of its own, with its own place in the queue.
    let mut tickets = vec![first_ticket];
    while (tickets.len() as i64) < call.batch {
        match app.queue.admit(caller.owner()).await {
            Ok(ticket) => tickets.push(ticket),
            Err(refusal) => return Err(refuse_unread(request, refusal.into()).await),
        }
    }
    let name = if op == Op::VaeDecode { "latent" } else { "sample" };
    let files = receive_items(&app, request, name, &call, &slot).await?;
    // Subscribed before queueing so that no job's last change can be missed.
    let mut changes = app.queue.changes();
    let mut waited = WaitedJobs::new(app.queue.clone());
    for (file, ticket) in files.into_iter().zip(tickets) {
        let submission = Submission { request: call.job.clone(), input: file, kind: InputKind::Tensor, owner: caller.owner(), ticket };
        waited.add(app.queue.submit(submission).await?.id);
    }
    // Queued: waiting for the jobs is not an upload.
    drop(slot);
    let mut results: Vec<(Job, JobResult)> = Vec::with_capacity(waited.ids().len());
    for id in waited.ids().to_vec() {
        let job = app.queue.wait(id, &mut changes).await?;
        if job.status != JobStatus::Succeeded {
            // The items already decoded are answered to no one.
            for (done, _) in &results {
                app.queue.discard_files(done.id).await;
            }
            return Ok(refusal(&job));
        }
        let result = app.queue.local_result(&job, &job.id.to_string()).await?;
        results.push((job, result));
    }
    waited.answered();
    let response = answer(&call, &results).await;
    for (job, _) in &results {
        app.queue.discard_files(job.id).await;
    }
    response
}

/// A job that did not succeed answers for its whole call, naming itself.
fn refusal(job: &Job) -> Response {
    let error = job.error.clone().unwrap_or(JobError { code: codes::CANCELLED.into(), message: "the job was cancelled".into() });
    let status = match error.code.as_str() {
        codes::CANCELLED => StatusCode::CONFLICT,
        codes::DISK_FULL => StatusCode::INSUFFICIENT_STORAGE,
        _ => StatusCode::UNPROCESSABLE_ENTITY,
    };
    let mut body = ErrorBody::new(error.code, error.message);
    body.error.job = Some(job.id);
    (status, Json(body)).into_response()
}
