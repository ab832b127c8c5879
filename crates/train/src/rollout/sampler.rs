//! In-process sampling from the candle policy: a worker thread that holds a frozen view
//! of the trainer's own weights (adapters applied unmerged, no copy: see
//! [`Qwen3::shared`]), keeps a KV cache per rollout (a new prompt that
//! extends the previous one only computes its new tokens), decodes the running rollouts
//! together in fixed-size batches, and samples with a per-request seed, so that a
//! rollout's tokens do not depend on scheduling or on its batch.

use std::collections::HashMap;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, RwLock};

use candle_core::{DType, Tensor, D};
use rand::{Rng, SeedableRng};
use tokio::sync::oneshot;

use crate::error::TrainError;
use crate::model::{KvCache, Qwen3};

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
    /// The grammar the reply must match (the episode's `ChatRequest::grammar`), so that
    /// rollouts are sampled in the constrained format the product chats in. The llama.cpp
    /// engine enforces it; the candle engine samples free (see `docs/train.md`).
    pub grammar: Option<String>,
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
    /// Starts a worker sampling from `policy` (a frozen view or copy).
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

    /// Replaces the policy (after an update); cached prefixes are dropped.
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

/// Rows of every batched decoding step: a fixed count (idle rows are padding) keeps each
/// row's arithmetic the same whatever shares the batch.
pub const DECODE_ROWS: usize = 8;

/// A request being generated: its session is taken out of the map while it runs.
struct Active {
    req: Box<GenerateRequest>,
    model: Arc<Qwen3>,
    session: Session,
    rng: rand::rngs::StdRng,
    out: Generated,
    /// Logits of the next position, to sample from.
    logits: Tensor,
    /// A stop token was sampled: it is fed to the cache, then the request ends.
    ending: bool,
}

/// Serves requests in rounds: new requests are prefilled one by one (prompts differ in
/// length), then every running request samples a token and all of them are fed in
/// batched decoding steps. A request's tokens depend only on its prompt, its seed and
/// the policy (see `Qwen3::decode_batch`), never on what runs beside it.
fn worker(rx: Receiver<Msg>, policy: Arc<RwLock<Arc<Qwen3>>>) {
    let mut sessions: HashMap<u64, Session> = HashMap::new();
    let mut active: Vec<Active> = Vec::new();
    // Requests for a session that is already generating wait for it (one rollout asks
    // one thing at a time, so this is a guard, not a path).
    let mut waiting: Vec<Box<GenerateRequest>> = Vec::new();
    let mut closed: Vec<u64> = Vec::new();
    loop {
        let mut inbox = Vec::new();
        if active.is_empty() && waiting.is_empty() {
            match rx.recv() {
                Ok(m) => inbox.push(m),
                Err(_) => return,
            }
        }
        inbox.extend(rx.try_iter());
        for msg in inbox {
            match msg {
                Msg::Close(id) => {
                    sessions.remove(&id);
                    if active.iter().any(|a| a.req.session == id) {
                        closed.push(id);
                    }
                }
                Msg::Generate(req) => waiting.push(req),
            }
        }
        let mut still_waiting = Vec::new();
        for req in waiting.drain(..) {
            if active.iter().any(|a| a.req.session == req.session) {
                still_waiting.push(req);
                continue;
            }
            let model = match policy.read() {
                Ok(p) => p.clone(),
                Err(_) => return,
            };
            if let Some(a) = start(req, model, &mut sessions) {
                active.push(a);
            }
        }
        waiting = still_waiting;
        step(&mut active, &mut sessions, &mut closed);
    }
}

/// Prefills a request's new prompt tokens; answers at once when that fails.
fn start(req: Box<GenerateRequest>, model: Arc<Qwen3>, sessions: &mut HashMap<u64, Session>) -> Option<Active> {
    let key = Arc::as_ptr(&model) as usize;
    let mut session = sessions.remove(&req.session).filter(|s| s.policy == key).unwrap_or(Session {
        tokens: Vec::new(),
        cache: KvCache::default(),
        policy: key,
    });
    let common = session.tokens.iter().zip(&req.prompt).take_while(|(a, b)| a == b).count();
    // At least one prompt token must be fed to get logits.
    let keep = common.min(req.prompt.len().saturating_sub(1));
    let prefill =
        session.cache.truncate(keep).and_then(|()| model.forward_cached(&req.prompt[keep..], &mut session.cache));
    match prefill {
        Ok(logits) => {
            session.tokens.truncate(keep);
            session.tokens.extend_from_slice(&req.prompt[keep..]);
            let out = Generated {
                ids: Vec::new(),
                logp: Vec::new(),
                stopped: false,
                computed_prompt_tokens: req.prompt.len() - keep,
            };
            let rng = rand::rngs::StdRng::seed_from_u64(req.seed);
            Some(Active { req, model, session, rng, out, logits, ending: false })
        }
        Err(e) => {
            let _ = req.reply.send(Err(sampling_error(e)));
            None
        }
    }
}

