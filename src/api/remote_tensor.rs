//! The remote-VAE calls' tensors: the raw body cut into one safetensors file per batch item (each job reads
//! one `[1, C, T, H, W]` tensor, like any latent file), and the items' results joined back into one answer
//! with the batch dimension, in the layout the client sent.
use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt, BufWriter};
use uuid::Uuid;

use super::error::ApiError;
use super::remote_call::RemoteCall;
use super::upload::refuse_unread;
use super::upload_places::UploadPlace;
use super::state::AppState;
use crate::error_codes as codes;
use crate::jobs::Job;
use crate::media::safetensors::{self, single_tensor_prefix};
use crate::queue::{JobResult, StagedFile};

/// One item's file as it is written.
struct ItemFile {
    staged: StagedFile,
    out: BufWriter<tokio::fs::File>,
}

async fn open_item(app: &AppState, name: &str, call: &RemoteCall) -> Result<ItemFile, ApiError> {
    let dir = app.uploads_dir();
    tokio::fs::create_dir_all(&dir).await?;
    let staged = StagedFile::new(dir.join(format!("{}.part", Uuid::new_v4())), format!("{name}.safetensors"));
    let mut out = BufWriter::new(tokio::fs::File::create(&staged.path).await?);
    out.write_all(&single_tensor_prefix(name, call.dtype, &call.item_shape, &call.metadata)).await?;
    Ok(ItemFile { staged, out })
}

/// Streams the raw body into one file per batch item, each behind a safetensors prefix with the call's
/// metadata, so the executor reads it like any tensor file.
/// `place` is the upload place the body is received in (a body cut as too slow cools its address down).
pub async fn receive_items(app: &AppState, request: Request, name: &str, call: &RemoteCall, place: &UploadPlace) -> Result<Vec<StagedFile>, ApiError> {
    let item_bytes = call.item_bytes();
    let expected = item_bytes.saturating_mul(call.batch as u64);
    if expected > app.config.max_upload_bytes {
        return Err(refuse_unread(request, ApiError::UploadTooLarge { limit: app.config.max_upload_bytes }).await);
    }
    let mut done = Vec::with_capacity(call.batch as usize);
    let mut current: Option<ItemFile> = None;
    let mut received = 0u64;
    let mut stream = request.into_body().into_data_stream();
    let mut rate = place.rate_check(app.config.min_upload_rate_kib_s);
    while let Some(chunk) = stream.next().await {
        let mut chunk: Bytes = chunk.map_err(|e| super::upload::body_error(&e))?;
        rate.add(chunk.len()).map_err(|slow| ApiError::UploadTooSlow(slow.to_string()))?;
        received += chunk.len() as u64;
        if received > expected {
            break;
        }
        while !chunk.is_empty() {
            let item = match current.as_mut() {
                Some(item) => item,
                None => current.insert(open_item(app, name, call).await?),
            };
            let room = (item_bytes - item.staged.bytes) as usize;
            let part = chunk.split_to(room.min(chunk.len()));
            item.out.write_all(&part).await?;
            item.staged.bytes += part.len() as u64;
            if item.staged.bytes == item_bytes {
                let mut full = current.take().expect("written just above");
                full.out.flush().await?;
                done.push(full.staged);
            }
        }
    }
    if received != expected {
        return Err(ApiError::bad_request(
            codes::TENSOR_SIZE_MISMATCH,
            format!("the body has {received} bytes; shape {:?} in {} needs {expected}", call.shape(), call.dtype.torch_name()),
        ));
    }
    Ok(done)
}

/// Where a result's tensor lies in its file.
struct ResultTensor {
    file: tokio::fs::File,
    shape: Vec<i64>,
    dtype: safetensors::Dtype,
    bytes: u64,
}

async fn open_result(job: &Job, path: std::path::PathBuf) -> Result<ResultTensor, ApiError> {
    let header_path = path.clone();
    let parsed = tokio::task::spawn_blocking(move || safetensors::read_header(&header_path))
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))?
        .map_err(|e| ApiError::Internal(format!("result of job {}: {e}", job.id)))?;
    let (_, entry) = parsed.tensors.into_iter().next().ok_or_else(|| ApiError::Internal("empty result tensor file".into()))?;
    let mut file = tokio::fs::File::open(&path).await?;
    file.seek(std::io::SeekFrom::Start(entry.start)).await?;
    Ok(ResultTensor { file, shape: entry.shape, dtype: entry.dtype, bytes: entry.end - entry.start })
}

/// The results leave in the response and nowhere else (the caller then discards the jobs' files, which stay
/// readable through the handles opened here). `jobs` in batch order; more than one only for tensors.
pub async fn answer(call: &RemoteCall, jobs: &[(Job, JobResult)]) -> Result<Response, ApiError> {
    let ids: Vec<String> = jobs.iter().map(|(job, _)| job.id.to_string()).collect();
    let job_header = HeaderValue::from_str(&ids.join(",")).expect("uuids are ascii");
    if let [(_, only)] = jobs {
        if only.path.extension().is_none_or(|e| e != "safetensors") {
            let file = tokio::fs::File::open(&only.path).await?;
            let body = Body::from_stream(tokio_util::io::ReaderStream::new(file));
            let mut response = (StatusCode::OK, [(header::CONTENT_TYPE, "video/mp4")], body).into_response();
            response.headers_mut().insert("x-vaebox-job", job_header);
            return Ok(response);
        }
    }
    let mut tensors = Vec::with_capacity(jobs.len());
    for (job, result) in jobs {
        tensors.push(open_result(job, result.path.clone()).await?);
    }
    let first = tensors.first().ok_or_else(|| ApiError::Internal("a call with no items".into()))?;
    let (item_shape, dtype) = (first.shape.clone(), first.dtype);
    if tensors.iter().any(|t| t.shape != item_shape || t.dtype != dtype) {
        return Err(ApiError::Internal("the batch's items decoded to different shapes".into()));
    }
    // Items are contiguous along the first axis: the batch is their bytes one after the other.
    let mut shape = item_shape;
    shape[0] = tensors.len() as i64;
    if call.images {
        shape.remove(2);
    }
    let parts = tensors.into_iter().map(|t| tokio_util::io::ReaderStream::new(t.file.take(t.bytes)));
    let body = Body::from_stream(futures_util::stream::iter(parts).flatten());
    let shape = serde_json::to_string(&shape).expect("shape serializes");
    let mut response = (StatusCode::OK, [(header::CONTENT_TYPE, "tensor/binary")], body).into_response();
    let headers = response.headers_mut();
    headers.insert("shape", HeaderValue::from_str(&shape).expect("digits and commas"));
    headers.insert("dtype", HeaderValue::from_static(dtype.torch_name()));
    headers.insert("x-vaebox-job", job_header);
    Ok(response)
}
