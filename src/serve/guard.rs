//! What every request passes before it reaches the model: a `Host` header naming this
//! server (a web page whose name was rebound to 127.0.0.1 sends its own name, so a
//! browser cannot be turned into a client of a key-less server), and a cap on requests
//! in flight (beyond it a 429 at once, never a queue that grows without bound).

use std::net::IpAddr;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use futures_util::StreamExt;
use tokio::sync::Semaphore;

use super::error;

/// The names and addresses a request's `Host` may give.
#[derive(Debug, Clone)]
pub struct HostCheck {
    /// The address the server listens on (`--host`), as given.
    listen: String,
    /// `--allowed-host` names, lower-case.
    extra: Vec<String>,
}

impl HostCheck {
    /// Loopback names and addresses, `listen` (the `--host` value) and `extra`.
    pub fn new(listen: &str, extra: &[String]) -> HostCheck {
        HostCheck {
            listen: listen.trim_start_matches('[').trim_end_matches(']').to_ascii_lowercase(),
            extra: extra.iter().map(|h| h.trim().trim_end_matches('.').to_ascii_lowercase()).collect(),
        }
    }

    /// Whether `host` (a `Host` header: a name or address, with or without a port)
    /// names this server.
    pub fn allows(&self, host: &str) -> bool {
        let Some(name) = host_part(host) else { return false };
        if name == "localhost" || name == self.listen || self.extra.contains(&name) {
            return true;
        }
        // An address is never a rebound name: a page can only make a browser send one
        // it was itself loaded from. Loopback and the bound address are this server;
        // listening on every interface (0.0.0.0, ::), any of the machine's addresses is.
        let Ok(ip) = name.parse::<IpAddr>() else { return false };
        let listen = self.listen.parse::<IpAddr>().ok();
        ip.is_loopback() || Some(ip) == listen || listen.is_some_and(|l| l.is_unspecified())
    }
}

/// The name or address of a `Host` header, lower-case, without port, brackets or a
/// final dot; `None` when it is not a host at all.
fn host_part(host: &str) -> Option<String> {
    let host = host.trim().to_ascii_lowercase();
    let name = if let Some(rest) = host.strip_prefix('[') {
        let (inside, after) = rest.split_once(']')?;
        if !(after.is_empty() || after.strip_prefix(':').is_some_and(|p| p.chars().all(|c| c.is_ascii_digit()))) {
            return None;
        }
        inside.to_string()
    } else {
        match host.rsplit_once(':') {
            Some((h, p)) if p.chars().all(|c| c.is_ascii_digit()) => h.to_string(),
            Some(_) => return None,
            None => host,
        }
    };
    let name = name.trim_end_matches('.').to_string();
    (!name.is_empty() && !name.contains(['/', '@', ' '])).then_some(name)
}

/// Refuses a request whose `Host` header names another server (403, OpenAI's error shape).
pub async fn check_host(check: Arc<HostCheck>, req: Request, next: Next) -> Response {
    let given = req.headers().get(header::HOST).map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    match given {
        Some(h) if check.allows(&h) => next.run(req).await,
        given => {
            let shown = given.as_deref().unwrap_or("(none)");
            error(
                StatusCode::FORBIDDEN,
                "invalid_request_error",
                format!(
                    "the Host header `{}` names no address this server listens on (a guard against DNS rebinding); \
                     reach it as localhost or 127.0.0.1, or start `agent serve` with --allowed-host NAME",
                    shown.chars().filter(|c| !c.is_control()).take(200).collect::<String>()
                ),
            )
        }
    }
}

/// Lets a request through while fewer than the cap are in flight; the permit is held
/// until its response body (a stream, too) is finished or dropped.
pub async fn cap_requests(slots: Arc<Semaphore>, req: Request, next: Next) -> Response {
    let Ok(permit) = slots.clone().try_acquire_owned() else {
        let mut r = error(
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limit_error",
            "too many requests in flight on this server (see `agent serve --max-connections`); retry shortly".into(),
        );
        r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        return r;
    };
    let response = next.run(req).await;
    let (parts, body) = response.into_parts();
    let body = body.into_data_stream().map(move |chunk| {
        let _held = &permit;
        chunk
    });
    Response::from_parts(parts, Body::from_stream(body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_the_bound_address_and_named_hosts_pass() {
        let c = HostCheck::new("127.0.0.1", &["models.lan".into()]);
        for ok in
            ["localhost", "localhost:8080", "127.0.0.1:8080", "[::1]:8080", "[::1]", "LOCALHOST.", "models.lan:80"]
        {
            assert!(c.allows(ok), "{ok}");
        }
        for bad in
            ["evil.example", "evil.example:8080", "localhost.evil.example", "127.0.0.1.nip.io", "10.0.0.7", "", ":80"]
        {
            assert!(!c.allows(bad), "{bad}");
        }
        let any = HostCheck::new("0.0.0.0", &[]);
        assert!(any.allows("10.0.0.7:8080") && !any.allows("gpu-box:8080"));
        let named = HostCheck::new("gpu-box", &[]);
        assert!(named.allows("gpu-box:8080") && !named.allows("other:8080"));
    }
}
