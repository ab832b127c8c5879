//! Rollouts sampled through mistral.rs. The policy (adapter merged) is written as a plain
//! model folder and loaded by mistral.rs, and written and loaded again whenever the policy
//! changes. mistral.rs runs the model, one request at a time (see `one_at_a_time`); at
//! each step a logits processor draws the token from mistral.rs's logits with the
//! trainer's sampler and the request's seed and makes it the only choice, so the sampled
//! ids and their log-probabilities are known exactly (mistral.rs's own responses name
//! tokens as text).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use async_trait::async_trait;
use candle_core::Tensor;
use rand::SeedableRng;

use super::engine::RolloutSampler;
use super::sampler::{sample, GenerateRequest, Generated};
use crate::error::TrainError;
use crate::model::{peft, Qwen3};
use agent_llm::LocalModelOptions;
use agent_local::MistralRsBackend;

/// The loaded policy and where its folder is.
struct Loaded {
    backend: Arc<MistralRsBackend>,
    dir: PathBuf,
    version: u64,
}

/// A [`RolloutSampler`] backed by mistral.rs.
pub struct MistralrsEngine {
    /// Side files (config, tokenizer) of the policy's folders come from here.
    base: PathBuf,
    /// Where the policy's folders are written.
    work: PathBuf,
    force_cpu: bool,
    loaded: RwLock<Option<Loaded>>,
    runtime: tokio::runtime::Handle,
    /// Lets one request run at a time: mistral.rs 0.8.1 (without paged attention) gives
    /// sequences it batches together other logits than it gives each alone (measured on
    /// the tiny Qwen3: log-prob differences up to 0.7 batched, under 1e-6 alone, even with
    /// `max_num_seqs` 1 and no prefix cache), which would make the rollouts off-policy
    /// by more than rounding.
    one_at_a_time: Arc<tokio::sync::Semaphore>,
}

impl MistralrsEngine {
    /// Loads `policy` into mistral.rs; `base` is the model folder the policy was loaded
    /// from, `work` a folder of its own for the policy's copies.
    pub async fn start(policy: &Qwen3, base: &Path, work: &Path, force_cpu: bool) -> Result<Self, TrainError> {
        let engine = MistralrsEngine {
            base: base.to_path_buf(),
            work: work.to_path_buf(),
            force_cpu,
            loaded: RwLock::new(None),
            runtime: tokio::runtime::Handle::current(),
            one_at_a_time: Arc::new(tokio::sync::Semaphore::new(1)),
        };
        engine.load_policy(policy).await?;
        Ok(engine)
    }

    /// How many times a policy was loaded (1 after `start`).
    pub fn version(&self) -> u64 {
        self.loaded.read().ok().and_then(|l| l.as_ref().map(|l| l.version)).unwrap_or(0)
    }

    /// The mistral.rs model now serving requests.
    fn backend(&self) -> Result<Arc<MistralRsBackend>, TrainError> {
        self.loaded
            .read()
            .ok()
            .and_then(|l| l.as_ref().map(|l| l.backend.clone()))
            .ok_or_else(|| TrainError::Other("the mistral.rs rollout engine has no policy loaded".into()))
    }
}

impl Drop for MistralrsEngine {
    fn drop(&mut self) {
        if let Ok(mut loaded) = self.loaded.write() {
            if let Some(old) = loaded.take() {
                drop(old.backend);
                let _ = std::fs::remove_dir_all(&old.dir);
            }
        }
    }
}

#[async_trait]
impl RolloutSampler for MistralrsEngine {
    fn submit(&self, request: GenerateRequest) -> Result<(), TrainError> {
        let backend = self.backend()?;
        let gate = self.one_at_a_time.clone();
        self.runtime.spawn(async move {
            let reply = match gate.acquire().await {
                Ok(_turn) => generate(&backend, &request).await,
                Err(_) => Err(TrainError::Other("the mistral.rs rollout engine has stopped".into())),
            };
            let _ = request.reply.send(reply);
        });
        Ok(())
    }

    /// mistral.rs's prefix cache keeps shared prefixes by itself.
    fn close(&self, _session: u64) {}

