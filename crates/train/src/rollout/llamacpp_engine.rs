//! Rollouts sampled by llama.cpp over the quantised GGUF base the user chats with: after
//! each update the policy's adapters are written in llama.cpp's LoRA format and set on
//! the loaded model (no reload of the base), and the running rollouts decode together
//! (see `agent_local::LlamaRollouts`). Tokens are drawn from llama.cpp's logits with the
//! trainer's own sampler and each request's seed, so ids and log-probabilities are exact;
//! they are the quantised model's, so the update weighs them as off-policy.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use rand::SeedableRng;

use super::engine::RolloutSampler;
use super::sampler::{sample_slice, GenerateRequest, Generated};
use crate::error::TrainError;
use crate::model::lora_gguf::{llama_arch, save_adapter_gguf};
use crate::model::Qwen3;
use agent_local::constraint::{Constraint, GrammarEnv};
use agent_local::{LlamaRollouts, RolloutEngineOptions, TokenChooser, TokenRequest};

/// A [`RolloutSampler`] backed by llama.cpp.
pub struct LlamaCppEngine {
    rollouts: LlamaRollouts,
    /// Where the adapter files are written.
    work: PathBuf,
    /// LoRA alpha (llama.cpp scales by alpha / r as the trainer does).
    alpha: f64,
    version: AtomicU64,
    runtime: tokio::runtime::Handle,
    /// The GGUF's vocabulary as llguidance sees it, for rollouts held to a grammar.
    grammar_env: Option<GrammarEnv>,
}

impl LlamaCppEngine {
    /// Loads `gguf` (the base `policy` was dequantised from) with `sequences` rollouts
    /// decoded together, each up to `context` tokens, and sets `policy`'s adapters on it.
    pub async fn start(
        policy: &Qwen3,
        gguf: &Path,
        work: &Path,
        alpha: f64,
        sequences: usize,
        context: usize,
    ) -> Result<Self, TrainError> {
        std::fs::create_dir_all(work).map_err(|e| TrainError::io("create", work, e))?;
        let opts = RolloutEngineOptions {
            sequences: u32::try_from(sequences.max(1)).unwrap_or(u32::MAX),
            context_per_sequence: u32::try_from(context).unwrap_or(u32::MAX),
            threads: 0,
        };
        let path = gguf.to_path_buf();
        let rollouts = tokio::task::spawn_blocking(move || LlamaRollouts::start(&path, &opts))
            .await
            .map_err(|e| TrainError::Other(format!("the llama.cpp loader stopped: {e}")))?
            .map_err(|e| TrainError::Other(format!("the llama.cpp rollout engine cannot start: {e}")))?;
        let grammar_env = match rollouts.vocabulary().await.map_err(|e| e.to_string()).and_then(|v| v.grammar_env()) {
            Ok(env) => Some(env),
            Err(e) => {
                tracing::warn!("rollouts are sampled without the reply grammar: {e}");
                None
            }
        };
        let engine = LlamaCppEngine {
            grammar_env,
            rollouts,
            work: work.to_path_buf(),
            alpha,
            version: AtomicU64::new(0),
            runtime: tokio::runtime::Handle::current(),
        };
        engine.load_policy(policy).await?;
        Ok(engine)
    }

    /// How many adapters were set (1 after `start`).
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::Relaxed)
    }

    fn adapter_path(&self, version: u64) -> PathBuf {
        self.work.join(format!("adapter-{version:06}.gguf"))
    }
}

/// The trainer's sampler over llama.cpp's logits, with the request's own random stream.
struct Chooser {
    rng: rand::rngs::StdRng,
    temperature: f64,
    top_p: f64,
    /// The reply's grammar. The log-probability recorded is then that of the masked
    /// distribution the token was really drawn from, so the update's off-policy
    /// correction sees the sampler as it was.
    constraint: Option<Constraint>,
}

impl TokenChooser for Chooser {
    fn choose(&mut self, logits: &[f32]) -> (u32, f32) {
        match self.constraint.as_mut() {
            Some(constraint) => {
                constraint.draw(logits, |allowed| sample_slice(allowed, self.temperature, self.top_p, &mut self.rng))
            }
            None => sample_slice(logits, self.temperature, self.top_p, &mut self.rng),
        }
    }
}

#[async_trait]
impl RolloutSampler for LlamaCppEngine {
    fn submit(&self, request: GenerateRequest) -> Result<(), TrainError> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        let prompt_len = request.prompt.len();
        let token_request = TokenRequest {
            session: request.session,
            prompt: request.prompt,
            max_new_tokens: request.max_new_tokens,
            stop: request.stop,
            cancel: request.cancel,
            chooser: Box::new(Chooser {
                rng: rand::rngs::StdRng::seed_from_u64(request.seed),
                temperature: request.temperature,
                top_p: request.top_p,
                constraint: request
                    .grammar
                    .as_deref()
                    .and_then(|g| self.grammar_env.as_ref().and_then(|env| env.constraint(g))),
            }),
            reply,
        };
        self.rollouts
            .submit(token_request)
            .map_err(|e| TrainError::Other(format!("llama.cpp rollout request: {e}")))?;
        let done = request.reply;
        self.runtime.spawn(async move {
            let result = match answer.await {
                Ok(Ok(r)) => Ok(Generated {
                    ids: r.ids,
                    logp: r.logp,
                    stopped: r.stopped,
                    computed_prompt_tokens: r.computed_prompt_tokens.min(prompt_len),
                }),
                Ok(Err(e)) => Err(TrainError::Other(format!("llama.cpp rollout request: {e}"))),
                Err(_) => Err(TrainError::Other("the llama.cpp rollout engine dropped a request".into())),
            };
            let _ = done.send(result);
        });
        Ok(())
    }

    fn close(&self, session: u64) {
        self.rollouts.close(session);
    }

    async fn load_policy(&self, policy: &Qwen3) -> Result<(), TrainError> {
        let version = self.version() + 1;
        let path = self.adapter_path(version);
        save_adapter_gguf(policy, self.alpha, llama_arch(policy), &path)?;
        self.rollouts
            .set_adapter(Some(&path))
            .await
            .map_err(|e| TrainError::Other(format!("the llama.cpp rollout engine cannot take the new adapter: {e}")))?;
        self.version.store(version, Ordering::Relaxed);
        // llama.cpp copied the tensors; the previous file is no longer needed.
        if version > 1 {
            let _ = std::fs::remove_file(self.adapter_path(version - 1));
        }
        Ok(())
    }

    fn off_policy(&self) -> bool {
        true
    }
}
