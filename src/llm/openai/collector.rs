//! The collector of one attempt: accumulates streamed text (wrapping reasoning in
//! `<think>` tags), token ids and usage, and builds the final [`ChatResponse`].

use std::time::Instant;

use serde_json::Value;

use super::stream::{first_choice, token_ids};
use crate::llm::{estimate_tokens, ChatResponse, FinishReason};
use crate::protocol::TokenUsage;

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
