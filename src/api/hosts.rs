//! DNS rebinding: a page of `evil.example` whose name is made to resolve to this box is, for the browser,
//! same-origin with the box, so the origin check lets it through. Its requests still carry
//! `Host: evil.example`, so the box answers only to names it has: IP addresses, `localhost`, this machine's
//! host name (and `NAME.local`), and `allowed_hosts`; anything else gets 403 `unknown-host`.
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::ApiError;

#[derive(Clone, Debug)]
pub struct Hosts {
    /// Lower-case names without ports; `None` accepts any (`allowed_hosts = ["*"]`).
    names: Option<Arc<Vec<String>>>,
}

impl Hosts {
    pub fn new(allowed: &[String], machine_name: Option<String>) -> Hosts {
        if allowed.iter().any(|name| name.trim() == "*") {
            return Hosts { names: None };
        }
        let mut names: Vec<String> = allowed.iter().map(|name| name.trim().trim_end_matches('.').to_ascii_lowercase()).collect();
        names.push("localhost".into());
        if let Some(machine) = machine_name.map(|name| name.trim().to_ascii_lowercase()).filter(|name| !name.is_empty()) {
            names.push(format!("{machine}.local"));
            names.push(machine);
        }
        Hosts { names: Some(Arc::new(names)) }
    }

    /// The names this machine answers to, from the kernel (no lookup, no network).
    pub fn machine_name() -> Option<String> {
        std::fs::read_to_string("/proc/sys/kernel/hostname").ok()
    }

    /// `host` as the client sent it: `name[:port]`, `1.2.3.4[:port]` or `[v6][:port]`.
    fn allows(&self, host: &str) -> bool {
        let Some(names) = &self.names else { return true };
        let name = match host.rsplit_once(':') {
            Some((name, port)) if !host.ends_with(']') && port.bytes().all(|b| b.is_ascii_digit()) => name,
            _ => host,
        };
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        let bracketed_v6 = name.strip_prefix('[').and_then(|n| n.strip_suffix(']')).is_some_and(|n| n.parse::<std::net::Ipv6Addr>().is_ok());
        bracketed_v6 || name.parse::<std::net::Ipv4Addr>().is_ok() || names.iter().any(|allowed| *allowed == name)
    }
}

/// Every request, pages included (a rebinding page would read results and lists, not only post).
/// Requests without `Host` (HTTP/1.0 tools) pass: browsers always send it. Two `Host` or two `Origin`
/// headers are refused for every method: a proxy in front may read the other one.
pub async fn refuse_unknown_hosts(State(hosts): State<Hosts>, request: Request, next: Next) -> Response {
    if let Some(name) = [header::HOST, header::ORIGIN].into_iter().find(|name| request.headers().get_all(name).iter().nth(1).is_some()) {
        tracing::info!(header = name.as_str(), path = request.uri().path(), "refused a request with a header given twice");
        return ApiError::DuplicateHeader { name: name.as_str().to_string() }.into_response();
    }
    let host = request.headers().get(header::HOST).map(|value| value.to_str().unwrap_or("(not text)").to_string());
    match host {
        Some(host) if !hosts.allows(&host) => {
            tracing::info!(%host, path = request.uri().path(), "refused a request for an unknown host name");
            ApiError::UnknownHost { host }.into_response()
        }
        _ => next.run(request).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_local_names_and_listed_names_pass() {
        let hosts = Hosts::new(&["Vae.Example.lan".into()], Some("gpubox\n".into()));
        for ok in ["127.0.0.1:8080", "192.168.1.5", "[::1]:8080", "[fe80::1]", "localhost:8080", "gpubox", "GPUBOX.local:80", "vae.example.lan."] {
            assert!(hosts.allows(ok), "{ok}");
        }
        for refused in ["evil.example:8080", "gpubox.evil.example", "192.168.1.5.nip.io", "vae.example.lan.evil", "[not-v6]", "(not text)"] {
            assert!(!hosts.allows(refused), "{refused}");
        }
        assert!(Hosts::new(&["*".into()], None).allows("anything.example"));
    }
}
