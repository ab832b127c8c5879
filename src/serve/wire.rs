//! The OpenAI chat-completions wire format (the subset clients use).

use serde::{Deserialize, Serialize};

use agent_llm::{ChatMessage, ChatRequest, Role, SamplingParams, ToolCall, ToolDefinition};

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
    /// An assistant message's native tool calls.
    #[serde(default)]
    pub tool_calls: Vec<WireToolCall>,
    /// A tool message's call id.
    #[serde(default)]
    pub tool_call_id: Option<String>,
}

/// One tool call in OpenAI's shape (`arguments` is a JSON string, or an object).
#[derive(Debug, Clone, Deserialize)]
pub struct WireToolCall {
    #[serde(default)]
    pub id: String,
    pub function: WireFunctionCall,
}

/// The function part of a [`WireToolCall`].
#[derive(Debug, Clone, Deserialize)]
pub struct WireFunctionCall {
    pub name: String,
    #[serde(default)]
    pub arguments: serde_json::Value,
}

/// A tool offered by the client (`{"type": "function", "function": {...}}`).
#[derive(Debug, Clone, Deserialize)]
pub struct WireTool {
    pub function: WireFunction,
}

/// The function part of a [`WireTool`].
#[derive(Debug, Clone, Deserialize)]
pub struct WireFunction {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub parameters: serde_json::Value,
}

/// `POST /v1/chat/completions` body. A `model` field is accepted and ignored: the server
/// serves one model, and its responses name it.
#[derive(Debug, Clone, Deserialize)]
pub struct CompletionRequest {
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
    /// Tools for native tool calling, passed to the model's chat template.
    #[serde(default)]
    pub tools: Vec<WireTool>,
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
                "user" => Role::User,
                "tool" => Role::Tool,
                "assistant" => Role::Assistant,
                other => return Err(format!("messages[{i}].role: unknown role `{other}`")),
            };
            let tool_calls = m
                .tool_calls
                .iter()
                .map(|c| ToolCall {
                    id: c.id.clone(),
                    name: c.function.name.clone(),
                    arguments: match &c.function.arguments {
                        serde_json::Value::String(s) => {
                            serde_json::from_str(s).unwrap_or_else(|_| serde_json::Value::String(s.clone()))
                        }
                        other => other.clone(),
                    },
                })
                .collect();
            messages.push(ChatMessage {
                tool_calls,
                tool_call_id: m.tool_call_id.clone(),
                ..ChatMessage::new(role, text_of(&m.content))
            });
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
            tools: self
                .tools
                .iter()
                .map(|t| ToolDefinition {
                    name: t.function.name.clone(),
                    description: t.function.description.clone(),
                    parameters: t.function.parameters.clone(),
                })
                .collect(),
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

impl From<agent_protocol::TokenUsage> for WireUsage {
    fn from(u: agent_protocol::TokenUsage) -> Self {
        WireUsage {
            prompt_tokens: u.prompt_tokens,
            completion_tokens: u.completion_tokens,
            total_tokens: u.prompt_tokens + u.completion_tokens,
        }
    }
}

/// The OpenAI name of a finish reason.
pub fn finish_name(reason: agent_llm::FinishReason) -> &'static str {
    match reason {
        agent_llm::FinishReason::Stop => "stop",
        agent_llm::FinishReason::Length => "length",
        agent_llm::FinishReason::Cancelled => "cancelled",
        agent_llm::FinishReason::Other => "stop",
    }
}
