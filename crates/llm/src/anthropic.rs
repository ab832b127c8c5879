//! The Anthropic Messages API (`POST /v1/messages`), used mainly as a judge model. One
//! request per call (no streaming: judges answer in one piece), retries with backoff on
//! 429, 529 and 5xx, and cancellation.

use std::time::Duration;

use crate::retry::{AfterFailure, Failure, RetryPolicy};
use async_trait::async_trait;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use std::collections::HashSet;

use super::{ChatMessage, ChatRequest, ChatResponse, FinishReason, LlmError, ModelBackend, Role, ToolCall};
use agent_protocol::TokenUsage;

/// The API version this client speaks.
const API_VERSION: &str = "2023-06-01";

/// Settings of an [`AnthropicBackend`].
#[derive(Debug, Clone, PartialEq)]
pub struct AnthropicConfig {
    /// The API root, `https://api.anthropic.com` by default (`ANTHROPIC_BASE_URL`).
    pub base_url: String,
    /// The model name, e.g. `claude-sonnet-4-5`.
    pub model: String,
    /// The environment variable that holds the key (`ANTHROPIC_API_KEY` by default).
    pub api_key_env: String,
    /// Longest wait for one response.
    pub timeout: Duration,
    /// Retries after 429, 529, 5xx and connection errors.
    pub retry: RetryPolicy,
    /// `max_tokens` when the request sets none (the API requires one).
    pub default_max_tokens: u32,
}

impl AnthropicConfig {
    /// Defaults for `model`: the base URL from `ANTHROPIC_BASE_URL` or the public API,
    /// the key from `ANTHROPIC_API_KEY`, 120 s timeout, 3 retries from 1 s capped at 16 s.
    pub fn new(model: impl Into<String>) -> Self {
        let base_url = std::env::var("ANTHROPIC_BASE_URL")
            .ok()
            .filter(|u| !u.trim().is_empty())
            .unwrap_or_else(|| "https://api.anthropic.com".to_string());
        Self {
            base_url,
            model: model.into(),
            api_key_env: "ANTHROPIC_API_KEY".into(),
            timeout: Duration::from_secs(120),
            retry: RetryPolicy::new(3, Duration::from_secs(1), Duration::from_secs(16)),
            default_max_tokens: 2048,
        }
    }
}

/// A [`ModelBackend`] on the Anthropic Messages API.
pub struct AnthropicBackend {
    cfg: AnthropicConfig,
    client: reqwest::Client,
    url: String,
    api_key: String,
}

impl std::fmt::Debug for AnthropicBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnthropicBackend").field("url", &self.url).field("model", &self.cfg.model).finish()
    }
}

impl AnthropicBackend {
    /// Builds the client; fails when the key variable is unset.
    pub fn new(cfg: AnthropicConfig) -> Result<Self, LlmError> {
        let api_key = match std::env::var(&cfg.api_key_env) {
            Ok(k) if !k.trim().is_empty() => k.trim().to_string(),
            _ => return Err(LlmError::MissingApiKey { var: cfg.api_key_env.clone() }),
        };
        let client = reqwest::Client::builder()
            .use_rustls_tls()
            .tls_built_in_native_certs(true)
            .timeout(cfg.timeout)
            .user_agent(concat!("agent/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| LlmError::Other(format!("cannot set up the HTTP client: {e}")))?;
        let url = format!("{}/v1/messages", cfg.base_url.trim_end_matches('/'));
        Ok(Self { cfg, client, url, api_key })
    }

    fn body(&self, request: &ChatRequest) -> serde_json::Value {
        let system: Vec<&str> =
            request.messages.iter().filter(|m| m.role == Role::System).map(|m| m.content.as_str()).collect();
        let messages = wire_messages(&request.messages);
        let s = &request.sampling;
        let mut body = json!({
            "model": self.cfg.model,
            "max_tokens": s.max_tokens.unwrap_or(self.cfg.default_max_tokens),
            "messages": messages,
        });
        if !request.tools.is_empty() {
            let tools: Vec<serde_json::Value> = request
                .tools
                .iter()
                .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.parameters}))
                .collect();
            body["tools"] = json!(tools);
        }
        if !system.is_empty() {
            body["system"] = json!(system.join("\n\n"));
        }
        if let Some(t) = s.temperature {
            body["temperature"] = json!(t.clamp(0.0, 1.0));
        }
        if let Some(p) = s.top_p {
            body["top_p"] = json!(p);
        }
        if let Some(k) = s.top_k {
            body["top_k"] = json!(k);
        }
        if !s.stop.is_empty() {
            body["stop_sequences"] = json!(s.stop);
        }
        body
    }

    /// One attempt.
    async fn attempt(&self, body: &serde_json::Value) -> Result<ChatResponse, Failure> {
        let retryable = |error| Failure::Retryable { error, retry_after: None };
        let sent = self
            .client
            .post(&self.url)
            .header("x-api-key", &self.api_key)
            .header("anthropic-version", API_VERSION)
            .json(body)
            .send()
            .await;
        let resp = match sent {
            Ok(r) => r,
            Err(e) if e.is_timeout() => {
                return Err(retryable(LlmError::Timeout { url: self.url.clone(), secs: self.cfg.timeout.as_secs() }))
            }
            Err(e) => return Err(retryable(LlmError::Unreachable { url: self.url.clone(), reason: e.to_string() })),
        };
        let status = resp.status().as_u16();
        let retry_after = crate::retry::retry_after(resp.headers());
        let text = match resp.text().await {
            Ok(t) => t,
            Err(e) if e.is_timeout() => {
                return Err(retryable(LlmError::Timeout { url: self.url.clone(), secs: self.cfg.timeout.as_secs() }))
            }
            Err(e) => return Err(retryable(LlmError::Unreachable { url: self.url.clone(), reason: e.to_string() })),
        };
        if status != 200 {
            let error = LlmError::Http { url: self.url.clone(), status, body: text.chars().take(300).collect() };
            return Err(if status == 429 || status == 529 || status >= 500 {
                Failure::Retryable { error, retry_after }
            } else {
                Failure::Fatal(error)
            });
        }
        parse_response(&text).map_err(|reason| Failure::Fatal(LlmError::BadResponse { url: self.url.clone(), reason }))
    }
}

