//! The OpenAI chat-completions wire format (the subset clients use).

use serde::{Deserialize, Serialize};

use crate::llm::{ChatMessage, ChatRequest, Role, SamplingParams};

/// `stop` may be one string or a list.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Stop {
    One(String),
    Many(Vec<String>),
}

/// A message as clients send it; `content` may be a string or a list of text parts.
#[derive(Debug, Clone, Deserialize)]
pub struct WireMessage {
    pub role: String,
    #[serde(default)]
    pub content: serde_json::Value,
}

/// `POST /v1/chat/completions` body.
#[derive(Debug, Clone, Deserialize)]
pub struct CompletionRequest {
    #[serde(default)]
    pub model: Option<String>,
    pub messages: Vec<WireMessage>,
    #[serde(default)]
    pub stream: bool,
    #[serde(default, alias = "max_completion_tokens")]
    pub max_tokens: Option<u32>,
    #[serde(default)]
    pub temperature: Option<f32>,
    #[serde(default)]
    pub top_p: Option<f32>,
    #[serde(default)]
    pub top_k: Option<u32>,
    #[serde(default)]
    pub seed: Option<u64>,
    #[serde(default)]
    pub stop: Option<Stop>,
}

fn text_of(content: &serde_json::Value) -> String {
    match content {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Array(parts) => {
            parts.iter().filter_map(|p| p.get("text").and_then(|t| t.as_str())).collect::<Vec<_>>().join("")
        }
        serde_json::Value::Null => String::new(),
        other => other.to_string(),
    }
}

impl CompletionRequest {
    /// Converts to the backend's request; unknown roles are an error naming the message.
    pub fn to_chat(&self) -> Result<ChatRequest, String> {
        let mut messages = Vec::with_capacity(self.messages.len());
        for (i, m) in self.messages.iter().enumerate() {
            let role = match m.role.as_str() {
                "system" | "developer" => Role::System,
                "user" | "tool" => Role::User,
                "assistant" => Role::Assistant,
                other => return Err(format!("messages[{i}].role: unknown role `{other}`")),
            };
            messages.push(ChatMessage::new(role, text_of(&m.content)));
        }
        if messages.is_empty() {
            return Err("messages: at least one message is needed".into());
        }
        let stop = match &self.stop {
            None => Vec::new(),
            Some(Stop::One(s)) => vec![s.clone()],
            Some(Stop::Many(v)) => v.clone(),
        };
        Ok(ChatRequest {
            messages,
            sampling: SamplingParams {
                max_tokens: self.max_tokens,
                temperature: self.temperature,
                top_p: self.top_p,
                top_k: self.top_k,
                seed: self.seed,
                stop,
            },
        })
    }
}

/// Token counts in OpenAI's shape.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct WireUsage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub total_tokens: u64,
}

impl From<crate::protocol::TokenUsage> for WireUsage {
    fn from(u: crate::protocol::TokenUsage) -> Self {
        WireUsage {
            prompt_tokens: u.prompt_tokens,
            completion_tokens: u.completion_tokens,
            total_tokens: u.prompt_tokens + u.completion_tokens,
        }
    }
}

/// The OpenAI name of a finish reason.
pub fn finish_name(reason: crate::llm::FinishReason) -> &'static str {
    match reason {
        crate::llm::FinishReason::Stop => "stop",
        crate::llm::FinishReason::Length => "length",
        crate::llm::FinishReason::Cancelled => "cancelled",
        crate::llm::FinishReason::Other => "stop",
    }
}
