//! Updates: the GRPO update over PPO epochs, mini-batches, micro-batches and
//! data-parallel ranks, and the SFT step. The prompt a mini-batch's sequences share is
//! computed once per mini-batch (see `model::prefix`).

use std::time::Instant;

use candle_core::{DType, Tensor};
use rand::seq::SliceRandom;
use rand::SeedableRng;

use super::backward::{backward_into, hidden_after, prefix_backward};
use super::dist::{all_reduce_host_f64, Collective};
use super::error::{TensorContext, TrainError};
use super::grpo::{ppo_loss, LossInputs, LossSums, PpoSettings};
use super::model::{shared_len, token_logprobs, ForwardMode, Qwen3, SharedPrefix, TokenBatch};
use super::optim::AdamW;
use super::zero3::pass;

/// One training sequence: a rollout's tokens with its loss mask and advantage.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Prompt, model and tool-output tokens in order.
    pub tokens: Vec<u32>,
    /// 1 where the model produced the token (only those are trained on).
    pub mask: Vec<u8>,
    /// The rollout's advantage (every model token of it gets the same).
    pub advantage: f32,
    /// The sampler's log-probabilities of the model tokens, when the sampler is not the trainer.
    pub sampler_logp: Option<Vec<f32>>,
}

impl Sample {
    /// Model tokens that are scored (the first token has no prediction).
    pub fn scored(&self) -> usize {
        self.mask.iter().skip(1).filter(|m| **m != 0).count()
    }
}

/// How updates are computed.
#[derive(Debug, Clone, PartialEq)]
pub struct UpdateSettings {
    pub ppo: PpoSettings,
    /// Passes over the step's samples.
    pub epochs: usize,
    /// Optimiser steps per epoch.
    pub minibatches: usize,
    /// Sequences per forward/backward (gradients accumulate over micro-batches).
    pub micro_batch: usize,
    /// Global gradient-norm limit (0 = none).
    pub grad_clip: f64,
    /// Recompute each layer's activations in the backward pass instead of keeping them.
    pub recompute: bool,
    /// Positions per log-prob chunk.
    pub chunk: usize,
    /// Cap of the truncated importance weights; applied to samples with sampler log-probs.
    pub importance_cap: f64,
    /// Padding token id.
    pub pad: u32,
}

/// What an update measured.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct UpdateStats {
    /// Mean loss per optimiser step.
    pub loss: f64,
    /// Mean k3 KL per model token.
    pub kl: f64,
    /// Mean entropy per model token.
    pub entropy: f64,
    /// Fraction of model tokens whose clipped term was active.
    pub clip_frac: f64,
    /// Mean gradient norm before clipping.
    pub grad_norm: f64,
    /// Model tokens trained on (per epoch).
    pub model_tokens: u64,
    /// Optimiser steps taken.
    pub steps: u64,
    /// Mean |trainer − sampler| log-prob over the model tokens another engine sampled
    /// (before the update: both saw the same weights); `None` when the trainer sampled.
    pub sampler_logp_diff: Option<f64>,
    /// Where the seconds went.
    pub phases: UpdatePhases,
}

/// The update's phases: seconds, and the tokens each one went through.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct UpdatePhases {
    /// Scoring the samples before the update (old, and reference when the KL weight is set).
    pub score_secs: f64,
    /// Forward and backward passes, shared prefixes included.
    pub grad_secs: f64,
    /// Gradient reduction, clipping and the optimiser.
    pub optim_secs: f64,
    /// Token positions the forward and backward passes went through (every sample's, once
    /// per PPO epoch).
    pub tokens: u64,
    /// Of those, positions computed once per mini-batch as a shared prefix instead of per sample.
    pub shared_tokens: u64,
}

