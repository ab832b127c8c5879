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

/// The sampling fields both endpoints take.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct WireSampling {
    #[serde(default, alias = "max_completion_tokens")]
    pub max_tokens: Option<u32>,
    #[serde(default)]
    pub temperature: Option<f32>,
    #[serde(default)]
    pub top_p: Option<f32>,
    #[serde(default)]
    pub top_k: Option<u32>,
    /// Any integer; its bits are the seed.
    #[serde(default)]
    pub seed: Option<i64>,
    #[serde(default)]
    pub stop: Option<Stop>,
}

impl WireSampling {
    /// The engine's sampling, with `max_tokens` when the request sets none.
    pub fn params(&self, max_tokens: Option<u32>) -> SamplingParams {
        SamplingParams {
            max_tokens: self.max_tokens.or(max_tokens),
            temperature: self.temperature,
            top_p: self.top_p,
            top_k: self.top_k,
            seed: self.seed.map(|s| s as u64),
            stop: stop_list(&self.stop),
        }
    }
}

/// `tool_choice`: `"auto"`, `"none"`, `"required"`, or `{"type": "function",
/// "function": {"name": NAME}}`.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum WireToolChoice {
    Mode(String),
    Named { function: NamedFunction },
}

/// The function a named `tool_choice` forces.
#[derive(Debug, Clone, Deserialize)]
pub struct NamedFunction {
    pub name: String,
}

/// `response_format`: `{"type": "text"}`, `{"type": "json_object"}` or `{"type":
/// "json_schema", "json_schema": {"name": ..., "schema": {...}}}`.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum WireResponseFormat {
    Text,
    JsonObject,
    JsonSchema { json_schema: WireJsonSchema },
}

/// The schema of a `json_schema` response format.
#[derive(Debug, Clone, Deserialize)]
pub struct WireJsonSchema {
    #[serde(default)]
    pub schema: Option<serde_json::Value>,
}

impl WireResponseFormat {
    /// The schema the reply must be valid against; `None` for free text.
    pub fn schema(&self) -> Option<serde_json::Value> {
        match self {
            WireResponseFormat::Text => None,
            WireResponseFormat::JsonObject => Some(serde_json::json!({"type": "object"})),
            WireResponseFormat::JsonSchema { json_schema } => {
                Some(json_schema.schema.clone().unwrap_or_else(|| serde_json::json!({})))
            }
        }
    }
}

/// What the request lets the model do with its tools.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolChoice {
    /// No tools offered, or `none`: plain text.
    Off,
    Auto,
    Required,
    Named(String),
}

/// `POST /v1/chat/completions` body.
#[derive(Debug, Clone, Deserialize)]
pub struct CompletionRequest {
    /// Must name the served model when given (else 404, as OpenAI answers).
    #[serde(default)]
    pub model: Option<String>,
    pub messages: Vec<WireMessage>,
    #[serde(default)]
    pub stream: bool,
    #[serde(flatten)]
    pub sampling: WireSampling,
    /// Tools for native tool calling, passed to the model's chat template.
    #[serde(default)]
    pub tools: Vec<WireTool>,
    #[serde(default)]
    pub tool_choice: Option<WireToolChoice>,
    /// Report the sampled tokens' log-probabilities.
    #[serde(default)]
    pub logprobs: bool,
    /// With `logprobs`, this many most likely alternatives at each token (0-20).
    #[serde(default)]
    pub top_logprobs: Option<u32>,
    /// Choices per request; only 1 is served.
    #[serde(default)]
    pub n: Option<u32>,
    /// vLLM's extension: tokens in `logprobs` written as `token_id:ID`.
    #[serde(default)]
    pub return_tokens_as_token_ids: bool,
    /// JSON output held to a schema (in-process engines enforce it while sampling).
    #[serde(default)]
    pub response_format: Option<WireResponseFormat>,
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

/// The `stop` field as a list.
pub fn stop_list(stop: &Option<Stop>) -> Vec<String> {
    match stop {
        None => Vec::new(),
        Some(Stop::One(s)) => vec![s.clone()],
        Some(Stop::Many(v)) => v.clone(),
    }
}

/// Only one choice per request is served.
pub fn check_n(n: Option<u32>) -> Result<(), String> {
    match n {
        None | Some(1) => Ok(()),
        Some(n) => {
            Err(format!("n: {n} choices were asked for; this server returns one per request (send {n} requests)"))
        }
    }
}

impl CompletionRequest {
    /// What the model may do with the tools; a named tool must be one of them.
    pub fn tool_choice(&self) -> Result<ToolChoice, String> {
        let choice = match &self.tool_choice {
            None => ToolChoice::Auto,
            Some(WireToolChoice::Mode(m)) => match m.as_str() {
                "auto" => ToolChoice::Auto,
                "none" => ToolChoice::Off,
                "required" => ToolChoice::Required,
                other => {
                    return Err(format!(
                        "tool_choice: unknown value `{other}` (auto, none, required, or a named function)"
                    ))
                }
            },
            Some(WireToolChoice::Named { function }) => {
                if !self.tools.iter().any(|t| t.function.name == function.name) {
                    return Err(format!(
                        "tool_choice: the function `{}` is not among the request's tools",
                        function.name
                    ));
                }
                ToolChoice::Named(function.name.clone())
            }
        };
        if self.tools.is_empty() {
            return match choice {
                ToolChoice::Required | ToolChoice::Named(_) => {
                    Err("tool_choice: a tool call was required but the request offers no tools".into())
                }
                _ => Ok(ToolChoice::Off),
            };
        }
        Ok(choice)
    }

