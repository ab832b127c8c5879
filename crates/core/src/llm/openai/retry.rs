//! Failures of one attempt: which are worth a retry and after what delay, and readable
//! descriptions of transport errors and error bodies.

use std::time::Duration;

use rand::Rng;

use super::OpenAiBackend;
use crate::llm::LlmError;

/// How many characters of an error body go into [`LlmError::Http`].
const ERROR_BODY_CHARS: usize = 300;

/// How one attempt failed.
pub(super) enum Failure {
    /// Worth another attempt (nothing was streamed to the caller yet).
    Retryable { error: LlmError, retry_after: Option<Duration> },
    /// Final.
    Fatal(LlmError),
}

impl Failure {
    /// The failure with the API key taken out of its text (see [`LlmError::redact`]).
    pub(super) fn redact(self, secret: Option<&str>) -> Failure {
        match self {
            Failure::Retryable { error, retry_after } => {
                Failure::Retryable { error: error.redact(secret), retry_after }
            }
            Failure::Fatal(error) => Failure::Fatal(error.redact(secret)),
        }
    }
}

impl OpenAiBackend {
    /// The delay before retry number `attempt + 1`.
    pub(super) fn backoff(&self, attempt: u32) -> Duration {
        let base = self.cfg.initial_backoff.saturating_mul(2u32.saturating_pow(attempt.min(20)));
        let base = base.min(self.cfg.max_backoff);
        let jitter = rand::thread_rng().gen_range(0.0..0.25);
        base.mul_f64(1.0 + jitter).min(self.cfg.max_backoff.max(self.cfg.initial_backoff))
    }

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
