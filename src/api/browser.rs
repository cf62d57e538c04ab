//! Browser safety: a page of another origin may not change anything here (POST, DELETE with a foreign
//! `Origin` get 403) unless `cors_origins` lists it, CORS answers only those origins, and every answer
//! carries headers that keep the page from being framed, sniffed or given inline script.
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::header::{self, HeaderName, HeaderValue};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tower_http::cors::{AllowOrigin, CorsLayer};

use super::error::ApiError;

/// The origins allowed besides the box's own, as browsers write them (`http://host:port`, lower case).
#[derive(Clone, Debug, Default)]
pub struct Origins(Arc<Vec<String>>);

impl Origins {
    /// Each configured origin in the form browsers send; entries that cannot be an `Origin` are dropped with a warning.
    pub fn new(configured: &[String]) -> Origins {
        let origins = configured
            .iter()
            .filter_map(|raw| {
                let origin = raw.trim().trim_end_matches('/').to_ascii_lowercase();
                let usable = origin.split_once("://").is_some_and(|(_, rest)| !rest.is_empty() && !rest.contains('/'))
                    && HeaderValue::from_str(&origin).is_ok();
                if !usable {
                    tracing::warn!(origin = %raw, "cors_origins: not an origin (scheme://host[:port]); ignored");
                }
                usable.then_some(origin)
            })
            .collect();
        Origins(Arc::new(origins))
    }

    /// CORS for the listed origins; `None` (no CORS headers at all) when there are none.
    pub fn cors_layer(&self) -> Option<CorsLayer> {
        if self.0.is_empty() {
            return None;
        }
        let origins: Vec<HeaderValue> = self.0.iter().filter_map(|o| HeaderValue::from_str(o).ok()).collect();
        let exposed = ["shape", "dtype", "x-vaebox-job"].map(HeaderName::from_static);
        Some(
            CorsLayer::new()
                .allow_origin(AllowOrigin::list(origins))
                .allow_methods([Method::GET, Method::POST, Method::DELETE])
                .allow_headers([header::CONTENT_TYPE, header::AUTHORIZATION, header::ACCEPT, header::RANGE])
                .expose_headers([&exposed[..], &[header::CONTENT_DISPOSITION]].concat())
                .max_age(Duration::from_secs(600)),
        )
    }

    fn allows(&self, origin: &str) -> bool {
        let origin = origin.trim_end_matches('/').to_ascii_lowercase();
        self.0.iter().any(|allowed| *allowed == origin)
    }
}

/// Refuses requests that change state (anything but GET, HEAD, OPTIONS) whose `Origin` is neither this
/// box (the `Host` they were sent to) nor listed. Requests without `Origin` (curl, scripts) pass.
pub async fn refuse_foreign_origins(State(origins): State<Origins>, request: Request, next: Next) -> Response {
    if matches!(*request.method(), Method::GET | Method::HEAD | Method::OPTIONS) {
        return next.run(request).await;
    }
    let Some(origin) = request.headers().get(header::ORIGIN) else { return next.run(request).await };
    let origin = origin.to_str().unwrap_or("(not text)").to_string();
    let host = request.headers().get(header::HOST).and_then(|h| h.to_str().ok()).or_else(|| request.uri().authority().map(|a| a.as_str()));
    if origins.allows(&origin) || host.is_some_and(|host| same_host(&origin, host)) {
        return next.run(request).await;
    }
    tracing::info!(%origin, method = %request.method(), path = request.uri().path(), "refused a request from a foreign origin");
    ApiError::ForeignOrigin { origin }.into_response()
}

/// Whether `origin` (`scheme://host[:port]`) names `host` (`host[:port]` as the client sent it). A missing
/// port is the scheme's default on both sides, so a box behind an HTTPS proxy matches its own pages too.
fn same_host(origin: &str, host: &str) -> bool {
    let Some((scheme, authority)) = origin.split_once("://") else { return false }; // "null": sandboxed or file pages
    let default_port = match scheme.to_ascii_lowercase().as_str() {
        "http" => "80",
        "https" => "443",
        _ => return false,
    };
    let (origin_host, origin_port) = split_port(authority);
    let (host, port) = split_port(host);
    origin_host.eq_ignore_ascii_case(host) && origin_port.unwrap_or(default_port) == port.unwrap_or(default_port)
}

/// `host:port` → (`host`, `port`); IPv6 hosts keep their brackets.
fn split_port(authority: &str) -> (&str, Option<&str>) {
    match authority.rsplit_once(':') {
        Some((host, port)) if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => (host, Some(port)),
        _ => (authority, None),
    }
}

/// The page and the API: scripts, styles and everything else from this box only, no inline script, no framing.
const PAGE_CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; object-src 'none'; \
    base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// `/docs` (Swagger UI): its page starts the bundle with one inline script, allowed by its hash (a change in
/// swagger-ui-dist's page shows in tests/it/openapi.rs, which renders it); the UI sets style attributes and
/// draws icons from data: URLs.
const DOCS_CSP: &str = "default-src 'self'; script-src 'self' 'sha256-mFVH9lXAn0Cq0+HIK4GnSSrQ5+r5vz9Os6Y4rmv8ZAA='; \
    style-src 'self' 'unsafe-inline'; img-src 'self' data:; object-src 'none'; base-uri 'none'; form-action 'self'; \
    frame-ancestors 'none'";

/// The headers every answer carries, `/docs` with its own CSP. Also written into the HTTP layer's own bare
/// error answers (`server::secured_io`), which never reach the middleware below.
pub const SECURITY_HEADERS: [(HeaderName, &str); 4] = [
    (header::CONTENT_SECURITY_POLICY, PAGE_CSP),
    (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
    (header::REFERRER_POLICY, "no-referrer"),
    (header::X_FRAME_OPTIONS, "DENY"),
];

/// Adds the security headers to every answer (harmless on JSON and files, needed on the pages).
pub async fn security_headers(request: Request, next: Next) -> Response {
    let docs = request.uri().path() == "/docs" || request.uri().path().starts_with("/docs/");
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    for (name, value) in SECURITY_HEADERS {
        let value = if docs && name == header::CONTENT_SECURITY_POLICY { DOCS_CSP } else { value };
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_origin_matches_the_host_it_was_sent_to() {
        assert!(same_host("http://192.168.1.5:8080", "192.168.1.5:8080"));
        assert!(same_host("http://Box.lan", "box.lan:80"));
        assert!(same_host("https://box.lan", "box.lan"));
        assert!(same_host("http://[::1]:8080", "[::1]:8080"));
        assert!(!same_host("http://192.168.1.5:8081", "192.168.1.5:8080"));
        assert!(!same_host("http://evil.example", "192.168.1.5:8080"));
        assert!(!same_host("http://box.lan", "box.lan:8080"));
        assert!(!same_host("null", "box.lan:8080"));
        assert!(!same_host("file://", "box.lan"));
    }

    #[test]
    fn configured_origins_are_normalised_and_bad_ones_dropped() {
        let origins = Origins::new(&["http://Tools.lan:3000/".into(), "tools.lan".into(), "http://x/path".into()]);
        assert_eq!(origins.0.as_slice(), ["http://tools.lan:3000"]);
        assert!(origins.allows("http://tools.lan:3000"));
        assert!(!origins.allows("http://tools.lan:3001"));
        assert!(Origins::new(&[]).cors_layer().is_none());
    }
}
