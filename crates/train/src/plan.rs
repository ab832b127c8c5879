//! Memory and throughput plan of a preset, for `agent train --dry-run` and the check before a run starts.
//!
//! Accounting, per GPU (or for the one CPU process):
//! - weights: every parameter (base and adapters) at the preset dtype;
//! - gradients: trainable parameters in the parameter dtype;
//! - optimiser: AdamW m and v in f32 for each trainable parameter, plus an f32 master copy of the trainable
//!   weights when the dtype is bf16 (updates of ~lr·1e-3 vanish in bf16's 8-bit mantissa);
//! - reference model: a frozen copy of the weights only for a full update with `kl_coef > 0` (with LoRA the base
//!   model is the reference for free);
//! - activations of one micro-batch (`micro_batch × max_seq_len` tokens), see [`activation_bytes`];
//! - the chunked log-prob buffer: 1024 tokens × vocab of f32 logits, and their gradient;
//! - on CUDA a fixed reserve for the context, cuBLAS workspaces and allocator slack.
//!
//! Data parallelism is replicated (every rank holds all of the above; gradients are all-reduced): adding GPUs
//! adds throughput, never memory. Sharded optimiser state / FSDP is not implemented.

use std::fmt;

use super::preset::{Device, Dtype, ModelShape, Preset, RolloutEngine};

/// Tokens whose logits are materialised at once when computing log-probs.
pub const LOGPROB_CHUNK_TOKENS: u64 = 1024;

/// Memory kept aside on each GPU for the CUDA context, library workspaces and fragmentation.
pub const CUDA_RESERVE_BYTES: u64 = 2 * GIB;

const GIB: u64 = 1 << 30;

/// A plan that does not fit in memory, with what to change.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// The per-GPU (or CPU) total exceeds the memory the preset declares.
    #[error(
        "preset {preset} does not fit: it needs {need:.1} GiB per {unit} but one {unit} has {have:.1} GiB \
         (hardware.gpu_memory_gib), {over:.1} GiB too much. {advice}"
    )]
    DoesNotFit { preset: String, unit: &'static str, need: f64, have: f64, over: f64, advice: String },
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
    /// All weights (base and adapters) at the dtype.
    pub weight_bytes: u64,
    /// Gradients of the trainable parameters.
    pub grad_bytes: u64,
    /// AdamW state and master weights.
    pub optimizer_bytes: u64,
    /// Frozen reference weights for the KL term (0 when not needed).
    pub reference_bytes: u64,
    /// Tokens in one micro-batch.
    pub micro_batch_tokens: u64,
    /// Activations kept for the backward pass of one micro-batch.
    pub activation_bytes: u64,
    /// The part of `activation_bytes` that is attention scores (grows with max_seq_len squared).
    pub attention_bytes: u64,
    /// The chunked log-prob buffer.
    pub logprob_bytes: u64,
    /// CUDA context and slack (0 on CPU).
    pub reserve_bytes: u64,
    /// Sum of the above.
    pub total_bytes: u64,
    /// Memory of one GPU; None on CPU when not declared.
    pub memory_bytes: Option<u64>,
    /// memory − total (negative: does not fit).
    pub headroom_bytes: Option<i64>,
    /// Whether the total fits in the memory (true when the memory is not declared).
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
    /// The rollout engine, for the note on its memory.
    pub engine: RolloutEngine,
    /// Whether activation recomputation is on.
    pub recompute: bool,
    /// Advice when it does not fit.
    advice: Vec<String>,
}

