//! `POST /v1/chat/completions`, streaming and not: native tool calls returned as
//! `tool_calls` (whole, or as deltas), `tool_choice` honoured, `logprobs` from the
//! engine's sampled tokens.

use std::convert::Infallible;

use axum::body::Bytes;
use axum::extract::State;
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::generate::{clamp_max_tokens, run, Outcome, Plan};
use super::logprobs::Naming;
use super::tool_calls::{split, CallSplitter, Part};
use super::wire::{check_n, finish_name, CompletionRequest, ToolChoice, WireResponseFormat, WireUsage};
use super::{backend_error, bad_request, error_event, guarded, now, AppState};
use agent_llm::grammar::{json_value, native_calls, CallChoice, Calls, Openers};
use agent_llm::{FinishReason, GenerationPiece};

/// The opening written for the model when a call is required: the Hermes `<tool_call>`
/// up to the function's name (any), or into its arguments object (a named one, so that
/// the arguments are an object whatever the model would have written).
fn forced_opening(choice: &ToolChoice) -> String {
    match choice {
        ToolChoice::Required => "<tool_call>\n{\"name\": \"".into(),
        ToolChoice::Named(name) => format!("<tool_call>\n{{\"name\": {}, \"arguments\": {{", json!(name)),
        ToolChoice::Off | ToolChoice::Auto => String::new(),
    }
}

fn call_id() -> String {
    format!("call_{}", &uuid::Uuid::new_v4().simple().to_string()[..24])
}

fn wire_call(index: usize, name: &str, arguments: &str) -> Value {
    json!({"index": index, "id": call_id(), "type": "function", "function": {"name": name, "arguments": arguments}})
}

pub(super) async fn chat(State(s): State<AppState>, body: Bytes) -> Response {
    let req: CompletionRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => return bad_request(format!("invalid request body: {e}")),
    };
    if let Some(refused) = s.refuse_model(req.model.as_deref()) {
        return refused;
    }
    let checked = (|| {
        check_n(req.n)?;
        let choice = req.tool_choice()?;
        let logprobs = req.logprobs()?;
        Ok::<_, String>((choice, logprobs, req.to_chat()?))
    })();
    let (choice, logprobs, chat) = match checked {
        Ok(x) => x,
        Err(e) => return bad_request(e),
    };
    // With one tool, a required call can only be a call of it.
    let choice = match (&choice, req.tools.as_slice()) {
        (ToolChoice::Required, [only]) => ToolChoice::Named(only.function.name.clone()),
        _ => choice,
    };
    let mut chat = chat;
    let schema = req.response_format.as_ref().and_then(WireResponseFormat::schema);
    let prefill = if s.backend.enforces_grammar() {
        // The grammar forces the call (or the JSON) itself: no opening is written for
        // the model, and every call it makes is one the client's schemas accept.
        chat.grammar = match (&schema, &choice) {
            (Some(schema), _) => Some(json_value(schema)),
            (None, ToolChoice::Off) => None,
            (None, ToolChoice::Auto) => native_calls(&chat.tools, &CallChoice::Optional, Openers::Tagged, Calls::Many),
            (None, ToolChoice::Required) => {
                native_calls(&chat.tools, &CallChoice::Required, Openers::Tagged, Calls::Many)
            }
            (None, ToolChoice::Named(name)) => {
                native_calls(&chat.tools, &CallChoice::Named(name.clone()), Openers::Tagged, Calls::Many)
            }
        };
        String::new()
    } else if schema.is_some() {
        return bad_request(format!(
            "response_format: {} cannot hold its output to a schema (an API model); serve a local model for structured output",
            s.backend.name()
        ));
    } else {
        forced_opening(&choice)
    };
    let forced = matches!(choice, ToolChoice::Required | ToolChoice::Named(_));
    if forced && schema.is_none() && !s.backend.native_tools() {
        return bad_request(format!(
            "tool_choice: {} has no native tool format to force a call in; use tool_choice auto",
            s.backend.name()
        ));
    }
    let mut plan = Plan { chat, logprobs, prefill };
    clamp_max_tokens(&mut plan.chat.sampling, s.backend.context_window());
    let reply = Reply {
        id: format!("chatcmpl-{}", uuid::Uuid::new_v4().simple()),
        model: s.model_id.clone(),
        created: now(),
        parse_calls: choice != ToolChoice::Off,
        tools: req.tools.iter().map(|t| t.function.name.clone()).collect(),
        naming: Naming { ids: req.return_tokens_as_token_ids },
        logprobs: logprobs.is_some(),
    };
    if req.stream {
        stream(s, plan, reply)
    } else {
        whole(s, plan, reply).await
    }
}

