//! Memory and throughput plan of a preset, for `agent train --dry-run` and the check before a run starts.
//!
//! Each GPU (or the one CPU process) is split between the trainer and the rollout engine:
//! the trainer must fit in (1 − `rollout.gpu_memory_fraction`) of the memory, the engine in
//! the fraction. Both sides count what the implementation holds at its peak; the phases
//! (rollouts, then the update) do not overlap, so the split is conservative.
//!
//! The trainer, per GPU:
//! - weights: every parameter (base and adapters) at the preset dtype, on every GPU at ZeRO stages 0–2
//!   (stage 3 is counted below);
//! - gradients: the local sum over a step's micro-batches of every trainable parameter in the dtype, on every
//!   GPU and at every stage: candle's backward hands back whole gradients, which are reduced at the optimiser
//!   step (the reduction drops each variable's local gradient once reduced; until then it is all there);
//! - the backward pass's own gradients besides the sums: with `recompute` one layer's (or the output head's or
//!   the embedding's, whichever is largest) plus the new sum of one variable, without recompute a whole second
//!   set when a step has more than one micro-batch per rank (candle's gradient store holds every gradient of
//!   the micro-batch while they are added to the sums);
//! - the summed gradient shard (ZeRO-2 and 1 alike: what the reduction leaves this rank), trainable / world;
//! - optimiser: AdamW m and v in f32, plus an f32 master copy of the weights when the dtype is bf16 (updates of
//!   ~lr·1e-3 vanish in bf16's 8-bit mantissa), for every trainable parameter (ZeRO 0) or for 1/world of them
//!   (ZeRO 1 and 2);
//! - reference model: a frozen copy of the weights only for a full update with `kl_coef > 0` (with LoRA the base
//!   model is the reference for free);
//! - activations of one micro-batch (`micro_batch × max_seq_len` tokens), see [`activation_bytes`]; with
//!   `recompute`, attention whose scores would be large runs in tiles forward and backward, so only a few tiles
//!   of scores exist at once;
//! - the log-prob pass, see [`logprob_bytes`]: one chunk's f32 softmax (no chunk keeps its logits for the
//!   backward pass) and a few hidden-sized rows per scored token;
//! - the shared prompt of a mini-batch's sequences (computed once, see `model::prefix`): its keys and values in
//!   every layer, up to `max_seq_len` positions, and the gradients they gather from the sequences;
//! - buffers of the gradient reduction (ZeRO 0 over several GPUs: `all_reduce_grads`'s f32 copy, concatenation
//!   and sum of every gradient; ZeRO 1/2: one bucket of [`BUCKET_ELEMS`]) and of the in-place AdamW update
//!   (about eight f32 slices of [`UPDATE_SLICE`] elements);
//! - on CUDA a fixed reserve for the context, cuBLAS workspaces and allocator slack.
//!
//! With parameter sharding (ZeRO-3, `optim.zero: 3`) the phases are counted apart, each against the whole GPU:
//! - the update: 1/world of the weights, the gradient sum and AdamW's state (none of it with `optim.offload`,
//!   one unit's share then), two copies of the largest unit gathered whole (the gathered buffer and the
//!   trainable copy the backward pass differentiates), that unit's whole gradient and the f32 buffers of its
//!   reduce-scatter, the activations; no shared prompt (each rank's passes are collectives);
//! - the rollouts: the shards, the whole policy gathered for the sampler, the KV caches; AdamW's state waits in
//!   host memory and no gradient exists.
//!
//! The rollout engine, per GPU: its own copy of the weights (candle: none, it samples from a view of the
//! trainer's weights with the adapters applied unmerged; mistral.rs: all of them; llama.cpp: its quantised
//! base; an external server: nothing), the KV cache of its share of the rollouts in flight (rollout.concurrency
//! over the GPUs) at `max_seq_len`, or, when larger, the second copy of the weights that exists while
//! mistral.rs reloads the policy after an update (the new copy is built before the old one is dropped; the KV
//! caches are gone by then).

mod activations;
mod display;
#[cfg(test)]
mod tests;

pub use activations::{activation_bytes, logprob_bytes};