/// Activations (total, of which attention scores) of one micro-batch, in bytes.
///
/// Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models" (the Megatron
/// formula): one layer keeps `s·b·h·(34 + 5·a·s/h)` bytes with 16-bit activations, i.e. per token
/// `34·h + 5·a·s`. Of the 34·h, 11·h is the attention block, 4·h the two norms and 19·h a GeLU MLP of width 4h;
/// Qwen3's SwiGLU MLP of width I keeps its input (2·h) and four I-wide tensors (gate, up, silu, product: 8·I),
/// so we count `17·h + 8·I + 5·a·s`. The `5·a·s` term is the materialised softmax of the attention scores, which
/// our candle model keeps (no fused attention backward). The figures are for 2-byte activations; f32 doubles
/// them. With recomputation only each layer's input (2·h per token per layer) is kept, plus one layer's full
/// set while it is recomputed.
pub fn activation_bytes(
    shape: &ModelShape,
    dtype: Dtype,
    micro_batch: u64,
    seq_len: u64,
    recompute: bool,
) -> (u64, u64) {
    let tokens = micro_batch * seq_len;
    let h = shape.hidden_size as u64;
    let i = shape.intermediate_size as u64;
    let a = shape.num_attention_heads as u64;
    let layers = shape.num_hidden_layers as u64;
    let attention_per_token = 5 * a * seq_len;
    let per_token_layer = 17 * h + 8 * i + attention_per_token;
    let (units, attention_units) = if recompute {
        (tokens * layers * 2 * h + tokens * per_token_layer, tokens * attention_per_token)
    } else {
        (tokens * layers * per_token_layer, tokens * layers * attention_per_token)
    };
    (units * dtype.size() / 2, attention_units * dtype.size() / 2)
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
        let (trainable_params, lora, adapter_params) = match &preset.mode.lora {
            Some(l) => {
                let n = shape.lora_parameter_count(l.rank, &l.targets);
                (n, Some((l.rank, l.targets.len())), n)
            }
            None => (base_params, None, 0),
        };
        let weight_bytes = (base_params + adapter_params) * dt;
        let grad_bytes = trainable_params * dt;
        let master = if preset.dtype == Dtype::Bf16 { 4 } else { 0 };
        let optimizer_bytes = trainable_params * (8 + master);
        let reference_bytes = if lora.is_none() && preset.grpo.kl_coef > 0.0 { base_params * dt } else { 0 };
        let g = &preset.grpo;
        let micro_batch = preset.optim.micro_batch as u64;
        let seq = g.max_seq_len as u64;
        let (activation_bytes, attention_bytes) =
            activation_bytes(shape, preset.dtype, micro_batch, seq, preset.recompute);
        // Logits and their gradient, both f32 whatever the weights, for one chunk.
        let logprob_bytes = 2 * LOGPROB_CHUNK_TOKENS * shape.vocab_size as u64 * 4;
        let reserve_bytes = if preset.hardware.device == Device::Cuda { CUDA_RESERVE_BYTES } else { 0 };
        let total_bytes = weight_bytes
            + grad_bytes
            + optimizer_bytes
            + reference_bytes
            + activation_bytes
            + logprob_bytes
            + reserve_bytes;
        let declared = preset.hardware.gpu_memory_gib;
        let memory_bytes = (declared > 0.0).then_some((declared * GIB as f64) as u64);
        let headroom_bytes = memory_bytes.map(|m| m as i64 - total_bytes as i64);
        let fits = headroom_bytes.is_none_or(|h| h >= 0);

        let world = preset.world_size() as u64;
        let rollouts_per_step = (g.tasks_per_step * g.group_size) as u64;
        let rollouts_per_rank = rollouts_per_step / world.max(1);
        let micro_batches_per_rank = rollouts_per_rank.div_ceil(micro_batch.max(1)) * g.ppo_epochs as u64;
        let kv_bytes_per_rollout =
            2 * shape.num_hidden_layers as u64 * (shape.num_key_value_heads * shape.head_dim) as u64 * seq * dt;

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
            weight_bytes,
            grad_bytes,
            optimizer_bytes,
            reference_bytes,
            micro_batch_tokens: micro_batch * seq,
            activation_bytes,
            attention_bytes,
            logprob_bytes,
            reserve_bytes,
            total_bytes,
            memory_bytes,
            headroom_bytes,
            fits,
            rollouts_per_step,
            rollouts_per_rank,
            rollouts_in_flight: (preset.rollout.concurrency as u64).min(rollouts_per_step),
            tokens_per_step: rollouts_per_step * seq,
            tokens_per_rank: rollouts_per_rank * seq,
            micro_batches_per_rank,
            kv_bytes_per_rollout,
            engine: preset.rollout.engine,
            recompute: preset.recompute,
            advice: Vec::new(),
        }
    }

    /// Ok when the plan fits; otherwise by how much it does not and what to change.
    pub fn check(&self) -> Result<(), PlanError> {
        let (Some(memory), false) = (self.memory_bytes, self.fits) else {
            return Ok(());
        };
        Err(PlanError::DoesNotFit {
            preset: self.preset.clone(),
            unit: if self.device == Device::Cuda { "GPU" } else { "process" },
            need: gib(self.total_bytes),
            have: gib(memory),
            over: gib(self.total_bytes - memory),
            advice: self.advice.join(" "),
        })
    }
}