/// Log-probabilities of every sample's scored tokens under `model` (no gradient kept).
/// The prompt all samples share is computed once. Over several ranks each computes its
/// run of the micro-batches one process would cut (the same sequences, padded alike, so
/// the same bits) and the results are exchanged: every rank gets every sample's.
pub fn sample_logprobs(
    model: &Qwen3,
    samples: &[&Sample],
    mode: ForwardMode,
    (micro_batch, pad, chunk): (usize, u32, usize),
    world: &dyn Collective,
) -> Result<Vec<Vec<f32>>, TrainError> {
    let all: Vec<(&[u32], &[u8])> = samples.iter().map(|s| (s.tokens.as_slice(), s.mask.as_slice())).collect();
    let sharded = model.zero3.is_some();
    // A sharded model's passes are collectives: no per-rank shared prompt, and phantom
    // passes where a rank has fewer micro-batches than another.
    let prefix = if sharded { None } else { shared_prefix(model, &all, mode)? };
    let p = prefix.as_ref().map_or(0, SharedPrefix::len);
    let order: Vec<usize> = (0..all.len()).collect();
    let mut mine: Vec<(usize, Vec<f32>)> = Vec::new();
    let micro: Vec<&[usize]> =
        rank_micro_batches(&order, micro_batch, world.rank(), world.world_size()).map(|(_, m)| m).collect();
    let rounds = if sharded { pass::rounds(order.len().div_ceil(micro_batch.max(1)), world.world_size()) } else { 0 };
    for k in 0..micro.len().max(rounds) {
        let Some(indices) = micro.get(k) else {
            pass::token_logprobs_sharded(model, None, mode, chunk, world)?;
            continue;
        };
        let group: Vec<(&[u32], &[u8])> = indices.iter().map(|&i| all[i]).collect();
        let batch = TokenBatch::new(&after(&group, p), pad, model.device()).ctx("building a batch")?;
        let logp = if sharded {
            pass::token_logprobs_sharded(model, Some(&batch), mode, chunk, world)?
                .ok_or_else(|| TrainError::Other("a sharded pass scored nothing".into()))?
        } else {
            let hidden = hidden_after(model, &batch.ids, mode, prefix.as_ref()).ctx("scoring tokens")?;
            token_logprobs(model, &hidden, &batch, chunk).ctx("scoring tokens")?.0
        };
        // An f64 model (the parity checks' reference) scores in f64; samples keep f32.
        let logp = logp.detach().to_dtype(DType::F32).and_then(|t| t.to_vec1::<f32>()).ctx("scoring tokens")?;
        let mut per = vec![Vec::new(); group.len()];
        for (v, &b) in logp.into_iter().zip(&batch.seq_of_token) {
            per[b].push(v);
        }
        mine.extend(indices.iter().copied().zip(per));
    }
    let mut out = vec![Vec::new(); all.len()];
    if world.world_size() == 1 {
        for (i, v) in mine {
            out[i] = v;
        }
        return Ok(out);
    }
    for (r, bytes) in world.all_gather_bytes(&encode_scores(&mine))?.iter().enumerate() {
        for (i, v) in
            decode_scores(bytes).ok_or_else(|| TrainError::Distributed(format!("rank {r} sent bad scores")))?
        {
            *out.get_mut(i).ok_or_else(|| TrainError::Distributed(format!("rank {r} scored sample {i}")))? = v;
        }
    }
    Ok(out)
}

/// Samples' log-probs as bytes: per sample its index, its length and the f32s (exact, unlike text).
fn encode_scores(scores: &[(usize, Vec<f32>)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, v) in scores {
        out.extend((*i as u64).to_le_bytes());
        out.extend((v.len() as u64).to_le_bytes());
        out.extend(v.iter().flat_map(|x| x.to_le_bytes()));
    }
    out
}

fn decode_scores(mut bytes: &[u8]) -> Option<Vec<(usize, Vec<f32>)>> {
    let mut out = Vec::new();
    let word = |b: &mut &[u8]| -> Option<u64> {
        let (head, rest) = b.split_first_chunk::<8>()?;
        *b = rest;
        Some(u64::from_le_bytes(*head))
    };
    while !bytes.is_empty() {
        let i = word(&mut bytes)? as usize;
        let n = word(&mut bytes)? as usize;
        let body = bytes.get(..n.checked_mul(4)?)?;
        bytes = &bytes[n * 4..];
        out.push((i, body.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()));
    }
    Some(out)
}

