//! Gradients and updates: the backward pass (plain, or with activation recomputation
//! layer by layer), the GRPO update over PPO epochs, mini-batches, micro-batches and
//! data-parallel ranks, and the SFT step.

use std::collections::HashMap;

use candle_core::{DType, Tensor, TensorId, Var};
use rand::seq::SliceRandom;
use rand::SeedableRng;

use super::dist::{all_reduce_host_f64, Collective};
use super::error::{TensorContext, TrainError};
use super::grpo::{ppo_loss, LossInputs, LossSums, PpoSettings};
use super::model::{token_logprobs, ForwardMode, Qwen3, TokenBatch};
use super::optim::AdamW;

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
}

/// Computes the gradients of `head(final hidden states)` for every trainable variable,
/// aligned with `model.trainable()`. With `recompute`, only each layer's input is kept
/// in the forward pass; the backward pass recomputes one layer at a time and chains the
/// gradient through it (gradient checkpointing, written out because candle has none).
pub fn backward(
    model: &Qwen3,
    ids: &Tensor,
    mode: ForwardMode,
    recompute: bool,
    head: &dyn Fn(&Tensor) -> candle_core::Result<Tensor>,
) -> Result<(f64, Vec<Option<Tensor>>), TrainError> {
    let mut grads: Vec<Option<Tensor>> = vec![None; model.trainable().len()];
    let value = backward_into(model, ids, mode, recompute, head, &mut grads)?;
    Ok((value, grads))
}

/// [`backward`], adding the gradients into `grads` (gradient accumulation over
/// micro-batches without a second set of whole gradients: with `recompute` only one
/// layer's gradients exist besides the sums). Returns the loss.
pub fn backward_into(
    model: &Qwen3,
    ids: &Tensor,
    mode: ForwardMode,
    recompute: bool,
    head: &dyn Fn(&Tensor) -> candle_core::Result<Tensor>,
    grads: &mut [Option<Tensor>],
) -> Result<f64, TrainError> {
    let vars = model.trainable();
    if grads.len() != vars.len() {
        return Err(TrainError::Other(format!("{} gradient slots for {} variables", grads.len(), vars.len())));
    }
    let index: HashMap<TensorId, usize> = vars.iter().enumerate().map(|(i, (_, v))| (v.as_tensor().id(), i)).collect();
    let mut collect = |store: &candle_core::backprop::GradStore| -> Result<(), TrainError> {
        for (_, v) in &vars {
            if let Some(g) = store.get(v.as_tensor()) {
                let i = index[&v.as_tensor().id()];
                grads[i] = Some(match grads[i].take() {
                    Some(prev) => (prev + g).ctx("accumulating gradients")?,
                    None => g.clone(),
                });
            }
        }
        Ok(())
    };
    if !recompute {
        let hidden = model.hidden(ids, mode).ctx("the forward pass")?;
        let loss = head(&hidden).ctx("the loss")?;
        let value = f64::from(loss.to_dtype(candle_core::DType::F32)?.to_scalar::<f32>()?);
        let store = loss.backward().ctx("the backward pass")?;
        collect(&store)?;
        return Ok(value);
    }
    let layers = model.layers.len();
    let mut inputs = Vec::with_capacity(layers);
    let mut x = model.embed(ids).ctx("embedding")?.detach();
    for l in 0..layers {
        inputs.push(x.clone());
        x = model.layer_forward(l, &x, 0, mode, None).ctx("the forward pass")?.detach();
    }
    let top = Var::from_tensor(&x).ctx("recomputation")?;
    let hidden = model.final_norm(top.as_tensor()).ctx("the final norm")?;
    let loss = head(&hidden).ctx("the loss")?;
    let value = f64::from(loss.to_dtype(candle_core::DType::F32)?.to_scalar::<f32>()?);
    let store = loss.backward().ctx("the backward pass")?;
    collect(&store)?;
    let mut upstream = store.get(top.as_tensor()).cloned();
    // The output head's gradient is in the sums now; its store need not live on.
    drop(store);
    for l in (0..layers).rev() {
        let Some(g) = upstream.take() else { break };
        let input = Var::from_tensor(&inputs[l]).ctx("recomputation")?;
        let y = model.layer_forward(l, input.as_tensor(), 0, mode, None).ctx("recomputing a layer")?;
        let surrogate = (y * g.detach()).ctx("recomputation")?.sum_all().ctx("recomputation")?;
        let store = surrogate.backward().ctx("the backward pass")?;
        collect(&store)?;
        upstream = store.get(input.as_tensor()).cloned();
    }
    if let Some(g) = upstream {
        let e = model.embed(ids).ctx("embedding")?;
        let surrogate = (e * g.detach()).ctx("recomputation")?.sum_all().ctx("recomputation")?;
        collect(&surrogate.backward().ctx("the backward pass")?)?;
    }
    Ok(value)
}

