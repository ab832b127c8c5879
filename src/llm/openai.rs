//! A client for OpenAI-compatible chat-completion endpoints (vLLM, llama.cpp server,
//! mistral.rs server, OpenAI, ...), with SSE streaming, retries and cancellation.

use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures_util::StreamExt;
use rand::Rng;
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use super::sse::{SseDecoder, SseEvent};
use super::{estimate_tokens, ChatRequest, ChatResponse, FinishReason, LlmError, ModelBackend};
use crate::protocol::TokenUsage;

/// Longest wait a `Retry-After` header can impose.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);
/// How many characters of an error body go into [`LlmError::Http`].
const ERROR_BODY_CHARS: usize = 300;

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
    pub max_retries: u32,
    /// Whether to stream the reply (SSE) or wait for the whole answer.
    pub stream: bool,
    /// The first retry delay; it doubles on each further retry (plus jitter).
    pub initial_backoff: Duration,
    /// The cap of the retry delay.
    pub max_backoff: Duration,
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
            max_retries: 3,
            stream: true,
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(8),
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

/// How one attempt failed.
enum Failure {
    /// Worth another attempt (nothing was streamed to the caller yet).
    Retryable { error: LlmError, retry_after: Option<Duration> },
    /// Final.
    Fatal(LlmError),
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

    /// The JSON body of a request.
    fn request_body(&self, request: &ChatRequest) -> Value {
        let mut body = Map::new();
        body.insert("model".into(), Value::String(self.cfg.model.clone()));
        let messages = request
            .messages
            .iter()
            .map(|m| {
                let mut msg = Map::new();
                msg.insert("role".into(), serde_json::to_value(m.role).unwrap_or(Value::Null));
                msg.insert("content".into(), Value::String(m.content.clone()));
                Value::Object(msg)
            })
            .collect();
        body.insert("messages".into(), Value::Array(messages));
        let s = &request.sampling;
        if let Some(n) = s.max_tokens {
            body.insert("max_tokens".into(), n.into());
        }
        if let Some(t) = s.temperature {
            body.insert("temperature".into(), f32_json(t));
        }
        if let Some(p) = s.top_p {
            body.insert("top_p".into(), f32_json(p));
        }
        if let Some(k) = s.top_k {
            body.insert("top_k".into(), k.into());
        }
        if let Some(seed) = s.seed {
            body.insert("seed".into(), seed.into());
        }
        if !s.stop.is_empty() {
            body.insert("stop".into(), s.stop.clone().into());
        }
        if self.cfg.return_token_ids {
            body.insert("return_token_ids".into(), true.into());
        }
        if self.cfg.stream {
            body.insert("stream".into(), true.into());
            let mut opts = Map::new();
            opts.insert("include_usage".into(), true.into());
            body.insert("stream_options".into(), Value::Object(opts));
        } else {
            body.insert("stream".into(), false.into());
        }
        Value::Object(body)
    }

    /// The delay before retry number `attempt + 1`.
    fn backoff(&self, attempt: u32) -> Duration {
        let base = self.cfg.initial_backoff.saturating_mul(2u32.saturating_pow(attempt.min(20)));
        let base = base.min(self.cfg.max_backoff);
        let jitter = rand::thread_rng().gen_range(0.0..0.25);
        base.mul_f64(1.0 + jitter).min(self.cfg.max_backoff.max(self.cfg.initial_backoff))
    }

    fn timeout_error(&self) -> LlmError {
        LlmError::Timeout { url: self.url.clone(), secs: self.cfg.idle_timeout.as_secs_f64().ceil().max(1.0) as u64 }
    }