/// The prompt `seqs` share, run through `model` once, when it is long enough to pay.
fn shared_prefix(
    model: &Qwen3,
    seqs: &[(&[u32], &[u8])],
    mode: ForwardMode,
) -> Result<Option<SharedPrefix>, TrainError> {
    match shared_len(seqs) {
        0 => Ok(None),
        p => SharedPrefix::compute(model, &seqs[0].0[..p], mode).map(Some).ctx("the shared prefix"),
    }
}

/// `seqs` without their first `p` tokens (what follows a shared prefix).
fn after<'a>(seqs: &[(&'a [u32], &'a [u8])], p: usize) -> Vec<(&'a [u32], &'a [u8])> {
    seqs.iter().map(|(ids, mask)| (&ids[p..], &mask[p..])).collect()
}

/// Mean |trainer − sampler| log-prob over the samples that carry sampler log-probs.
fn sampler_logp_diff(samples: &[Sample], trainer: &[Vec<f32>]) -> Option<f64> {
    let (mut sum, mut n) = (0.0f64, 0usize);
    for (s, t) in samples.iter().zip(trainer) {
        if let Some(sampler) = &s.sampler_logp {
            sum += t.iter().zip(sampler).map(|(a, b)| f64::from((a - b).abs())).sum::<f64>();
            n += t.len().min(sampler.len());
        }
    }
    (n > 0).then(|| sum / n as f64)
}

/// What the reference policy for the KL term is.
#[derive(Clone, Copy)]
pub enum Reference<'a> {
    /// No KL term.
    None,
    /// LoRA: the same model with its adapters switched off.
    AdaptersOff,
    /// Full updates: a frozen copy of the initial weights.
    Model(&'a Qwen3),
}

