//! `POST /v1/completions`: a raw prompt (text or token ids) continued, with the legacy
//! `logprobs` lists; for engines that sample tokens themselves.

use std::convert::Infallible;

use axum::body::Bytes;
use axum::extract::State;
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::generate::clamp_max_tokens;
use super::logprobs::{Legacy, Naming};
use super::wire::{finish_name, TextCompletionRequest, WireUsage};
use super::{backend_error, bad_request, error_event, guarded, now, AppState};
use agent_llm::{GenerationPiece, GenerationRequest, LlmError};

pub(super) async fn completions(State(s): State<AppState>, body: Bytes) -> Response {
    let req: TextCompletionRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => return bad_request(format!("invalid request body: {e}")),
    };
    if let Some(refused) = s.refuse_model(req.model.as_deref()) {
        return refused;
    }
    let mut generation = match req.to_generation() {
        Ok(g) => g,
        Err(e) => return bad_request(e),
    };
    if !s.backend.generates_tokens() {
        return bad_request(format!(
            "{} takes chats only: /v1/completions needs a model this server samples itself (a GGUF model on llama.cpp)",
            s.backend.name()
        ));
    }
    clamp_max_tokens(&mut generation.sampling, s.backend.context_window());
    let head = Head {
        id: format!("cmpl-{}", uuid::Uuid::new_v4().simple()),
        model: s.model_id.clone(),
        created: now(),
        naming: Naming { ids: req.return_tokens_as_token_ids },
        logprobs: req.logprobs.is_some(),
    };
    if req.stream {
        return stream(s, generation, head);
    }
    let cancel = CancellationToken::new();
    let _guard = cancel.clone().drop_guard();
    let mut ignore = |_: GenerationPiece<'_>| {};
    let g = match generate(&s, &generation, &mut ignore, &cancel).await {
        Ok(g) => g,
        Err(e) => return backend_error(e),
    };
    let logprobs = if head.logprobs {
        let mut l = Legacy::default();
        l.push(head.naming, &g.tokens);
        l.take()
    } else {
        Value::Null
    };
    Json(json!({
        "id": head.id,
        "object": "text_completion",
        "created": head.created,
        "model": head.model,
        "choices": [{"index": 0, "text": g.text, "logprobs": logprobs, "finish_reason": finish_name(g.finish_reason)}],
        "usage": WireUsage::from(g.usage),
    }))
    .into_response()
}

/// What every response of one request shares.
#[derive(Debug, Clone)]
struct Head {
    id: String,
    model: String,
    created: u64,
    naming: Naming,
    logprobs: bool,
}

impl Head {
    fn chunk(&self, text: &str, logprobs: Value, finish: Option<&str>) -> Value {
        json!({
            "id": self.id,
            "object": "text_completion",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "text": text, "logprobs": logprobs, "finish_reason": finish}],
        })
    }
}

async fn generate(
    s: &AppState,
    request: &GenerationRequest,
    on_piece: &mut (dyn for<'p> FnMut(GenerationPiece<'p>) + Send),
    cancel: &CancellationToken,
) -> Result<agent_llm::Generation, LlmError> {
    let _turn = match &s.gate {
        Some(g) => Some(g.acquire().await.map_err(|_| LlmError::Cancelled)?),
        None => None,
    };
    s.backend.generate(request, on_piece, cancel).await
}

fn stream(s: AppState, generation: GenerationRequest, head: Head) -> Response {
    let (tx, rx) = mpsc::unbounded_channel::<Result<SseEvent, Infallible>>();
    let cancel = CancellationToken::new();
    let task_cancel = cancel.clone();
    tokio::spawn(async move {
        let mut legacy = Legacy::default();
        let result = {
            let mut on_piece = |p: GenerationPiece<'_>| {
                let logprobs = if head.logprobs {
                    legacy.push(head.naming, p.tokens);
                    legacy.take()
                } else {
                    Value::Null
                };
                let chunk = head.chunk(p.text, logprobs, None);
                let _ = tx.send(Ok(SseEvent::default().data(chunk.to_string())));
            };
            generate(&s, &generation, &mut on_piece, &task_cancel).await
        };
        let last = match result {
            Ok(g) => {
                let mut last = head.chunk("", Value::Null, Some(finish_name(g.finish_reason)));
                last["usage"] = json!(WireUsage::from(g.usage));
                last
            }
            Err(e) => error_event(&e),
        };
        let _ = tx.send(Ok(SseEvent::default().data(last.to_string())));
        let _ = tx.send(Ok(SseEvent::default().data("[DONE]")));
    });
    Sse::new(guarded(rx, cancel)).keep_alive(super::keep_alive()).into_response()
}