    /// Maps a transport error of reqwest.
    fn transport_failure(&self, e: &reqwest::Error, emitted: bool) -> Failure {
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

    /// One HTTP exchange. Cancellation yields `Ok` with [`FinishReason::Cancelled`].
    async fn attempt(
        &self,
        body: &Value,
        prompt_estimate: u64,
        on_delta: &mut (dyn FnMut(&str) + Send),
        cancel: &CancellationToken,
    ) -> Result<ChatResponse, Failure> {
        let out = Collector::new(prompt_estimate);
        let mut rb = self.client.post(&self.url).json(body);
        if let Some(key) = &self.api_key {
            rb = rb.bearer_auth(key);
        }
        if self.cfg.stream {
            rb = rb.header(reqwest::header::ACCEPT, "text/event-stream");
        }
        let sent = tokio::select! {
            biased;
            _ = cancel.cancelled() => return Ok(out.finish(FinishReason::Cancelled, on_delta)),
            r = tokio::time::timeout(self.cfg.idle_timeout, rb.send()) => r,
        };
        let resp = match sent {
            Err(_) => return Err(Failure::Fatal(self.timeout_error())),
            Ok(Err(e)) => return Err(self.transport_failure(&e, false)),
            Ok(Ok(resp)) => resp,
        };
        let status = resp.status();
        if !status.is_success() {
            let retry_after = resp
                .headers()
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(|s| Duration::from_secs(s).min(MAX_RETRY_AFTER));
            let text = tokio::select! {
                biased;
                _ = cancel.cancelled() => return Ok(out.finish(FinishReason::Cancelled, on_delta)),
                r = tokio::time::timeout(self.cfg.idle_timeout, resp.text()) => r,
            };
            let text = match text {
                Ok(Ok(t)) => t,
                _ => String::new(),
            };
            let mut body = trim_body(&text);
            if status.as_u16() == 404 {
                body.push_str(" (check the URL: it usually ends in /v1)");
            }
            let error = LlmError::Http { url: self.url.clone(), status: status.as_u16(), body };
            return Err(if status.as_u16() == 429 || status.is_server_error() {
                Failure::Retryable { error, retry_after }
            } else {
                Failure::Fatal(error)
            });
        }
        let is_sse = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.to_ascii_lowercase().contains("text/event-stream"));
        if is_sse {
            self.read_stream(resp, out, on_delta, cancel).await
        } else {
            self.read_whole(resp, out, on_delta, cancel).await
        }
    }

    /// Reads an SSE stream of `chat.completion.chunk` objects.
    async fn read_stream(
        &self,
        resp: reqwest::Response,
        mut out: Collector,
        on_delta: &mut (dyn FnMut(&str) + Send),
        cancel: &CancellationToken,
    ) -> Result<ChatResponse, Failure> {
        let mut stream = resp.bytes_stream();
        let mut decoder = SseDecoder::new();
        loop {
            let next = tokio::select! {
                biased;
                _ = cancel.cancelled() => {
                    drop(stream);
                    return Ok(out.finish(FinishReason::Cancelled, on_delta));
                }
                r = tokio::time::timeout(self.cfg.idle_timeout, stream.next()) => r,
            };
            let events = match next {
                Err(_) => return Err(Failure::Fatal(self.timeout_error())),
                Ok(Some(Err(e))) => return Err(self.transport_failure(&e, out.emitted)),
                Ok(Some(Ok(bytes))) => decoder.feed(&bytes),
                Ok(None) => {
                    if let Some(event) = decoder.finish() {
                        if self.handle_event(&event, &mut out, on_delta)? {
                            return Ok(out.finish_done(on_delta));
                        }
                    }
                    let reason = out.finish_reason.unwrap_or_else(|| {
                        tracing::warn!(url = %self.url, "the stream ended without [DONE] or a finish reason");
                        FinishReason::Other
                    });
                    return Ok(out.finish(reason, on_delta));
                }
            };
            for event in &events {
                if self.handle_event(event, &mut out, on_delta)? {
                    drop(stream);
                    return Ok(out.finish_done(on_delta));
                }
            }
        }
    }

