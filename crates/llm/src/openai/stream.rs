//! Reading a reply: an SSE stream of `chat.completion.chunk` objects or one whole
//! `chat.completion` object, and the JSON helpers both use.

use futures_util::StreamExt;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::collector::Collector;
use super::retry::trim_body;
use super::OpenAiBackend;
use crate::retry::Failure;
use crate::sse::{SseDecoder, SseEvent};
use crate::{ChatResponse, FinishReason, LlmError};

impl OpenAiBackend {
    /// Reads an SSE stream of `chat.completion.chunk` objects.
    pub(super) async fn read_stream(
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
                if let Some(calls) = delta.get("tool_calls") {
                    out.push_tool_calls(calls);
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
    pub(super) async fn read_whole(
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
            if let Some(calls) = message.get("tool_calls") {
                out.push_tool_calls(calls);
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

pub(super) fn first_choice(v: &Value) -> Option<&Value> {
    v.get("choices").and_then(Value::as_array).and_then(|c| c.first())
}

fn reasoning_of(v: &Value) -> Option<&str> {
    v.get("reasoning_content").and_then(Value::as_str).or_else(|| v.get("reasoning").and_then(Value::as_str))
}

pub(super) fn token_ids(v: Option<&Value>) -> Option<Vec<u32>> {
    v?.as_array()?.iter().map(|x| x.as_u64().and_then(|n| u32::try_from(n).ok())).collect()
}

pub(super) fn map_finish_reason(reason: &str) -> FinishReason {
    match reason {
        "stop" | "eos" | "stop_sequence" | "end_turn" | "tool_calls" | "tool_use" => FinishReason::Stop,
        "length" | "max_tokens" => FinishReason::Length,
        _ => FinishReason::Other,
    }
}
