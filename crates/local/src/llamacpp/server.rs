//! A GGUF model serving several clients at once (`agent serve`): the rollout engine's
//! slots, one KV sequence per request in a unified cache, every running request advanced
//! one token per `llama_decode`, and a new request starting from the longest prefix any
//! slot already holds (copied, not computed). Each token is chosen here
//! ([`super::choice`]), so the reported ids and log-probabilities are the sampled ones.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use tokio::sync::mpsc as tokio_mpsc;
use tokio_util::sync::CancellationToken;

use super::choice::{Chosen, ServeChooser};
use super::rollouts::{LlamaRollouts, RolloutEngineOptions, TokenRequest};
use super::text_stream::TextStream;
use super::vocabulary::{PromptText, Vocabulary};
use crate::constraint::GrammarEnv;
use agent_llm::{
    CallStats, ChatRequest, ChatResponse, FinishReason, Generation, GenerationPiece, GenerationPrompt,
    GenerationRequest, LlmError, ModelBackend, SampledToken, SamplingDefaults, TokenCandidate, MAX_TOP_LOGPROBS,
};
use agent_protocol::TokenUsage;

/// How a serving engine is loaded.
#[derive(Debug, Clone, Default)]
pub struct LlamaServerOptions {
    /// Requests decoded at once (KV sequences); more wait for a free one.
    pub parallel: u32,
    /// The most tokens (prompt and reply) one request may hold; 0: the model's training
    /// context, at most 16,384.
    pub context_per_request: u32,
    /// CPU threads; 0 uses every core.
    pub threads: u32,
    /// A llama.cpp LoRA adapter GGUF applied to every request.
    pub lora: Option<PathBuf>,
    /// Sampling where a request sets none.
    pub sampling: SamplingDefaults,
}

/// A GGUF model behind `agent serve` (see the module docs).
pub struct LlamaServer {
    name: String,
    rollouts: LlamaRollouts,
    vocab: Arc<Vocabulary>,
    /// The vocabulary as llguidance sees it, for requests with a grammar.
    grammar_env: Option<GrammarEnv>,
    defaults: SamplingDefaults,
    next_session: AtomicU64,
    last_stats: Mutex<Option<CallStats>>,
}

impl std::fmt::Debug for LlamaServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlamaServer").field("name", &self.name).field("parallel", &self.rollouts.sequences()).finish()
    }
}

impl LlamaServer {
    /// Loads the model (on a blocking thread) and its adapter.
    pub async fn start(path: &Path, opts: &LlamaServerOptions) -> Result<Self, LlmError> {
        let name = path.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_else(|| "llama.cpp".into());
        let engine = RolloutEngineOptions {
            sequences: opts.parallel.max(1),
            context_per_sequence: opts.context_per_request,
            threads: opts.threads,
        };
        let model = path.to_path_buf();
        let rollouts = tokio::task::spawn_blocking(move || LlamaRollouts::start(&model, &engine))
            .await
            .map_err(|e| LlmError::Other(format!("the llama.cpp loader stopped: {e}")))??;
        if let Some(adapter) = &opts.lora {
            rollouts.set_adapter(Some(adapter)).await?;
        }
        let vocab = rollouts.vocabulary().await?;
        let grammar_env = match vocab.grammar_env() {
            Ok(env) => Some(env),
            Err(e) => {
                tracing::warn!("cannot read the vocabulary for constrained sampling; grammars are ignored: {e}");
                None
            }
        };
        let seed = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
        Ok(LlamaServer {
            name,
            rollouts,
            vocab,
            grammar_env,
            defaults: opts.sampling,
            next_session: AtomicU64::new(seed | 1),
            last_stats: Mutex::new(None),
        })
    }

    /// Requests served at once.
    pub fn parallel(&self) -> u32 {
        self.rollouts.sequences()
    }

    fn candidate(&self, id: u32, logprob: f32) -> TokenCandidate {
        let bytes = self.vocab.display.get(id as usize).cloned().unwrap_or_default();
        TokenCandidate { id, bytes, logprob }
    }