    /// Handles one SSE event; `true` at `[DONE]`.
    fn handle_event(
        &self,
        event: &SseEvent,
        out: &mut Collector,
        on_delta: &mut (dyn FnMut(&str) + Send),
    ) -> Result<bool, Failure> {
        let data = event.data.trim();
        if data == "[DONE]" {
            return Ok(true);
        }
        if data.is_empty() {
            return Ok(false);
        }
        let chunk: Value = serde_json::from_str(data).map_err(|e| {
            Failure::Fatal(LlmError::BadResponse {
                url: self.url.clone(),
                reason: format!("a stream chunk is not JSON ({e}): {}", trim_body(data)),
            })
        })?;
        if let Some(err) = chunk.get("error").filter(|e| !e.is_null()) {
            return Err(Failure::Fatal(self.server_error(err)));
        }
        if event.event.as_deref() == Some("error") {
            return Err(Failure::Fatal(self.server_error(&chunk)));
        }
        out.take_ids_and_usage(&chunk);
        if let Some(choice) = first_choice(&chunk) {
            if let Some(delta) = choice.get("delta") {
                if let Some(r) = reasoning_of(delta) {
                    out.push_reasoning(r, on_delta);
                }
                if let Some(c) = delta.get("content").and_then(Value::as_str) {
                    out.push_content(c, on_delta);
                }
            }
            if let Some(ids) = token_ids(choice.get("token_ids")) {
                out.completion_ids.get_or_insert_with(Vec::new).extend(ids);
            }
            if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
                out.finish_reason = Some(map_finish_reason(reason));
            }
        }
        Ok(false)
    }

    /// Reads a whole (non-streamed) `chat.completion` object.
    async fn read_whole(
        &self,
        resp: reqwest::Response,
        mut out: Collector,
        on_delta: &mut (dyn FnMut(&str) + Send),
        cancel: &CancellationToken,
    ) -> Result<ChatResponse, Failure> {
        let bytes = tokio::select! {
            biased;
            _ = cancel.cancelled() => return Ok(out.finish(FinishReason::Cancelled, on_delta)),
            r = tokio::time::timeout(self.cfg.idle_timeout, resp.bytes()) => r,
        };
        let bytes = match bytes {
            Err(_) => return Err(Failure::Fatal(self.timeout_error())),
            Ok(Err(e)) => return Err(self.transport_failure(&e, false)),
            Ok(Ok(b)) => b,
        };
        let bad = |reason: String| Failure::Fatal(LlmError::BadResponse { url: self.url.clone(), reason });
        let value: Value = serde_json::from_slice(&bytes).map_err(|e| {
            bad(format!("the reply is not JSON ({e}): {}", trim_body(&String::from_utf8_lossy(&bytes))))
        })?;
        if let Some(err) = value.get("error").filter(|e| !e.is_null()) {
            return Err(Failure::Fatal(self.server_error(err)));
        }
        let choice = first_choice(&value).ok_or_else(|| bad("the reply has no `choices`".to_string()))?;
        out.take_ids_and_usage(&value);
        if let Some(message) = choice.get("message") {
            if let Some(r) = reasoning_of(message) {
                out.push_reasoning(r, on_delta);
            }
            if let Some(c) = message.get("content").and_then(Value::as_str) {
                out.push_content(c, on_delta);
            }
        } else if let Some(text) = choice.get("text").and_then(Value::as_str) {
            out.push_content(text, on_delta);
        }
        if let Some(ids) = token_ids(choice.get("token_ids")) {
            out.completion_ids = Some(ids);
        }
        let reason =
            choice.get("finish_reason").and_then(Value::as_str).map(map_finish_reason).unwrap_or(FinishReason::Stop);
        // Without streaming there is no first-token time to measure decode speed from.
        out.first_token = None;
        Ok(out.finish(reason, on_delta))
    }

    fn server_error(&self, err: &Value) -> LlmError {
        let msg = err
            .get("message")
            .and_then(Value::as_str)
            .map(str::to_string)
            .or_else(|| err.as_str().map(str::to_string))
            .unwrap_or_else(|| err.to_string());
        LlmError::BadResponse {
            url: self.url.clone(),
            reason: format!("the server reported an error: {}", trim_body(&msg)),
        }
    }
}

#[async_trait]
impl ModelBackend for OpenAiBackend {
    fn name(&self) -> String {
        self.cfg.model.clone()
    }

