//! The preset format: one YAML file's sections and fields, as serde reads them.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::defaults::{advantage_grpo, beta1, beta2, clip_dual, clip_high, clip_low, eps, one, one_f, yes};
use super::Origin;

/// The projections LoRA can target, by their Hugging Face / PEFT module names.
pub const LORA_TARGETS: [&str; 7] = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"];

/// Everything one `agent train` run needs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Preset {
    /// Short name, shown in logs and plots.
    pub name: String,
    /// One line saying what the preset is for.
    pub description: String,
    /// Seed of every random choice (task sampling, rollouts, dropout, LoRA init).
    #[serde(default)]
    pub seed: u64,
    /// The policy model.
    pub model: ModelSection,
    /// Where the run executes.
    pub hardware: Hardware,
    /// Precision of the model weights.
    pub dtype: Dtype,
    /// LoRA adapters or a full update.
    pub mode: TrainMode,
    /// Directory of training tasks (relative paths: see [`Preset::resolve_path`]).
    pub tasks: String,
    /// Which tasks of an `agent tasks synth` output to train on (difficulty, category,
    /// the solver's pass-rate band); only for such a folder.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_filter: Option<agent_protocol::task_filter::TaskFilter>,
    /// The GRPO algorithm.
    pub grpo: Grpo,
    /// AdamW and batching.
    pub optim: Optim,
    /// Who samples the rollouts.
    pub rollout: Rollout,
    /// How a rollout is scored.
    #[serde(default)]
    pub reward: RewardSection,
    /// Supervised warm start before GRPO.
    #[serde(default)]
    pub sft: Option<SftSection>,
    /// Evaluation before and after training.
    pub eval: EvalSection,
    /// Checkpoint cadence and retention.
    #[serde(default)]
    pub checkpoint: CheckpointSection,
    /// Activation recomputation: keep only layer inputs and recompute the rest in the backward pass.
    #[serde(default)]
    pub recompute: bool,
    /// Replaces the agent's default system prompt (short prompts suit tiny models).
    #[serde(default)]
    pub system_prompt: Option<String>,
    /// The rollouts' action format, as `--tool-format` for `agent run`: `auto` (native
    /// calls where the model's chat template renders tools, as the user's chat does),
    /// `native` or `text`. A preset whose warm-start demonstrations are in the text
    /// format says `text`.
    #[serde(default)]
    pub tool_format: agent_core::tools::ToolFormat,
    /// The built-in tools the rollouts offer (default: all; `finish` is always kept), as
    /// `tools` in config.toml: a short list keeps every prompt, and so every step, short.
    /// Evaluate a trained adapter with the same list.
    #[serde(default)]
    pub tools: Option<Vec<String>>,
    #[serde(skip)]
    pub(super) origin: Origin,
}

/// The policy model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSection {
    /// A directory with config.json and safetensors, `hf:ORG/NAME`, or `tiny:toy` for the generated tiny model.
    pub path: String,
    /// The architecture, so that `--dry-run` works without the weights on disk.
    #[serde(default)]
    pub shape: Option<ModelShape>,
}

/// A Qwen3 architecture, in the field names of its Hugging Face `config.json`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelShape {
    /// Width of the residual stream.
    pub hidden_size: usize,
    /// Decoder layers.
    pub num_hidden_layers: usize,
    /// Query heads.
    pub num_attention_heads: usize,
    /// Key/value heads (grouped-query attention).
    pub num_key_value_heads: usize,
    /// Width of one head.
    pub head_dim: usize,
    /// Width of the SwiGLU MLP.
    pub intermediate_size: usize,
    /// Tokens in the vocabulary.
    pub vocab_size: usize,
    /// Whether the output head shares the embedding matrix.
    pub tie_word_embeddings: bool,
}

/// Compute device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Device {
    /// The CPU.
    Cpu,
    /// NVIDIA GPUs.
    Cuda,
}

