//! One HTTP exchange: the JSON body of a chat request, sending it, and the handling of
//! the response status before the reply is read.

use std::collections::HashSet;

use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use super::collector::Collector;
use super::retry::trim_body;
use super::OpenAiBackend;
use crate::retry::Failure;
use crate::{ChatMessage, ChatRequest, ChatResponse, FinishReason, LlmError, Role};

impl OpenAiBackend {
    /// The JSON body of a request.
    pub(super) fn request_body(&self, request: &ChatRequest) -> Value {
        let mut body = Map::new();
        body.insert("model".into(), Value::String(self.cfg.model.clone()));
        body.insert("messages".into(), Value::Array(wire_messages(&request.messages)));
        if !request.tools.is_empty() {
            let tools = request
                .tools
                .iter()
                .map(|t| {
                    serde_json::json!({
                        "type": "function",
                        "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
                    })
                })
                .collect();
            body.insert("tools".into(), Value::Array(tools));
        }
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

    /// One HTTP exchange. Cancellation yields `Ok` with [`FinishReason::Cancelled`].
    pub(super) async fn attempt(
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
            let retry_after = crate::retry::retry_after(resp.headers());
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
}

/// The messages in the API's form: assistant tool calls as `tool_calls` (arguments as a
/// JSON string), tool results as `tool` messages. A tool result whose call the API never
/// saw as structured data (the model wrote it as text, e.g. `<tool_call>` from a server
/// without a tool parser) goes as a user message, which every server accepts.
pub(super) fn wire_messages(messages: &[ChatMessage]) -> Vec<Value> {
    let mut known_ids: HashSet<&str> = HashSet::new();
    messages
        .iter()
        .map(|m| {
            let mut msg = Map::new();
            let structured_result = m.role == Role::Tool && m.tool_call_id.as_deref().is_some_and(|id| known_ids.contains(id));
            let role = match m.role {
                Role::Tool if !structured_result => "user",
                role => role.as_str(),
            };
            msg.insert("role".into(), Value::String(role.into()));
            if m.role == Role::Tool && !structured_result {
                msg.insert("content".into(), Value::String(format!("<tool_response>\n{}\n</tool_response>", m.content)));
                return Value::Object(msg);
            }
            msg.insert("content".into(), Value::String(m.content.clone()));
            if let (true, Some(id)) = (structured_result, m.tool_call_id.as_deref()) {
                msg.insert("tool_call_id".into(), Value::String(id.into()));
            }
            if !m.tool_calls.is_empty() {
                let calls = m
                    .tool_calls
                    .iter()
                    .map(|c| {
                        known_ids.insert(&c.id);
                        let arguments = match &c.arguments {
                            Value::String(s) => s.clone(),
                            other => other.to_string(),
                        };
                        serde_json::json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": arguments}})
                    })
                    .collect();
                msg.insert("tool_calls".into(), Value::Array(calls));
            }
            Value::Object(msg)
        })
        .collect()
}

/// An f32 as the JSON number it reads as (0.7, not 0.699999988079071).
pub(super) fn f32_json(x: f32) -> Value {
    x.to_string().parse::<f64>().ok().and_then(serde_json::Number::from_f64).map(Value::Number).unwrap_or(Value::Null)
}