    async fn chat(
        &self,
        request: &ChatRequest,
        on_delta: &mut (dyn for<'s> FnMut(&'s str) + Send),
        cancel: &CancellationToken,
    ) -> Result<ChatResponse, LlmError> {
        let body = self.request_body(request);
        let prompt_estimate: u64 = request.messages.iter().map(|m| estimate_tokens(&m.content)).sum();
        let mut retries = 0;
        loop {
            match self.attempt(&body, prompt_estimate, on_delta, cancel).await {
                Ok(resp) => return Ok(resp),
                Err(Failure::Fatal(error)) => return Err(error),
                Err(Failure::Retryable { error, retry_after }) => {
                    if retries >= self.cfg.max_retries {
                        return Err(error);
                    }
                    let delay = retry_after.unwrap_or_else(|| self.backoff(retries));
                    retries += 1;
                    tracing::warn!(
                        "model request failed ({error}); retry {retries}/{} in {:.1} s",
                        self.cfg.max_retries,
                        delay.as_secs_f64()
                    );
                    tokio::select! {
                        biased;
                        _ = cancel.cancelled() => {
                            return Ok(Collector::new(prompt_estimate).finish(FinishReason::Cancelled, on_delta));
                        }
                        _ = tokio::time::sleep(delay) => {}
                    }
                }
            }
        }
    }
}

/// What one attempt has received so far.
struct Collector {
    text: String,
    in_think: bool,
    emitted: bool,
    finish_reason: Option<FinishReason>,
    usage: Option<TokenUsage>,
    prompt_ids: Option<Vec<u32>>,
    completion_ids: Option<Vec<u32>>,
    first_token: Option<Instant>,
    prompt_estimate: u64,
}

impl Collector {
    fn new(prompt_estimate: u64) -> Self {
        Self {
            text: String::new(),
            in_think: false,
            emitted: false,
            finish_reason: None,
            usage: None,
            prompt_ids: None,
            completion_ids: None,
            first_token: None,
            prompt_estimate,
        }
    }

    fn emit(&mut self, s: &str, on_delta: &mut (dyn FnMut(&str) + Send)) {
        if s.is_empty() {
            return;
        }
        self.first_token.get_or_insert_with(Instant::now);
        self.emitted = true;
        self.text.push_str(s);
        on_delta(s);
    }

    fn push_reasoning(&mut self, s: &str, on_delta: &mut (dyn FnMut(&str) + Send)) {
        if s.is_empty() {
            return;
        }
        if !self.in_think {
            self.in_think = true;
            self.emit("<think>", on_delta);
        }
        self.emit(s, on_delta);
    }

    fn push_content(&mut self, s: &str, on_delta: &mut (dyn FnMut(&str) + Send)) {
        if s.is_empty() {
            return;
        }
        self.close_think(on_delta);
        self.emit(s, on_delta);
    }

    fn close_think(&mut self, on_delta: &mut (dyn FnMut(&str) + Send)) {
        if self.in_think {
            self.in_think = false;
            self.emit("</think>", on_delta);
        }
    }

    /// Picks up `usage` and prompt token ids of a chunk or reply.
    fn take_ids_and_usage(&mut self, v: &Value) {
        if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
            let get = |k: &str| u.get(k).and_then(Value::as_u64);
            if let (Some(p), Some(c)) = (get("prompt_tokens"), get("completion_tokens")) {
                self.usage = Some(TokenUsage { prompt_tokens: p, completion_tokens: c });
            }
        }
        let ids = token_ids(v.get("prompt_token_ids"))
            .or_else(|| first_choice(v).and_then(|c| token_ids(c.get("prompt_token_ids"))));
        if let Some(ids) = ids {
            self.prompt_ids = Some(ids);
        }
    }

    /// Ends after `[DONE]`.
    fn finish_done(self, on_delta: &mut (dyn FnMut(&str) + Send)) -> ChatResponse {
        let reason = self.finish_reason.unwrap_or(FinishReason::Stop);
        self.finish(reason, on_delta)
    }

    fn finish(mut self, reason: FinishReason, on_delta: &mut (dyn FnMut(&str) + Send)) -> ChatResponse {
        self.close_think(on_delta);
        let usage = self.usage.unwrap_or_else(|| TokenUsage {
            prompt_tokens: self.prompt_ids.as_ref().map_or(self.prompt_estimate, |ids| ids.len() as u64),
            completion_tokens: self
                .completion_ids
                .as_ref()
                .map_or_else(|| estimate_tokens(&self.text), |ids| ids.len() as u64),
        });
        let decode_tokens_per_sec = self.first_token.and_then(|t| {
            let secs = t.elapsed().as_secs_f64();
            (secs > 0.0 && usage.completion_tokens > 0).then(|| usage.completion_tokens as f64 / secs)
        });
        ChatResponse {
            text: self.text,
            finish_reason: reason,
            usage,
            completion_token_ids: self.completion_ids,
            prompt_token_ids: self.prompt_ids,
            decode_tokens_per_sec,
        }
    }
}