/// One GRPO update on the step's samples (every rank passes all samples; each rank
/// trains on its share of every mini-batch and gradients are summed across ranks).
pub fn grpo_update(
    policy: &Qwen3,
    reference: Reference<'_>,
    opt: &mut AdamW,
    samples: &[Sample],
    world: &dyn Collective,
    settings: &UpdateSettings,
    seed: u64,
) -> Result<UpdateStats, TrainError> {
    let (rank, size) = (world.rank(), world.world_size());
    let all: Vec<&Sample> = samples.iter().collect();
    let eval = ForwardMode::default();
    let scoring = Instant::now();
    let batching = (settings.micro_batch, settings.pad, settings.chunk);
    let old = sample_logprobs(policy, &all, eval, batching, world)?;
    let refs = match reference {
        Reference::None => None,
        Reference::AdaptersOff => {
            Some(sample_logprobs(policy, &all, ForwardMode { adapters_off: true, ..eval }, batching, world)?)
        }
        Reference::Model(m) => Some(sample_logprobs(m, &all, eval, batching, world)?),
    };
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut stats = UpdateStats { sampler_logp_diff: sampler_logp_diff(samples, &old), ..Default::default() };
    stats.phases.score_secs = scoring.elapsed().as_secs_f64();
    let positions: u64 = samples.iter().map(|s| s.tokens.len() as u64).sum();
    stats.phases.tokens = positions * settings.epochs.max(1) as u64;
    let mut totals = LossSums::default();
    let mut entropy_sum = 0.0;
    let n_vars = opt.vars().len();
    let sharded = policy.zero3.is_some();
    for epoch in 0..settings.epochs.max(1) {
        let mut order: Vec<usize> = (0..samples.len()).collect();
        order.shuffle(&mut rng);
        let per_mb = order.len().div_ceil(settings.minibatches.max(1)).max(1);
        for (mb_index, mb) in order.chunks(per_mb).enumerate() {
            let norm = mb.iter().map(|&i| samples[i].scored()).sum::<usize>().max(1) as f64;
            let mut grads: Vec<Option<Tensor>> = vec![None; n_vars];
            let mut loss_value = 0.0;
            let computing = Instant::now();
            let mb_seed = seed ^ ((epoch as u64) << 40) ^ ((mb_index as u64) << 20);
            // The prompt this rank's sequences of the mini-batch share (one dropout draw for it).
            let mine: Vec<(&[u32], &[u8])> = rank_micro_batches(mb, settings.micro_batch, rank, size)
                .flat_map(|(_, micro)| {
                    micro.iter().map(|&i| (samples[i].tokens.as_slice(), samples[i].mask.as_slice()))
                })
                .collect();
            let prefix_mode = ForwardMode { train: true, dropout_seed: mb_seed ^ 0xF_FFFF, adapters_off: false };
            let mut prefix = if sharded { None } else { shared_prefix(policy, &mine, prefix_mode)? };
            let p = prefix.as_ref().map_or(0, SharedPrefix::len);
            stats.phases.shared_tokens += (p * mine.len().saturating_sub(1)) as u64;
            let micros: Vec<&[usize]> =
                rank_micro_batches(mb, settings.micro_batch, rank, size).map(|(_, m)| m).collect();
            let rounds = if sharded { pass::rounds(mb.len().div_ceil(settings.micro_batch.max(1)), size) } else { 0 };
            for k in 0..micros.len().max(rounds) {
                let Some(micro) = micros.get(k).copied() else {
                    pass::backward_sharded(policy, None, ForwardMode::default(), &|_, h| Ok(h.clone()), world)?;
                    continue;
                };
                let mode = ForwardMode { train: true, dropout_seed: mb_seed ^ micro[0] as u64, adapters_off: false };
                let inputs = MicroInputs { old: &old, refs: refs.as_deref(), norm, mode };
                let (value, sums, ent) =
                    micro_grads(policy, samples, micro, &inputs, settings, &mut grads, prefix.as_mut(), world)?;
                loss_value += value;
                entropy_sum += ent;
                totals.pg += sums.pg;
                totals.kl += sums.kl;
                totals.clipped += sums.clipped;
                totals.tokens += sums.tokens;
            }
            if let Some(p) = prefix.as_mut() {
                prefix_backward(policy, p, &mut grads)?;
            }
            stats.phases.grad_secs += computing.elapsed().as_secs_f64();
            let optimising = Instant::now();
            let norm_before = opt.reduce_clip_apply(world, &mut grads, settings.grad_clip)?;
            stats.phases.optim_secs += optimising.elapsed().as_secs_f64();
            let mut lv = [loss_value];
            all_reduce_host_f64(world, &mut lv)?;
            stats.loss += lv[0];
            stats.grad_norm += norm_before;
            stats.steps += 1;
        }
    }
    let mut sums = [totals.kl, totals.clipped as f64, totals.tokens as f64, entropy_sum];
    all_reduce_host_f64(world, &mut sums)?;
    let tokens = sums[2].max(1.0);
    let steps = stats.steps.max(1) as f64;
    stats.loss /= steps;
    stats.grad_norm /= steps;
    stats.kl = sums[0] / tokens;
    stats.clip_frac = sums[1] / tokens;
    stats.entropy = sums[3] / tokens;
    stats.model_tokens = (tokens as u64) / settings.epochs.max(1) as u64;
    Ok(stats)
}

/// This rank's micro-batches of a mini-batch, with their indices: the mini-batch is cut
/// into micro-batches exactly as one process cuts it, and each rank takes a contiguous
/// run of them. Every micro-batch is then computed on the same sequences, padded alike,
/// as in one process, and with at most two micro-batches per mini-batch the sum over
/// ranks (in rank order) adds them in one process's order: the update is the same to the
/// bit. (Splitting sequences instead would change each micro-batch's padding, and with it
/// the rounding of every reduction inside the model.) A shared prompt is computed by each
/// rank for its own sequences and its gradient added there: when the mini-batch's
/// micro-batches fall on several ranks, the sum is one process's up to rounding.
fn rank_micro_batches<T>(
    items: &[T],
    micro_batch: usize,
    rank: usize,
    size: usize,
) -> impl Iterator<Item = (usize, &[T])> {
    let n = items.len().div_ceil(micro_batch.max(1));
    let (base, extra) = (n / size.max(1), n % size.max(1));
    let lo = rank * base + rank.min(extra);
    let hi = lo + base + usize::from(rank < extra);
    items.chunks(micro_batch.max(1)).enumerate().skip(lo).take(hi - lo)
}

