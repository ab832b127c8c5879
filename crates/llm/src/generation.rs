//! Token-level generation for servers: a chat, a raw text or token ids in, the sampled
//! tokens out with their log-probabilities (what `agent serve` answers `logprobs`,
//! `top_logprobs` and `/v1/completions` from). Engines that sample themselves implement
//! [`super::ModelBackend::generate`]; the others keep only `chat`.

use agent_protocol::chat::{ChatMessage, FinishReason, SamplingParams, ToolDefinition};
use agent_protocol::TokenUsage;

/// The most alternatives a request may ask for at each token (OpenAI's limit).
pub const MAX_TOP_LOGPROBS: u32 = 20;

/// What a generation continues.
#[derive(Debug, Clone)]
pub enum GenerationPrompt {
    /// A conversation rendered by the model's chat template, then `prefill` written as
    /// the start of the assistant's reply (part of the reply's text, not sampled).
    Chat { messages: Vec<ChatMessage>, tools: Vec<ToolDefinition>, prefill: String },
    /// A raw text, tokenized with special tokens parsed and no chat template.
    Text(String),
    /// Token ids as they are.
    Tokens(Vec<u32>),
}

/// One generation request.
#[derive(Debug, Clone)]
pub struct GenerationRequest {
    pub prompt: GenerationPrompt,
    pub sampling: SamplingParams,
    /// Report each sampled token's log-probability, with this many of the most likely
    /// alternatives (0: the sampled token's alone); `None` reports none.
    pub logprobs: Option<u32>,
    /// A grammar the reply must match (see [`crate::ChatRequest::grammar`]); it applies
    /// to what is sampled after the prompt's prefill.
    pub grammar: Option<String>,
}

/// A candidate token and its log-probability.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenCandidate {
    pub id: u32,
    /// The token's bytes as the vocabulary spells them (a piece of a multi-byte character
    /// is not valid UTF-8 alone).
    pub bytes: Vec<u8>,
    /// Natural log of its probability under the model (the raw distribution, before
    /// temperature, top-k and top-p: what the model said, whatever the sampler did).
    pub logprob: f32,
}

impl TokenCandidate {
    /// The token's text, with bytes that are not UTF-8 alone shown as U+FFFD.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes).into_owned()
    }
}

/// A sampled token: itself and, when asked, the most likely alternatives at its place.
#[derive(Debug, Clone, PartialEq)]
pub struct SampledToken {
    pub token: TokenCandidate,
    /// Most likely first.
    pub top: Vec<TokenCandidate>,
}

/// What a generation produced.
#[derive(Debug, Clone)]
pub struct Generation {
    /// The reply's text (the prefill included), cut before a stop string.
    pub text: String,
    pub finish_reason: FinishReason,
    pub usage: TokenUsage,
    /// The prompt's token ids.
    pub prompt_token_ids: Vec<u32>,
    /// Every sampled token, in order (the stop token of a model's end included), with
    /// log-probabilities when they were asked for.
    pub tokens: Vec<SampledToken>,
}

/// A streamed piece of a generation: text safe to show and the tokens sampled since the
/// last piece (their bytes may hold more or less than `text`, which waits for whole
/// characters and stop strings).
#[derive(Debug, Clone, Copy)]
pub struct GenerationPiece<'a> {
    pub text: &'a str,
    pub tokens: &'a [SampledToken],
}
