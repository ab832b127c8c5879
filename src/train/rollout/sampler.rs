//! In-process sampling from the candle policy: a worker thread that owns a merged,
//! frozen snapshot of the policy, keeps a KV cache per rollout (a new prompt that
//! extends the previous one only computes its new tokens), and samples with a
//! per-request seed so that a rollout's tokens do not depend on scheduling.

use std::collections::HashMap;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, RwLock};

use candle_core::{DType, Tensor, D};
use rand::{Rng, SeedableRng};
use tokio::sync::oneshot;

use crate::train::error::TrainError;
use crate::train::model::{KvCache, Qwen3};

/// One generation request.
pub struct GenerateRequest {
    /// Identifies the rollout whose KV cache may be reused.
    pub session: u64,
    /// The whole prompt (the worker reuses whatever prefix it has cached for the session).
    pub prompt: Vec<u32>,
    pub max_new_tokens: usize,
    pub temperature: f64,
    pub top_p: f64,
    /// Seeds this request's sampling.
    pub seed: u64,
    /// Ids that end generation (included in the output).
    pub stop: Vec<u32>,
    /// Polled between tokens; a set flag ends generation.
    pub cancel: Arc<std::sync::atomic::AtomicBool>,
    pub reply: oneshot::Sender<Result<Generated, TrainError>>,
}

/// Sampled tokens with their log-probabilities under the policy (temperature 1).
#[derive(Debug, Clone, PartialEq)]
pub struct Generated {
    pub ids: Vec<u32>,
    pub logp: Vec<f32>,
    /// Whether a stop token ended generation (otherwise the length limit or a cancel did).
    pub stopped: bool,
    /// Prompt tokens computed (not served from the cache).
    pub computed_prompt_tokens: usize,
}

enum Msg {
    Generate(Box<GenerateRequest>),
    Close(u64),
}

/// Handle to the sampling worker.
#[derive(Clone)]
pub struct Sampler {
    tx: Sender<Msg>,
    policy: Arc<RwLock<Arc<Qwen3>>>,
}

impl Sampler {
    /// Starts a worker sampling from `policy` (already merged and frozen).
    pub fn start(policy: Qwen3) -> Result<Sampler, TrainError> {
        let policy = Arc::new(RwLock::new(Arc::new(policy)));
        let (tx, rx) = channel();
        let shared = policy.clone();
        std::thread::Builder::new()
            .name("policy-sampler".into())
            .spawn(move || worker(rx, shared))
            .map_err(|e| TrainError::Other(format!("cannot start the sampling thread: {e}")))?;
        Ok(Sampler { tx, policy })
    }

    /// Replaces the policy snapshot (after an update); cached prefixes are dropped.
    pub fn set_policy(&self, policy: Qwen3) {
        if let Ok(mut p) = self.policy.write() {
            *p = Arc::new(policy);
        }
    }

    /// Queues a request; the answer arrives on its `reply` channel.
    pub fn submit(&self, request: GenerateRequest) -> Result<(), TrainError> {
        self.tx
            .send(Msg::Generate(Box::new(request)))
            .map_err(|_| TrainError::Other("the sampling thread has stopped".into()))
    }

    /// Frees a rollout's KV cache.
    pub fn close(&self, session: u64) {
        let _ = self.tx.send(Msg::Close(session));
    }
}

struct Session {
    tokens: Vec<u32>,
    cache: KvCache,
    policy: usize,
}

fn worker(rx: Receiver<Msg>, policy: Arc<RwLock<Arc<Qwen3>>>) {
    let mut sessions: HashMap<u64, Session> = HashMap::new();
    while let Ok(msg) = rx.recv() {
        match msg {
            Msg::Close(id) => {
                sessions.remove(&id);
            }
            Msg::Generate(req) => {
                let model = match policy.read() {
                    Ok(p) => p.clone(),
                    Err(_) => return,
                };
                let key = Arc::as_ptr(&model) as usize;
                let session = sessions.entry(req.session).or_insert_with(|| Session {
                    tokens: Vec::new(),
                    cache: KvCache::default(),
                    policy: key,
                });
                if session.policy != key {
                    *session = Session { tokens: Vec::new(), cache: KvCache::default(), policy: key };
                }
                let result = generate(&model, session, &req)
                    .map_err(|e| TrainError::Tensor { context: "sampling from the policy".into(), source: e });
                let _ = req.reply.send(result);
            }
        }
    }
}

