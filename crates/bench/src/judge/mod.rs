//! The behavioural LLM judge: how well an agent worked (planning, exploring before
//! acting, verifying, tool use, recovering from errors), as opposed to whether the tests
//! pass. A rubric prompt (`prompts/judge/`), a compact rendering of the trajectory, a
//! YAML verdict, retries with a format correction, and failures that are recorded, never
//! turned into a silent 0.

mod episode;
pub mod eval;
mod render;
pub mod report;
mod reward;
mod verdict;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sha2::{Digest, Sha256};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use agent_llm::{ChatMessage, ChatRequest, LlmError, ModelBackend, Role, SamplingParams};

pub use episode::{EpisodeFacts, JudgedEpisode};
pub use render::{cut_middle, render_ending, render_transcript, RenderLimits};
pub use reward::{mix_reward, RewardWeights};
pub use verdict::{parse_verdict, Verdict, VerdictError, CAPS, COMPONENTS};

/// The rubric versions shipped with the binary, newest last.
pub const PROMPTS: [(&str, &str); 1] = [("v1", include_str!("../../../../prompts/judge/v1.md"))];

/// Errors of the judge that are not a judgement failure (those are [`JudgeFailure`]).
#[derive(Debug, thiserror::Error)]
pub enum JudgeError {
    #[error("cannot read the trajectory {path}: {reason}")]
    Trajectory { path: String, reason: String },
    #[error("unknown judge prompt version `{0}` (known: v1)")]
    UnknownPrompt(String),
    #[error("{0}")]
    Suite(String),
    #[error(transparent)]
    Model(#[from] LlmError),
}

/// Trajectory JSONL the judge cannot read; each error names its line (1-based).
#[derive(Debug, thiserror::Error)]
pub enum TrajectoryError {
    /// A line that is not a record of the trajectory contract (a truncated or foreign file).
    #[error(transparent)]
    Line(#[from] agent_protocol::trajectory::TrajectoryError),
    /// No `turn` record at all: the file holds no episode (write it with `agent run --trajectory`).
    #[error("no turn records: the trajectory holds no episode")]
    NoTurns,
}

/// A judgement that could not be made: every attempt failed. The trainer masks the judge
/// term of such a rollout (see [`mix_reward`]); judge-eval counts it as a miss.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, thiserror::Error)]
#[error("the judge failed after {} attempt(s): {reason}", attempts.len())]
pub struct JudgeFailure {
    /// The last attempt's error.
    pub reason: String,
    /// Every attempt's error, in order.
    pub attempts: Vec<String>,
}

/// How the judge is asked.
#[derive(Debug, Clone)]
pub struct JudgeOptions {
    /// The rubric version (`v1`).
    pub prompt_version: String,
    /// Attempts per judgement; a malformed verdict gets a correction message.
    pub attempts: u32,
    /// The delay after a failed request; it doubles per attempt.
    pub backoff: Duration,
    /// Longest wait for one answer.
    pub request_timeout: Duration,
    /// Judgements in flight at once.
    pub concurrency: usize,
    /// Tokens of one answer.
    pub max_tokens: u32,
    /// Sampling temperature (a little randomness lets judge-eval measure variance).
    pub temperature: f32,
    /// How much of the transcript is shown.
    pub limits: RenderLimits,
}

impl Default for JudgeOptions {
    fn default() -> Self {
        Self {
            prompt_version: "v1".into(),
            attempts: 3,
            backoff: Duration::from_secs(1),
            request_timeout: Duration::from_secs(180),
            concurrency: 4,
            max_tokens: 768,
            temperature: 0.3,
            limits: RenderLimits::default(),
        }
    }
}

/// A judge model with its rubric, a concurrency limit and a cache of identical requests.
pub struct Judge {
    backend: Arc<dyn ModelBackend>,
    opts: JudgeOptions,
    template: &'static str,
    slots: Semaphore,
    cache: Mutex<HashMap<String, Verdict>>,
}

impl Judge {
    /// A judge on `backend`.
    pub fn new(backend: Arc<dyn ModelBackend>, opts: JudgeOptions) -> Result<Self, JudgeError> {
        let template = PROMPTS
            .iter()
            .find(|(v, _)| *v == opts.prompt_version)
            .map(|(_, t)| *t)
            .ok_or_else(|| JudgeError::UnknownPrompt(opts.prompt_version.clone()))?;
        let slots = Semaphore::new(opts.concurrency.max(1));
        Ok(Self { backend, opts, template, slots, cache: Mutex::new(HashMap::new()) })
    }

