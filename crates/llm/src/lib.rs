//! Models, below the agent: the [`ModelBackend`] trait with an OpenAI-compatible HTTP
//! client, Anthropic's Messages API and a scripted replayer; how a model spec becomes a
//! backend ([`ModelSpec`], [`resolve_model`], the [`LocalLoader`] that `agent-local`
//! implements); the chat templates; and the built-in model files ([`models`]: catalog,
//! download, cache).
//!
//! Nothing here prints: a download reports through [`models::Progress`], a failed call
//! through its error and `tracing`.

mod anthropic;
mod chat_template;
pub mod date;
mod generation;
pub mod grammar;
mod local_options;
pub mod models;
mod openai;
mod resolve;
pub mod retry;
mod scripted;
mod spec;
mod sse;
mod stats;

pub use agent_protocol::chat::{
    ChatMessage, ChatRequest, ChatResponse, FinishReason, Role, SamplingParams, ToolCall, ToolDefinition,
};
pub use anthropic::{AnthropicBackend, AnthropicConfig};
pub use chat_template::{ChatTemplate, QWEN3_TEMPLATE};
pub use generation::{
    Generation, GenerationPiece, GenerationPrompt, GenerationRequest, SampledToken, TokenCandidate, MAX_TOP_LOGPROBS,
};
pub use local_options::{LocalEngine, LocalModelOptions};
pub use openai::{OpenAiBackend, OpenAiConfig};
pub use resolve::{resolve_model, LocalLoader, ResolveOptions};
pub use retry::RetryPolicy;
pub use scripted::ScriptedBackend;
pub use spec::ModelSpec;
pub use stats::CallStats;

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

/// Sampling a model uses where a request sets none (a built-in model's recommended
/// settings); unset fields fall back to the engine's own defaults.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SamplingDefaults {
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub top_k: Option<u32>,
    /// Multiplicative penalty on recently generated tokens (llama.cpp's `repeat_penalty`).
    pub repeat_penalty: Option<f32>,
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
    #[error("the prompt has {prompt_tokens} tokens but the model's context holds {context} (shorten the conversation or load the model with a larger context)")]
    ContextOverflow { prompt_tokens: u64, context: u64 },
    /// A request the model cannot take as written (the caller's to fix).
    #[error("{0}")]
    BadRequest(String),
    /// Something this backend cannot do at all.
    #[error("{0}")]
    Unsupported(String),
    #[error("{0}")]
    Other(String),
}

impl LlmError {
    /// The error with every occurrence of `secret` (an API key) replaced: a server or
    /// proxy that echoes the request's headers in its error body must not carry the key
    /// into logs, trajectories or saved sessions.
    pub fn redact(self, secret: Option<&str>) -> LlmError {
        let Some(secret) = secret.filter(|s| s.len() >= 4) else { return self };
        let r = |s: String| s.replace(secret, "[redacted]");
        match self {
            LlmError::Unreachable { url, reason } => LlmError::Unreachable { url, reason: r(reason) },
            LlmError::Http { url, status, body } => LlmError::Http { url, status, body: r(body) },
            LlmError::BadResponse { url, reason } => LlmError::BadResponse { url, reason: r(reason) },
            LlmError::Other(text) => LlmError::Other(r(text)),
            other => other,
        }
    }
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

    /// How far the call in flight is through evaluating its prompt, for backends that
    /// evaluate it themselves in steps (a long prompt on a CPU takes minutes); `None`
    /// once generation starts or where the backend cannot tell.
    fn prompt_progress(&self) -> Option<PromptProgress> {
        None
    }

    /// Whether the model takes tools natively (JSON schemas in the request, calls in the
    /// model's own format); `--tool-format auto` picks the native format when it does.
    fn native_tools(&self) -> bool {
        false
    }

    /// Whether the backend enforces [`ChatRequest::grammar`] (and
    /// [`GenerationRequest::grammar`]) while sampling: the in-process engines do; APIs
    /// ignore a grammar.
    fn enforces_grammar(&self) -> bool {
        false
    }

    /// Whether [`Self::generate`] works: the backend samples tokens itself and can report
    /// their ids and log-probabilities (llama.cpp); APIs and mistral.rs cannot.
    fn generates_tokens(&self) -> bool {
        false
    }

    /// Token-level generation (see [`GenerationRequest`]); `on_piece` receives the
    /// streamed text and the tokens sampled for it. Only where [`Self::generates_tokens`].
    async fn generate(
        &self,
        request: &GenerationRequest,
        on_piece: &mut (dyn for<'p> FnMut(GenerationPiece<'p>) + Send),
        cancel: &CancellationToken,
    ) -> Result<Generation, LlmError> {
        let _ = (request, on_piece, cancel);
        Err(LlmError::Unsupported(format!(
            "{} does not sample tokens itself, so it cannot report log-probabilities or continue raw text",
            self.name()
        )))
    }

    /// Whether requests may run at once with each one's output what it would be alone.
    /// mistral.rs batches concurrent requests with logits that depend on their neighbours,
    /// so a server runs its requests one at a time.
    fn batch_invariant(&self) -> bool {
        true
    }
}

/// Prompt tokens evaluated so far (a reused cached prefix counts) of the prompt's total.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PromptProgress {
    pub evaluated: u64,
    pub total: u64,
}

/// A rough token estimate (4 bytes per token) for backends that report no usage.
pub fn estimate_tokens(text: &str) -> u64 {
    (text.len() as u64).div_ceil(4)
}