fn generate(model: &Qwen3, session: &mut Session, req: &GenerateRequest) -> candle_core::Result<Generated> {
    let common = session.tokens.iter().zip(&req.prompt).take_while(|(a, b)| a == b).count();
    // At least one prompt token must be fed to get logits.
    let keep = common.min(req.prompt.len().saturating_sub(1));
    session.cache.truncate(keep)?;
    session.tokens.truncate(keep);
    let mut rng = rand::rngs::StdRng::seed_from_u64(req.seed);
    let mut logits = model.forward_cached(&req.prompt[keep..], &mut session.cache)?;
    session.tokens.extend_from_slice(&req.prompt[keep..]);
    let mut out = Generated {
        ids: Vec::new(),
        logp: Vec::new(),
        stopped: false,
        computed_prompt_tokens: req.prompt.len() - keep,
    };
    let limit = model.cfg.max_position_embeddings;
    for _ in 0..req.max_new_tokens {
        if req.cancel.load(std::sync::atomic::Ordering::Relaxed) || session.tokens.len() >= limit {
            break;
        }
        let (token, logp) = sample(&logits, req.temperature, req.top_p, &mut rng)?;
        out.ids.push(token);
        out.logp.push(logp);
        if req.stop.contains(&token) {
            out.stopped = true;
            // Keep the stop token in the cache: the next prompt starts with it.
            logits = model.forward_cached(&[token], &mut session.cache)?;
            session.tokens.push(token);
            let _ = logits;
            break;
        }
        logits = model.forward_cached(&[token], &mut session.cache)?;
        session.tokens.push(token);
    }
    Ok(out)
}

/// Draws a token from `logits` (f32, vocabulary-long) at `temperature` with nucleus
/// `top_p`; returns it with its log-probability at temperature 1.
pub fn sample(logits: &Tensor, temperature: f64, top_p: f64, rng: &mut impl Rng) -> candle_core::Result<(u32, f32)> {
    let logits = logits.to_dtype(DType::F32)?;
    let m = logits.max_keepdim(D::Minus1)?;
    let shifted = logits.broadcast_sub(&m)?;
    let lse = shifted.exp()?.sum_keepdim(D::Minus1)?.log()?;
    let logp = shifted.broadcast_sub(&lse)?.to_vec1::<f32>()?;
    let token = if temperature <= 0.0 {
        logp.iter()
            .enumerate()
            .fold((0usize, f32::NEG_INFINITY), |best, (i, &v)| if v > best.1 { (i, v) } else { best })
            .0
    } else {
        let scaled: Vec<f64> = logp.iter().map(|&v| f64::from(v) / temperature).collect();
        let mx = scaled.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let mut probs: Vec<(usize, f64)> = scaled.iter().map(|v| (v - mx).exp()).enumerate().collect();
        let total: f64 = probs.iter().map(|p| p.1).sum();
        if top_p < 1.0 {
            probs.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            let mut acc = 0.0;
            let mut cut = probs.len();
            for (i, p) in probs.iter().enumerate() {
                acc += p.1 / total;
                if acc >= top_p {
                    cut = i + 1;
                    break;
                }
            }
            probs.truncate(cut);
        }
        let kept: f64 = probs.iter().map(|p| p.1).sum();
        let mut u = rng.gen::<f64>() * kept;
        let mut chosen = probs.last().map(|p| p.0).unwrap_or(0);
        for (i, p) in &probs {
            if u < *p {
                chosen = *i;
                break;
            }
            u -= p;
        }
        chosen
    };
    Ok((token as u32, logp[token]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn sampling_follows_the_distribution_and_greedy_takes_the_max() {
        let logits = Tensor::new(&[0.0f32, (3.0f32).ln(), f32::NEG_INFINITY], &Device::Cpu).unwrap();
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let mut counts = [0usize; 3];
        for _ in 0..4000 {
            let (t, lp) = sample(&logits, 1.0, 1.0, &mut rng).unwrap();
            counts[t as usize] += 1;
            let want = if t == 0 { 0.25f32.ln() } else { 0.75f32.ln() };
            assert!((lp - want).abs() < 1e-5);
        }
        assert_eq!(counts[2], 0);
        assert!((counts[1] as f64 / 4000.0 - 0.75).abs() < 0.03, "{counts:?}");
        assert_eq!(sample(&logits, 0.0, 1.0, &mut rng).unwrap().0, 1);
        // top_p 0.5 keeps only the most likely token.
        for _ in 0..50 {
            assert_eq!(sample(&logits, 1.0, 0.5, &mut rng).unwrap().0, 1);
        }
    }
}