use super::dist::zero::BUCKET_ELEMS;
use super::optim::UPDATE_SLICE;
use super::preset::{Device, Dtype, ModelShape, Preset, RolloutEngine};
use display::gib;

/// Tokens whose logits are materialised at once when computing log-probs.
pub const LOGPROB_CHUNK_TOKENS: u64 = 1024;

/// Memory kept aside on each GPU for the CUDA context, library workspaces and fragmentation.
pub const CUDA_RESERVE_BYTES: u64 = 2 * GIB;

const GIB: u64 = 1 << 30;

/// A plan that does not fit in memory, with what to change.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// The trainer or the rollout engine exceeds its share of the memory the preset declares.
    #[error("preset {preset} does not fit: {detail}. {advice}")]
    DoesNotFit {
        /// The preset's name.
        preset: String,
        /// Which side needs how much of what it has.
        detail: String,
        /// What would make it fit.
        advice: String,
    },
}

/// Memory per GPU and work per step of a preset; `Display` renders the dry-run table.
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryPlan {
    /// Preset name.
    pub preset: String,
    /// CPU or CUDA.
    pub device: Device,
    /// Weight dtype.
    pub dtype: Dtype,
    /// LoRA rank and number of targeted projections; None for a full update.
    pub lora: Option<(usize, usize)>,
    /// Nodes.
    pub nodes: usize,
    /// GPUs per node.
    pub gpus_per_node: usize,
    /// Processes: nodes × GPUs per node.
    pub world_size: usize,
    /// Parameters of the base model.
    pub base_params: u64,
    /// Parameters the optimiser updates (the adapters with LoRA, everything otherwise).
    pub trainable_params: u64,
    /// ZeRO stage (0: replicated optimiser).
    pub zero: u8,
    /// All weights (base and adapters) at the dtype; this rank's shard with ZeRO-3.
    pub weight_bytes: u64,
    /// ZeRO-3: the units gathered whole at once during the update (0 otherwise).
    pub gathered_bytes: u64,
    /// ZeRO-3: the update and the rollouts are planned apart, each against the whole GPU.
    pub phase_exclusive: bool,
    /// ZeRO-3 with `optim.offload`: AdamW's state per GPU that lives in host memory.
    pub host_optimizer_bytes: u64,
    /// The local gradient sums of the trainable parameters, at every ZeRO stage.
    pub grad_bytes: u64,
    /// Gradients the backward pass holds besides the sums.
    pub grad_transient_bytes: u64,
    /// This rank's shard of the summed gradient (ZeRO 1 and 2).
    pub grad_shard_bytes: u64,
    /// AdamW state and master weights (this rank's shard with ZeRO 1 and 2).
    pub optimizer_bytes: u64,
    /// Frozen reference weights for the KL term (0 when not needed).
    pub reference_bytes: u64,
    /// Tokens in one micro-batch.
    pub micro_batch_tokens: u64,
    /// Activations kept for the backward pass of one micro-batch.
    pub activation_bytes: u64,
    /// The part of `activation_bytes` that is attention scores (grows with max_seq_len squared).
    pub attention_bytes: u64,
    /// The log-prob pass (see [`logprob_bytes`]).
    pub logprob_bytes: u64,
    /// A shared prompt's keys and values, and their gradients, at most `max_seq_len` long.
    pub prefix_bytes: u64,
    /// Buffers of the gradient reduction and the in-place update.
    pub comm_bytes: u64,
    /// CUDA context and slack (0 on CPU).
    pub reserve_bytes: u64,
    /// The trainer's sum of the above.
    pub trainer_bytes: u64,
    /// `rollout.gpu_memory_fraction` in effect.
    pub rollout_fraction: f64,
    /// Rollouts in flight on one GPU (its share of `rollouts_in_flight`; 0 for an external server).
    pub rollouts_in_flight_per_gpu: u64,
    /// The engine's own copy of the weights.
    pub rollout_weight_bytes: u64,
    /// The second copy while the engine reloads the policy.
    pub rollout_reload_bytes: u64,
    /// KV caches of the rollouts in flight on one GPU, at max_seq_len.
    pub rollout_kv_bytes: u64,
    /// The engine's peak: weights + the larger of the KV caches and the reload copy.
    pub rollout_bytes: u64,
    /// Trainer and engine.
    pub total_bytes: u64,
    /// Memory of one GPU; None on CPU when not declared.
    pub memory_bytes: Option<u64>,
    /// The trainer's share: (1 − fraction) × memory.
    pub trainer_budget_bytes: Option<u64>,
    /// The engine's share: fraction × memory.
    pub rollout_budget_bytes: Option<u64>,
    /// memory − total (negative: does not fit even with a better split).
    pub headroom_bytes: Option<i64>,
    /// Whether trainer and engine each fit in their share (true when the memory is not declared).
    pub fits: bool,
    /// Rollouts sampled per step (tasks_per_step × group_size).
    pub rollouts_per_step: u64,
    /// Rollouts each rank trains on per step.
    pub rollouts_per_rank: u64,
    /// Rollouts running at once (rollout.concurrency, at most a step's worth).
    pub rollouts_in_flight: u64,
    /// Upper bound of tokens per step (every rollout at max_seq_len).
    pub tokens_per_step: u64,
    /// Upper bound of tokens per rank per step.
    pub tokens_per_rank: u64,
    /// Forward+backward passes per rank per step (micro-batches × PPO epochs).
    pub micro_batches_per_rank: u64,
    /// KV cache of one rollout at max_seq_len, at the dtype (what a sampler holds per sequence).
    pub kv_bytes_per_rollout: u64,
    /// The rollout engine.
    pub engine: RolloutEngine,
    /// Whether activation recomputation is on.
    pub recompute: bool,
    /// Advice when it does not fit.
    advice: Vec<String>,
}