/// What would make a plan fit, with the savings computed on variants of the preset.
fn advise(preset: &Preset, shape: &ModelShape, plan: &MemoryPlan) -> Vec<String> {
    let mut advice = vec!["Options:".to_string()];
    if plan.lora.is_none() {
        let mut lora = preset.clone();
        lora.mode.full = false;
        lora.mode.lora = Some(super::preset::LoraSection {
            rank: 32,
            alpha: 64.0,
            dropout: 0.0,
            targets: super::preset::LORA_TARGETS.iter().map(|t| t.to_string()).collect(),
        });
        let alt = MemoryPlan::without_advice(&lora, shape);
        advice.push(format!(
            "train LoRA instead (mode.lora; rank 32 on all projections needs {:.1} GiB);",
            gib(alt.total_bytes)
        ));
    }
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
    if plan.attention_bytes > 0 {
        let mut s = preset.clone();
        s.grpo.max_seq_len = (preset.grpo.max_seq_len / 2).max(preset.grpo.max_new_tokens + 1);
        let alt = MemoryPlan::without_advice(&s, shape);
        advice.push(format!(
            "lower grpo.max_seq_len (attention scores grow with its square; at {}: activations {:.1} GiB);",
            s.grpo.max_seq_len,
            gib(alt.activation_bytes)
        ));
    }
    if plan.reference_bytes > 0 {
        advice.push(format!("set grpo.kl_coef: 0 (drops the {:.1} GiB reference copy);", gib(plan.reference_bytes)));
    }
    advice.push(
        "or use GPUs with more memory. More GPUs do not help: data parallelism is replicated, and a sharded \
         optimiser / FSDP is not implemented."
            .to_string(),
    );
    advice
}

fn gib(bytes: u64) -> f64 {
    bytes as f64 / GIB as f64
}

/// A count with a metric suffix: 8.19 B, 268.4 M.
fn count(n: u64) -> String {
    let n = n as f64;
    if n >= 1e9 {
        format!("{:.2} B", n / 1e9)
    } else if n >= 1e6 {
        format!("{:.1} M", n / 1e6)
    } else if n >= 1e3 {
        format!("{:.1} k", n / 1e3)
    } else {
        format!("{n}")
    }
}

/// Thousands separators: 786,432.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

