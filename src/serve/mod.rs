//! `agent serve`: an OpenAI-compatible HTTP API over any [`ModelBackend`]:
//! `/v1/chat/completions` (native tool calls as `tool_calls`, `tool_choice`, `logprobs`),
//! `/v1/completions` (raw text or token ids), `/v1/models`; streaming and not.

mod chat;
mod completions;
mod generate;
mod guard;
mod logprobs;
#[cfg(test)]
mod tests;
mod tool_calls;
mod wire;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::sse::Event as SseEvent;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures_util::stream::{self, Stream};
use serde_json::{json, Value};
use tokio::sync::{mpsc, Semaphore};
use tokio_util::sync::CancellationToken;

use agent_llm::{LlmError, ModelBackend};

/// What the server serves and how it is reached.
#[derive(Debug, Clone, Default)]
pub struct ServeOptions {
    /// The id `/v1/models` lists and responses name.
    pub model_id: String,
    /// Other names a request may give for the same model (the spec it was started with).
    pub aliases: Vec<String>,
    /// The base model's name, when an adapter is applied over it.
    pub base: Option<String>,
    /// The name of the LoRA adapter applied to every request (a name, never its path:
    /// `/v1/models` is public on a key-less server).
    pub adapter: Option<String>,
    /// With a key, every route but `/health` wants `Authorization: Bearer KEY`.
    pub api_key: Option<String>,
    /// The address the server listens on (`--host`): a `Host` header may name it.
    pub listen_host: String,
    /// More names a `Host` header may give (`--allowed-host`), beyond loopback's.
    pub allowed_hosts: Vec<String>,
    /// Requests in flight at once; more get a 429 (0 takes [`DEFAULT_MAX_REQUESTS`]).
    pub max_requests: usize,
}

/// Requests in flight at once when the options name no cap.
pub const DEFAULT_MAX_REQUESTS: u32 = 64;

#[derive(Clone)]
struct AppState {
    backend: Arc<dyn ModelBackend>,
    model_id: String,
    /// Every name a request may use for the model.
    names: Arc<Vec<String>>,
    base: Option<String>,
    adapter: Option<String>,
    /// One request at a time, for engines whose batched outputs depend on the batch.
    gate: Option<Arc<Semaphore>>,
}

impl AppState {
    /// OpenAI's 404 for a model this server does not serve; `None` lets it through (an
    /// absent or empty name means the served model).
    fn refuse_model(&self, asked: Option<&str>) -> Option<Response> {
        let asked = asked.filter(|m| !m.is_empty())?;
        if self.names.iter().any(|n| n == asked) {
            return None;
        }
        let body = json!({"error": {
            "message": format!("The model `{asked}` does not exist or you do not have access to it. This server serves `{}`.", self.model_id),
            "type": "invalid_request_error",
            "param": "model",
            "code": "model_not_found",
        }});
        Some((StatusCode::NOT_FOUND, Json(body)).into_response())
    }
}

/// The API's routes over `backend`.
pub fn router(backend: Arc<dyn ModelBackend>, options: ServeOptions) -> Router {
    let mut names = vec![options.model_id.clone()];
    names.extend(options.aliases.iter().filter(|a| !a.is_empty()).cloned());
    let gate = (!backend.batch_invariant()).then(|| Arc::new(Semaphore::new(1)));
    let state = AppState {
        backend,
        model_id: options.model_id.clone(),
        names: Arc::new(names),
        base: options.base.clone(),
        adapter: options.adapter.clone(),
        gate,
    };
    let api = Router::new()
        .route("/v1/models", get(models))
        .route("/v1/models/{id}", get(model))
        .route("/v1/chat/completions", post(chat::chat))
        .route("/v1/completions", post(completions::completions));
    let cap = match options.max_requests {
        0 => DEFAULT_MAX_REQUESTS as usize,
        n => n,
    };
    let slots = Arc::new(Semaphore::new(cap));
    let api = api.layer(axum::middleware::from_fn(move |req: axum::extract::Request, next: axum::middleware::Next| {
        guard::cap_requests(slots.clone(), req, next)
    }));
    let api = match options.api_key.filter(|k| !k.is_empty()) {
        Some(key) => {
            let key = Arc::new(key);
            api.layer(axum::middleware::from_fn(move |req: axum::extract::Request, next: axum::middleware::Next| {
                let key = key.clone();
                async move { authorize(&key, req, next).await }
            }))
        }
        None => api,
    };
    let hosts = Arc::new(guard::HostCheck::new(&options.listen_host, &options.allowed_hosts));
    api.route("/health", get(|| async { "ok" }))
        .layer(axum::middleware::from_fn(move |req: axum::extract::Request, next: axum::middleware::Next| {
            guard::check_host(hosts.clone(), req, next)
        }))
        .with_state(state)
}