/// Log-probabilities of every sample's scored tokens under `model` (no gradient kept).
pub fn sample_logprobs(
    model: &Qwen3,
    samples: &[&Sample],
    mode: ForwardMode,
    micro_batch: usize,
    pad: u32,
    chunk: usize,
) -> Result<Vec<Vec<f32>>, TrainError> {
    let mut out = Vec::with_capacity(samples.len());
    for group in samples.chunks(micro_batch.max(1)) {
        let seqs: Vec<(&[u32], &[u8])> = group.iter().map(|s| (s.tokens.as_slice(), s.mask.as_slice())).collect();
        let batch = TokenBatch::new(&seqs, pad, model.device()).ctx("building a batch")?;
        let hidden = model.hidden(&batch.ids, mode).ctx("scoring tokens")?;
        let (logp, _) = token_logprobs(model, &hidden, &batch, chunk).ctx("scoring tokens")?;
        // An f64 model (the parity checks' reference) scores in f64; samples keep f32.
        let logp = logp.detach().to_dtype(DType::F32).and_then(|t| t.to_vec1::<f32>()).ctx("scoring tokens")?;
        let mut per = vec![Vec::new(); group.len()];
        for (v, &b) in logp.into_iter().zip(&batch.seq_of_token) {
            per[b].push(v);
        }
        out.extend(per);
    }
    Ok(out)
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
    let old = sample_logprobs(policy, &all, eval, settings.micro_batch, settings.pad, settings.chunk)?;
    let refs = match reference {
        Reference::None => None,
        Reference::AdaptersOff => Some(sample_logprobs(
            policy,
            &all,
            ForwardMode { adapters_off: true, ..eval },
            settings.micro_batch,
            settings.pad,
            settings.chunk,
        )?),
        Reference::Model(m) => {
            Some(sample_logprobs(m, &all, eval, settings.micro_batch, settings.pad, settings.chunk)?)
        }
    };
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut stats = UpdateStats { sampler_logp_diff: sampler_logp_diff(samples, &old), ..Default::default() };
    let mut totals = LossSums::default();
    let mut entropy_sum = 0.0;
    let n_vars = opt.vars().len();
    for epoch in 0..settings.epochs.max(1) {
        let mut order: Vec<usize> = (0..samples.len()).collect();
        order.shuffle(&mut rng);
        let per_mb = order.len().div_ceil(settings.minibatches.max(1)).max(1);
        for (mb_index, mb) in order.chunks(per_mb).enumerate() {
            let norm = mb.iter().map(|&i| samples[i].scored()).sum::<usize>().max(1) as f64;
            let mut grads: Vec<Option<Tensor>> = vec![None; n_vars];
            let mut loss_value = 0.0;
            for (_, micro) in rank_micro_batches(mb, settings.micro_batch, rank, size) {
                let dropout_seed = seed ^ ((epoch as u64) << 40) ^ ((mb_index as u64) << 20) ^ micro[0] as u64;
                let mode = ForwardMode { train: true, dropout_seed, adapters_off: false };
                let (value, sums, ent) =
                    micro_grads(policy, samples, micro, &old, refs.as_deref(), norm, settings, mode, &mut grads)?;
                loss_value += value;
                entropy_sum += ent;
                totals.pg += sums.pg;
                totals.kl += sums.kl;
                totals.clipped += sums.clipped;
                totals.tokens += sums.tokens;
            }
            let norm_before = opt.reduce_clip_apply(world, &mut grads, settings.grad_clip)?;
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
/// the rounding of every reduction inside the model.)
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

/// One micro-batch's forward and backward pass, its gradients added into `grads`.
#[allow(clippy::too_many_arguments)]
fn micro_grads(
    policy: &Qwen3,
    samples: &[Sample],
    micro: &[usize],
    old: &[Vec<f32>],
    refs: Option<&[Vec<f32>]>,
    norm: f64,
    settings: &UpdateSettings,
    mode: ForwardMode,
    grads: &mut [Option<Tensor>],
) -> Result<MicroResult, TrainError> {
    let device = policy.device().clone();
    let seqs: Vec<(&[u32], &[u8])> =
        micro.iter().map(|&i| (samples[i].tokens.as_slice(), samples[i].mask.as_slice())).collect();
    let batch = TokenBatch::new(&seqs, settings.pad, &device).ctx("building a batch")?;
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
    let head = |hidden: &Tensor| -> candle_core::Result<Tensor> {
        let (logp, entropy) = token_logprobs(policy, hidden, &batch, settings.chunk)?;
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
    let value = backward_into(policy, &batch.ids, mode, settings.recompute, &head, grads)?;
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
    for (k, micro) in rank_micro_batches(samples, settings.micro_batch, rank, size) {
        let seqs: Vec<(&[u32], &[u8])> = micro.iter().map(|s| (s.tokens.as_slice(), s.mask.as_slice())).collect();
        let batch = TokenBatch::new(&seqs, settings.pad, model.device()).ctx("building a batch")?;
        let head = |hidden: &Tensor| -> candle_core::Result<Tensor> {
            let (logp, _) = token_logprobs(model, hidden, &batch, settings.chunk)?;
            logp.sum_all()?.neg()? / norm
        };
        let mode = ForwardMode { train: true, dropout_seed: seed ^ k as u64, adapters_off: false };
        total += backward_into(model, &batch.ids, mode, settings.recompute, &head, &mut grads)?;
    }
    opt.reduce_clip_apply(world, &mut grads, settings.grad_clip)?;
    let mut lv = [total];
    all_reduce_host_f64(world, &mut lv)?;
    Ok(lv[0])
}

#[cfg(test)]
mod tests {
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

    fn settings() -> UpdateSettings {
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
            let trainer = sample_logprobs(&m, &refs, ForwardMode::default(), mb, pad, chunk).unwrap();
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