/// Parameters of one decoder layer's projections named in `targets` (all seven for a full layer).
fn projection_params(shape: &ModelShape, targets: &[&str]) -> u64 {
    targets.iter().filter_map(|t| shape.projection_dims(t)).map(|(i, o)| i as u64 * o as u64).sum()
}

impl MemoryPlan {
    /// The plan of `preset` on a model of `shape`.
    pub fn for_preset(preset: &Preset, shape: &ModelShape) -> MemoryPlan {
        let mut plan = MemoryPlan::without_advice(preset, shape);
        if !plan.fits {
            plan.advice = advise(preset, shape, &plan);
        }
        plan
    }

    fn without_advice(preset: &Preset, shape: &ModelShape) -> MemoryPlan {
        let dt = preset.dtype.size();
        let base_params = shape.parameter_count();
        let all_targets: Vec<&str> = super::preset::LORA_TARGETS.to_vec();
        let h = shape.hidden_size as u64;
        let layer_params = projection_params(shape, &all_targets) + 2 * h + 2 * shape.head_dim as u64;
        // The largest gradient one backward store holds (recompute) and the largest variable.
        let (trainable_params, lora, adapter_params, largest_piece, largest_var) = match &preset.mode.lora {
            Some(l) => {
                let n = shape.lora_parameter_count(l.rank, &l.targets);
                let per_layer = n / shape.num_hidden_layers.max(1) as u64;
                let widest = l.targets.iter().filter_map(|t| shape.projection_dims(t)).map(|(i, o)| i.max(o));
                let var = l.rank as u64 * widest.max().unwrap_or(0) as u64;
                (n, Some((l.rank, l.targets.len())), n, per_layer, var)
            }
            None => {
                let embed = shape.vocab_size as u64 * h;
                let widest = all_targets.iter().filter_map(|t| shape.projection_dims(t)).map(|(i, o)| (i * o) as u64);
                (base_params, None, 0, embed.max(layer_params), embed.max(widest.max().unwrap_or(0)))
            }
        };
        let world = preset.world_size() as u64;
        let zero = preset.zero_stage();
        let g = &preset.grpo;
        let micro_batch = preset.optim.micro_batch as u64;
        let seq = g.max_seq_len as u64;
        let rollouts_per_step = (g.tasks_per_step * g.group_size) as u64;
        let rollouts_per_rank = rollouts_per_step / world.max(1);
        let per_minibatch = rollouts_per_step.div_ceil(g.minibatches.max(1) as u64).div_ceil(world.max(1));
        let micro_per_opt_step = per_minibatch.div_ceil(micro_batch.max(1));

        let sharded = zero == 3;
        let vocab_h = shape.vocab_size as u64 * h;
        // The largest unit gathered whole: a layer, the embedding, or the head (with the
        // embedding when tied).
        let head_unit = vocab_h + h;
        let largest_unit = layer_params.max(vocab_h).max(head_unit);
        let weight_bytes = if sharded { base_params.div_ceil(world) * dt } else { (base_params + adapter_params) * dt };
        let gathered_bytes = if sharded { 2 * largest_unit * dt } else { 0 };
        let grad_bytes = if sharded { 0 } else { trainable_params * dt };
        let grad_transient_bytes = if preset.recompute {
            2 * largest_piece * dt
        } else if micro_per_opt_step > 1 {
            trainable_params * dt
        } else {
            0
        };
        let shard_params = if zero > 0 { trainable_params.div_ceil(world) } else { trainable_params };
        let grad_shard_bytes = if zero > 0 { shard_params * dt } else { 0 };
        let master = if preset.dtype == Dtype::Bf16 { 4 } else { 0 };
        let offload = sharded && preset.optim.offload && preset.hardware.device == Device::Cuda;
        let (optimizer_bytes, host_optimizer_bytes) = if offload {
            (largest_unit.div_ceil(world) * (8 + master), shard_params * (8 + master))
        } else {
            (shard_params * (8 + master), 0)
        };
        let reference_bytes = match (lora.is_none() && g.kl_coef > 0.0, sharded) {
            (false, _) => 0,
            (true, false) => base_params * dt,
            (true, true) => base_params.div_ceil(world) * dt,
        };
        let (activation_bytes, attention_bytes) =
            activation_bytes(shape, preset.dtype, micro_batch, seq, preset.recompute);
        let logprob_bytes = logprob_bytes(shape, preset.dtype, micro_batch * seq, lora.is_some());
        // The log-prob pass and the recomputed layer may not coexist in time, but the measured peak is still
        // above this plan (`tests/memory_peak.rs`), so both count until the gap is found.
        let activations_and_logprobs = activation_bytes + logprob_bytes;
        let kv_bytes_per_rollout =
            2 * shape.num_hidden_layers as u64 * (shape.num_key_value_heads * shape.head_dim) as u64 * seq * dt;
        let prefix_bytes = if sharded { 0 } else { 2 * kv_bytes_per_rollout };
        let bucket = (BUCKET_ELEMS as u64).min(shard_params * world);
        let (reduce, update_unit) = match zero {
            // One unit's gradient in f32, then the flat buffer the reduce-scatter sends.
            3 => (8 * largest_unit, largest_unit.div_ceil(world)),
            0 if world > 1 => (trainable_params * (8 + if dt == 4 { 0 } else { 4 }), largest_var),
            0 => (0, largest_var),
            1 => (12 * bucket, largest_var.div_ceil(world).min(bucket / world)),
            _ => (8 * bucket + 4 * bucket / world, largest_var.div_ceil(world).min(bucket / world)),
        };
        let comm_bytes = reduce + 8 * 4 * update_unit.min(UPDATE_SLICE as u64);
        let reserve_bytes = if preset.hardware.device == Device::Cuda { CUDA_RESERVE_BYTES } else { 0 };
        let trainer_bytes = weight_bytes
            + gathered_bytes
            + grad_bytes
            + grad_transient_bytes
            + grad_shard_bytes
            + optimizer_bytes
            + reference_bytes
            + activations_and_logprobs
            + prefix_bytes
            + comm_bytes
            + reserve_bytes;

        let rollouts_in_flight = (preset.rollout.concurrency as u64).min(rollouts_per_step);
        let (rollout_weight_bytes, in_flight_per_gpu) = match preset.rollout.engine {
            // The sharded policy gathered whole for the sampler, between updates.
            RolloutEngine::Candle if sharded => (base_params * dt, rollouts_in_flight.div_ceil(world.max(1))),
            // A view of the trainer's weights, adapters unmerged: nothing of its own.
            RolloutEngine::Candle => (0, rollouts_in_flight.div_ceil(world.max(1))),
            RolloutEngine::Mistralrs => (base_params * dt, rollouts_in_flight.div_ceil(world.max(1))),
            RolloutEngine::Openai => (0, 0),
            // The quantised GGUF (Q4_K_M: ~5 bits a weight) with the adapter on top.
            RolloutEngine::Llamacpp => (base_params * 5 / 8, rollouts_in_flight.div_ceil(world.max(1))),
        };
        // llama.cpp swaps the adapter in place (the base is never loaded twice); the candle
        // sampler's view follows the weights as they are updated.
        let rollout_reload_bytes = match preset.rollout.engine {
            RolloutEngine::Llamacpp | RolloutEngine::Candle => 0,
            _ => rollout_weight_bytes,
        };
        let rollout_kv_bytes = kv_bytes_per_rollout * in_flight_per_gpu;
        let rollout_bytes = rollout_weight_bytes + rollout_kv_bytes.max(rollout_reload_bytes);
        // What stays on the GPU while the sampler runs (ZeRO-3): the shards and the reserve.
        let resident_in_rollouts = weight_bytes + reference_bytes + reserve_bytes;
        let total_bytes = if sharded {
            trainer_bytes.max(resident_in_rollouts + rollout_bytes)
        } else {
            trainer_bytes + rollout_bytes
        };

        let fraction = if sharded { 0.0 } else { preset.rollout_memory_fraction() };
        let declared = preset.hardware.gpu_memory_gib;
        let memory_bytes = (declared > 0.0).then_some((declared * GIB as f64) as u64);
        let (rollout_budget_bytes, trainer_budget_bytes) = if sharded {
            (memory_bytes.map(|m| m.saturating_sub(resident_in_rollouts)), memory_bytes)
        } else {
            let r = memory_bytes.map(|m| (m as f64 * fraction) as u64);
            (r, memory_bytes.zip(r).map(|(m, r)| m - r.min(m)))
        };
        let fits = trainer_budget_bytes
            .zip(rollout_budget_bytes)
            .is_none_or(|(t, r)| trainer_bytes <= t && rollout_bytes <= r);

        MemoryPlan {
            preset: preset.name.clone(),
            device: preset.hardware.device,
            dtype: preset.dtype,
            lora,
            nodes: preset.hardware.nodes,
            gpus_per_node: preset.hardware.gpus_per_node,
            world_size: world as usize,
            base_params,
            trainable_params,
            zero,
            weight_bytes,
            gathered_bytes,
            phase_exclusive: sharded,
            host_optimizer_bytes,
            grad_bytes,
            grad_transient_bytes,
            grad_shard_bytes,
            optimizer_bytes,
            reference_bytes,
            micro_batch_tokens: micro_batch * seq,
            activation_bytes,
            attention_bytes,
            logprob_bytes,
            prefix_bytes,
            comm_bytes,
            reserve_bytes,
            trainer_bytes,
            rollout_fraction: fraction,
            rollouts_in_flight_per_gpu: in_flight_per_gpu,
            rollout_weight_bytes,
            rollout_reload_bytes,
            rollout_kv_bytes,
            rollout_bytes,
            total_bytes,
            memory_bytes,
            trainer_budget_bytes,
            rollout_budget_bytes,
            headroom_bytes: memory_bytes.map(|m| m as i64 - total_bytes as i64),
            fits,
            rollouts_per_step,
            rollouts_per_rank,
            rollouts_in_flight,
            tokens_per_step: rollouts_per_step * seq,
            tokens_per_rank: rollouts_per_rank * seq,
            micro_batches_per_rank: rollouts_per_rank.div_ceil(micro_batch.max(1)) * g.ppo_epochs as u64,
            kv_bytes_per_rollout,
            engine: preset.rollout.engine,
            recompute: preset.recompute,
            advice: Vec::new(),
        }
    }

