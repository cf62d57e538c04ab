//! Who is calling. With `tokens` configured every `/v1/*` call names its token
//! (`Authorization: Bearer <secret>`, or HTTP Basic with the secret as the password — what a client that
//! only takes a URL sends for `http://any:<secret>@box/…`; 401 `unauthorized` otherwise) and a job belongs to the token that
//! made it: other tokens get 404 for it and do not see it in lists; admin tokens see all. Without tokens
//! everyone is the same anonymous caller. The page shell, `/healthz`, `/metrics` and the API description
//! stay open, so a browser can load the page before it has a token.
use axum::extract::{Request, State};
use base64::Engine;
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use super::state::AppState;
use crate::config::AccessToken;
use crate::jobs::Job;

#[derive(Debug, Clone)]
pub enum Caller {
    /// The box has no tokens.
    Anyone,
    Token { name: String, admin: bool },
}

impl Caller {
    /// The owner recorded on the jobs this caller makes.
    pub fn owner(&self) -> Option<String> {
        match self {
            Caller::Anyone => None,
            Caller::Token { name, .. } => Some(name.clone()),
        }
    }

    /// Whose jobs a listing shows: everyone's (`None`) or this token's.
    pub fn listing_owner(&self) -> Option<String> {
        match self {
            Caller::Token { name, admin: false } => Some(name.clone()),
            _ => None,
        }
    }

    pub fn sees(&self, job: &Job) -> bool {
        match self {
            Caller::Anyone | Caller::Token { admin: true, .. } => true,
            Caller::Token { name, .. } => job.owner.as_deref() == Some(name),
        }
    }
}

pub async fn authenticate(State(app): State<AppState>, mut request: Request, next: Next) -> Response {
    if !request.uri().path().starts_with("/v1/") {
        return next.run(request).await;
    }
    let caller = match identify(&app.config.tokens, &request) {
        Ok(caller) => caller,
        Err(refusal) => {
            let mut response = refusal.into_response();
            response.headers_mut().insert(header::WWW_AUTHENTICATE, header::HeaderValue::from_static("Bearer"));
            return response;
        }
    };
    request.extensions_mut().insert(caller);
    next.run(request).await
}

fn identify(tokens: &[AccessToken], request: &Request) -> Result<Caller, ApiError> {
    if tokens.is_empty() {
        return Ok(Caller::Anyone);
    }
    let from_header = request.headers().get(header::AUTHORIZATION).and_then(|value| value.to_str().ok()).and_then(header_secret);
    let presented = from_header
        .or_else(|| query_token(request))
        .ok_or_else(|| ApiError::Unauthorized("this box needs an access token: send `Authorization: Bearer <secret>`".into()))?;
    let presented = presented.as_str();
    tokens
        .iter()
        .find(|token| same_secret(token.secret.as_bytes(), presented.as_bytes()))
        .map(|token| Caller::Token { name: token.name.clone(), admin: token.admin })
        .ok_or_else(|| ApiError::Unauthorized("the access token is not valid on this box".into()))
}

/// The secret of `Bearer <secret>`, or of `Basic base64(user:secret)` (any user name; a lone user name
/// with an empty password counts as the secret too, as `curl -u secret:` sends it).
fn header_secret(value: &str) -> Option<String> {
    let (scheme, credentials) = value.split_once(' ')?;
    let credentials = credentials.trim();
    if scheme.eq_ignore_ascii_case("bearer") {
        return Some(credentials.to_string());
    }
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = String::from_utf8(base64::engine::general_purpose::STANDARD.decode(credentials).ok()?).ok()?;
    let (user, password) = decoded.split_once(':')?;
    Some(if password.is_empty() { user } else { password }.to_string())
}

/// `?access_token=` on a GET: what a browser can send where it cannot set headers (an event stream, a
/// download link). Only for reading; anything that changes a job needs the header.
fn query_token(request: &Request) -> Option<String> {
    if request.method() != axum::http::Method::GET {
        return None;
    }
    let query = request.uri().query()?;
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(query).ok()?;
    pairs.into_iter().find(|(key, _)| key == "access_token").map(|(_, value)| value)
}

/// Compares in time that does not depend on where the first difference is.
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |diff, (x, y)| diff | (x ^ y)) == 0
}
