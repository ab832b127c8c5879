//! A client for OpenAI-compatible chat-completion endpoints (vLLM, llama.cpp server,
//! mistral.rs server, OpenAI, ...), with SSE streaming, retries and cancellation.

mod collector;
mod request;
mod retry;
mod stream;

#[cfg(test)]
mod tests;

use std::time::Duration;

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use super::{estimate_tokens, ChatRequest, ChatResponse, FinishReason, LlmError, ModelBackend};
use crate::retry::{AfterFailure, RetryPolicy};
use collector::Collector;
use retry::error_chain;

/// Settings of an [`OpenAiBackend`].
#[derive(Debug, Clone, PartialEq)]
pub struct OpenAiConfig {
    /// The API root, e.g. `http://127.0.0.1:8080/v1`; `/chat/completions` is appended.
    pub base_url: String,
    /// The model name sent in each request.
    pub model: String,
    /// The environment variable holding the API key (sent as a Bearer token); `None`
    /// sends no key.
    pub api_key_env: Option<String>,
    /// Limit for establishing the TCP/TLS connection.
    pub connect_timeout: Duration,
    /// Longest silence allowed: waiting for the response headers, and between two
    /// chunks of the body. There is no limit on the total duration of a stream.
    pub idle_timeout: Duration,
    /// Retries after connection errors, HTTP 429 and 5xx (never once output has been
    /// streamed).
    pub retry: RetryPolicy,
    /// Whether to stream the reply (SSE) or wait for the whole answer.
    pub stream: bool,
    /// Asks the server for the sampled token ids (`"return_token_ids": true`, a vLLM
    /// extension that strict servers reject). Ids are read whenever the server sends
    /// them, whatever this says.
    pub return_token_ids: bool,
}

impl OpenAiConfig {
    /// A configuration with defaults: no API key, 10 s connect timeout, 180 s idle
    /// timeout, 3 retries from 0.5 s backoff capped at 8 s, streaming on.
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into(),
            model: model.into(),
            api_key_env: None,
            connect_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(180),
            retry: RetryPolicy::new(3, Duration::from_millis(500), Duration::from_secs(8)),
            stream: true,
            return_token_ids: false,
        }
    }

    /// The endpoint URL requests go to.
    pub fn endpoint(&self) -> String {
        format!("{}/chat/completions", self.base_url.trim_end_matches('/'))
    }
}

/// A [`ModelBackend`] talking to an OpenAI-compatible `/chat/completions` endpoint.
pub struct OpenAiBackend {
    cfg: OpenAiConfig,
    client: reqwest::Client,
    url: String,
    api_key: Option<String>,
}

impl std::fmt::Debug for OpenAiBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiBackend")
            .field("url", &self.url)
            .field("model", &self.cfg.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "<set>"))
            .finish()
    }
}

impl OpenAiBackend {
    /// Builds the backend: checks the URL, reads the API key, makes the HTTP client
    /// (system root certificates; the proxy from the environment except for loopback
    /// endpoints).
    pub fn new(cfg: OpenAiConfig) -> Result<Self, LlmError> {
        let base = cfg.base_url.trim();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(LlmError::Other(format!(
                "the model endpoint URL `{base}` must start with http:// or https:// \
                 (e.g. http://127.0.0.1:8080/v1)"
            )));
        }
        let url = cfg.endpoint();
        let parsed = reqwest::Url::parse(&url)
            .map_err(|e| LlmError::Other(format!("the model endpoint URL `{base}` is not valid: {e}")))?;
        if cfg.model.trim().is_empty() {
            return Err(LlmError::Other(format!("no model name given for the endpoint {base}")));
        }
        let api_key = match &cfg.api_key_env {
            None => None,
            Some(var) => match std::env::var(var) {
                Ok(key) if !key.trim().is_empty() => Some(key.trim().to_string()),
                _ => return Err(LlmError::MissingApiKey { var: var.clone() }),
            },
        };
        let mut builder = reqwest::Client::builder()
            .use_rustls_tls()
            .tls_built_in_native_certs(true)
            .connect_timeout(cfg.connect_timeout)
            .tcp_nodelay(true)
            .user_agent(concat!("agent/", env!("CARGO_PKG_VERSION")));
        if is_loopback(&parsed) {
            builder = builder.no_proxy();
        }
        let client = builder
            .build()
            .map_err(|e| LlmError::Other(format!("cannot set up the HTTP client: {}", error_chain(&e))))?;
        Ok(Self { cfg, client, url, api_key })
    }

    /// The configuration in use.
    pub fn config(&self) -> &OpenAiConfig {
        &self.cfg
    }
}

#[async_trait]
impl ModelBackend for OpenAiBackend {
    fn name(&self) -> String {
        self.cfg.model.clone()
    }

    /// The API takes `tools` and answers with `tool_calls` (servers without a tool parser
    /// send the model's call as text, which the loop parses too).
    fn native_tools(&self) -> bool {
        true
    }

    async fn chat(
        &self,
        request: &ChatRequest,
        on_delta: &mut (dyn for<'s> FnMut(&'s str) + Send),
        cancel: &CancellationToken,
    ) -> Result<ChatResponse, LlmError> {
        let body = self.request_body(request);
        let prompt_estimate: u64 = request.messages.iter().map(|m| estimate_tokens(&m.content)).sum();
        let mut retries = self.cfg.retry.start();
        loop {
            let failure = match self.attempt(&body, prompt_estimate, on_delta, cancel).await {
                Ok(resp) => return Ok(resp),
                Err(f) => f.redact(self.api_key.as_deref()),
            };
            match retries.after(failure, "model request", cancel).await {
                AfterFailure::Retry => {}
                AfterFailure::GiveUp(error) => return Err(error),
                AfterFailure::Cancelled => {
                    return Ok(Collector::new(prompt_estimate).finish(FinishReason::Cancelled, on_delta))
                }
            }
        }
    }
}

fn is_loopback(url: &reqwest::Url) -> bool {
    match url.host_str() {
        Some("localhost") => true,
        Some(h) => {
            h.trim_start_matches('[').trim_end_matches(']').parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
        }
        None => false,
    }
}
