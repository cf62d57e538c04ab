//! Webhooks: a job's `callback_url` is checked at submission (`check_url`, and `refuse_own_api` against where
//! the box's APIs listen, `api_listens`), and once the job has ended a `Deliverer` in every process takes it
//! from the store, signs the job's JSON (`signature`) and POSTs it (`post`), retrying with back-off until a
//! 2xx answers or a day has gone by.
pub mod api_listens;
mod deliverer;
mod host_slots;
mod post;
pub mod signature;

pub use deliverer::Deliverer;

use std::net::{IpAddr, SocketAddr};

use super::QueueError;
use crate::config::Config;
use crate::error_codes as codes;
use crate::jobs::JobStore;

/// The URL a job may be given: the box signs deliveries (`callback_secret`), the host is one the box may
/// call (`callback_hosts`), and it is plain `http://` (the client has no TLS). The URL as it will be called.
pub fn check_url(raw: &str, config: &Config) -> Result<String, QueueError> {
    if config.callback_secret.is_empty() {
        let why = "this box signs no webhooks: it has no callback_secret (config.toml or VAEBOX_CALLBACK_SECRET)";
        return Err(QueueError::refused(codes::CALLBACK_NOT_CONFIGURED, why));
    }
    let invalid = |why: &str| QueueError::refused(codes::INVALID_CALLBACK_URL, format!("callback_url `{raw}` {why}"));
    let url = url::Url::parse(raw.trim()).map_err(|e| invalid(&format!("is not a URL ({e})")))?;
    match url.scheme() {
        "http" => {}
        "https" => {
            let why = format!("callback_url `{raw}`: this box's HTTP client has no TLS; use an http:// receiver on the LAN");
            return Err(QueueError::refused(codes::CALLBACK_HTTPS_UNSUPPORTED, why));
        }
        other => return Err(invalid(&format!("is `{other}:`, not http://"))),
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(invalid("carries a user name or password; the signature is the receiver's proof"));
    }
    let host = url.host().ok_or_else(|| invalid("names no host"))?;
    if !config.callback_hosts().allows_host(&host) {
        let why = match config.callback_hosts.is_empty() {
            true => format!("callback_url `{raw}`: this box calls no hosts (callback_hosts is empty)"),
            false => format!("callback_url `{raw}`: host `{host}` is not in the box's callback_hosts"),
        };
        return Err(QueueError::refused(codes::CALLBACK_HOST_NOT_ALLOWED, why));
    }
    Ok(url.to_string())
}

/// A `callback_url` that names an address where one of the box's APIs listens (its own, or another
/// process's of a split box) is refused: a webhook would act on the box as nobody. A name is looked up at each
/// try instead, by the process that sends it.
pub async fn refuse_own_api(raw: &str, store: &dyn JobStore) -> Result<(), QueueError> {
    let Ok(url) = url::Url::parse(raw) else { return Ok(()) };
    let ip = match url.host() {
        Some(url::Host::Ipv4(ip)) => IpAddr::V4(ip),
        Some(url::Host::Ipv6(ip)) => IpAddr::V6(ip),
        _ => return Ok(()),
    };
    let target = SocketAddr::new(ip, url.port_or_known_default().unwrap_or(80));
    match api_listens::api_at(target, &api_listens::known(store).await?) {
        Some(api) => {
            let why = format!("callback_url `{raw}` is this box's own API (it listens on {api}): a webhook may not call into it");
            Err(QueueError::refused(codes::CALLBACK_HOST_NOT_ALLOWED, why))
        }
        None => Ok(()),
    }
}

/// The tokens' own `callback_url`s, checked as a job's would be, or why start-up must stop.
pub fn check_token_urls(config: &Config) -> Result<(), String> {
    for token in &config.tokens {
        if let Some(url) = &token.callback_url {
            check_url(url, config).map_err(|e| format!("tokens.{}.callback_url: {e}", token.name))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(raw: &str, config: &Config) -> &'static str {
        check_url(raw, config).err().map(|e| e.code()).unwrap_or("accepted")
    }

    #[test]
    fn urls_are_checked_against_the_secret_and_the_hosts() {
        let open = Config { callback_secret: "a-long-enough-secret".into(), callback_hosts: vec!["hooks.lan".into(), "10.0.0.0/8".into()], ..Config::default() };
        assert_eq!(code("http://hooks.lan:9000/done", &Config::default()), codes::CALLBACK_NOT_CONFIGURED);
        assert_eq!(code("http://hooks.lan:9000/done", &open), "accepted");
        assert_eq!(code("http://10.3.4.5/x", &open), "accepted");
        assert_eq!(code("http://192.168.1.1/x", &open), codes::CALLBACK_HOST_NOT_ALLOWED);
        assert_eq!(code("http://hooks.lan.evil.example/x", &open), codes::CALLBACK_HOST_NOT_ALLOWED);
        assert_eq!(code("https://hooks.lan/x", &open), codes::CALLBACK_HTTPS_UNSUPPORTED);
        assert_eq!(code("ftp://hooks.lan/x", &open), codes::INVALID_CALLBACK_URL);
        assert_eq!(code("http://user:pw@hooks.lan/x", &open), codes::INVALID_CALLBACK_URL);
        assert_eq!(code("hooks.lan/x", &open), codes::INVALID_CALLBACK_URL);
    }
}