    /// How many alternatives to report per token: `None` without `logprobs`.
    pub fn logprobs(&self) -> Result<Option<u32>, String> {
        match (self.logprobs, self.top_logprobs) {
            (false, Some(n)) if n > 0 => Err("top_logprobs needs logprobs: true".into()),
            (false, _) => Ok(None),
            (true, Some(n)) if n > agent_llm::MAX_TOP_LOGPROBS => {
                Err(format!("top_logprobs: {n} is more than {}", agent_llm::MAX_TOP_LOGPROBS))
            }
            (true, n) => Ok(Some(n.unwrap_or(0))),
        }
    }

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
        Ok(ChatRequest {
            messages,
            sampling: self.sampling.params(None),
            // `none` renders no tools: the model is not told it has any.
            tools: if self.tool_choice()? == ToolChoice::Off { &[][..] } else { &self.tools[..] }
                .iter()
                .map(|t| ToolDefinition {
                    name: t.function.name.clone(),
                    description: t.function.description.clone(),
                    parameters: t.function.parameters.clone(),
                })
                .collect(),
            grammar: None,
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

/// `POST /v1/completions` body.
#[derive(Debug, Clone, Deserialize)]
pub struct TextCompletionRequest {
    #[serde(default)]
    pub model: Option<String>,
    pub prompt: WirePrompt,
    #[serde(default)]
    pub stream: bool,
    /// `max_tokens` defaults to 16 here, as OpenAI's.
    #[serde(flatten)]
    pub sampling: WireSampling,
    /// Report this many alternatives with each token's log-probability (0-20).
    #[serde(default)]
    pub logprobs: Option<u32>,
    #[serde(default)]
    pub echo: bool,
    #[serde(default)]
    pub n: Option<u32>,
    #[serde(default)]
    pub return_tokens_as_token_ids: bool,
}

/// A completion's prompt: a string, token ids, or a list holding one of either.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum WirePrompt {
    Text(String),
    Tokens(Vec<u32>),
    Texts(Vec<String>),
    TokenLists(Vec<Vec<u32>>),
}

impl TextCompletionRequest {
    /// The generation this asks for.
    pub fn to_generation(&self) -> Result<agent_llm::GenerationRequest, String> {
        if self.echo {
            return Err("echo: returning the prompt with the completion is not supported".into());
        }
        check_n(self.n)?;
        let one = |n: usize| {
            if n == 1 {
                Ok(())
            } else {
                Err(format!("prompt: {n} prompts in one request; send one prompt per request"))
            }
        };
        let prompt = match &self.prompt {
            WirePrompt::Text(t) => agent_llm::GenerationPrompt::Text(t.clone()),
            WirePrompt::Tokens(ids) => agent_llm::GenerationPrompt::Tokens(ids.clone()),
            WirePrompt::Texts(v) => {
                one(v.len())?;
                agent_llm::GenerationPrompt::Text(v[0].clone())
            }
            WirePrompt::TokenLists(v) => {
                one(v.len())?;
                agent_llm::GenerationPrompt::Tokens(v[0].clone())
            }
        };
        if let Some(n) = self.logprobs.filter(|n| *n > agent_llm::MAX_TOP_LOGPROBS) {
            return Err(format!("logprobs: {n} is more than {}", agent_llm::MAX_TOP_LOGPROBS));
        }
        Ok(agent_llm::GenerationRequest {
            prompt,
            sampling: self.sampling.params(Some(16)),
            logprobs: self.logprobs,
            grammar: None,
        })
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
