//! The chat messages a model and the loop exchange: what every model backend takes and
//! returns, and what trajectories and the judge record.

use serde::{Deserialize, Serialize};

use crate::TokenUsage;

/// Who wrote a chat message.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
    /// The result of one native tool call (OpenAI's `tool` role; chat templates render it
    /// in their own way, e.g. Qwen's `<tool_response>` inside a user turn).
    Tool,
}

impl Role {
    /// The role's name as chat templates and APIs spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }
}

/// One native tool call of an assistant message.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ToolCall {
    /// The call's id, echoed by the tool message that answers it.
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The arguments as the model wrote them: a JSON object, or a string when the model
    /// wrote something that is not JSON (the parser reports it).
    pub arguments: serde_json::Value,
}

/// A tool offered to a model with native tool calling: a name, a description and a JSON
/// Schema of the arguments (OpenAI's `function` object).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ToolDefinition {
    pub name: String,
    pub description: String,
    pub parameters: serde_json::Value,
}

/// One message of the conversation sent to a model.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ChatMessage {
    pub role: Role,
    pub content: String,
    /// Native tool calls of an assistant message, for backends that take them as structured
    /// data (OpenAI, Anthropic, mistral.rs). Local engines that render the chat themselves
    /// keep the model's own text in `content` instead, so the prompt stays byte-identical
    /// to what was sampled.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// For a [`Role::Tool`] message: the id of the call it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

impl ChatMessage {
    /// A message with the given role and text.
    pub fn new(role: Role, content: impl Into<String>) -> Self {
        Self { role, content: content.into(), tool_calls: Vec::new(), tool_call_id: None }
    }

    /// The result of the native tool call `call_id`.
    pub fn tool_result(call_id: impl Into<String>, content: impl Into<String>) -> Self {
        Self { role: Role::Tool, content: content.into(), tool_calls: Vec::new(), tool_call_id: Some(call_id.into()) }
    }
}

/// Sampling settings of one request.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct SamplingParams {
    pub max_tokens: Option<u32>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub top_k: Option<u32>,
    pub seed: Option<u64>,
    pub stop: Vec<String>,
}

/// A chat request.
#[derive(Debug, Clone, Default)]
pub struct ChatRequest {
    pub messages: Vec<ChatMessage>,
    pub sampling: SamplingParams,
    /// Tools offered for native tool calling; empty in the text action format.
    pub tools: Vec<ToolDefinition>,
    /// A grammar the reply must match, in llguidance's Lark dialect: the local engines
    /// (llama.cpp, mistral.rs) enforce it while sampling, so a tool call cannot be
    /// malformed; remote APIs ignore it. `None` leaves sampling free.
    pub grammar: Option<String>,
}

/// Why generation stopped.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    Stop,
    Length,
    Cancelled,
    Other,
}

/// The full answer of one model call.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ChatResponse {
    pub text: String,
    pub finish_reason: FinishReason,
    /// Token counts as reported by the backend (estimated when it reports none).
    pub usage: TokenUsage,
    /// The exact sampled token ids, when the backend supplies them.
    pub completion_token_ids: Option<Vec<u32>>,
    /// The exact prompt token ids, when the backend supplies them.
    pub prompt_token_ids: Option<Vec<u32>>,
    /// Decode speed measured for this call.
    pub decode_tokens_per_sec: Option<f64>,
    /// Native tool calls the backend returned as structured data (APIs, mistral.rs).
    /// Engines whose calls stay in `text` (llama.cpp) leave this empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
}