    /// How many bytes the plan is short of fitting: over the whole GPU when trainer and
    /// engine together need more than it has, else what the side over its share lacks
    /// (0 when it fits or the memory is not declared).
    pub fn shortfall_bytes(&self) -> u64 {
        let (Some(m), Some(t), Some(r)) = (self.memory_bytes, self.trainer_budget_bytes, self.rollout_budget_bytes)
        else {
            return 0;
        };
        if self.total_bytes > m {
            return self.total_bytes - m;
        }
        self.trainer_bytes.saturating_sub(t).max(self.rollout_bytes.saturating_sub(r))
    }

    /// Ok when the plan fits; otherwise by how much it does not and what to change.
    pub fn check(&self) -> Result<(), PlanError> {
        let (Some(m), Some(t), Some(r), false) =
            (self.memory_bytes, self.trainer_budget_bytes, self.rollout_budget_bytes, self.fits)
        else {
            return Ok(());
        };
        let unit = if self.device == Device::Cuda { "GPU" } else { "process" };
        let side = |need: u64, have: u64| {
            let verdict = if need > have { format!("{:.1} GiB too much", gib(need - have)) } else { "fits".into() };
            format!("needs {:.1} GiB of its {:.1} GiB ({verdict})", gib(need), gib(have))
        };
        let whole = if self.total_bytes > m {
            format!(
                "together {:.1} GiB per {unit} of {:.1} GiB (hardware.gpu_memory_gib), {:.1} GiB too much",
                gib(self.total_bytes),
                gib(m),
                gib(self.total_bytes - m)
            )
        } else {
            format!(
                "together {:.1} GiB of {:.1} GiB: a better rollout.gpu_memory_fraction fits",
                gib(self.total_bytes),
                gib(m)
            )
        };
        Err(PlanError::DoesNotFit {
            preset: self.preset.clone(),
            detail: format!(
                "per {unit}, the trainer {}; the rollout engine {}; {whole}",
                side(self.trainer_bytes, t),
                side(self.rollout_bytes, r)
            ),
            advice: self.advice.join(" "),
        })
    }
}