    async fn prompt_ids(&self, prompt: &GenerationPrompt) -> Result<(Vec<u32>, String), LlmError> {
        Ok(match prompt {
            GenerationPrompt::Chat { messages, tools, prefill } => {
                let text =
                    PromptText::Chat { messages: messages.clone(), tools: tools.clone(), prefill: prefill.clone() };
                (self.rollouts.prepare(text).await?, prefill.clone())
            }
            GenerationPrompt::Text(text) => {
                (self.rollouts.prepare(PromptText::Text(text.clone())).await?, String::new())
            }
            GenerationPrompt::Tokens(ids) => {
                let n = self.vocab.text.len();
                if let Some(bad) = ids.iter().find(|&&id| id as usize >= n) {
                    return Err(LlmError::BadRequest(format!(
                        "prompt: token id {bad} is outside the model's vocabulary of {n}"
                    )));
                }
                (ids.clone(), String::new())
            }
        })
    }
}

#[async_trait]
impl ModelBackend for LlamaServer {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn context_window(&self) -> Option<u64> {
        Some(u64::from(self.rollouts.context_per_sequence()))
    }

    fn native_tools(&self) -> bool {
        self.vocab.native_tools
    }

    fn last_call_stats(&self) -> Option<CallStats> {
        self.last_stats.lock().ok().and_then(|s| *s)
    }

    fn generates_tokens(&self) -> bool {
        true
    }

    fn enforces_grammar(&self) -> bool {
        self.grammar_env.is_some()
    }

