//! Every error the API returns, mapped to a status and a stable code in one place.
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use crate::error_codes as codes;
use crate::jobs::StoreError;
use crate::media::latent::LatentError;
use crate::media::MediaError;
use crate::models::registry::NormalizeRefusal;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{message}")]
    BadRequest { code: &'static str, message: String },
    #[error("no job with id {0}")]
    JobNotFound(String),
    #[error("no route {method} {path}; the API is described at /openapi.json")]
    RouteNotFound { method: String, path: String },
    #[error("{path} does not take {method}; see the Allow header and /openapi.json")]
    MethodNotAllowed { method: String, path: String },
    #[error("{0}")]
    Conflict(String),
    #[error("the upload is larger than the limit of {limit} bytes")]
    UploadTooLarge { limit: u64 },
    #[error("the queue is full ({limit} jobs waiting); try again later")]
    QueueFull { limit: u32 },
    #[error(transparent)]
    Media(#[from] MediaError),
    #[error(transparent)]
    Latent(#[from] LatentError),
    #[error(transparent)]
    Normalize(#[from] NormalizeRefusal),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{0}")]
    Internal(String),
}

impl ApiError {
    pub fn bad_request(code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError::BadRequest { code, message: message.into() }
    }

    pub fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            ApiError::BadRequest { code, .. } => (StatusCode::BAD_REQUEST, code),
            ApiError::JobNotFound(_) => (StatusCode::NOT_FOUND, codes::JOB_NOT_FOUND),
            ApiError::RouteNotFound { .. } => (StatusCode::NOT_FOUND, codes::NOT_FOUND),
            ApiError::MethodNotAllowed { .. } => (StatusCode::METHOD_NOT_ALLOWED, codes::METHOD_NOT_ALLOWED),
            ApiError::Conflict(_) => (StatusCode::CONFLICT, codes::JOB_NOT_FINISHED),
            ApiError::UploadTooLarge { .. } => (StatusCode::PAYLOAD_TOO_LARGE, codes::UPLOAD_TOO_LARGE),
            ApiError::QueueFull { .. } => (StatusCode::TOO_MANY_REQUESTS, codes::QUEUE_FULL),
            ApiError::Media(e) if e.is_client_error() => (StatusCode::UNPROCESSABLE_ENTITY, e.code()),
            ApiError::Media(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.code()),
            ApiError::Latent(e) if e.is_client_error() => (StatusCode::UNPROCESSABLE_ENTITY, e.code()),
            ApiError::Latent(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.code()),
            // A request parameter, or the content of the uploaded latent.
            ApiError::Normalize(e @ NormalizeRefusal::Encode { .. }) => (StatusCode::BAD_REQUEST, e.code()),
            ApiError::Normalize(e) => (StatusCode::UNPROCESSABLE_ENTITY, e.code()),
            ApiError::Store(_) => (StatusCode::INTERNAL_SERVER_ERROR, codes::STORE_ERROR),
            ApiError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, codes::INTERNAL_ERROR),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code) = self.status_and_code();
        if status.is_server_error() {
            tracing::error!(code, error = %self, "request failed");
        }
        (status, Json(json!({ "error": { "code": code, "message": self.to_string() } }))).into_response()
    }
}

impl From<std::io::Error> for ApiError {
    fn from(e: std::io::Error) -> Self {
        ApiError::Internal(format!("file system: {e}"))
    }
}