    async fn load_policy(&self, policy: &Qwen3) -> Result<(), TrainError> {
        let version = self.version() + 1;
        let dir = self.work.join(format!("policy-{version:06}"));
        let tmp = self.work.join(format!(".tmp-policy-{version:06}"));
        for stale in [&dir, &tmp] {
            if stale.exists() {
                std::fs::remove_dir_all(stale).map_err(|e| TrainError::io("remove", stale, e))?;
            }
        }
        peft::save_full_weights(policy, &self.base, &tmp)?;
        std::fs::rename(&tmp, &dir).map_err(|e| TrainError::io("rename", &tmp, e))?;
        let opts = LocalModelOptions { force_cpu: self.force_cpu, ..Default::default() };
        let backend = MistralRsBackend::load(&dir, &opts).await.map_err(|e| {
            TrainError::Other(format!("the mistral.rs rollout engine cannot load the policy in {}: {e}", dir.display()))
        })?;
        let old = {
            let mut loaded =
                self.loaded.write().map_err(|_| TrainError::Other("the rollout engine's state is poisoned".into()))?;
            loaded.replace(Loaded { backend: Arc::new(backend), dir, version })
        };
        // Requests still running hold their own handle on the old model; the folder can go.
        if let Some(old) = old {
            let _ = std::fs::remove_dir_all(&old.dir);
        }
        Ok(())
    }

    fn off_policy(&self) -> bool {
        true
    }
}

/// Draws the tokens of one request inside mistral.rs's sampling step.
struct Chooser {
    state: Mutex<Choices>,
    temperature: f64,
    top_p: f64,
    cancel: Arc<AtomicBool>,
    /// Forced when the request is cancelled, to end it at the next step.
    stop_token: Option<u32>,
}

struct Choices {
    rng: rand::rngs::StdRng,
    ids: Vec<u32>,
    logp: Vec<f32>,
}

impl mistralrs::CustomLogitsProcessor for Chooser {
    fn apply(&self, logits: &Tensor, _context: &[u32]) -> candle_core::Result<Tensor> {
        let mut state = self.state.lock().map_err(|_| candle_core::Error::Msg("the chooser is poisoned".into()))?;
        let (token, logp) = match self.stop_token.filter(|_| self.cancel.load(Ordering::Relaxed)) {
            Some(stop) => (stop, 0.0),
            None => sample(logits, self.temperature, self.top_p, &mut state.rng)?,
        };
        state.ids.push(token);
        state.logp.push(logp);
        let vocab = logits.elem_count();
        let mut only = vec![0f32; vocab];
        if let Some(slot) = only.get_mut(token as usize) {
            *slot = 1.0;
        }
        Tensor::from_vec(only, vocab, logits.device())
    }
}

/// Runs one request through mistral.rs. mistral.rs also ends a sequence at the model's
/// own end-of-sequence tokens; when that is not one of the request's stop tokens,
/// generation goes on from there (same chooser, same random stream), as the trainer's
/// sampler would.
async fn generate(backend: &MistralRsBackend, req: &GenerateRequest) -> Result<Generated, TrainError> {
    let chooser = Arc::new(Chooser {
        state: Mutex::new(Choices {
            rng: rand::rngs::StdRng::seed_from_u64(req.seed),
            ids: Vec::new(),
            logp: Vec::new(),
        }),
        temperature: req.temperature,
        top_p: req.top_p,
        cancel: req.cancel.clone(),
        stop_token: req.stop.first().copied(),
    });
    loop {
        let before = chooser.chosen()?;
        let prompt: Vec<u32> = req.prompt.iter().chain(&before).copied().collect();
        let budget = req.max_new_tokens.saturating_sub(before.len());
        let done = backend
            .generate_from_tokens(prompt, budget, &req.stop, chooser.clone())
            .await
            .map_err(|e| TrainError::Other(format!("mistral.rs rollout request: {e}")))?;
        let ids = chooser.chosen()?;
        if done.completion_tokens != ids.len() - before.len() {
            return Err(TrainError::Other(format!(
                "mistral.rs generated {} tokens but the sampler chose {}",
                done.completion_tokens,
                ids.len() - before.len()
            )));
        }
        let stopped = ids.last().is_some_and(|t| req.stop.contains(t));
        let ended_early = done.finish_reason == "stop" && !stopped && done.completion_tokens > 0;
        if !ended_early || ids.len() >= req.max_new_tokens || req.cancel.load(Ordering::Relaxed) {
            let state = chooser.state.lock().map_err(|_| poisoned())?;
            return Ok(Generated {
                ids,
                logp: state.logp.clone(),
                stopped,
                // mistral.rs does not say how much of the prompt its prefix cache held.
                computed_prompt_tokens: req.prompt.len(),
            });
        }
    }
}

fn poisoned() -> TrainError {
    TrainError::Other("a mistral.rs rollout's token chooser is poisoned".into())
}

impl Chooser {
    /// The tokens chosen so far.
    fn chosen(&self) -> Result<Vec<u32>, TrainError> {
        Ok(self.state.lock().map_err(|_| poisoned())?.ids.clone())
    }
}
