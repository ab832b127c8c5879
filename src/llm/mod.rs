//! Model backends behind one trait: local inference (llama.cpp for GGUF files on the
//! CPU, mistral.rs for safetensors models and GPUs), an OpenAI-compatible HTTP client,
//! and a scripted replayer for tests and demos.

mod anthropic;
mod llamacpp;
mod local;
mod openai;
mod scripted;
mod spec;
mod speed_bench;
mod sse;
mod stats;

pub use anthropic::{AnthropicBackend, AnthropicConfig};
pub use llamacpp::{LlamaCppBackend, LlamaCppOptions};
pub use local::{LocalBackend, LocalEngine, LocalModelOptions, TokenCompletion};
pub use openai::{OpenAiBackend, OpenAiConfig};
pub use scripted::ScriptedBackend;
pub use spec::{resolve_model, ModelSpec, ResolveOptions};
pub use speed_bench::{run_speed_bench, FirstTurn, SpeedBenchOptions, SpeedReport};
pub use stats::CallStats;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::protocol::TokenUsage;

/// Who wrote a chat message.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
}

/// One message of the conversation sent to a model.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ChatMessage {
    pub role: Role,
    pub content: String,
}

impl ChatMessage {
    /// A message with the given role and text.
    pub fn new(role: Role, content: impl Into<String>) -> Self {
        Self { role, content: content.into() }
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
}

/// Errors of model backends, written for the user.
#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    #[error("unknown model spec `{spec}`: {hint}")]
    UnknownSpec { spec: String, hint: String },
    #[error("cannot read the scripted model file {path}: {reason}")]
    ScriptFile { path: String, reason: String },
    #[error("the scripted model ran out of replies after {used} calls ({path})")]
    ScriptExhausted { path: String, used: usize },
    #[error("cannot reach the model endpoint {url}: {reason}")]
    Unreachable { url: String, reason: String },
    #[error("the model endpoint {url} answered HTTP {status}: {body}")]
    Http { url: String, status: u16, body: String },
    #[error("the model endpoint {url} sent a response that is not valid: {reason}")]
    BadResponse { url: String, reason: String },
    #[error("the model endpoint {url} did not answer within {secs} s")]
    Timeout { url: String, secs: u64 },
    #[error("the API key variable {var} is not set (named by `api_key_env` in the config)")]
    MissingApiKey { var: String },
    #[error("generation was cancelled")]
    Cancelled,
    #[error("{0}")]
    Other(String),
}

/// A streaming chat model.
#[async_trait]
pub trait ModelBackend: Send + Sync {
    /// A short name for status lines and logs.
    fn name(&self) -> String;

    /// Generates one reply. `on_delta` receives streamed text pieces in order; a
    /// cancelled token stops generation promptly and returns what was generated with
    /// [`FinishReason::Cancelled`].
    async fn chat(
        &self,
        request: &ChatRequest,
        on_delta: &mut (dyn for<'s> FnMut(&'s str) + Send),
        cancel: &CancellationToken,
    ) -> Result<ChatResponse, LlmError>;

    /// Cache and timing figures of the last finished call, for backends that can see
    /// inside the engine.
    fn last_call_stats(&self) -> Option<CallStats> {
        None
    }

    /// The context window in tokens, when the backend knows it; the loop keeps its
    /// prompts inside it.
    fn context_window(&self) -> Option<u64> {
        None
    }
}

/// A rough token estimate (4 bytes per token) for backends that report no usage.
pub fn estimate_tokens(text: &str) -> u64 {
    (text.len() as u64).div_ceil(4)
}
