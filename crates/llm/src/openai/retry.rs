//! How one attempt's failures are classed for the retry policy ([`crate::retry`]), and
//! readable descriptions of transport errors and error bodies.

use super::OpenAiBackend;
use crate::retry::Failure;
use crate::LlmError;

/// How many characters of an error body go into [`LlmError::Http`].
const ERROR_BODY_CHARS: usize = 300;

impl OpenAiBackend {
    pub(super) fn timeout_error(&self) -> LlmError {
        LlmError::Timeout { url: self.url.clone(), secs: self.cfg.idle_timeout.as_secs_f64().ceil().max(1.0) as u64 }
    }

    /// Maps a transport error of reqwest.
    pub(super) fn transport_failure(&self, e: &reqwest::Error, emitted: bool) -> Failure {
        if e.is_builder() {
            return Failure::Fatal(LlmError::Other(format!(
                "cannot build the request to {}: {}",
                self.url,
                error_chain(e)
            )));
        }
        if e.is_timeout() && !e.is_connect() {
            return Failure::Fatal(self.timeout_error());
        }
        let reason = if e.is_connect() && e.is_timeout() {
            format!("connection timed out after {} s", self.cfg.connect_timeout.as_secs_f64().ceil() as u64)
        } else {
            transport_reason(e)
        };
        let reason = if emitted { format!("the connection broke mid-reply: {reason}") } else { reason };
        let error = LlmError::Unreachable { url: self.url.clone(), reason };
        if emitted {
            Failure::Fatal(error)
        } else {
            Failure::Retryable { error, retry_after: None }
        }
    }
}

/// The first 300 characters of an error body, on one line.
pub(super) fn trim_body(text: &str) -> String {
    let text = text.trim();
    let mut out: String = text.chars().take(ERROR_BODY_CHARS).map(|c| if c.is_control() { ' ' } else { c }).collect();
    if text.chars().nth(ERROR_BODY_CHARS).is_some() {
        out.push('…');
    }
    if out.is_empty() {
        out.push_str("(empty body)");
    }
    out
}

/// The root cause of a transport error, short and readable.
fn transport_reason(e: &reqwest::Error) -> String {
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    let mut innermost = None;
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind::*;
            let known = match io.kind() {
                ConnectionRefused => Some("connection refused"),
                ConnectionReset => Some("connection reset by the server"),
                ConnectionAborted => Some("connection aborted"),
                TimedOut => Some("connection timed out"),
                AddrNotAvailable => Some("address not available"),
                _ => None,
            };
            if let Some(k) = known {
                return k.to_string();
            }
        }
        innermost = Some(s);
        source = s.source();
    }
    match innermost {
        Some(s) => s.to_string(),
        None => e.to_string(),
    }
}

/// An error with its causes, for messages.
pub(super) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}