impl fmt::Display for MemoryPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let unit = if self.device == Device::Cuda { "per GPU" } else { "CPU process" };
        let mode = match self.lora {
            Some((r, n)) => format!("LoRA r={r} on {n} projections"),
            None => "full update".to_string(),
        };
        writeln!(f, "Plan for preset {} ({}, {}, {mode})", self.preset, self.device, self.dtype)?;
        let world = if self.device == Device::Cuda {
            format!(
                "{} ({} node{} × {} GPU{}); data parallel, replicated: each GPU holds everything below, no sharding",
                self.world_size,
                self.nodes,
                if self.nodes == 1 { "" } else { "s" },
                self.gpus_per_node,
                if self.gpus_per_node == 1 { "" } else { "s" }
            )
        } else {
            "1 (one CPU process)".to_string()
        };
        writeln!(f, "  {:<44}{world}", "world size")?;
        writeln!(f, "  {:<44}{} ({})", "parameters", count(self.base_params), self.base_params)?;
        writeln!(
            f,
            "  {:<44}{} ({:.2}% of the model)",
            "trainable",
            count(self.trainable_params),
            100.0 * self.trainable_params as f64 / self.base_params.max(1) as f64
        )?;
        writeln!(f)?;
        writeln!(f, "  {:<44}{:>10}", format!("memory, {unit}"), "GiB")?;
        let row =
            |f: &mut fmt::Formatter<'_>, label: &str, bytes: u64| writeln!(f, "  {label:<44}{:>10.2}", gib(bytes));
        row(f, &format!("weights ({})", self.dtype), self.weight_bytes)?;
        row(f, &format!("gradients ({}, trainable only)", self.dtype), self.grad_bytes)?;
        let master = if self.dtype == Dtype::Bf16 { " + f32 master" } else { "" };
        row(f, &format!("optimiser (AdamW m, v in f32{master})"), self.optimizer_bytes)?;
        if self.reference_bytes > 0 {
            row(f, "reference model (KL)", self.reference_bytes)?;
        }
        let how = if self.recompute { "recompute" } else { "no recompute" };
        row(f, &format!("activations ({} tokens, {how})", thousands(self.micro_batch_tokens)), self.activation_bytes)?;
        row(f, "  of which attention scores", self.attention_bytes)?;
        row(f, &format!("log-prob chunk ({LOGPROB_CHUNK_TOKENS} tokens, f32 + grad)"), self.logprob_bytes)?;
        if self.reserve_bytes > 0 {
            row(f, "CUDA context and slack", self.reserve_bytes)?;
        }
        row(f, "total", self.total_bytes)?;
        match (self.memory_bytes, self.headroom_bytes) {
            (Some(m), Some(h)) => {
                row(f, "available (hardware.gpu_memory_gib)", m)?;
                writeln!(f, "  {:<44}{:>10.2}", "headroom", h as f64 / GIB as f64)?;
                writeln!(f, "  {:<44}{:>10}", "fits", if self.fits { "yes" } else { "NO" })?;
            }
            _ => writeln!(f, "  {:<44}{:>10}", "available", "not declared (not checked)")?,
        }
        writeln!(f)?;
        writeln!(f, "  per step")?;
        writeln!(
            f,
            "  {:<44}{} ({} per rank), {} in flight",
            "rollouts",
            thousands(self.rollouts_per_step),
            thousands(self.rollouts_per_rank),
            self.rollouts_in_flight
        )?;
        writeln!(
            f,
            "  {:<44}≤ {} (≤ {} per rank)",
            "tokens",
            thousands(self.tokens_per_step),
            thousands(self.tokens_per_rank)
        )?;
        writeln!(f, "  {:<44}{}", "forward+backward passes per rank", self.micro_batches_per_rank)?;
        writeln!(f)?;
        let sampler = match self.engine {
            RolloutEngine::Candle => format!(
                "candle, which samples from a merged copy of the weights ({:.2} GiB)",
                gib(self.base_params * self.dtype.size())
            ),
            RolloutEngine::Mistralrs => {
                format!(
                    "mistralrs, which loads its own {:.2} GiB copy of the weights",
                    gib(self.base_params * self.dtype.size())
                )
            }
            RolloutEngine::Openai => "an external server".to_string(),
        };
        writeln!(
            f,
            "  rollout sampling is not in the total: {sampler}; KV cache {:.2} GiB per rollout at max_seq_len \
             ({:.2} GiB for the {} in flight)",
            gib(self.kv_bytes_per_rollout),
            gib(self.kv_bytes_per_rollout * self.rollouts_in_flight),
            self.rollouts_in_flight
        )?;
        if !self.fits {
            writeln!(f)?;
            writeln!(f, "  does not fit. {}", self.advice.join(" "))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn qwen3_8b() -> ModelShape {
        Preset::builtin("qwen3-8b-lora-1xh200").unwrap().model.shape.unwrap()
    }

    fn qwen3_32b() -> ModelShape {
        Preset::builtin("qwen3-32b-lora-1xh200").unwrap().model.shape.unwrap()
    }

    fn plan(name: &str) -> MemoryPlan {
        let p = Preset::builtin(name).unwrap();
        let shape = p.model.shape.unwrap();
        MemoryPlan::for_preset(&p, &shape)
    }

    #[test]
    fn qwen3_parameter_counts() {
        let n8 = qwen3_8b().parameter_count() as f64;
        assert!((n8 / 8.19e9 - 1.0).abs() < 0.01, "Qwen3-8B: {n8}");
        let n32 = qwen3_32b().parameter_count() as f64;
        assert!((n32 / 32.8e9 - 1.0).abs() < 0.01, "Qwen3-32B: {n32}");
    }

    #[test]
    fn lora_trainable_count_by_hand() {
        let mut p = Preset::builtin("cpu-tiny").unwrap();
        let shape = ModelShape {
            hidden_size: 16,
            num_hidden_layers: 3,
            num_attention_heads: 4,
            num_key_value_heads: 2,
            head_dim: 4,
            intermediate_size: 32,
            vocab_size: 100,
            tie_word_embeddings: true,
        };
        p.mode.lora = Some(super::super::preset::LoraSection {
            rank: 4,
            alpha: 8.0,
            dropout: 0.0,
            targets: vec!["q_proj".into(), "v_proj".into(), "down_proj".into()],
        });
        let plan = MemoryPlan::for_preset(&p, &shape);
        // q 16→16, v 16→8, down 32→16: r·(in+out) = 4·(32 + 24 + 48) = 416 per layer, 3 layers.
        assert_eq!(plan.trainable_params, 1248);
        // f32: grads 4 bytes, AdamW m+v 8 bytes, no master copy.
        assert_eq!(plan.grad_bytes, 1248 * 4);
        assert_eq!(plan.optimizer_bytes, 1248 * 8);
        assert_eq!(plan.weight_bytes, (shape.parameter_count() + 1248) * 4);
        assert!(plan.fits && plan.check().is_ok(), "CPU without declared memory is not checked");
    }

    #[test]
    fn qwen3_32b_lora_fits_on_one_h200() {
        let plan = plan("qwen3-32b-lora-1xh200");
        assert!(plan.fits, "{plan}");
        plan.check().unwrap();
        assert_eq!(plan.world_size, 1);
    }

    #[test]
    fn qwen3_32b_full_does_not_fit_on_8_h100() {
        let plan = plan("qwen3-32b-full-8xh100");
        assert!(!plan.fits);
        let err = plan.check().unwrap_err().to_string();
        assert!(err.contains("qwen3-32b-full-8xh100") && err.contains("GiB too much"), "{err}");
        assert!(err.contains("LoRA") && err.contains("FSDP"), "{err}");
        let table = plan.to_string();
        assert!(table.contains("NO") && table.contains("replicated"), "{table}");
    }

    #[test]
    fn bf16_full_update_accounting() {
        let plan = plan("qwen3-8b-full-1xh200");
        let n = plan.base_params;
        assert_eq!(plan.trainable_params, n);
        assert_eq!(plan.weight_bytes, 2 * n);
        assert_eq!(plan.grad_bytes, 2 * n);
        assert_eq!(plan.optimizer_bytes, 12 * n, "m, v and master copy in f32");
    }

    #[test]
    fn recompute_keeps_less() {
        let shape = qwen3_8b();
        let (with, _) = activation_bytes(&shape, Dtype::Bf16, 1, 4096, true);
        let (without, attention) = activation_bytes(&shape, Dtype::Bf16, 1, 4096, false);
        assert!(with * 10 < without, "{with} vs {without}");
        // Without recompute: per token per layer 17h + 8I + 5as 2-byte units, at bf16 that is bytes.
        let per = 17 * 4096 + 8 * 12288 + 5 * 32 * 4096;
        assert_eq!(without, 4096 * 36 * per);
        assert_eq!(attention, 4096 * 36 * 5 * 32 * 4096);
        let (f32_bytes, _) = activation_bytes(&shape, Dtype::F32, 1, 4096, false);
        assert_eq!(f32_bytes, 2 * without);
    }

    #[test]
    fn step_figures() {
        let p = Preset::builtin("cpu-tiny").unwrap();
        let plan = MemoryPlan::for_preset(&p, &qwen3_8b());
        assert_eq!(plan.rollouts_per_step, 32);
        assert_eq!(plan.tokens_per_step, 32 * 512);
        assert_eq!(plan.rollouts_in_flight, 8);
        // 32 rollouts in micro-batches of 16, two epochs.
        assert_eq!(plan.micro_batches_per_rank, 4);
    }

    #[test]
    fn multi_node_splits_work_per_rank() {
        let plan = plan("qwen3-8b-lora-4x8xh100");
        assert_eq!(plan.world_size, 32);
        assert_eq!(plan.rollouts_per_rank * 32, plan.rollouts_per_step);
        assert_eq!(plan.tokens_per_rank * 32, plan.tokens_per_step);
    }
}