    /// The judge model's name.
    pub fn name(&self) -> String {
        self.backend.name()
    }

    /// The prompt for an episode.
    pub fn prompt(&self, episode: &JudgedEpisode) -> String {
        self.template
            .replace("{task}", episode.task.trim())
            .replace("{ending}", &render_ending(episode))
            .replace("{transcript}", &render_transcript(episode, self.opts.limits))
    }

    /// Judges an episode. `sample` tells repeated judgements of the same episode apart
    /// (its seed); the same episode and sample are answered from the cache.
    pub async fn judge(&self, episode: &JudgedEpisode, sample: u64) -> Result<Verdict, JudgeFailure> {
        let prompt = self.prompt(episode);
        let key = {
            let mut h = Sha256::new();
            h.update(self.backend.name().as_bytes());
            h.update(sample.to_le_bytes());
            h.update(prompt.as_bytes());
            format!("{:x}", h.finalize())
        };
        if let Some(hit) = self.cache.lock().ok().and_then(|c| c.get(&key).cloned()) {
            return Ok(hit);
        }
        let _slot = self.slots.acquire().await.map_err(|_| JudgeFailure {
            reason: "the judge is shutting down".into(),
            attempts: vec!["the judge is shutting down".into()],
        })?;
        let fact_cap = episode.facts().cap();
        let mut messages = vec![ChatMessage::new(Role::User, prompt)];
        let mut errors = Vec::new();
        for attempt in 0..self.opts.attempts.max(1) {
            let request = ChatRequest {
                messages: messages.clone(),
                sampling: SamplingParams {
                    max_tokens: Some(self.opts.max_tokens),
                    temperature: Some(self.opts.temperature),
                    seed: Some(sample.wrapping_mul(1_000_003).wrapping_add(u64::from(attempt))),
                    ..Default::default()
                },
                tools: Vec::new(),
                grammar: None,
            };
            let cancel = CancellationToken::new();
            let mut ignore_deltas = |_: &str| {};
            let call = self.backend.chat(&request, &mut ignore_deltas, &cancel);
            let outcome = tokio::time::timeout(self.opts.request_timeout, call).await;
            match outcome {
                Ok(Ok(reply)) => match parse_verdict(&reply.text, fact_cap) {
                    Ok(verdict) => {
                        if let Ok(mut cache) = self.cache.lock() {
                            cache.insert(key, verdict.clone());
                        }
                        return Ok(verdict);
                    }
                    Err(format) => {
                        errors.push(format!("attempt {}: {format}", attempt + 1));
                        // Ask again with the reason; the judge keeps its assessment.
                        messages.push(ChatMessage::new(Role::Assistant, reply.text));
                        messages.push(ChatMessage::new(
                            Role::User,
                            format!(
                                "Your answer could not be read: {format}. Reply with only the YAML block, \
                                 in the form given above, every score a number from 0.0 to 1.0."
                            ),
                        ));
                        continue;
                    }
                },
                Ok(Err(e)) => errors.push(format!("attempt {}: {e}", attempt + 1)),
                Err(_) => {
                    cancel.cancel();
                    errors.push(format!(
                        "attempt {}: no answer within {} s",
                        attempt + 1,
                        self.opts.request_timeout.as_secs_f64()
                    ));
                }
            }
            if attempt + 1 < self.opts.attempts {
                tokio::time::sleep(self.opts.backoff.saturating_mul(1 << attempt.min(6))).await;
            }
        }
        let reason = errors.last().cloned().unwrap_or_else(|| "no attempt was made".into());
        tracing::warn!("judge {} failed: {reason}", self.backend.name());
        Err(JudgeFailure { reason, attempts: errors })
    }
}
