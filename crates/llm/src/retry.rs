//! The one retry policy of the remote backends (OpenAI-compatible and Anthropic): which
//! failures are retried, after what delay (the server's `retry-after`, else exponential
//! backoff with jitter under a cap), and what a cancel during the wait returns.

use std::time::Duration;

use rand::Rng;
use tokio_util::sync::CancellationToken;

use crate::LlmError;

/// How often and after what delays a failed request is tried again.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    /// Retries after the first attempt.
    pub max_retries: u32,
    /// The first retry delay; it doubles on each further retry (plus up to 25% jitter).
    pub initial_backoff: Duration,
    /// The cap of the retry delay.
    pub max_backoff: Duration,
}

impl RetryPolicy {
    /// `max_retries` retries from `initial` doubling up to `max`.
    pub fn new(max_retries: u32, initial: Duration, max: Duration) -> RetryPolicy {
        RetryPolicy { max_retries, initial_backoff: initial, max_backoff: max }
    }

    /// The delay before retry number `retry + 1`, capped at `max_backoff` (or at
    /// `initial_backoff` when that is larger).
    pub fn backoff(&self, retry: u32) -> Duration {
        let cap = self.max_backoff.max(self.initial_backoff);
        let base = self.initial_backoff.saturating_mul(2u32.saturating_pow(retry.min(20))).min(cap);
        base.mul_f64(1.0 + rand::thread_rng().gen_range(0.0..0.25)).min(cap)
    }

    /// A fresh count of retries under this policy, for one request.
    pub fn start(&self) -> Retries {
        Retries { policy: *self, done: 0 }
    }
}

/// The retries of one request so far.
#[derive(Debug, Clone)]
pub struct Retries {
    policy: RetryPolicy,
    done: u32,
}

/// What to do after a failed attempt.
#[derive(Debug)]
pub enum AfterFailure {
    /// The wait is over: try again.
    Retry,
    /// Final: the error to report.
    GiveUp(LlmError),
    /// The request was cancelled during the wait.
    Cancelled,
}

impl Retries {
    /// Decides about `failure`: gives up on a fatal one or when the retries are spent,
    /// else logs the retry (`what` names the request) and waits out its delay (the
    /// server's `retry-after`, else the backoff) unless `cancel` fires first.
    pub async fn after(&mut self, failure: Failure, what: &str, cancel: &CancellationToken) -> AfterFailure {
        let (error, retry_after) = match failure {
            Failure::Fatal(error) => return AfterFailure::GiveUp(error),
            Failure::Retryable { error, retry_after } => (error, retry_after),
        };
        if self.done >= self.policy.max_retries {
            return AfterFailure::GiveUp(error);
        }
        let delay = retry_after.unwrap_or_else(|| self.policy.backoff(self.done));
        self.done += 1;
        tracing::warn!(
            "{what} failed ({error}); retry {}/{} in {:.1} s",
            self.done,
            self.policy.max_retries,
            delay.as_secs_f64()
        );
        tokio::select! {
            biased;
            _ = cancel.cancelled() => AfterFailure::Cancelled,
            _ = tokio::time::sleep(delay) => AfterFailure::Retry,
        }
    }
}

/// How one attempt failed.
#[derive(Debug)]
pub enum Failure {
    /// Worth another attempt (nothing was passed on to the caller yet), after the
    /// server's `retry-after` when it sent one.
    Retryable { error: LlmError, retry_after: Option<Duration> },
    /// Final.
    Fatal(LlmError),
}

impl Failure {
    /// The failure with the API key taken out of its text (see [`LlmError::redact`]).
    pub fn redact(self, secret: Option<&str>) -> Failure {
        match self {
            Failure::Retryable { error, retry_after } => {
                Failure::Retryable { error: error.redact(secret), retry_after }
            }
            Failure::Fatal(error) => Failure::Fatal(error.redact(secret)),
        }
    }
}

/// A `retry-after` header in seconds, bounded to a minute.
pub fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    headers
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map(|s| Duration::from_secs_f64(s.clamp(0.0, 60.0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(retries: u32) -> RetryPolicy {
        RetryPolicy::new(retries, Duration::from_millis(1), Duration::from_millis(4))
    }

    #[test]
    fn backoff_doubles_and_stays_under_the_cap() {
        let p = RetryPolicy::new(10, Duration::from_millis(100), Duration::from_millis(500));
        let first = p.backoff(0);
        assert!(first >= Duration::from_millis(100) && first <= Duration::from_millis(125), "{first:?}");
        let second = p.backoff(1);
        assert!(second >= Duration::from_millis(200) && second <= Duration::from_millis(250), "{second:?}");
        for r in 0..40 {
            assert!(p.backoff(r) <= Duration::from_millis(500));
        }
    }

    fn busy() -> Failure {
        Failure::Retryable { error: LlmError::Other("busy".into()), retry_after: None }
    }

    #[tokio::test]
    async fn retries_what_is_retryable_until_the_limit_and_gives_up_at_a_fatal_error() {
        let cancel = CancellationToken::new();
        let mut r = policy(2).start();
        assert!(matches!(r.after(busy(), "test request", &cancel).await, AfterFailure::Retry));
        assert!(matches!(r.after(busy(), "test request", &cancel).await, AfterFailure::Retry));
        assert!(
            matches!(r.after(busy(), "test request", &cancel).await, AfterFailure::GiveUp(LlmError::Other(m)) if m == "busy"),
            "two retries, then the third failure is final"
        );
        let mut r = policy(5).start();
        let fatal = Failure::Fatal(LlmError::Other("bad request".into()));
        assert!(matches!(r.after(fatal, "test request", &cancel).await, AfterFailure::GiveUp(_)));
    }

    #[tokio::test]
    async fn a_cancel_during_the_wait_ends_it_at_once() {
        let cancel = CancellationToken::new();
        let mut r = RetryPolicy::new(3, Duration::from_secs(30), Duration::from_secs(60)).start();
        cancel.cancel();
        let started = std::time::Instant::now();
        assert!(matches!(r.after(busy(), "test request", &cancel).await, AfterFailure::Cancelled));
        assert!(started.elapsed() < Duration::from_secs(30));
    }
}