/// What every response of one request shares.
#[derive(Debug, Clone)]
struct Reply {
    id: String,
    model: String,
    created: u64,
    parse_calls: bool,
    /// The offered tools' names.
    tools: Vec<String>,
    naming: Naming,
    logprobs: bool,
}

async fn whole(s: AppState, plan: Plan, reply: Reply) -> Response {
    let cancel = CancellationToken::new();
    // Dropped with the request when the client goes away: generation stops.
    let _guard = cancel.clone().drop_guard();
    let mut ignore = |_: GenerationPiece<'_>| {};
    let out: Outcome = match run(&s.backend, s.gate.as_ref(), &plan, &mut ignore, &cancel).await {
        Ok(o) => o,
        Err(e) => return backend_error(e),
    };
    let parts =
        if reply.parse_calls { split(&out.text, reply.tools.clone()) } else { vec![Part::Text(out.text.clone())] };
    let mut content = String::new();
    let mut calls = Vec::new();
    for part in parts {
        match part {
            Part::Text(t) => content.push_str(&t),
            Part::Call { name, arguments } => calls.push(wire_call(calls.len(), &name, &arguments)),
        }
    }
    for c in &out.calls {
        calls.push(wire_call(calls.len(), &c.name, &arguments_text(&c.arguments)));
    }
    for c in &mut calls {
        // `index` belongs to streamed deltas only.
        if let Some(o) = c.as_object_mut() {
            o.remove("index");
        }
    }
    let mut message = json!({"role": "assistant", "content": content});
    if !calls.is_empty() {
        let trimmed = content.trim();
        message["content"] = if trimmed.is_empty() { Value::Null } else { json!(trimmed) };
        message["tool_calls"] = Value::Array(calls.clone());
    }
    let finish = if calls.is_empty() { finish_name(out.finish) } else { "tool_calls" };
    let logprobs = if reply.logprobs {
        json!({"content": out.tokens.iter().map(|t| reply.naming.chat_entry(t)).collect::<Vec<_>>()})
    } else {
        Value::Null
    };
    Json(json!({
        "id": reply.id,
        "object": "chat.completion",
        "created": reply.created,
        "model": reply.model,
        "choices": [{"index": 0, "message": message, "logprobs": logprobs, "finish_reason": finish}],
        "usage": WireUsage::from(out.usage),
    }))
    .into_response()
}

/// A call's arguments as the JSON string OpenAI sends.
fn arguments_text(arguments: &Value) -> String {
    match arguments {
        Value::String(s) => s.clone(),
        Value::Null => "{}".into(),
        other => other.to_string(),
    }
}

fn stream(s: AppState, plan: Plan, reply: Reply) -> Response {
    let (tx, rx) = mpsc::unbounded_channel::<Result<SseEvent, Infallible>>();
    let cancel = CancellationToken::new();
    let task_cancel = cancel.clone();
    tokio::spawn(async move {
        let mut w = ChunkWriter::new(tx.clone(), reply);
        w.send(json!({"role": "assistant", "content": ""}), None);
        let result = {
            let mut on_piece = |p: GenerationPiece<'_>| w.piece(p);
            run(&s.backend, s.gate.as_ref(), &plan, &mut on_piece, &task_cancel).await
        };
        match result {
            Ok(out) => w.finish(&out),
            Err(e) => {
                let _ = tx.send(Ok(SseEvent::default().data(error_event(&e).to_string())));
            }
        }
        let _ = tx.send(Ok(SseEvent::default().data("[DONE]")));
    });
    Sse::new(guarded(rx, cancel)).keep_alive(super::keep_alive()).into_response()
}

