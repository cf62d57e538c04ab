//! A result that is not on this box streams from the shared storage (`storage`), with Range as a file
//! on disk would be served.
use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use uuid::Uuid;

use super::error::ApiError;
use crate::jobs::blobs::{BlobError, Blobs, ByteRange};
use crate::queue::QueueError;

/// What a download of `file_name` of job `id` needs to know.
pub struct StoredFile<'a> {
    pub id: Uuid,
    pub file_name: &'a str,
    pub disposition: Option<&'a str>,
}

pub async fn serve(blobs: &Blobs, file: StoredFile<'_>, request: Request) -> Result<Response, ApiError> {
    // The request is not held across the reads below (its body is not `Sync`).
    let asked = request.headers().get(header::RANGE).and_then(|v| v.to_str().ok()).and_then(ByteRange::parse);
    drop(request);
    let read = match blobs.read(file.id, file.file_name, asked).await {
        Ok(read) => read,
        Err(BlobError::RangeNotSatisfiable { size }) => {
            let mut response = StatusCode::RANGE_NOT_SATISFIABLE.into_response();
            response.headers_mut().insert(header::CONTENT_RANGE, header_value(format!("bytes */{size}")));
            return Ok(response);
        }
        Err(e) => return Err(QueueError::from_blob(e, &file.id.to_string()).into()),
    };
    let status = if asked.is_some() { StatusCode::PARTIAL_CONTENT } else { StatusCode::OK };
    let length = read.range.end - read.range.start;
    let mut response = Response::new(Body::from_stream(read.body));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    // Guessed as tower-http's `ServeFile` guesses a file on disk, so both paths name a result alike.
    let content_type = mime_guess::from_path(file.file_name).first_raw().unwrap_or("application/octet-stream");
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(header::CONTENT_LENGTH, header_value(length.to_string()));
    headers.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    if asked.is_some() {
        headers.insert(header::CONTENT_RANGE, header_value(format!("bytes {}-{}/{}", read.range.start, read.range.end - 1, read.size)));
    }
    if let Some(value) = file.disposition.and_then(|d| HeaderValue::from_str(d).ok()) {
        headers.insert(header::CONTENT_DISPOSITION, value);
    }
    Ok(response)
}

fn header_value(text: String) -> HeaderValue {
    HeaderValue::from_str(&text).expect("digits, spaces and a slash")
}