    async fn chat(
        &self,
        request: &ChatRequest,
        on_delta: &mut (dyn for<'s> FnMut(&'s str) + Send),
        cancel: &CancellationToken,
    ) -> Result<ChatResponse, LlmError> {
        let request = GenerationRequest {
            prompt: GenerationPrompt::Chat {
                messages: request.messages.clone(),
                tools: request.tools.clone(),
                prefill: String::new(),
            },
            sampling: request.sampling.clone(),
            logprobs: None,
            grammar: request.grammar.clone(),
        };
        let mut on_piece = |p: GenerationPiece<'_>| {
            if !p.text.is_empty() {
                on_delta(p.text)
            }
        };
        let g = self.generate(&request, &mut on_piece, cancel).await?;
        let decode_tokens_per_sec = self.last_call_stats().and_then(|s| s.decode_tokens_per_sec());
        Ok(ChatResponse {
            text: g.text,
            finish_reason: g.finish_reason,
            usage: g.usage,
            completion_token_ids: Some(g.tokens.iter().map(|t| t.token.id).collect()),
            prompt_token_ids: Some(g.prompt_token_ids),
            decode_tokens_per_sec,
            tool_calls: Vec::new(),
        })
    }

    async fn generate(
        &self,
        request: &GenerationRequest,
        on_piece: &mut (dyn for<'p> FnMut(GenerationPiece<'p>) + Send),
        cancel: &CancellationToken,
    ) -> Result<Generation, LlmError> {
        let started = Instant::now();
        let (prompt, prefill) = self.prompt_ids(&request.prompt).await?;
        let context = self.rollouts.context_per_sequence() as usize;
        if prompt.is_empty() {
            return Err(LlmError::BadRequest("the prompt is empty".into()));
        }
        if prompt.len() >= context {
            return Err(LlmError::ContextOverflow { prompt_tokens: prompt.len() as u64, context: context as u64 });
        }
        let max_new_tokens =
            request.sampling.max_tokens.map_or(usize::MAX, |n| n as usize).min(context - prompt.len()).max(1);
        let session = self.next_session.fetch_add(2, Ordering::Relaxed);
        let (events, mut chosen_rx) = tokio_mpsc::unbounded_channel::<Chosen>();
        let stop_flag = Arc::new(AtomicBool::new(false));
        let (reply, answer) = tokio::sync::oneshot::channel();
        let top_n = request.logprobs.map(|n| n.min(MAX_TOP_LOGPROBS) as usize);
        let constraint =
            request.grammar.as_deref().and_then(|g| self.grammar_env.as_ref().and_then(|env| env.constraint(g)));
        let chooser = ServeChooser::new(&request.sampling, &self.defaults, top_n, session, events, constraint);
        self.rollouts.submit(TokenRequest {
            session,
            prompt: prompt.clone(),
            max_new_tokens,
            stop: self.vocab.end_of_generation.clone(),
            cancel: stop_flag.clone(),
            chooser: Box::new(chooser),
            reply,
        })?;
        // The slot is given back whatever happens below; its cells stay for sharing.
        let _close = CloseOnDrop { rollouts: &self.rollouts, session };

        let mut stream = TextStream::new(&request.sampling.stop);
        let mut tokens: Vec<SampledToken> = Vec::new();
        let mut unsent = 0usize;
        let (first, _) = stream.push(prefill.as_bytes());
        if !first.is_empty() {
            on_piece(GenerationPiece { text: &first, tokens: &[] });
        }
        let mut stop_string = false;
        let mut cancelled = false;
        let mut first_token = None;
        loop {
            let chosen = tokio::select! {
                _ = cancel.cancelled(), if !cancelled => {
                    cancelled = true;
                    stop_flag.store(true, Ordering::Relaxed);
                    continue;
                }
                chosen = chosen_rx.recv() => chosen,
            };
            // The channel closes when the engine drops the request's sampler: it has ended.
            let Some(chosen) = chosen else { break };
            first_token.get_or_insert_with(Instant::now);
            if stop_string {
                // Sampled before the engine saw the stop flag: not part of the reply.
                continue;
            }
            let top = chosen.top.iter().map(|&(id, lp)| self.candidate(id, lp)).collect();
            tokens.push(SampledToken { token: self.candidate(chosen.id, chosen.logprob), top });
            if self.vocab.end_of_generation.contains(&chosen.id) {
                continue;
            }
            let bytes = self.vocab.text.get(chosen.id as usize).map(Vec::as_slice).unwrap_or_default();
            let (delta, hit) = stream.push(bytes);
            if !delta.is_empty() || hit {
                on_piece(GenerationPiece { text: &delta, tokens: &tokens[unsent..] });
                unsent = tokens.len();
            }
            if hit {
                stop_string = true;
                stop_flag.store(true, Ordering::Relaxed);
            }
        }
        let outcome = answer.await.map_err(|_| LlmError::Other("the llama.cpp engine dropped a request".into()))??;
        let tail = stream.finish(stop_string);
        if !tail.is_empty() || unsent < tokens.len() {
            on_piece(GenerationPiece { text: &tail, tokens: &tokens[unsent..] });
        }
        let finish_reason = if stop_string || outcome.stopped {
            FinishReason::Stop
        } else if cancelled {
            FinishReason::Cancelled
        } else {
            FinishReason::Length
        };
        let decode_start = first_token.unwrap_or(started);
        let stats = CallStats {
            prompt_tokens: prompt.len() as u64,
            prompt_tokens_cached: Some((prompt.len() - outcome.computed_prompt_tokens) as u64),
            prompt_tokens_computed: Some(outcome.computed_prompt_tokens as u64),
            prompt_eval: decode_start.duration_since(started),
            decode: decode_start.elapsed(),
            time_to_first_token: decode_start.duration_since(started),
            completion_tokens: tokens.len() as u64,
        };
        if let Ok(mut last) = self.last_stats.lock() {
            *last = Some(stats);
        }
        Ok(Generation {
            text: stream.into_text(),
            finish_reason,
            usage: TokenUsage { prompt_tokens: prompt.len() as u64, completion_tokens: tokens.len() as u64 },
            prompt_token_ids: prompt,
            tokens,
        })
    }
}

/// Gives a request's slot back when the request ends or its caller goes away.
struct CloseOnDrop<'a> {
    rollouts: &'a LlamaRollouts,
    session: u64,
}

impl Drop for CloseOnDrop<'_> {
    fn drop(&mut self) {
        self.rollouts.close(self.session);
    }
}
