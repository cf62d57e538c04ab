//! Every error the API returns, mapped to a status and a stable code in one place.
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use utoipa::openapi::schema::{ObjectBuilder, Type};
use utoipa::ToSchema;
use uuid::Uuid;

use crate::error_codes as codes;
use crate::jobs::StoreError;
use crate::models::registry::NormalizeRefusal;
use crate::queue::QueueError;

/// Every error answer: 4XX for the request, 5XX for faults of this box. A path that is not listed here
/// answers 404 not-found; a listed path with a method it does not take, 405 method-not-allowed (with an
/// Allow header).
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = Error)]
pub struct ErrorBody {
    #[schema(inline)]
    pub error: ErrorDetail,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorDetail {
    #[schema(schema_with = code_schema)]
    pub code: String,
    pub message: String,
    /// `/v1/decode`, `/v1/encode`: the job that failed or was cancelled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job: Option<Uuid>,
}

impl ErrorBody {
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> ErrorBody {
        ErrorBody { error: ErrorDetail { code: code.into(), message: message.into(), job: None } }
    }
}

/// The stable codes, from the one list clients may match on.
fn code_schema() -> ObjectBuilder {
    ObjectBuilder::new().schema_type(Type::String).enum_values(Some(codes::ALL.iter().copied()))
}

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{message}")]
    BadRequest { code: &'static str, message: String },
    #[error("no route {method} {path}; the API is described at /openapi.json")]
    RouteNotFound { method: String, path: String },
    #[error("{path} does not take {method}; see the Allow header and /openapi.json")]
    MethodNotAllowed { method: String, path: String },
    #[error("the upload is larger than the limit of {limit} bytes")]
    UploadTooLarge { limit: u64 },
    #[error("{0}")]
    Unauthorized(String),
    #[error("{0}")]
    TooManyStreams(String),
    #[error("form field `{field}` is over {limit} bytes; only the `file` part may be large")]
    FieldTooLarge { field: String, limit: usize },
    #[error("the upload stalled: nothing arrived for body_idle_timeout_s seconds")]
    UploadStalled,
    #[error("{limit} uploads are being received already; try again shortly")]
    TooManyUploads { limit: u32 },
    #[error("this address is sending {limit} uploads already, its share of the box's places; try again when one has finished")]
    TooManyUploadsFromClient { limit: u32 },
    #[error("addresses of this one's network (its /24, or /64) are sending {limit} uploads already, all but the places kept for other networks; try again when one has finished")]
    TooManyUploadsFromNetwork { limit: u32 },
    #[error("this address is sending an upload already, and {} kept for addresses that send none; try again when its upload has finished", reserved_places(*reserve))]
    UploadPlacesReserved { reserve: u32 },
    #[error("an upload from this address was just cut off for arriving under the box's minimum rate; it may start another in {retry_after_s} s (Retry-After): send fewer uploads at once, or from a faster link")]
    SlowUploadCoolDown { retry_after_s: u64 },
    #[error("{0}; it was cut off so that the place is free for others")]
    UploadTooSlow(String),
    #[error("requests from pages of origin `{origin}` are refused (not this box's origin, not in cors_origins)")]
    ForeignOrigin { origin: String },
    #[error("this box does not answer to the name `{host}`: use its IP address, localhost or its host name, or add the name to allowed_hosts")]
    UnknownHost { host: String },
    #[error("the request has more than one `{name}` header; send it once")]
    DuplicateHeader { name: String },
    /// A job's life: submission, lookup, cancel, delete, result.
    #[error(transparent)]
    Queue(#[from] QueueError),
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
            ApiError::RouteNotFound { .. } => (StatusCode::NOT_FOUND, codes::NOT_FOUND),
            ApiError::MethodNotAllowed { .. } => (StatusCode::METHOD_NOT_ALLOWED, codes::METHOD_NOT_ALLOWED),
            ApiError::UploadTooLarge { .. } => (StatusCode::PAYLOAD_TOO_LARGE, codes::UPLOAD_TOO_LARGE),
            ApiError::FieldTooLarge { .. } => (StatusCode::PAYLOAD_TOO_LARGE, codes::FIELD_TOO_LARGE),
            ApiError::UploadStalled => (StatusCode::REQUEST_TIMEOUT, codes::UPLOAD_STALLED),
            ApiError::TooManyUploads { .. }
            | ApiError::TooManyUploadsFromClient { .. }
            | ApiError::TooManyUploadsFromNetwork { .. }
            | ApiError::UploadPlacesReserved { .. }
            | ApiError::SlowUploadCoolDown { .. } => (StatusCode::SERVICE_UNAVAILABLE, codes::TOO_MANY_UPLOADS),
            ApiError::UploadTooSlow(_) => (StatusCode::REQUEST_TIMEOUT, codes::UPLOAD_TOO_SLOW),
            ApiError::TooManyStreams(_) => (StatusCode::TOO_MANY_REQUESTS, codes::TOO_MANY_STREAMS),
            ApiError::ForeignOrigin { .. } => (StatusCode::FORBIDDEN, codes::FOREIGN_ORIGIN),
            ApiError::UnknownHost { .. } => (StatusCode::FORBIDDEN, codes::UNKNOWN_HOST),
            ApiError::DuplicateHeader { .. } => (StatusCode::BAD_REQUEST, codes::DUPLICATE_HEADER),
            ApiError::Unauthorized(_) => (StatusCode::UNAUTHORIZED, codes::UNAUTHORIZED),
            ApiError::Queue(e) => (queue_status(e), e.code()),
            ApiError::Store(e) if e.is_outage() => (StatusCode::SERVICE_UNAVAILABLE, codes::STORE_UNAVAILABLE),
            ApiError::Store(_) => (StatusCode::INTERNAL_SERVER_ERROR, codes::STORE_ERROR),
            ApiError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, codes::INTERNAL_ERROR),
        }
    }
}