/// Lets a request through when it carries the key (compared in constant time).
async fn authorize(key: &str, req: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let given = req
        .headers()
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or_default();
    let same = given.len() == key.len() && given.bytes().zip(key.bytes()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0;
    if same {
        next.run(req).await
    } else {
        error(
            StatusCode::UNAUTHORIZED,
            "invalid_request_error",
            "missing or wrong API key: send `Authorization: Bearer KEY` with the key `agent serve` was given".into(),
        )
    }
}

/// Serves until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    backend: Arc<dyn ModelBackend>,
    options: ServeOptions,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(backend, options)).with_graceful_shutdown(shutdown).await
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

fn error(status: StatusCode, kind: &str, message: String) -> Response {
    (status, Json(json!({"error": {"message": message, "type": kind, "param": null, "code": null}}))).into_response()
}

fn bad_request(message: String) -> Response {
    error(StatusCode::BAD_REQUEST, "invalid_request_error", message)
}

fn model_entry(s: &AppState) -> Value {
    let mut entry = json!({"id": s.model_id, "object": "model", "created": now(), "owned_by": "agent"});
    if let Some(adapter) = &s.adapter {
        entry["parent"] = json!(s.base);
        entry["root"] = json!(s.base);
        entry["adapter"] = json!(adapter);
    }
    entry
}

async fn models(State(s): State<AppState>) -> Json<Value> {
    Json(json!({"object": "list", "data": [model_entry(&s)]}))
}

async fn model(State(s): State<AppState>, axum::extract::Path(id): axum::extract::Path<String>) -> Response {
    match s.refuse_model(Some(&id)) {
        Some(refused) => refused,
        None => Json(model_entry(&s)).into_response(),
    }
}

/// A comment every 10 s on a stream with nothing else to say: a long prompt on a slow CPU
/// (minutes, before the first token) must not trip a client's idle timeout.
fn keep_alive() -> axum::response::sse::KeepAlive {
    axum::response::sse::KeepAlive::new().interval(std::time::Duration::from_secs(10)).text("keep-alive")
}

/// The event stream; dropping it (client disconnected) cancels generation.
fn guarded(
    rx: mpsc::UnboundedReceiver<Result<SseEvent, Infallible>>,
    cancel: CancellationToken,
) -> impl Stream<Item = Result<SseEvent, Infallible>> {
    stream::unfold((rx, cancel.drop_guard()), |(mut rx, guard)| async move {
        rx.recv().await.map(|item| (item, (rx, guard)))
    })
}

/// Whose fault an engine error is, in OpenAI's words.
fn error_kind(e: &LlmError) -> (StatusCode, &'static str, Option<&'static str>) {
    match e {
        // The client's request is too long for the model: theirs to fix, as OpenAI says.
        LlmError::ContextOverflow { .. } => {
            (StatusCode::BAD_REQUEST, "invalid_request_error", Some("context_length_exceeded"))
        }
        LlmError::BadRequest(_) | LlmError::Unsupported(_) => (StatusCode::BAD_REQUEST, "invalid_request_error", None),
        LlmError::Cancelled => (StatusCode::SERVICE_UNAVAILABLE, "server_error", None),
        _ => (StatusCode::INTERNAL_SERVER_ERROR, "server_error", None),
    }
}

fn error_event(e: &LlmError) -> Value {
    let (_, kind, code) = error_kind(e);
    json!({"error": {"message": e.to_string(), "type": kind, "param": null, "code": code}})
}

fn backend_error(e: LlmError) -> Response {
    let (status, _, _) = error_kind(&e);
    (status, Json(error_event(&e))).into_response()
}