/// Where the run executes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Hardware {
    /// CPU or CUDA.
    pub device: Device,
    /// GPUs per node (one process each).
    #[serde(default = "one")]
    pub gpus_per_node: usize,
    /// Nodes.
    #[serde(default = "one")]
    pub nodes: usize,
    /// Memory of one GPU in GiB (0 on CPU: not checked).
    #[serde(default)]
    pub gpu_memory_gib: f64,
    /// CPU threads (None: all cores).
    #[serde(default)]
    pub threads: Option<usize>,
}

/// Precision of the model weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    /// 32-bit float.
    F32,
    /// bfloat16.
    Bf16,
}

/// LoRA adapters or a full update; exactly one of the two.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainMode {
    /// Train LoRA adapters on these projections.
    #[serde(default)]
    pub lora: Option<LoraSection>,
    /// Train every weight.
    #[serde(default)]
    pub full: bool,
}

/// LoRA settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoraSection {
    /// Rank r of the update B·A.
    pub rank: usize,
    /// Scale numerator: the update is B·A·alpha/r.
    pub alpha: f64,
    /// Dropout on the adapter input.
    #[serde(default)]
    pub dropout: f64,
    /// Projections to adapt (see [`LORA_TARGETS`]).
    pub targets: Vec<String>,
}

pub use crate::grpo::AdvantageKind;

/// What happens to rollouts that hit a limit or failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TruncPolicy {
    /// Leave them out of the loss.
    Mask,
    /// Keep them with reward 0.
    Zero,
}

/// The GRPO algorithm.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Grpo {
    /// Optimiser steps.
    pub steps: usize,
    /// Tasks sampled per step.
    pub tasks_per_step: usize,
    /// Rollouts per task (G).
    pub group_size: usize,
    /// Advantage estimator.
    #[serde(default = "advantage_grpo")]
    pub advantage: AdvantageKind,
    /// Lower clip of the ratio: 1 − clip_low.
    #[serde(default = "clip_low")]
    pub clip_low: f64,
    /// Upper clip of the ratio: 1 + clip_high.
    #[serde(default = "clip_high")]
    pub clip_high: f64,
    /// Dual clip: a negative-advantage term is capped at clip_dual·|A| (0: off).
    #[serde(default = "clip_dual")]
    pub clip_dual: f64,
    /// Weight of the KL penalty to the reference policy (0: none).
    #[serde(default)]
    pub kl_coef: f64,
    /// Passes over each step's rollouts.
    #[serde(default = "one")]
    pub ppo_epochs: usize,
    /// Optimiser updates per epoch.
    #[serde(default = "one")]
    pub minibatches: usize,
    /// Drop groups whose rewards are all equal (they carry no signal).
    #[serde(default = "yes")]
    pub dynamic_sampling: bool,
    /// With dynamic sampling: draws of fresh tasks (at most this many per step) to
    /// replace the groups dropped for want of signal (0: none).
    #[serde(default)]
    pub refill_rounds: usize,
    /// `[low, high]`: draw the tasks whose running pass rate is in this band (or never
    /// tried), so that groups have a spread to learn from; none: every task.
    #[serde(default)]
    pub task_band: Option<[f64; 2]>,
    /// Sampling temperature of rollouts.
    #[serde(default = "one_f")]
    pub temperature: f64,
    /// Nucleus sampling of rollouts.
    #[serde(default = "one_f")]
    pub top_p: f64,
    /// Model turns per rollout.
    pub max_turns: usize,
    /// Tokens per model reply.
    pub max_new_tokens: usize,
    /// Tokens of a whole rollout transcript (prompt, replies and tool output).
    pub max_seq_len: usize,
    /// What happens to truncated or failed rollouts.
    pub truncated: TruncPolicy,
}

