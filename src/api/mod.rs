//! The HTTP API (axum): routes, upload handling, error mapping, metrics, the web page and the OpenAPI
//! document that describes them all (`openapi`).
pub mod address_counts;
pub mod auth;
pub mod browser;
mod data_dir_bytes;
mod doc_types;
pub mod error;
mod event_line;
mod fields;
mod hosts;
pub mod jobs;
pub mod metrics;
pub mod openapi;
pub mod params;
pub mod presets;
mod preview;
pub mod remote;
mod remote_call;
mod remote_tensor;
mod state;
mod stored;
pub mod stream_places;
pub mod system;
pub mod upload;
pub mod upload_places;
pub mod watch;

use std::time::Duration;

use axum::extract::DefaultBodyLimit;
use axum::http::{Method, Uri};
use axum::middleware;
use axum::routing::{get, post};
use axum::Router;
use tower_http::timeout::RequestBodyTimeoutLayer;
use tower_http::trace::TraceLayer;

pub use state::AppState;

pub fn router(state: AppState) -> Router {
    let origins = browser::Origins::new(&state.config.cors_origins);
    let hosts = hosts::Hosts::new(&state.config.allowed_hosts, hosts::Hosts::machine_name());
    let router = Router::new()
        .route("/", get(system::index))
        .route("/js/{name}", get(system::script_module))
        .route("/static/style.css", get(system::style_css))
        .route("/healthz", get(system::healthz))
        .route("/metrics", get(system::metrics))
        .route("/openapi.json", get(openapi::document))
        .route("/v1/models", get(system::models))
        .route("/v1/presets", get(presets::list))
        // The upload size limit is enforced while streaming to disk (upload.rs), not by buffering.
        .route("/v1/jobs", post(jobs::create).get(jobs::list).layer(DefaultBodyLimit::disable()))
        .route("/v1/jobs/{id}", get(jobs::get).delete(jobs::delete))
        .route("/v1/estimate", post(jobs::estimate).layer(DefaultBodyLimit::disable()))
        .route("/v1/decode", post(remote::decode).layer(DefaultBodyLimit::disable()))
        .route("/v1/encode", post(remote::encode).layer(DefaultBodyLimit::disable()))
        // Hugging Face endpoint URLs end in a slash (`https://….cloud/`), so clients append `?model=` to one.
        .route("/v1/decode/", post(remote::decode).layer(DefaultBodyLimit::disable()))
        .route("/v1/encode/", post(remote::encode).layer(DefaultBodyLimit::disable()))
        .route("/v1/jobs/{id}/events", get(jobs::events))
        .route("/v1/jobs/{id}/result", get(jobs::result))
        .route("/v1/jobs/{id}/thumbnail", get(preview::thumbnail))
        .route("/v1/jobs/{id}/preview", get(preview::preview))
        .route("/v1/jobs/{id}/cancel", post(jobs::cancel))
        .route("/v1/jobs/{id}/pause", post(jobs::pause))
        .route("/v1/jobs/{id}/resume", post(jobs::resume))
        .route("/v1/jobs/{id}/whole", post(jobs::whole))
        // Before the fallbacks, so that they answer for /docs too.
        .merge(openapi::docs_routes().with_state(()))
        .fallback(|method: Method, uri: Uri| async move {
            error::ApiError::RouteNotFound { method: method.to_string(), path: uri.path().into() }
        })
        .method_not_allowed_fallback(|method: Method, uri: Uri| async move {
            error::ApiError::MethodNotAllowed { method: method.to_string(), path: uri.path().into() }
        })
        // A body that goes silent is cut (408 upload-stalled where the handler still answers).
        .layer(RequestBodyTimeoutLayer::new(Duration::from_secs(state.config.body_idle_timeout_s.max(1))))
        .layer(middleware::from_fn_with_state(state.clone(), auth::authenticate))
        .layer(middleware::from_fn_with_state(origins.clone(), browser::refuse_foreign_origins));
    // Outside the origin check, so that preflights of the listed origins are answered.
    let router = match origins.cors_layer() {
        Some(cors) => router.layer(cors),
        None => router,
    };
    router
        .layer(middleware::from_fn_with_state(hosts, hosts::refuse_unknown_hosts))
        .layer(middleware::from_fn(browser::security_headers))
        .layer(TraceLayer::new_for_http().make_span_with(|request: &axum::http::Request<axum::body::Body>| {
            tracing::debug_span!("request", method = %request.method(), uri = %uri_without_token(request.uri()), version = ?request.version())
        }))
        .with_state(state)
}

/// The request's path and query for the log, with an `access_token` value replaced: a token in a link
/// (`?access_token=`) must not reach a log at `VAEBOX_LOG=debug`.
fn uri_without_token(uri: &axum::http::Uri) -> String {
    let Some(query) = uri.query() else { return uri.path().to_string() };
    let query: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some(("access_token", _)) => "access_token=[redacted]".to_string(),
            _ => pair.to_string(),
        })
        .collect();
    format!("{}?{}", uri.path(), query.join("&"))
}
