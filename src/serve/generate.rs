//! One request's run on the backend: token-level where the engine samples itself
//! (log-probabilities, a forced call opening), else its plain chat; one at a time where
//! the engine is not batch invariant.

use std::sync::Arc;

use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use agent_llm::{
    ChatRequest, FinishReason, GenerationPiece, GenerationPrompt, GenerationRequest, LlmError, ModelBackend,
    SampledToken, SamplingParams, ToolCall,
};
use agent_protocol::TokenUsage;

/// What a request asks of the backend.
#[derive(Debug, Clone)]
pub struct Plan {
    pub chat: ChatRequest,
    /// Alternatives per token, when log-probabilities are asked for.
    pub logprobs: Option<u32>,
    /// Text written as the start of the reply (a forced tool call's opening).
    pub prefill: String,
}

/// What came back.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub text: String,
    pub finish: FinishReason,
    pub usage: TokenUsage,
    pub tokens: Vec<SampledToken>,
    /// Calls the backend returned as data (APIs, mistral.rs).
    pub calls: Vec<ToolCall>,
}

/// Bounds a client's `max_tokens` (or `max_completion_tokens`) by the model's context
/// window where the engine knows it: `4000000000` is no budget any engine should take.
/// Engines that do not say (mistral.rs, APIs) bound it themselves.
pub fn clamp_max_tokens(sampling: &mut SamplingParams, window: Option<u64>) {
    if let (Some(asked), Some(window)) = (sampling.max_tokens, window) {
        let window = u32::try_from(window).unwrap_or(u32::MAX).max(1);
        sampling.max_tokens = Some(asked.min(window));
    }
}

/// Whether the plan needs the engine's own sampling.
pub fn needs_tokens(plan: &Plan) -> bool {
    plan.logprobs.is_some() || !plan.prefill.is_empty()
}

/// Runs `plan`, streaming to `on_piece`; `gate` (one permit) serialises engines that are
/// not batch invariant.
pub async fn run(
    backend: &Arc<dyn ModelBackend>,
    gate: Option<&Arc<Semaphore>>,
    plan: &Plan,
    on_piece: &mut (dyn for<'p> FnMut(GenerationPiece<'p>) + Send),
    cancel: &CancellationToken,
) -> Result<Outcome, LlmError> {
    let _turn = match gate {
        Some(g) => Some(g.acquire().await.map_err(|_| LlmError::Cancelled)?),
        None => None,
    };
    if backend.generates_tokens() {
        let request = GenerationRequest {
            prompt: GenerationPrompt::Chat {
                messages: plan.chat.messages.clone(),
                tools: plan.chat.tools.clone(),
                prefill: plan.prefill.clone(),
            },
            sampling: plan.chat.sampling.clone(),
            logprobs: plan.logprobs,
            grammar: plan.chat.grammar.clone(),
        };
        let g = backend.generate(&request, on_piece, cancel).await?;
        return Ok(Outcome {
            text: g.text,
            finish: g.finish_reason,
            usage: g.usage,
            tokens: g.tokens,
            calls: Vec::new(),
        });
    }
    if needs_tokens(plan) {
        return Err(LlmError::BadRequest(format!(
            "{} does not sample tokens in this process, so it cannot report log-probabilities or force a tool call; serve a GGUF model (llama.cpp) for those",
            backend.name()
        )));
    }
    let mut on_delta = |text: &str| on_piece(GenerationPiece { text, tokens: &[] });
    let r = backend.chat(&plan.chat, &mut on_delta, cancel).await?;
    Ok(Outcome { text: r.text, finish: r.finish_reason, usage: r.usage, tokens: Vec::new(), calls: r.tool_calls })
}