/// AdamW and batching.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Optim {
    /// Learning rate.
    pub lr: f64,
    /// AdamW β1.
    #[serde(default = "beta1")]
    pub beta1: f64,
    /// AdamW β2.
    #[serde(default = "beta2")]
    pub beta2: f64,
    /// AdamW ε.
    #[serde(default = "eps")]
    pub eps: f64,
    /// Decoupled weight decay.
    #[serde(default)]
    pub weight_decay: f64,
    /// Clip of the global gradient norm.
    #[serde(default = "one_f")]
    pub grad_clip: f64,
    /// Micro-batches accumulated per optimiser update.
    #[serde(default = "one")]
    pub grad_accum: usize,
    /// Sequences per micro-batch (forward and backward at once).
    pub micro_batch: usize,
    /// ZeRO stage of the data-parallel optimiser: 0 keeps AdamW's whole state on every
    /// GPU; 1 shards it over the GPUs (each keeps the f32 moments and master weights of
    /// 1/world of every variable, and the updated weights are all-gathered); 2 also
    /// reduce-scatters the gradients (each GPU receives only its shard of the sum). The
    /// weights stay whole on every GPU; 3 shards the weights too (full updates; each layer
    /// is gathered while it is used, see `crate::zero3`). Stages 1 and 2 work for LoRA too,
    /// where the adapters are small enough that 0 is the usual choice. Default: 2 for full
    /// updates on more than one GPU, else 0 (on one GPU a shard is the whole state). See
    /// [`Preset::zero_stage`].
    #[serde(default)]
    pub zero: Option<u8>,
    /// With `zero: 3`, AdamW's state (moments and f32 master weights) stays in host memory
    /// and each unit's share is brought to the GPU for its update (ZeRO-Offload's trade: a
    /// few seconds of PCIe transfers per optimiser step for most of the GPU's memory).
    #[serde(default)]
    pub offload: bool,
}

/// Who samples rollouts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RolloutEngine {
    /// The in-process candle policy (always on-policy).
    Candle,
    /// mistral.rs with the current adapter merged.
    Mistralrs,
    /// An external OpenAI-compatible server.
    Openai,
    /// llama.cpp over the GGUF base (quantised, as the user chats with it), the adapter
    /// set after every update. LoRA on a GGUF base only.
    Llamacpp,
}

/// Who samples rollouts and how many at once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rollout {
    /// The sampler.
    pub engine: RolloutEngine,
    /// Rollouts (containers) in flight at once.
    pub concurrency: usize,
    /// Base URL of the server (engine `openai` only).
    #[serde(default)]
    pub url: Option<String>,
    /// Fraction of each GPU's memory reserved for the rollout engine, which shares the GPU
    /// with the trainer; the trainer must fit in the rest. `candle` samples in the training
    /// process from a merged copy of the policy (with LoRA, a copy of every adapted
    /// projection, and a second one while the new policy is merged after an update; with
    /// full updates the weights are shared with the trainer) plus a KV cache per rollout in
    /// flight. `mistralrs` loads its own copy of the weights (two while it reloads) and
    /// keeps KV caches as it goes: it runs without paged attention (one request at a time,
    /// see the engine), so there is no memory pool to size and the fraction is only the
    /// dry-run plan's budget. `openai` runs elsewhere (0). The plan (`--dry-run`) checks
    /// both sides. Default: 0 with `openai`, else 0.25. See [`Preset::rollout_memory_fraction`].
    #[serde(default)]
    pub gpu_memory_fraction: Option<f64>,
}

/// How a rollout is scored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RewardSection {
    /// Judge model spec; None: tests only.
    pub judge: Option<String>,
    /// Weight of the fraction of tests passed.
    pub tests_weight: f64,
    /// Weight of the judge score (ignored without a judge).
    pub judge_weight: f64,
}

impl RewardSection {
    /// The weights actually applied, normalised to sum 1: (tests, judge); without a judge, tests only.
    pub fn effective_weights(&self) -> (f64, f64) {
        let judge = if self.judge.is_some() { self.judge_weight } else { 0.0 };
        let sum = self.tests_weight + judge;
        // validate() guarantees sum > 0 for the weights in use; the guard keeps a hand-built section finite.
        if sum > 0.0 {
            (self.tests_weight / sum, judge / sum)
        } else {
            (1.0, 0.0)
        }
    }
}