/// Turns generated pieces into `chat.completion.chunk` events.
struct ChunkWriter {
    tx: mpsc::UnboundedSender<Result<SseEvent, Infallible>>,
    reply: Reply,
    splitter: Option<CallSplitter>,
    /// Log-probability entries not yet sent (their text may still be held back).
    pending: Vec<Value>,
    calls: usize,
    /// Whether prose went out (whitespace before a call is not sent as content).
    wrote_text: bool,
}

impl ChunkWriter {
    fn new(tx: mpsc::UnboundedSender<Result<SseEvent, Infallible>>, reply: Reply) -> Self {
        let splitter = reply.parse_calls.then(|| CallSplitter::new(reply.tools.clone()));
        ChunkWriter { tx, reply, splitter, pending: Vec::new(), calls: 0, wrote_text: false }
    }

    fn send(&mut self, delta: Value, finish: Option<&str>) {
        let mut choice = json!({"index": 0, "delta": delta, "finish_reason": finish});
        if self.reply.logprobs && !self.pending.is_empty() {
            choice["logprobs"] = json!({"content": std::mem::take(&mut self.pending)});
        }
        let chunk = json!({
            "id": self.reply.id,
            "object": "chat.completion.chunk",
            "created": self.reply.created,
            "model": self.reply.model,
            "choices": [choice],
        });
        let _ = self.tx.send(Ok(SseEvent::default().data(chunk.to_string())));
    }

    fn piece(&mut self, p: GenerationPiece<'_>) {
        if self.reply.logprobs {
            self.pending.extend(p.tokens.iter().map(|t| self.reply.naming.chat_entry(t)));
        }
        let parts = match &mut self.splitter {
            Some(s) => s.push(p.text),
            None => vec![Part::Text(p.text.to_string())],
        };
        for part in parts {
            self.part(part);
        }
    }

    fn part(&mut self, part: Part) {
        match part {
            Part::Text(t) => {
                if t.is_empty() || (self.splitter.is_some() && !self.wrote_text && t.trim().is_empty()) {
                    return;
                }
                self.wrote_text = true;
                self.send(json!({"content": t}), None);
            }
            Part::Call { name, arguments } => {
                let call = wire_call(self.calls, &name, &arguments);
                self.calls += 1;
                self.send(json!({"tool_calls": [call]}), None);
            }
        }
    }

    fn finish(&mut self, out: &Outcome) {
        let rest = self.splitter.as_mut().map(CallSplitter::finish).unwrap_or_default();
        for part in rest {
            self.part(part);
        }
        for c in &out.calls {
            self.part(Part::Call { name: c.name.clone(), arguments: arguments_text(&c.arguments) });
        }
        let finish = if self.calls > 0 && out.finish != FinishReason::Cancelled {
            "tool_calls"
        } else {
            finish_name(out.finish)
        };
        let mut last = json!({
            "id": self.reply.id,
            "object": "chat.completion.chunk",
            "created": self.reply.created,
            "model": self.reply.model,
            "choices": [{"index": 0, "delta": {}, "finish_reason": finish}],
            "usage": WireUsage::from(out.usage),
        });
        if self.reply.logprobs && !self.pending.is_empty() {
            last["choices"][0]["logprobs"] = json!({"content": std::mem::take(&mut self.pending)});
        }
        let _ = self.tx.send(Ok(SseEvent::default().data(last.to_string())));
    }
}