fn sampling_error(e: candle_core::Error) -> TrainError {
    TrainError::Tensor { context: "sampling from the policy".into(), source: e }
}

/// One round: every running request either ends or samples a token, and the sampled
/// tokens are fed in batches of `DECODE_ROWS` per policy snapshot.
fn step(active: &mut Vec<Active>, sessions: &mut HashMap<u64, Session>, closed: &mut Vec<u64>) {
    let mut feed: Vec<Active> = Vec::new();
    for mut a in active.drain(..) {
        let limit = a.model.cfg.max_position_embeddings;
        let cancelled = a.req.cancel.load(std::sync::atomic::Ordering::Relaxed);
        if a.ending || a.out.ids.len() >= a.req.max_new_tokens || cancelled || a.session.tokens.len() >= limit {
            finish(a, Ok(()), sessions, closed);
            continue;
        }
        match sample(&a.logits, a.req.temperature, a.req.top_p, &mut a.rng) {
            Ok((token, logp)) => {
                a.out.ids.push(token);
                a.out.logp.push(logp);
                // A stop token is still fed: the next prompt starts with it.
                if a.req.stop.contains(&token) {
                    a.out.stopped = true;
                    a.ending = true;
                }
                feed.push(a);
            }
            Err(e) => finish(a, Err(e), sessions, closed),
        }
    }
    // Batches of requests on the same policy snapshot, in arrival order.
    while !feed.is_empty() {
        let key = Arc::as_ptr(&feed[0].model);
        let (mut batch, mut rest) = (Vec::new(), Vec::new());
        for a in feed {
            if batch.len() < DECODE_ROWS && Arc::as_ptr(&a.model) == key {
                batch.push(a);
            } else {
                rest.push(a);
            }
        }
        feed = rest;
        let ids: Vec<u32> = batch.iter().map(|a| a.out.ids[a.out.ids.len() - 1]).collect();
        let model = batch[0].model.clone();
        let mut caches: Vec<&mut KvCache> = batch.iter_mut().map(|a| &mut a.session.cache).collect();
        match model.decode_batch(&ids, &mut caches, DECODE_ROWS) {
            Ok(logits) => {
                for ((mut a, l), id) in batch.into_iter().zip(logits).zip(ids) {
                    a.session.tokens.push(id);
                    a.logits = l;
                    active.push(a);
                }
            }
            Err(e) => {
                let msg = e.to_string();
                for a in batch {
                    finish(a, Err(candle_core::Error::Msg(msg.clone())), sessions, closed);
                }
            }
        }
    }
}

/// Answers a request and puts its session back (unless it was closed meanwhile or failed).
fn finish(a: Active, result: candle_core::Result<()>, sessions: &mut HashMap<u64, Session>, closed: &mut Vec<u64>) {
    let Active { req, session, out, .. } = a;
    let id = req.session;
    let reply = match result {
        Ok(()) => {
            if let Some(i) = closed.iter().position(|&c| c == id) {
                closed.swap_remove(i);
            } else {
                sessions.insert(id, session);
            }
            Ok(out)
        }
        Err(e) => {
            closed.retain(|&c| c != id);
            Err(sampling_error(e))
        }
    };
    let _ = req.reply.send(reply);
}

/// Draws a token from `logits` (f32, vocabulary-long) at `temperature` with nucleus
/// `top_p`; returns it with its log-probability at temperature 1.
pub fn sample(logits: &Tensor, temperature: f64, top_p: f64, rng: &mut impl Rng) -> candle_core::Result<(u32, f32)> {
    let logits = logits.to_dtype(DType::F32)?;
    let m = logits.max_keepdim(D::Minus1)?;
    let shifted = logits.broadcast_sub(&m)?;
    let lse = shifted.exp()?.sum_keepdim(D::Minus1)?.log()?;
    let logp = shifted.broadcast_sub(&lse)?.to_vec1::<f32>()?;
    Ok(draw(&logp, temperature, top_p, rng))
}

/// [`sample`] from a slice of logits (another engine's), in f64 for the normaliser.
pub fn sample_slice(logits: &[f32], temperature: f64, top_p: f64, rng: &mut impl Rng) -> (u32, f32) {
    let m = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let lse = logits.iter().map(|&v| f64::from(v - m).exp()).sum::<f64>().ln() as f32;
    let logp: Vec<f32> = logits.iter().map(|&v| v - m - lse).collect();
    draw(&logp, temperature, top_p, rng)
}