/// Supervised warm start before GRPO.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SftSection {
    /// JSONL file of demonstrations (relative paths: see [`Preset::resolve_path`]), or
    /// `oracle`: every training task's reference solution carried out through the real
    /// loop as the model's own tool calls, kept where it resolves the task (adapter only).
    pub file: String,
    /// Passes over the file.
    pub epochs: usize,
    /// Learning rate.
    pub lr: f64,
    /// Sequences per update.
    pub batch: usize,
    /// What the warm start trains: the base's weights (a new base for GRPO) or the run's
    /// own LoRA adapter (GRPO goes on training it; the base stays as it is, which a GGUF
    /// base served by `rollout.engine: llamacpp` needs).
    #[serde(default)]
    pub into: SftInto,
}

/// What the warm start trains.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SftInto {
    /// Every weight; the result becomes GRPO's base model.
    #[default]
    Weights,
    /// The run's LoRA adapter (LoRA mode only).
    Adapter,
}

/// Evaluation before and after training.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvalSection {
    /// Rollouts per evaluation (0: no evaluation).
    pub rollouts: usize,
    /// Sampling temperature (0: greedy).
    pub temperature: f64,
    /// A held-out task folder to evaluate on (relative paths: see [`Preset::resolve_path`]);
    /// without one the evaluation runs the training tasks.
    #[serde(default)]
    pub tasks: Option<String>,
    /// Task families never trained on: left out of the training tasks, and the only
    /// families evaluated (families as `agent tasks generate` names them in its manifest).
    #[serde(default)]
    pub heldout_families: Vec<String>,
}

/// Checkpoint cadence and retention.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CheckpointSection {
    /// Save every this many steps.
    pub every: usize,
    /// Checkpoints kept on disk (older ones are deleted).
    pub keep: usize,
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Device::Cpu => "cpu",
            Device::Cuda => "cuda",
        })
    }
}

impl fmt::Display for RolloutEngine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RolloutEngine::Candle => "candle",
            RolloutEngine::Mistralrs => "mistralrs",
            RolloutEngine::Openai => "openai",
            RolloutEngine::Llamacpp => "llamacpp",
        })
    }
}

impl fmt::Display for Dtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Dtype::F32 => "f32",
            Dtype::Bf16 => "bf16",
        })
    }
}

impl Dtype {
    /// Bytes per element.
    pub fn size(self) -> u64 {
        match self {
            Dtype::F32 => 4,
            Dtype::Bf16 => 2,
        }
    }
}

impl ModelShape {
    /// (in, out) features of a projection named as in [`LORA_TARGETS`]; None for an unknown name.
    pub fn projection_dims(&self, target: &str) -> Option<(usize, usize)> {
        let q = self.num_attention_heads * self.head_dim;
        let kv = self.num_key_value_heads * self.head_dim;
        let (h, i) = (self.hidden_size, self.intermediate_size);
        match target {
            "q_proj" => Some((h, q)),
            "k_proj" | "v_proj" => Some((h, kv)),
            "o_proj" => Some((q, h)),
            "gate_proj" | "up_proj" => Some((h, i)),
            "down_proj" => Some((i, h)),
            _ => None,
        }
    }

    /// Parameters of the whole model: embeddings, output head unless tied, every layer and the final norm.
    pub fn parameter_count(&self) -> u64 {
        let (h, d) = (self.hidden_size as u64, self.head_dim as u64);
        let projections: u64 =
            LORA_TARGETS.iter().filter_map(|t| self.projection_dims(t)).map(|(i, o)| i as u64 * o as u64).sum();
        // Two RMSNorms of width hidden, plus Qwen3's per-head q_norm and k_norm of width head_dim.
        let norms = 2 * h + 2 * d;
        let layers = self.num_hidden_layers as u64 * (projections + norms);
        let embed = self.vocab_size as u64 * h;
        let head = if self.tie_word_embeddings { 0 } else { embed };
        embed + head + layers + h
    }

    /// LoRA parameters: r·(in+out) per targeted projection per layer.
    pub fn lora_parameter_count(&self, rank: usize, targets: &[String]) -> u64 {
        let per_layer: u64 = targets
            .iter()
            .filter_map(|t| self.projection_dims(t))
            .map(|(i, o)| rank as u64 * (i as u64 + o as u64))
            .sum();
        per_layer * self.num_hidden_layers as u64
    }
}