/// A micro-batch's loss, loss sums and entropy sum.
type MicroResult = (f64, LossSums, f64);

/// What every micro-batch of a mini-batch is scored against.
struct MicroInputs<'a> {
    /// The samples' log-probs before the update.
    old: &'a [Vec<f32>],
    /// The reference policy's, when the KL term is on.
    refs: Option<&'a [Vec<f32>]>,
    /// Scored tokens of the mini-batch (the loss is their mean).
    norm: f64,
    mode: ForwardMode,
}

/// One micro-batch's forward and backward pass, its gradients added into `grads`; with
/// `prefix`, the sequences' tokens after it, its keys' and values' gradients added into it.
#[allow(clippy::too_many_arguments)]
fn micro_grads(
    policy: &Qwen3,
    samples: &[Sample],
    micro: &[usize],
    inputs: &MicroInputs<'_>,
    settings: &UpdateSettings,
    grads: &mut [Option<Tensor>],
    prefix: Option<&mut SharedPrefix>,
    world: &dyn Collective,
) -> Result<MicroResult, TrainError> {
    let MicroInputs { old, refs, norm, mode } = *inputs;
    let device = policy.device().clone();
    let seqs: Vec<(&[u32], &[u8])> =
        micro.iter().map(|&i| (samples[i].tokens.as_slice(), samples[i].mask.as_slice())).collect();
    let p = prefix.as_deref().map_or(0, SharedPrefix::len);
    let batch = TokenBatch::new(&after(&seqs, p), settings.pad, &device).ctx("building a batch")?;
    let cat = |f: &dyn Fn(usize) -> Vec<f32>| -> Result<Tensor, TrainError> {
        let v: Vec<f32> = micro.iter().flat_map(|&i| f(i)).collect();
        let n = v.len();
        Tensor::from_vec(v, n, &device).ctx("building a batch")
    };
    let old_t = cat(&|i| old[i].clone())?;
    let adv_t = cat(&|i| vec![samples[i].advantage; samples[i].scored()])?;
    let ref_t = match refs {
        Some(r) => Some(cat(&|i| r[i].clone())?),
        None => None,
    };
    let weights = if micro.iter().any(|&i| samples[i].sampler_logp.is_some()) {
        Some(cat(&|i| match &samples[i].sampler_logp {
            Some(s) => super::grpo::truncated_importance(&old[i], s, settings.importance_cap),
            None => vec![1.0; samples[i].scored()],
        })?)
    } else {
        None
    };
    let sums = std::cell::RefCell::new((LossSums::default(), 0.0f64));
    let head = |model: &Qwen3, hidden: &Tensor| -> candle_core::Result<Tensor> {
        let (logp, entropy) = token_logprobs(model, hidden, &batch, settings.chunk)?;
        // The loss is computed in f32 (its inputs are); an f64 model's gradient still
        // flows back through the conversion in f64.
        let logp = logp.to_dtype(DType::F32)?;
        let inputs = LossInputs {
            logp: &logp,
            old_logp: &old_t,
            advantages: &adv_t,
            ref_logp: ref_t.as_ref(),
            weights: weights.as_ref(),
        };
        let (loss, s) = ppo_loss(&inputs, &settings.ppo, norm)?;
        *sums.borrow_mut() = (s, entropy.iter().map(|&e| f64::from(e)).sum());
        Ok(loss)
    };
    let value = if policy.zero3.is_some() {
        pass::backward_sharded(policy, Some(&batch.ids), mode, &head, world)?
    } else {
        backward_into(policy, &batch.ids, mode, settings.recompute, &head, grads, prefix)?
    };
    let (s, ent) = sums.into_inner();
    Ok((value, s, ent))
}