/// What would make a plan fit, with the savings computed on variants of the preset.
fn advise(preset: &Preset, shape: &ModelShape, plan: &MemoryPlan) -> Vec<String> {
    let mut advice = vec!["Options:".to_string()];
    let trainer = |p: &Preset| gib(MemoryPlan::without_advice(p, shape).trainer_bytes);
    let (Some(memory), Some(t_budget), Some(r_budget)) =
        (plan.memory_bytes, plan.trainer_budget_bytes, plan.rollout_budget_bytes)
    else {
        return advice;
    };
    if plan.total_bytes <= memory {
        let lo = (plan.rollout_bytes as f64 / memory as f64 * 100.0).ceil() / 100.0;
        let hi = ((1.0 - plan.trainer_bytes as f64 / memory as f64) * 100.0).floor() / 100.0;
        advice.push(format!("set rollout.gpu_memory_fraction between {lo:.2} and {hi:.2};"));
    }
    if plan.lora.is_none() && plan.trainer_bytes > t_budget {
        if plan.world_size > 1 && plan.zero < 2 {
            let mut z = preset.clone();
            z.optim.zero = Some(2);
            advice.push(format!(
                "set optim.zero: 2 (trainer {:.1} → {:.1} GiB);",
                gib(plan.trainer_bytes),
                trainer(&z)
            ));
        } else if plan.world_size == 1 && plan.device == Device::Cuda {
            let mut z = preset.clone();
            z.hardware.gpus_per_node = 8;
            z.optim.zero = Some(2);
            advice.push(format!("train on 8 such GPUs with optim.zero: 2 (trainer {:.1} GiB per GPU);", trainer(&z)));
        }
        let mut lora = preset.clone();
        lora.mode.full = false;
        lora.optim.zero = None;
        lora.mode.lora = Some(super::preset::LoraSection {
            rank: 32,
            alpha: 64.0,
            dropout: 0.0,
            targets: super::preset::LORA_TARGETS.iter().map(|t| t.to_string()).collect(),
        });
        advice.push(format!(
            "train LoRA instead (mode.lora; rank 32 on all projections: trainer {:.1} GiB);",
            trainer(&lora)
        ));
    }
    if plan.trainer_bytes > t_budget {
        if !preset.recompute {
            let mut r = preset.clone();
            r.recompute = true;
            let alt = MemoryPlan::without_advice(&r, shape);
            advice.push(format!(
                "set recompute: true (activations {:.1} → {:.1} GiB);",
                gib(plan.activation_bytes),
                gib(alt.activation_bytes)
            ));
        }
        if preset.optim.micro_batch > 1 {
            let mut m = preset.clone();
            m.optim.micro_batch = 1;
            let alt = MemoryPlan::without_advice(&m, shape);
            advice.push(format!("lower optim.micro_batch (at 1: activations {:.1} GiB);", gib(alt.activation_bytes)));
        }
        if plan.reference_bytes > 0 {
            advice
                .push(format!("set grpo.kl_coef: 0 (drops the {:.1} GiB reference copy);", gib(plan.reference_bytes)));
        }
    }
    if plan.attention_bytes > 0 || plan.rollout_kv_bytes > r_budget {
        let mut s = preset.clone();
        s.grpo.max_seq_len = (preset.grpo.max_seq_len / 2).max(preset.grpo.max_new_tokens + 1);
        let alt = MemoryPlan::without_advice(&s, shape);
        advice.push(format!(
            "lower grpo.max_seq_len (attention scores grow with its square; at {}: activations {:.1} GiB, KV cache \
             {:.1} GiB);",
            s.grpo.max_seq_len,
            gib(alt.activation_bytes),
            gib(alt.rollout_kv_bytes)
        ));
    }
    if plan.rollout_bytes > r_budget && plan.rollout_kv_bytes > 0 {
        advice.push(format!(
            "lower rollout.concurrency (each rollout in flight holds up to {:.2} GiB of KV cache; {} per GPU now);",
            gib(plan.kv_bytes_per_rollout),
            plan.rollouts_in_flight_per_gpu
        ));
    }
    let floor = plan.weight_bytes + plan.grad_bytes + plan.rollout_weight_bytes;
    if plan.zero == 3 {
        if plan.trainer_bytes > t_budget && !preset.optim.offload && plan.device == Device::Cuda {
            let mut o = preset.clone();
            o.optim.offload = true;
            advice.push(format!(
                "set optim.offload: true (AdamW's {:.1} GiB per GPU wait in host memory; trainer {:.1} → {:.1} GiB);",
                gib(plan.optimizer_bytes),
                gib(plan.trainer_bytes),
                trainer(&o)
            ));
        }
        if plan.weight_bytes + plan.rollout_weight_bytes + plan.reserve_bytes > memory {
            advice.push(format!(
                "The sampler holds the whole policy ({:.1} GiB) on every GPU between updates; a tensor-parallel \
                 sampler is not implemented.",
                gib(plan.rollout_weight_bytes)
            ));
        }
    } else if floor + plan.reserve_bytes > memory {
        let mut why = format!(
            "Whatever the ZeRO stage, every GPU holds the {:.1} GiB of weights and the {:.1} GiB local gradient",
            gib(plan.weight_bytes),
            gib(plan.grad_bytes)
        );
        if plan.rollout_weight_bytes > 0 {
            why += &format!(" and the rollout engine's {:.1} GiB copy of the weights", gib(plan.rollout_weight_bytes));
        }
        advice.push(format!("{why}, {:.1} GiB before anything else.", gib(floor)));
        if plan.lora.is_none() {
            let mut z = preset.clone();
            z.optim.zero = Some(3);
            z.optim.offload = plan.device == Device::Cuda;
            z.recompute = true;
            z.rollout.engine = RolloutEngine::Candle;
            let alt = MemoryPlan::without_advice(&z, shape);
            advice.push(format!(
                "Set optim.zero: 3{} (weights, gradients and optimiser state sharded; update {:.1} GiB, rollouts \
                 {:.1} GiB per GPU).",
                if z.optim.offload { " with optim.offload: true" } else { "" },
                gib(alt.trainer_bytes),
                gib(alt.weight_bytes + alt.reference_bytes + alt.reserve_bytes + alt.rollout_bytes)
            ));
        }
    } else if plan.rollout_reload_bytes > r_budget.saturating_sub(plan.rollout_weight_bytes)
        && plan.rollout_reload_bytes > 0
    {
        advice.push(format!(
            "A reload that dropped the old copy of the policy before building the new one (not implemented) would \
             save {:.1} GiB on the engine's side.",
            gib(plan.rollout_reload_bytes)
        ));
    }
    advice.push(
        "Or use GPUs with more memory; more GPUs shrink only the ZeRO shards (optimiser state, summed gradient; \
         the weights too with ZeRO-3)."
            .to_string(),
    );
    advice
}