/// The queue's refusals and faults, each with its status; the code is the queue's own.
fn queue_status(e: &QueueError) -> StatusCode {
    match e {
        QueueError::Refused { .. } => StatusCode::BAD_REQUEST,
        QueueError::JobNotFound(_) => StatusCode::NOT_FOUND,
        QueueError::NotFinished(_) => StatusCode::CONFLICT,
        QueueError::OutputTooLarge(_) | QueueError::NoWorkerFits(_) => StatusCode::UNPROCESSABLE_ENTITY,
        QueueError::ResultGone(_) | QueueError::InputGone(_) => StatusCode::GONE,
        QueueError::Storage(_) => StatusCode::SERVICE_UNAVAILABLE,
        QueueError::PreviewUnavailable(_) => StatusCode::CONFLICT,
        QueueError::InsufficientStorage => StatusCode::INSUFFICIENT_STORAGE,
        QueueError::QueueFull { .. } | QueueError::TokenQueueFull { .. } => StatusCode::TOO_MANY_REQUESTS,
        QueueError::Media(e) if e.is_client_error() => StatusCode::UNPROCESSABLE_ENTITY,
        QueueError::Latent(e) if e.is_client_error() => StatusCode::UNPROCESSABLE_ENTITY,
        QueueError::Media(_) | QueueError::Latent(_) => StatusCode::INTERNAL_SERVER_ERROR,
        // A request parameter, or the content of the uploaded latent.
        QueueError::Normalize(NormalizeRefusal::Encode { .. }) => StatusCode::BAD_REQUEST,
        QueueError::Normalize(_) => StatusCode::UNPROCESSABLE_ENTITY,
        QueueError::Store(e) if e.is_outage() => StatusCode::SERVICE_UNAVAILABLE,
        QueueError::Store(_) | QueueError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code) = self.status_and_code();
        let full = self.to_string();
        let message = crate::redact::client_message(&full);
        if matches!(self, ApiError::TooManyUploads { .. }) {
            tracing::warn!(code, "upload refused: all places taken");
        } else if matches!(self, ApiError::TooManyUploadsFromClient { .. } | ApiError::UploadPlacesReserved { .. } | ApiError::SlowUploadCoolDown { .. }) {
            // The client's own share of the places, not a fault of the box.
            tracing::info!(code, error = %full, "upload refused");
        } else if status.is_server_error() {
            tracing::error!(code, error = %full, "request failed");
        } else if message != full {
            tracing::info!(code, error = %full, "request refused");
        }
        let mut response = (status, Json(ErrorBody::new(code, message))).into_response();
        // The one refusal whose end is known: an address cooling down after a too-slow upload.
        if let ApiError::SlowUploadCoolDown { retry_after_s } = self {
            response.headers_mut().insert(axum::http::header::RETRY_AFTER, axum::http::HeaderValue::from(retry_after_s));
        }
        response
    }
}

/// "the last free upload place is", "the last 2 free upload places are".
fn reserved_places(reserve: u32) -> String {
    if reserve == 1 {
        "the last free upload place is".into()
    } else {
        format!("the last {reserve} free upload places are")
    }
}

/// A full disk is the queue's `insufficient-storage`, whichever layer's write found it.
impl From<std::io::Error> for ApiError {
    fn from(e: std::io::Error) -> Self {
        ApiError::Queue(e.into())
    }
}