/// One supervised step: cross-entropy on the masked tokens of `samples`, token-mean over
/// the batch, gradient accumulation over micro-batches, clipping and AdamW. Returns the loss.
pub fn sft_step(
    model: &Qwen3,
    opt: &mut AdamW,
    samples: &[&Sample],
    settings: &UpdateSettings,
    world: &dyn Collective,
    seed: u64,
) -> Result<f64, TrainError> {
    let (rank, size) = (world.rank(), world.world_size());
    let norm = samples.iter().map(|s| s.scored()).sum::<usize>().max(1) as f64;
    let mut grads: Vec<Option<Tensor>> = vec![None; opt.vars().len()];
    let mut total = 0.0;
    let mine: Vec<(&[u32], &[u8])> = rank_micro_batches(samples, settings.micro_batch, rank, size)
        .flat_map(|(_, micro)| micro.iter().map(|s| (s.tokens.as_slice(), s.mask.as_slice())))
        .collect();
    let prefix_mode = ForwardMode { train: true, dropout_seed: seed ^ 0xF_FFFF, adapters_off: false };
    let sharded = model.zero3.is_some();
    let mut prefix = if sharded { None } else { shared_prefix(model, &mine, prefix_mode)? };
    let p = prefix.as_ref().map_or(0, SharedPrefix::len);
    let micros: Vec<(usize, &[&Sample])> = rank_micro_batches(samples, settings.micro_batch, rank, size).collect();
    let rounds = if sharded { pass::rounds(samples.len().div_ceil(settings.micro_batch.max(1)), size) } else { 0 };
    for j in 0..micros.len().max(rounds) {
        let Some(&(k, micro)) = micros.get(j) else {
            pass::backward_sharded(model, None, ForwardMode::default(), &|_, h| Ok(h.clone()), world)?;
            continue;
        };
        let seqs: Vec<(&[u32], &[u8])> = micro.iter().map(|s| (s.tokens.as_slice(), s.mask.as_slice())).collect();
        let batch = TokenBatch::new(&after(&seqs, p), settings.pad, model.device()).ctx("building a batch")?;
        let head = |model: &Qwen3, hidden: &Tensor| -> candle_core::Result<Tensor> {
            let (logp, _) = token_logprobs(model, hidden, &batch, settings.chunk)?;
            logp.sum_all()?.neg()? / norm
        };
        let mode = ForwardMode { train: true, dropout_seed: seed ^ k as u64, adapters_off: false };
        total += if sharded {
            pass::backward_sharded(model, Some(&batch.ids), mode, &head, world)?
        } else {
            backward_into(model, &batch.ids, mode, settings.recompute, &head, &mut grads, prefix.as_mut())?
        };
    }
    if let Some(p) = prefix.as_mut() {
        prefix_backward(model, p, &mut grads)?;
    }
    opt.reduce_clip_apply(world, &mut grads, settings.grad_clip)?;
    let mut lv = [total];
    all_reduce_host_f64(world, &mut lv)?;
    Ok(lv[0])
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::dist::{LocalWorld, SingleRank};
    use crate::grpo::PpoSettings;
    use crate::model::tests::write_random_qwen3;
    use crate::model::{LoraSettings, TrainMode, LORA_TARGETS};
    use crate::optim::AdamWSettings;
    use candle_core::{DType, Device};

    fn samples() -> Vec<Sample> {
        let mk =
            |tokens: Vec<u32>, mask: Vec<u8>, advantage: f32| Sample { tokens, mask, advantage, sampler_logp: None };
        vec![
            mk(vec![3, 5, 7, 2, 9], vec![0, 0, 1, 1, 1], 1.0),
            mk(vec![3, 5, 8, 8], vec![0, 0, 1, 1], -1.0),
            mk(vec![4, 6, 2, 2, 1, 7], vec![0, 1, 1, 0, 1, 1], 0.5),
            mk(vec![4, 6, 9], vec![0, 0, 1], -0.5),
        ]
    }

    pub(crate) fn settings() -> UpdateSettings {
        UpdateSettings {
            ppo: PpoSettings { clip_low: 0.2, clip_high: 0.28, clip_dual: 3.0, kl_coef: 0.05 },
            epochs: 2,
            minibatches: 1,
            micro_batch: 1,
            grad_clip: 1.0,
            recompute: false,
            chunk: 4,
            importance_cap: 2.0,
            pad: 0,
        }
    }

    fn lora() -> TrainMode {
        TrainMode::Lora(LoraSettings {
            rank: 2,
            alpha: 4.0,
            dropout: 0.0,
            targets: LORA_TARGETS.iter().map(|s| s.to_string()).collect(),
        })
    }

    fn params(model: &Qwen3) -> Vec<f32> {
        model
            .trainable()
            .iter()
            .flat_map(|(_, v)| v.as_tensor().flatten_all().unwrap().to_vec1::<f32>().unwrap())
            .collect()
    }

    const ADAM: AdamWSettings = AdamWSettings { lr: 0.01, beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.01 };

    #[test]
    fn two_rank_data_parallel_step_equals_the_one_rank_step() {
        let dir = tempfile::tempdir().unwrap();
        write_random_qwen3(dir.path(), 13, true, 11);
        let data = samples();
        let one = Qwen3::load(dir.path(), &lora(), DType::F32, &Device::Cpu, 5).unwrap();
        let mut opt = AdamW::new(one.trainable(), ADAM).unwrap();
        let s1 = grpo_update(&one, Reference::AdaptersOff, &mut opt, &data, &SingleRank, &settings(), 9).unwrap();
        let want = params(&one);

        let worlds = LocalWorld::new(2);
        let path = dir.path().to_path_buf();
        let handles: Vec<_> = worlds
            .into_iter()
            .map(|w| {
                let (path, data) = (path.clone(), data.clone());
                std::thread::spawn(move || {
                    let m = Qwen3::load(&path, &lora(), DType::F32, &Device::Cpu, 5).unwrap();
                    let mut opt = AdamW::new(m.trainable(), ADAM).unwrap();
                    let s = grpo_update(&m, Reference::AdaptersOff, &mut opt, &data, &w, &settings(), 9).unwrap();
                    (params(&m), s)
                })
            })
            .collect();
        for h in handles {
            let (got, s2) = h.join().unwrap();
            let diff = want.iter().zip(&got).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
            assert!(diff < 1e-5, "rank parameters differ from the 1-rank step by {diff}");
            assert!((s1.loss - s2.loss).abs() < 1e-5, "{} vs {}", s1.loss, s2.loss);
            assert_eq!(s1.model_tokens, s2.model_tokens);
            assert!((s1.kl - s2.kl).abs() < 1e-6);
        }
        assert!(want.iter().any(|v| *v != 0.0));
    }

    /// Full updates with the optimiser sharded over 2 ranks (ZeRO-2) give the 1-rank step.
    #[test]
    fn two_rank_zero2_full_update_equals_the_one_rank_step() {
        let dir = tempfile::tempdir().unwrap();
        write_random_qwen3(dir.path(), 13, false, 15);
        let data = samples();
        let one = Qwen3::load(dir.path(), &TrainMode::Full, DType::F32, &Device::Cpu, 5).unwrap();
        let mut opt = AdamW::new(one.trainable(), ADAM).unwrap();
        let s1 = grpo_update(&one, Reference::None, &mut opt, &data, &SingleRank, &settings(), 9).unwrap();
        let want = params(&one);

        let path = dir.path().to_path_buf();
        let handles: Vec<_> = LocalWorld::new(2)
            .into_iter()
            .map(|w| {
                let (path, data) = (path.clone(), data.clone());
                std::thread::spawn(move || {
                    let m = Qwen3::load(&path, &TrainMode::Full, DType::F32, &Device::Cpu, 5).unwrap();
                    let mut opt = AdamW::with_zero(m.trainable(), ADAM, &w, 2).unwrap();
                    let s = grpo_update(&m, Reference::None, &mut opt, &data, &w, &settings(), 9).unwrap();
                    (params(&m), s, opt.state_file_name())
                })
            })
            .collect();
        for (rank, h) in handles.into_iter().enumerate() {
            let (got, s2, file) = h.join().unwrap();
            let diff = want.iter().zip(&got).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
            assert!(diff < 1e-5, "rank {rank}'s weights differ from the 1-rank step by {diff}");
            assert!((s1.loss - s2.loss).abs() < 1e-5, "{} vs {}", s1.loss, s2.loss);
            assert!((s1.grad_norm - s2.grad_norm).abs() < 1e-4 * s1.grad_norm, "{} vs {}", s1.grad_norm, s2.grad_norm);
            assert_eq!(file, format!("optimizer-rank{rank}-of-2.safetensors"));
        }
        assert!(s1.grad_norm > 0.0);
    }

    #[test]
    fn kl_is_zero_at_the_start_and_positive_after_an_update() {
        let dir = tempfile::tempdir().unwrap();
        write_random_qwen3(dir.path(), 13, true, 12);
        let data = samples();
        let m = Qwen3::load(dir.path(), &lora(), DType::F32, &Device::Cpu, 5).unwrap();
        let mut opt = AdamW::new(m.trainable(), ADAM).unwrap();
        let one_epoch = UpdateSettings { epochs: 1, ..settings() };
        let s = grpo_update(&m, Reference::AdaptersOff, &mut opt, &data, &SingleRank, &one_epoch, 1).unwrap();
        // B starts at zero: the policy equals the reference during the first pass.
        assert_eq!(s.kl, 0.0);
        assert!(s.clip_frac == 0.0);
        let s = grpo_update(&m, Reference::AdaptersOff, &mut opt, &data, &SingleRank, &one_epoch, 2).unwrap();
        assert!(s.kl > 0.0, "kl {}", s.kl);
    }

    /// Sampler log-probs equal to the trainer's change nothing (weights of 1); lower ones
    /// (the sampler found those tokens less likely) weigh the loss up, to the cap.
    #[test]
    fn sampler_log_probs_weigh_the_update_and_are_measured() {
        let dir = tempfile::tempdir().unwrap();
        write_random_qwen3(dir.path(), 13, true, 14);
        let one_epoch = UpdateSettings { epochs: 1, ppo: PpoSettings { kl_coef: 0.0, ..settings().ppo }, ..settings() };
        let run = |shift: Option<f32>| {
            let m = Qwen3::load(dir.path(), &lora(), DType::F32, &Device::Cpu, 5).unwrap();
            let mut data = samples();
            let refs: Vec<&Sample> = data.iter().collect();
            let (mb, pad, chunk) = (one_epoch.micro_batch, one_epoch.pad, one_epoch.chunk);
            let trainer = sample_logprobs(&m, &refs, ForwardMode::default(), (mb, pad, chunk), &SingleRank).unwrap();
            for (s, t) in data.iter_mut().zip(&trainer) {
                s.sampler_logp = shift.map(|d| t.iter().map(|v| v - d).collect());
            }
            let mut opt = AdamW::new(m.trainable(), ADAM).unwrap();
            let stats = grpo_update(&m, Reference::None, &mut opt, &data, &SingleRank, &one_epoch, 3).unwrap();
            (stats, params(&m))
        };
        let (plain, p_plain) = run(None);
        let (same, p_same) = run(Some(0.0));
        let (lower, _) = run(Some(0.3));
        assert_eq!(plain.sampler_logp_diff, None);
        assert_eq!(same.sampler_logp_diff, Some(0.0));
        assert!((lower.sampler_logp_diff.unwrap() - 0.3).abs() < 1e-6);
        assert_eq!(p_plain, p_same, "weights of 1 changed the update");
        // The first step's loss is −mean(w·A) with ratio 1: weights e^0.3 scale it.
        let scale = lower.loss / plain.loss;
        assert!((scale - 0.3f64.exp()).abs() < 1e-3, "loss scaled by {scale}");
    }

    #[test]
    fn sft_lowers_the_loss_on_its_data() {
        let dir = tempfile::tempdir().unwrap();
        write_random_qwen3(dir.path(), 13, false, 13);
        let data = samples();
        let refs: Vec<&Sample> = data.iter().collect();
        let m = Qwen3::load(dir.path(), &TrainMode::Full, DType::F32, &Device::Cpu, 0).unwrap();
        let mut opt = AdamW::new(m.trainable(), AdamWSettings { lr: 0.02, ..ADAM }).unwrap();
        let first = sft_step(&m, &mut opt, &refs, &settings(), &SingleRank, 0).unwrap();
        let mut last = first;
        for k in 1..30 {
            last = sft_step(&m, &mut opt, &refs, &settings(), &SingleRank, k).unwrap();
        }
        assert!(last < first * 0.5, "loss {first} → {last}");
    }
}
