//! The collector of one attempt: accumulates streamed text (wrapping reasoning in
//! `<think>` tags), token ids and usage, and builds the final [`ChatResponse`].

use std::time::Instant;

use serde_json::Value;

use super::stream::{first_choice, token_ids};
use crate::{estimate_tokens, ChatResponse, FinishReason, ToolCall};
use agent_protocol::TokenUsage;

/// What one attempt has received so far.
pub(super) struct Collector {
    text: String,
    in_think: bool,
    pub(super) emitted: bool,
    pub(super) finish_reason: Option<FinishReason>,
    usage: Option<TokenUsage>,
    prompt_ids: Option<Vec<u32>>,
    pub(super) completion_ids: Option<Vec<u32>>,
    pub(super) first_token: Option<Instant>,
    prompt_estimate: u64,
    /// Tool calls by their index in the stream: id, name and the arguments' JSON text,
    /// which arrives in pieces.
    calls: Vec<(String, String, String)>,
}

impl Collector {
    pub(super) fn new(prompt_estimate: u64) -> Self {
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
            calls: Vec::new(),
        }
    }

    /// Adds the `tool_calls` of a stream delta or a whole message: a piece with an
    /// `index` extends that call, one without starts the next.
    pub(super) fn push_tool_calls(&mut self, calls: &Value) {
        for call in calls.as_array().into_iter().flatten() {
            let index = call
                .get("index")
                .and_then(Value::as_u64)
                .and_then(|i| usize::try_from(i).ok())
                .unwrap_or(self.calls.len());
            // Bounded: a hostile server must not make us allocate for a huge index.
            if index > self.calls.len() || index >= 256 {
                continue;
            }
            if index == self.calls.len() {
                self.first_token.get_or_insert_with(Instant::now);
                self.calls.push((String::new(), String::new(), String::new()));
            }
            let entry = &mut self.calls[index];
            if let Some(id) = call.get("id").and_then(Value::as_str) {
                entry.0 = id.to_string();
            }
            let function = call.get("function").unwrap_or(&Value::Null);
            if let Some(name) = function.get("name").and_then(Value::as_str) {
                entry.1.push_str(name);
            }
            match function.get("arguments") {
                Some(Value::String(piece)) => entry.2.push_str(piece),
                Some(args @ Value::Object(_)) => entry.2 = args.to_string(),
                _ => {}
            }
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

    pub(super) fn push_reasoning(&mut self, s: &str, on_delta: &mut (dyn FnMut(&str) + Send)) {
        if s.is_empty() {
            return;
        }
        if !self.in_think {
            self.in_think = true;
            self.emit("<think>", on_delta);
        }
        self.emit(s, on_delta);
    }

    pub(super) fn push_content(&mut self, s: &str, on_delta: &mut (dyn FnMut(&str) + Send)) {
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
    pub(super) fn take_ids_and_usage(&mut self, v: &Value) {
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
    pub(super) fn finish_done(self, on_delta: &mut (dyn FnMut(&str) + Send)) -> ChatResponse {
        let reason = self.finish_reason.unwrap_or(FinishReason::Stop);
        self.finish(reason, on_delta)
    }

    pub(super) fn finish(mut self, reason: FinishReason, on_delta: &mut (dyn FnMut(&str) + Send)) -> ChatResponse {
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
        let tool_calls = self
            .calls
            .into_iter()
            .enumerate()
            .map(|(i, (id, name, args))| ToolCall {
                id: if id.is_empty() { format!("call_{}", i + 1) } else { id },
                name,
                arguments: if args.trim().is_empty() {
                    serde_json::Value::Object(serde_json::Map::new())
                } else {
                    serde_json::from_str(&args).unwrap_or(serde_json::Value::String(args))
                },
            })
            .collect();
        ChatResponse {
            text: self.text,
            finish_reason: reason,
            usage,
            completion_token_ids: self.completion_ids,
            prompt_token_ids: self.prompt_ids,
            decode_tokens_per_sec,
            tool_calls,
        }
    }
}