fn first_choice(v: &Value) -> Option<&Value> {
    v.get("choices").and_then(Value::as_array).and_then(|c| c.first())
}

fn reasoning_of(v: &Value) -> Option<&str> {
    v.get("reasoning_content").and_then(Value::as_str).or_else(|| v.get("reasoning").and_then(Value::as_str))
}

fn token_ids(v: Option<&Value>) -> Option<Vec<u32>> {
    v?.as_array()?.iter().map(|x| x.as_u64().and_then(|n| u32::try_from(n).ok())).collect()
}

fn map_finish_reason(reason: &str) -> FinishReason {
    match reason {
        "stop" | "eos" | "stop_sequence" | "end_turn" => FinishReason::Stop,
        "length" | "max_tokens" => FinishReason::Length,
        _ => FinishReason::Other,
    }
}

/// An f32 as the JSON number it reads as (0.7, not 0.699999988079071).
fn f32_json(x: f32) -> Value {
    x.to_string().parse::<f64>().ok().and_then(serde_json::Number::from_f64).map(Value::Number).unwrap_or(Value::Null)
}

/// The first 300 characters of an error body, on one line.
fn trim_body(text: &str) -> String {
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
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::{ChatMessage, Role, SamplingParams};

    fn backend(stream: bool) -> OpenAiBackend {
        let mut cfg = OpenAiConfig::new("http://127.0.0.1:9/v1/", "m");
        cfg.stream = stream;
        OpenAiBackend::new(cfg).unwrap()
    }

    #[test]
    fn endpoint_joins_cleanly() {
        assert_eq!(OpenAiConfig::new("http://h:1/v1/", "m").endpoint(), "http://h:1/v1/chat/completions");
        assert_eq!(OpenAiConfig::new("http://h:1/v1", "m").endpoint(), "http://h:1/v1/chat/completions");
    }

    #[test]
    fn rejects_bad_urls_and_missing_keys() {
        assert!(OpenAiBackend::new(OpenAiConfig::new("ftp://x/v1", "m")).is_err());
        assert!(OpenAiBackend::new(OpenAiConfig::new("127.0.0.1:8080/v1", "m")).is_err());
        assert!(OpenAiBackend::new(OpenAiConfig::new("http://x/v1", " ")).is_err());
        let mut cfg = OpenAiConfig::new("http://x/v1", "m");
        cfg.api_key_env = Some("AGENT_TEST_SURELY_UNSET_KEY_VAR_1234".into());
        match OpenAiBackend::new(cfg) {
            Err(LlmError::MissingApiKey { var }) => {
                assert_eq!(var, "AGENT_TEST_SURELY_UNSET_KEY_VAR_1234")
            }
            other => panic!("expected MissingApiKey, got {other:?}"),
        }
    }

    #[test]
    fn request_body_fields() {
        let req = ChatRequest {
            messages: vec![ChatMessage::new(Role::System, "sys"), ChatMessage::new(Role::User, "hi")],
            sampling: SamplingParams {
                max_tokens: Some(64),
                temperature: Some(0.7),
                top_p: Some(0.95),
                top_k: None,
                seed: Some(42),
                stop: vec!["</end>".into()],
            },
        };
        let body = backend(true).request_body(&req);
        assert_eq!(body["model"], "m");
        assert_eq!(body["messages"][0]["role"], "system");
        assert_eq!(body["messages"][1]["content"], "hi");
        assert_eq!(body["max_tokens"], 64);
        assert_eq!(body["temperature"].as_f64(), Some(0.7));
        assert_eq!(body["top_p"].as_f64(), Some(0.95));
        assert_eq!(body["seed"], 42);
        assert_eq!(body["stop"][0], "</end>");
        assert!(body.get("top_k").is_none());
        assert!(body.get("return_token_ids").is_none());
        assert_eq!(body["stream"], true);
        assert_eq!(body["stream_options"]["include_usage"], true);

        let req = ChatRequest { messages: vec![], sampling: SamplingParams { top_k: Some(20), ..Default::default() } };
        let body = backend(false).request_body(&req);
        assert_eq!(body["top_k"], 20);
        assert_eq!(body["stream"], false);
        assert!(body.get("stream_options").is_none());
        assert!(body.get("stop").is_none());
        assert!(body.get("temperature").is_none());
    }

    #[test]
    fn backoff_grows_and_is_capped() {
        let mut cfg = OpenAiConfig::new("http://127.0.0.1:9/v1", "m");
        cfg.initial_backoff = Duration::from_millis(500);
        cfg.max_backoff = Duration::from_secs(4);
        let b = OpenAiBackend::new(cfg).unwrap();
        let d0 = b.backoff(0);
        assert!(d0 >= Duration::from_millis(500) && d0 <= Duration::from_millis(625), "{d0:?}");
        let d1 = b.backoff(1);
        assert!(d1 >= Duration::from_secs(1) && d1 <= Duration::from_millis(1250), "{d1:?}");
        for a in 3..40 {
            assert!(b.backoff(a) <= Duration::from_secs(4));
        }
    }

    #[test]
    fn trim_body_limits_and_flattens() {
        assert_eq!(trim_body("  {\"error\":\n\"x\"}  "), "{\"error\": \"x\"}");
        let long = "é".repeat(500);
        let t = trim_body(&long);
        assert_eq!(t.chars().count(), 301);
        assert!(t.ends_with('…'));
        assert_eq!(trim_body(""), "(empty body)");
    }

    #[test]
    fn helpers() {
        assert_eq!(map_finish_reason("stop"), FinishReason::Stop);
        assert_eq!(map_finish_reason("length"), FinishReason::Length);
        assert_eq!(map_finish_reason("tool_calls"), FinishReason::Other);
        assert_eq!(token_ids(Some(&serde_json::json!([1, 2, 3]))), Some(vec![1, 2, 3]));
        assert_eq!(token_ids(Some(&serde_json::json!([1, "x"]))), None);
        assert_eq!(token_ids(None), None);
        assert!(is_loopback(&reqwest::Url::parse("http://localhost:1/v1").unwrap()));
        assert!(is_loopback(&reqwest::Url::parse("http://127.0.0.2:1/v1").unwrap()));
        assert!(is_loopback(&reqwest::Url::parse("http://[::1]:1/v1").unwrap()));
        assert!(!is_loopback(&reqwest::Url::parse("https://api.openai.com/v1").unwrap()));
        assert_eq!(f32_json(0.7).as_f64(), Some(0.7));
    }

    #[test]
    fn collector_wraps_reasoning() {
        let mut seen = Vec::new();
        let mut on_delta = |s: &str| seen.push(s.to_string());
        let mut c = Collector::new(5);
        c.push_reasoning("hmm", &mut on_delta);
        c.push_reasoning(" ok", &mut on_delta);
        c.push_content("Answer", &mut on_delta);
        let r = c.finish(FinishReason::Stop, &mut on_delta);
        assert_eq!(r.text, "<think>hmm ok</think>Answer");
        assert_eq!(seen.concat(), r.text);
        assert_eq!(r.usage.prompt_tokens, 5);

        let mut c = Collector::new(0);
        c.push_reasoning("only thinking", &mut |_: &str| {});
        let r = c.finish(FinishReason::Cancelled, &mut |_: &str| {});
        assert_eq!(r.text, "<think>only thinking</think>");
    }
}