/// Draws from log-probabilities (temperature 1) at `temperature` and nucleus `top_p`.
fn draw(logp: &[f32], temperature: f64, top_p: f64, rng: &mut impl Rng) -> (u32, f32) {
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
            // Draw in vocabulary order, as without a nucleus: sorting near-equal
            // probabilities is where two engines' last-bit differences would reorder the
            // candidates and change the draw.
            probs.sort_by_key(|p| p.0);
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
    (token as u32, logp.get(token).copied().unwrap_or(f32::NEG_INFINITY))
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    fn request(
        session: u64,
        prompt: Vec<u32>,
        seed: u64,
    ) -> (GenerateRequest, oneshot::Receiver<Result<Generated, TrainError>>) {
        let (reply, rx) = oneshot::channel();
        let req = GenerateRequest {
            session,
            prompt,
            max_new_tokens: 12,
            temperature: 1.0,
            top_p: 1.0,
            seed,
            stop: vec![1],
            cancel: Default::default(),
            grammar: None,
            reply,
        };
        (req, rx)
    }

    #[test]
    fn a_rollout_samples_the_same_tokens_alone_or_batched_with_others() {
        use crate::model::tests::write_random_qwen3;
        use crate::model::TrainMode;
        let dir = tempfile::tempdir().unwrap();
        write_random_qwen3(dir.path(), 13, true, 2);
        let load = || Qwen3::load(dir.path(), &TrainMode::Full, DType::F32, &Device::Cpu, 1).unwrap().merged().unwrap();
        // Alone.
        let sampler = Sampler::start(load()).unwrap();
        let (req, rx) = request(7, vec![3, 5, 7, 2], 42);
        sampler.submit(req).unwrap();
        let alone = rx.blocking_recv().unwrap().unwrap();
        assert!(!alone.ids.is_empty());
        // With ten others (more than one batch of rows), submitted before and after it.
        let sampler = Sampler::start(load()).unwrap();
        let mut others = Vec::new();
        for s in 0..10u64 {
            let (req, rx) = request(100 + s, vec![4, 6, (s % 13) as u32], s);
            sampler.submit(req).unwrap();
            others.push(rx);
            if s == 4 {
                let (req, rx) = request(7, vec![3, 5, 7, 2], 42);
                sampler.submit(req).unwrap();
                others.push(rx);
            }
        }
        let results: Vec<Generated> = others.into_iter().map(|rx| rx.blocking_recv().unwrap().unwrap()).collect();
        assert_eq!(results[5], alone);
        // A follow-up turn of the same session reuses its cache: every sampled token
        // was fed, so only the new one is computed.
        let mut prompt = vec![3, 5, 7, 2];
        prompt.extend(&alone.ids);
        prompt.push(9);
        let (req, rx) = request(7, prompt, 43);
        sampler.submit(req).unwrap();
        let next = rx.blocking_recv().unwrap().unwrap();
        assert_eq!(next.computed_prompt_tokens, 1);
    }

    #[test]
    fn a_sampler_on_the_shared_weights_samples_what_a_merged_copy_samples_and_follows_updates() {
        use crate::model::tests::{lora, write_random_qwen3};
        use crate::model::Param;
        let dir = tempfile::tempdir().unwrap();
        write_random_qwen3(dir.path(), 13, true, 2);
        let policy = Qwen3::load(dir.path(), &lora(4), DType::F32, &Device::Cpu, 1).unwrap();
        // Non-zero adapters (B starts at zero), so that applying them unmerged matters.
        let randomise = |salt: f32| {
            for (_, v) in policy.trainable() {
                let n = v.as_tensor().elem_count();
                let vals: Vec<f32> = (0..n).map(|i| ((i as f32 * 0.37 + salt).sin()) * 0.3).collect();
                v.set(&Tensor::from_vec(vals, v.as_tensor().shape(), &Device::Cpu).unwrap()).unwrap();
            }
        };
        randomise(0.1);
        let run = |sampler: &Sampler| -> Vec<Generated> {
            (0..4u64)
                .map(|s| {
                    let (req, rx) = request(s, vec![3, 5, (s % 13) as u32], 40 + s);
                    sampler.submit(req).unwrap();
                    rx.blocking_recv().unwrap().unwrap()
                })
                .collect()
        };
        let shared = Sampler::start(policy.shared().unwrap()).unwrap();
        let merged = run(&Sampler::start(policy.merged().unwrap()).unwrap());
        let ours = run(&shared);
        for (a, b) in ours.iter().zip(&merged) {
            assert_eq!(a.ids, b.ids);
            for (x, y) in a.logp.iter().zip(&b.logp) {
                assert!((x - y).abs() < 1e-4, "{x} vs {y}");
            }
        }
        // The sampler's adapters are the trainer's: an in-place update is what it samples from next.
        randomise(2.0);
        shared.set_policy(policy.shared().unwrap());
        let after = run(&shared);
        assert_ne!(after, ours);
        assert_eq!(
            after.iter().map(|g| g.ids.clone()).collect::<Vec<_>>(),
            run(&Sampler::start(policy.merged().unwrap()).unwrap()).iter().map(|g| g.ids.clone()).collect::<Vec<_>>()
        );
        // The view holds no variable (nothing it computes keeps a gradient graph alive).
        let view = policy.shared().unwrap();
        let (_, _, q) = view.projections()[0];
        let lora = q.lora.as_ref().expect("q_proj is adapted");
        assert!(matches!((&lora.a, &lora.b, &q.weight), (Param::Frozen(_), Param::Frozen(_), Param::Frozen(_))));
    }

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
