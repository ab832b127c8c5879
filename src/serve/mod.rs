//! `agent serve`: an OpenAI-compatible HTTP API (`/v1/chat/completions`, streaming and
//! not, and `/v1/models`) over any [`ModelBackend`], so other tools and hosts can use a
//! local model.

mod wire;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures_util::stream::{self, Stream};
use serde_json::json;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use agent_llm::{ChatResponse, LlmError, ModelBackend};
use wire::{finish_name, CompletionRequest, WireUsage};

#[derive(Clone)]
struct AppState {
    backend: Arc<dyn ModelBackend>,
    model_id: String,
}

/// The API's routes over `backend`, advertised as `model_id`; with `api_key`, every
/// route but `/health` wants `Authorization: Bearer KEY`.
pub fn router(backend: Arc<dyn ModelBackend>, model_id: impl Into<String>, api_key: Option<String>) -> Router {
    let state = AppState { backend, model_id: model_id.into() };
    let api = Router::new().route("/v1/models", get(models)).route("/v1/chat/completions", post(chat));
    let api = match api_key {
        Some(key) => {
            let key = Arc::new(key);
            api.layer(axum::middleware::from_fn(move |req: axum::extract::Request, next: axum::middleware::Next| {
                let key = key.clone();
                async move { authorize(&key, req, next).await }
            }))
        }
        None => api,
    };
    api.route("/health", get(|| async { "ok" })).with_state(state)
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
    model_id: impl Into<String>,
    api_key: Option<String>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(backend, model_id, api_key)).with_graceful_shutdown(shutdown).await
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

fn error(status: StatusCode, kind: &str, message: String) -> Response {
    (status, Json(json!({"error": {"message": message, "type": kind}}))).into_response()
}

async fn models(State(s): State<AppState>) -> Json<serde_json::Value> {
    Json(json!({
        "object": "list",
        "data": [{"id": s.model_id, "object": "model", "created": now(), "owned_by": "agent"}]
    }))
}

async fn chat(State(s): State<AppState>, body: Bytes) -> Response {
    let req: CompletionRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => return error(StatusCode::BAD_REQUEST, "invalid_request_error", format!("invalid request body: {e}")),
    };
    let chat = match req.to_chat() {
        Ok(c) => c,
        Err(e) => return error(StatusCode::BAD_REQUEST, "invalid_request_error", e),
    };
    let id = format!("chatcmpl-{}", uuid::Uuid::new_v4().simple());
    // Responses name the model that answered, streaming or not (as OpenAI's API does).
    let model = s.model_id.clone();
    let cancel = CancellationToken::new();
    if !req.stream {
        // Dropped with the request when the client goes away: generation stops.
        let _guard = cancel.clone().drop_guard();
        let mut ignore = |_: &str| {};
        return match s.backend.chat(&chat, &mut ignore, &cancel).await {
            Ok(r) => Json(completion_json(&id, &model, &r)).into_response(),
            Err(e) => backend_error(e),
        };
    }
    let (tx, rx) = mpsc::unbounded_channel::<Result<SseEvent, Infallible>>();
    let backend = s.backend.clone();
    let task_cancel = cancel.clone();
    let (cid, cmodel) = (id.clone(), model.clone());
    tokio::spawn(async move {
        let created = now();
        let first = chunk_json(&cid, &cmodel, created, json!({"role": "assistant", "content": ""}), None, None);
        let _ = tx.send(Ok(SseEvent::default().data(first.to_string())));
        let delta_tx = tx.clone();
        let (did, dmodel) = (cid.clone(), cmodel.clone());
        let mut on_delta = move |piece: &str| {
            let c = chunk_json(&did, &dmodel, created, json!({"content": piece}), None, None);
            let _ = delta_tx.send(Ok(SseEvent::default().data(c.to_string())));
        };
        match backend.chat(&chat, &mut on_delta, &task_cancel).await {
            Ok(r) => {
                let usage = WireUsage::from(r.usage);
                let last =
                    chunk_json(&cid, &cmodel, created, json!({}), Some(finish_name(r.finish_reason)), Some(usage));
                let _ = tx.send(Ok(SseEvent::default().data(last.to_string())));
            }
            Err(e) => {
                let (kind, code) = match &e {
                    LlmError::ContextOverflow { .. } => ("invalid_request_error", Some("context_length_exceeded")),
                    _ => ("server_error", None),
                };
                let err = json!({"error": {"message": e.to_string(), "type": kind, "code": code}});
                let _ = tx.send(Ok(SseEvent::default().data(err.to_string())));
            }
        }
        let _ = tx.send(Ok(SseEvent::default().data("[DONE]")));
    });
    Sse::new(guarded(rx, cancel)).into_response()
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

fn backend_error(e: LlmError) -> Response {
    if let LlmError::ContextOverflow { .. } = e {
        // The client's request is too long for the model: theirs to fix, as OpenAI says.
        let body = json!({"error": {"message": e.to_string(), "type": "invalid_request_error", "code": "context_length_exceeded"}});
        return (StatusCode::BAD_REQUEST, Json(body)).into_response();
    }
    let status = match e {
        LlmError::Cancelled => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    error(status, "server_error", e.to_string())
}

fn completion_json(id: &str, model: &str, r: &ChatResponse) -> serde_json::Value {
    json!({
        "id": id,
        "object": "chat.completion",
        "created": now(),
        "model": model,
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": r.text},
            "finish_reason": finish_name(r.finish_reason),
        }],
        "usage": WireUsage::from(r.usage),
    })
}

fn chunk_json(
    id: &str,
    model: &str,
    created: u64,
    delta: serde_json::Value,
    finish: Option<&str>,
    usage: Option<WireUsage>,
) -> serde_json::Value {
    let mut v = json!({
        "id": id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    });
    if let Some(u) = usage {
        v["usage"] = json!(u);
    }
    v
}