/// The conversation as the Messages API takes it: roles alternate (consecutive messages of
/// one side become one message of content blocks), assistant tool calls are `tool_use`
/// blocks and their results `tool_result` blocks in the next user message. A result of a
/// call the API never saw as structured data goes as text.
fn wire_messages(messages: &[ChatMessage]) -> Vec<serde_json::Value> {
    let mut out: Vec<(&'static str, Vec<serde_json::Value>)> = Vec::new();
    let mut known_ids: HashSet<&str> = HashSet::new();
    for m in messages.iter().filter(|m| m.role != Role::System) {
        let role = if m.role == Role::Assistant { "assistant" } else { "user" };
        let mut blocks = Vec::new();
        match (m.role, m.tool_call_id.as_deref()) {
            (Role::Tool, Some(id)) if known_ids.contains(id) => {
                blocks.push(json!({"type": "tool_result", "tool_use_id": id, "content": m.content}));
            }
            (Role::Tool, _) => {
                blocks
                    .push(json!({"type": "text", "text": format!("<tool_response>\n{}\n</tool_response>", m.content)}));
            }
            _ => {
                if !m.content.is_empty() {
                    blocks.push(json!({"type": "text", "text": m.content}));
                }
                for call in &m.tool_calls {
                    known_ids.insert(&call.id);
                    let input = if call.arguments.is_object() { call.arguments.clone() } else { json!({}) };
                    blocks.push(json!({"type": "tool_use", "id": call.id, "name": call.name, "input": input}));
                }
            }
        }
        if blocks.is_empty() {
            // The API refuses empty content; an empty reply still keeps the turn order.
            blocks.push(json!({"type": "text", "text": "(empty)"}));
        }
        match out.last_mut() {
            Some((last, content)) if *last == role => content.extend(blocks),
            _ => out.push((role, blocks)),
        }
    }
    out.into_iter().map(|(role, content)| json!({"role": role, "content": content})).collect()
}

/// Reads a Messages API response body.
fn parse_response(text: &str) -> Result<ChatResponse, String> {
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let content = v["content"].as_array().ok_or("no `content` array")?;
    let text: String = content.iter().filter(|c| c["type"] == "text").filter_map(|c| c["text"].as_str()).collect();
    let tool_calls = content
        .iter()
        .filter(|c| c["type"] == "tool_use")
        .map(|c| ToolCall {
            id: c["id"].as_str().unwrap_or_default().to_string(),
            name: c["name"].as_str().unwrap_or_default().to_string(),
            arguments: c["input"].clone(),
        })
        .collect();
    let finish_reason = match v["stop_reason"].as_str() {
        Some("end_turn") | Some("stop_sequence") | Some("tool_use") => FinishReason::Stop,
        Some("max_tokens") => FinishReason::Length,
        _ => FinishReason::Other,
    };
    let usage = TokenUsage {
        prompt_tokens: v["usage"]["input_tokens"].as_u64().unwrap_or(0),
        completion_tokens: v["usage"]["output_tokens"].as_u64().unwrap_or(0),
    };
    Ok(ChatResponse {
        text,
        finish_reason,
        usage,
        completion_token_ids: None,
        prompt_token_ids: None,
        decode_tokens_per_sec: None,
        tool_calls,
    })
}

#[async_trait]
impl ModelBackend for AnthropicBackend {
    fn name(&self) -> String {
        self.cfg.model.clone()
    }

    fn native_tools(&self) -> bool {
        true
    }

    async fn chat(
        &self,
        request: &ChatRequest,
        on_delta: &mut (dyn for<'s> FnMut(&'s str) + Send),
        cancel: &CancellationToken,
    ) -> Result<ChatResponse, LlmError> {
        let body = self.body(request);
        let mut retries = self.cfg.retry.start();
        // As every backend: a cancel is an answer that finished `Cancelled`, not an error.
        let cancelled = || ChatResponse {
            text: String::new(),
            finish_reason: FinishReason::Cancelled,
            usage: TokenUsage::default(),
            completion_token_ids: None,
            prompt_token_ids: None,
            decode_tokens_per_sec: None,
            tool_calls: Vec::new(),
        };
        loop {
            let outcome = tokio::select! {
                biased;
                _ = cancel.cancelled() => return Ok(cancelled()),
                outcome = self.attempt(&body) => outcome,
            };
            let failure = match outcome {
                Ok(resp) => {
                    on_delta(&resp.text);
                    return Ok(resp);
                }
                Err(f) => f.redact(Some(&self.api_key)),
            };
            match retries.after(failure, "Anthropic request", cancel).await {
                AfterFailure::Retry => {}
                AfterFailure::GiveUp(error) => return Err(error),
                AfterFailure::Cancelled => return Ok(cancelled()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ChatMessage, SamplingParams};

    #[test]
    fn reads_a_messages_response() {
        let body = r#"{"content":[{"type":"text","text":"score: 0.5"}],"stop_reason":"end_turn","usage":{"input_tokens":12,"output_tokens":4}}"#;
        let r = parse_response(body).unwrap();
        assert_eq!(r.text, "score: 0.5");
        assert_eq!(r.finish_reason, FinishReason::Stop);
        assert_eq!(r.usage.prompt_tokens, 12);
        assert!(parse_response("{}").unwrap_err().contains("content"));
        let body = r#"{"content":[{"type":"text","text":"Listing."},{"type":"tool_use","id":"tu1","name":"bash","input":{"cmd":"ls"}}],"stop_reason":"tool_use","usage":{}}"#;
        let r = parse_response(body).unwrap();
        assert_eq!(r.finish_reason, FinishReason::Stop);
        assert_eq!(
            r.tool_calls,
            vec![ToolCall { id: "tu1".into(), name: "bash".into(), arguments: serde_json::json!({"cmd": "ls"}) }]
        );
    }

    #[test]
    fn tool_calls_and_results_become_blocks_in_alternating_turns() {
        let call = ToolCall { id: "tu1".into(), name: "bash".into(), arguments: serde_json::json!({"cmd": "ls"}) };
        let messages = wire_messages(&[
            ChatMessage::new(Role::System, "s"),
            ChatMessage::new(Role::User, "go"),
            ChatMessage { tool_calls: vec![call], ..ChatMessage::new(Role::Assistant, "Listing.") },
            ChatMessage::tool_result("tu1", "a.txt"),
            ChatMessage::new(Role::User, "<parse_error>…</parse_error>"),
            ChatMessage::new(Role::Assistant, "<tool_call>{}</tool_call>"),
            ChatMessage::tool_result("call_3_1", "b.txt"),
        ]);
        assert_eq!(messages.len(), 5);
        assert_eq!(messages[1]["content"][1]["type"], "tool_use");
        assert_eq!(messages[1]["content"][1]["input"]["cmd"], "ls");
        assert_eq!(messages[2]["role"], "user");
        assert_eq!(messages[2]["content"][0]["type"], "tool_result");
        assert_eq!(messages[2]["content"][0]["tool_use_id"], "tu1");
        assert_eq!(messages[2]["content"][1]["type"], "text");
        assert_eq!(messages[4]["content"][0]["text"], "<tool_response>\nb.txt\n</tool_response>");
    }

    #[test]
    fn system_messages_go_to_the_system_field() {
        std::env::set_var("AGENT_TEST_ANTHROPIC_KEY", "k");
        let cfg = AnthropicConfig { api_key_env: "AGENT_TEST_ANTHROPIC_KEY".into(), ..AnthropicConfig::new("m") };
        let b = AnthropicBackend::new(cfg).unwrap();
        let req = ChatRequest {
            messages: vec![ChatMessage::new(Role::System, "be fair"), ChatMessage::new(Role::User, "judge")],
            sampling: SamplingParams { temperature: Some(0.2), ..Default::default() },
            tools: vec![],
            grammar: None,
        };
        let body = b.body(&req);
        assert_eq!(body["system"], "be fair");
        assert_eq!(body["messages"][0]["role"], "user");
        assert_eq!(body["max_tokens"], 2048);
        let missing =
            AnthropicConfig { api_key_env: "AGENT_TEST_SURELY_UNSET_ANTHROPIC".into(), ..AnthropicConfig::new("m") };
        assert!(matches!(AnthropicBackend::new(missing), Err(LlmError::MissingApiKey { .. })));
    }
}
