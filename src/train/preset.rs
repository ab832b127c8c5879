//! Training presets: one YAML file holds everything `agent train` needs (model, hardware, GRPO, optimiser, rollout,
//! reward, checkpoints); the shipped ones are compiled into the binary.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// A shipped preset: its name and its YAML, embedded so that the binary works from any directory.
macro_rules! builtin {
    ($name:literal) => {
        ($name, include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/presets/", $name, ".yaml")))
    };
}

/// The shipped presets (every file in `presets/`; a test checks the two agree).
const BUILTIN: &[(&str, &str)] = &[
    builtin!("cpu-tiny"),
    builtin!("qwen3-8b-lora-1xh200"),
    builtin!("qwen3-8b-lora-8xh100"),
    builtin!("qwen3-8b-lora-4x8xh100"),
    builtin!("qwen3-8b-full-1xh200"),
    builtin!("qwen3-8b-full-8xh100"),
    builtin!("qwen3-8b-full-4x8xh100"),
    builtin!("qwen3-32b-lora-1xh200"),
    builtin!("qwen3-32b-lora-8xh100"),
    builtin!("qwen3-32b-lora-4x8xh100"),
    builtin!("qwen3-32b-full-1xh200"),
    builtin!("qwen3-32b-full-8xh100"),
    builtin!("qwen3-32b-full-4x8xh100"),
];

/// The projections LoRA can target, by their Hugging Face / PEFT module names.
pub const LORA_TARGETS: [&str; 7] = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"];

/// The model spec that asks for the built-in tiny model instead of weights on disk.
pub const TINY_TOY: &str = "tiny:toy";

/// Errors loading or checking a preset; each names the file and, where there is one, the field.
#[derive(Debug, thiserror::Error)]
pub enum PresetError {
    /// The preset file could not be read.
    #[error("cannot read the preset file {path}: {source}. Check the path, or give a built-in name ({known})")]
    Read {
        path: PathBuf,
        known: String,
        #[source]
        source: std::io::Error,
    },
    /// The YAML does not match the preset format (unknown field, wrong type, missing field, bad syntax).
    #[error("the preset {file} is not valid: {reason}. Fix that field; presets/cpu-tiny.yaml is a complete example")]
    Parse { file: String, reason: String, line: Option<usize>, column: Option<usize> },
    /// The name is neither a built-in preset nor a path.
    #[error(
        "there is no built-in preset named `{name}`; the built-in presets are: {known}. \
         To use a file, give a path ending in .yaml"
    )]
    Unknown { name: String, known: String },
    /// A field parsed but its value is out of range or contradicts another field.
    #[error("the preset {file} has a bad value for `{field}`: {reason}")]
    Invalid { file: String, field: String, reason: String },
}

/// Where a preset came from; relative paths inside it resolve against this.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Origin {
    /// Shipped with the binary; relative paths are relative to the crate root.
    #[default]
    Builtin,
    /// Read from this YAML file; relative paths are relative to its directory.
    File(PathBuf),
}

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
    #[serde(skip)]
    origin: Origin,
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

pub use crate::train::grpo::AdvantageKind;

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

impl Default for RewardSection {
    fn default() -> Self {
        Self { judge: None, tests_weight: 0.65, judge_weight: 0.35 }
    }
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
    /// JSONL file of demonstrations (relative paths: see [`Preset::resolve_path`]).
    pub file: String,
    /// Passes over the file.
    pub epochs: usize,
    /// Learning rate.
    pub lr: f64,
    /// Sequences per update.
    pub batch: usize,
}

/// Evaluation before and after training.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvalSection {
    /// Rollouts per evaluation (0: no evaluation).
    pub rollouts: usize,
    /// Sampling temperature (0: greedy).
    pub temperature: f64,
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

impl Default for CheckpointSection {
    fn default() -> Self {
        Self { every: 1, keep: 2 }
    }
}

fn one() -> usize {
    1
}
fn one_f() -> f64 {
    1.0
}
fn yes() -> bool {
    true
}
fn advantage_grpo() -> AdvantageKind {
    AdvantageKind::Grpo
}
fn clip_low() -> f64 {
    0.2
}
fn clip_high() -> f64 {
    0.28
}
fn clip_dual() -> f64 {
    3.0
}
fn beta1() -> f64 {
    0.9
}
fn beta2() -> f64 {
    0.999
}
fn eps() -> f64 {
    1e-8
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

impl Preset {
    /// Names of the built-in presets.
    pub fn builtin_names() -> Vec<&'static str> {
        BUILTIN.iter().map(|(name, _)| *name).collect()
    }

    /// A built-in preset by name, parsed and validated.
    pub fn builtin(name: &str) -> Result<Preset, PresetError> {
        let Some((_, text)) = BUILTIN.iter().find(|(n, _)| *n == name) else {
            return Err(PresetError::Unknown { name: name.to_string(), known: known_names() });
        };
        Preset::parse(text, Origin::Builtin, &format!("presets/{name}.yaml (built in)"))
    }

    /// A preset file, parsed and validated.
    pub fn load(path: &Path) -> Result<Preset, PresetError> {
        let text = std::fs::read_to_string(path).map_err(|source| PresetError::Read {
            path: path.to_path_buf(),
            known: known_names(),
            source,
        })?;
        Preset::parse(&text, Origin::File(path.to_path_buf()), &path.display().to_string())
    }

    /// A path (contains `/` or ends in `.yaml`) is read from disk; anything else is a built-in name.
    pub fn find(name_or_path: &str) -> Result<Preset, PresetError> {
        if name_or_path.contains('/') || name_or_path.ends_with(".yaml") {
            Preset::load(Path::new(name_or_path))
        } else {
            Preset::builtin(name_or_path)
        }
    }

    /// Parses and validates YAML text; `file` names it in errors.
    pub fn parse(text: &str, origin: Origin, file: &str) -> Result<Preset, PresetError> {
        let mut preset: Preset = serde_yaml::from_str(text).map_err(|e| PresetError::Parse {
            file: file.to_string(),
            reason: e.to_string(),
            line: e.location().map(|l| l.line()),
            column: e.location().map(|l| l.column()),
        })?;
        preset.origin = origin;
        preset.validate()?;
        Ok(preset)
    }

    /// Where this preset came from.
    pub fn origin(&self) -> &Origin {
        &self.origin
    }

    /// How errors name this preset's file.
    pub fn file_label(&self) -> String {
        match &self.origin {
            Origin::Builtin => format!("presets/{}.yaml (built in)", self.name),
            Origin::File(path) => path.display().to_string(),
        }
    }

    /// A path from the preset: absolute as is; relative to the YAML's directory, or for
    /// a built-in preset, under the files the binary carries (`assets/…`, unpacked into
    /// the cache) and else relative to the current directory.
    pub fn resolve_path(&self, p: &str) -> Result<PathBuf, PresetError> {
        let path = Path::new(p);
        if path.is_absolute() {
            return Ok(path.to_path_buf());
        }
        match &self.origin {
            Origin::Builtin => match path.strip_prefix("assets") {
                Ok(rest) => Ok(crate::assets::assets_root()
                    .map_err(|e| PresetError::Invalid {
                        file: self.file_label(),
                        field: "(built-in files)".into(),
                        reason: e.to_string(),
                    })?
                    .join(rest)),
                Err(_) => Ok(path.to_path_buf()),
            },
            Origin::File(file) => Ok(file.parent().unwrap_or(Path::new("")).join(path)),
        }
    }

    /// Processes in the run: GPUs per node × nodes (one on CPU).
    pub fn world_size(&self) -> usize {
        self.hardware.gpus_per_node * self.hardware.nodes
    }

    /// Checks ranges and cross-field rules; errors name the field path, e.g. `grpo.group_size`.
    pub fn validate(&self) -> Result<(), PresetError> {
        let bad = |field: &str, reason: String| PresetError::Invalid {
            file: self.file_label(),
            field: field.to_string(),
            reason,
        };
        let positive = |field: &str, v: usize| {
            if v == 0 {
                Err(bad(field, "must be at least 1, it is 0".into()))
            } else {
                Ok(())
            }
        };
        let in_range = |field: &str, v: f64, lo: f64, hi: f64, what: &str| {
            if v.is_finite() && v >= lo && v <= hi {
                Ok(())
            } else {
                Err(bad(field, format!("must be {what}, it is {v}")))
            }
        };
        let above_zero = |field: &str, v: f64| {
            if v.is_finite() && v > 0.0 {
                Ok(())
            } else {
                Err(bad(field, format!("must be a number above 0, it is {v}")))
            }
        };
        let non_empty = |field: &str, v: &str| {
            if v.trim().is_empty() {
                Err(bad(field, "must not be empty".into()))
            } else {
                Ok(())
            }
        };

        non_empty("name", &self.name)?;
        non_empty("model.path", &self.model.path)?;
        if self.model.path.starts_with("tiny:") && self.model.path != TINY_TOY {
            return Err(bad(
                "model.path",
                format!("`{}` is not a tiny model; the one there is is `{TINY_TOY}`", self.model.path),
            ));
        }
        if let Some(s) = &self.model.shape {
            for (field, v) in [
                ("model.shape.hidden_size", s.hidden_size),
                ("model.shape.num_hidden_layers", s.num_hidden_layers),
                ("model.shape.num_attention_heads", s.num_attention_heads),
                ("model.shape.num_key_value_heads", s.num_key_value_heads),
                ("model.shape.head_dim", s.head_dim),
                ("model.shape.intermediate_size", s.intermediate_size),
                ("model.shape.vocab_size", s.vocab_size),
            ] {
                positive(field, v)?;
            }
            if !s.num_attention_heads.is_multiple_of(s.num_key_value_heads) {
                return Err(bad(
                    "model.shape.num_key_value_heads",
                    format!(
                        "must divide num_attention_heads ({}) for grouped-query attention, it is {}",
                        s.num_attention_heads, s.num_key_value_heads
                    ),
                ));
            }
        }

        let hw = &self.hardware;
        positive("hardware.gpus_per_node", hw.gpus_per_node)?;
        positive("hardware.nodes", hw.nodes)?;
        if let Some(t) = hw.threads {
            positive("hardware.threads", t)?;
        }
        match hw.device {
            Device::Cpu => {
                // One CPU process trains; data parallelism needs NCCL, which is CUDA only.
                if hw.gpus_per_node != 1 || hw.nodes != 1 {
                    return Err(bad(
                        "hardware.device",
                        format!(
                            "cpu trains in one process, but gpus_per_node is {} and nodes is {}; set both to 1 \
                             or use device cuda",
                            hw.gpus_per_node, hw.nodes
                        ),
                    ));
                }
                in_range("hardware.gpu_memory_gib", hw.gpu_memory_gib, 0.0, f64::MAX, "0 or more (0: not checked)")?;
            }
            Device::Cuda => above_zero("hardware.gpu_memory_gib", hw.gpu_memory_gib)?,
        }

        match (&self.mode.lora, self.mode.full) {
            (Some(_), true) => {
                return Err(bad("mode", "has both `lora` and `full: true`; keep exactly one".into()));
            }
            (None, false) => {
                return Err(bad("mode", "needs either a `lora` section or `full: true`".into()));
            }
            (Some(lora), false) => {
                positive("mode.lora.rank", lora.rank)?;
                above_zero("mode.lora.alpha", lora.alpha)?;
                if !(lora.dropout.is_finite() && (0.0..1.0).contains(&lora.dropout)) {
                    return Err(bad("mode.lora.dropout", format!("must be in [0, 1), it is {}", lora.dropout)));
                }
                if lora.targets.is_empty() {
                    return Err(bad(
                        "mode.lora.targets",
                        format!("must name at least one of {}", LORA_TARGETS.join(", ")),
                    ));
                }
                for (i, t) in lora.targets.iter().enumerate() {
                    if !LORA_TARGETS.contains(&t.as_str()) {
                        return Err(bad(
                            "mode.lora.targets",
                            format!("`{t}` is not a projection; use some of {}", LORA_TARGETS.join(", ")),
                        ));
                    }
                    if lora.targets[..i].contains(t) {
                        return Err(bad("mode.lora.targets", format!("`{t}` is listed twice")));
                    }
                }
            }
            (None, true) => {}
        }

        non_empty("tasks", &self.tasks)?;

        let g = &self.grpo;
        positive("grpo.steps", g.steps)?;
        positive("grpo.tasks_per_step", g.tasks_per_step)?;
        if g.group_size < 2 {
            return Err(bad(
                "grpo.group_size",
                format!("must be at least 2 (advantages compare rollouts of one task), it is {}", g.group_size),
            ));
        }
        in_range("grpo.clip_low", g.clip_low, f64::MIN_POSITIVE, 0.999_999, "in (0, 1)")?;
        above_zero("grpo.clip_high", g.clip_high)?;
        if g.clip_dual != 0.0 && g.clip_dual <= 1.0 {
            return Err(bad("grpo.clip_dual", format!("must be 0 (off) or above 1, it is {}", g.clip_dual)));
        }
        in_range("grpo.kl_coef", g.kl_coef, 0.0, f64::MAX, "0 or more")?;
        positive("grpo.ppo_epochs", g.ppo_epochs)?;
        positive("grpo.minibatches", g.minibatches)?;
        // Temperature 0 makes every rollout of a group identical: no advantage, no signal.
        above_zero("grpo.temperature", g.temperature)?;
        in_range("grpo.top_p", g.top_p, f64::MIN_POSITIVE, 1.0, "in (0, 1]")?;
        positive("grpo.max_turns", g.max_turns)?;
        positive("grpo.max_new_tokens", g.max_new_tokens)?;
        if g.max_seq_len <= g.max_new_tokens {
            return Err(bad(
                "grpo.max_seq_len",
                format!(
                    "must be larger than grpo.max_new_tokens ({}) to leave room for the prompt, it is {}",
                    g.max_new_tokens, g.max_seq_len
                ),
            ));
        }
        let sequences = g.tasks_per_step * g.group_size;
        let world = self.world_size();
        // Every rank must run the same number of micro-batches, or the gradient all-reduce waits forever.
        if !sequences.is_multiple_of(world) {
            return Err(bad(
                "grpo.tasks_per_step",
                format!(
                    "tasks_per_step × group_size = {sequences} rollouts per step must be a multiple of the {world} \
                     processes (gpus_per_node × nodes) so each gets the same share"
                ),
            ));
        }
        if g.minibatches > sequences / world {
            return Err(bad(
                "grpo.minibatches",
                format!(
                    "is {} but each process only has {} rollouts per step; use at most that many",
                    g.minibatches,
                    sequences / world
                ),
            ));
        }

        let o = &self.optim;
        above_zero("optim.lr", o.lr)?;
        in_range("optim.beta1", o.beta1, 0.0, 0.999_999_999, "in [0, 1)")?;
        in_range("optim.beta2", o.beta2, 0.0, 0.999_999_999, "in [0, 1)")?;
        above_zero("optim.eps", o.eps)?;
        in_range("optim.weight_decay", o.weight_decay, 0.0, f64::MAX, "0 or more")?;
        above_zero("optim.grad_clip", o.grad_clip)?;
        positive("optim.grad_accum", o.grad_accum)?;
        positive("optim.micro_batch", o.micro_batch)?;

        let r = &self.rollout;
        positive("rollout.concurrency", r.concurrency)?;
        match (r.engine, &r.url) {
            (RolloutEngine::Openai, None) => {
                return Err(bad("rollout.url", "is required with engine openai (the server's base URL)".into()));
            }
            (RolloutEngine::Openai, Some(url)) => non_empty("rollout.url", url)?,
            (engine, Some(_)) => {
                return Err(bad("rollout.url", format!("is only used by engine openai, not {engine}; remove it")));
            }
            (_, None) => {}
        }

        let w = &self.reward;
        in_range("reward.tests_weight", w.tests_weight, 0.0, f64::MAX, "0 or more")?;
        in_range("reward.judge_weight", w.judge_weight, 0.0, f64::MAX, "0 or more")?;
        if let Some(judge) = &w.judge {
            non_empty("reward.judge", judge)?;
        }
        let judge = if w.judge.is_some() { w.judge_weight } else { 0.0 };
        if w.tests_weight + judge <= 0.0 {
            return Err(bad(
                "reward.tests_weight",
                "the weights in use sum to 0 (without reward.judge only tests_weight counts); make one positive".into(),
            ));
        }

        if let Some(sft) = &self.sft {
            non_empty("sft.file", &sft.file)?;
            positive("sft.epochs", sft.epochs)?;
            above_zero("sft.lr", sft.lr)?;
            positive("sft.batch", sft.batch)?;
        }

        in_range("eval.temperature", self.eval.temperature, 0.0, f64::MAX, "0 or more")?;
        positive("checkpoint.every", self.checkpoint.every)?;
        positive("checkpoint.keep", self.checkpoint.keep)?;
        if let Some(p) = &self.system_prompt {
            non_empty("system_prompt", p)?;
        }
        Ok(())
    }
}

fn known_names() -> String {
    Preset::builtin_names().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cpu_tiny_text() -> &'static str {
        BUILTIN[0].1
    }

    fn parse(text: &str) -> Result<Preset, PresetError> {
        Preset::parse(text, Origin::File(PathBuf::from("/x/p.yaml")), "/x/p.yaml")
    }

    #[test]
    fn every_shipped_preset_parses_and_validates() {
        for name in Preset::builtin_names() {
            let p = Preset::builtin(name).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(p.name, name, "the name field matches the file name");
        }
        let on_disk: Vec<String> = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/presets"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().trim_end_matches(".yaml").to_string())
            .collect();
        assert_eq!(on_disk.len(), BUILTIN.len(), "every file in presets/ is in the BUILTIN table");
        for name in &on_disk {
            assert!(Preset::builtin_names().contains(&name.as_str()), "{name} is missing from BUILTIN");
        }
    }

    #[test]
    fn cpu_tiny_has_the_expected_values() {
        let p = Preset::builtin("cpu-tiny").unwrap();
        assert_eq!(p.hardware.device, Device::Cpu);
        assert_eq!(p.model.path, TINY_TOY);
        let lora = p.mode.lora.as_ref().unwrap();
        assert_eq!((lora.rank, lora.alpha, lora.targets.len()), (16, 32.0, 7));
        assert_eq!((p.grpo.steps, p.grpo.tasks_per_step, p.grpo.group_size), (10, 4, 8));
        assert_eq!(p.checkpoint, CheckpointSection { every: 5, keep: 2 });
        assert_eq!(p.reward.effective_weights(), (1.0, 0.0));
        assert!(p.system_prompt.as_deref().unwrap().contains("<finish>"));
    }

    #[test]
    fn unknown_field_is_named_with_its_location() {
        let text = cpu_tiny_text().replace("group_size: 8", "group_size: 8\n  groupsize: 9");
        let err = parse(&text).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("/x/p.yaml") && msg.contains("unknown field `groupsize`"), "{msg}");
        assert!(msg.contains("grpo") && msg.contains("line"), "{msg}");
        assert!(matches!(err, PresetError::Parse { line: Some(_), .. }));
    }

    #[test]
    fn wrong_type_is_named_with_its_field_path() {
        let text = cpu_tiny_text().replace("micro_batch: 16", "micro_batch: many");
        let msg = parse(&text).unwrap_err().to_string();
        assert!(msg.contains("optim.micro_batch") && msg.contains("line"), "{msg}");
    }

    #[test]
    fn bad_values_name_the_field() {
        for (from, to, field) in [
            ("group_size: 8", "group_size: 1", "grpo.group_size"),
            ("lr: 0.003", "lr: 0", "optim.lr"),
            ("clip_low: 0.2", "clip_low: 0", "grpo.clip_low"),
            ("down_proj]", "down]", "mode.lora.targets"),
            ("every: 5", "every: 0", "checkpoint.every"),
            ("device: cpu", "device: cuda", "hardware.gpu_memory_gib"),
            ("max_seq_len: 512", "max_seq_len: 64", "grpo.max_seq_len"),
            ("engine: candle", "engine: openai", "rollout.url"),
        ] {
            assert!(cpu_tiny_text().contains(from), "the fixture has {from}");
            let err = parse(&cpu_tiny_text().replacen(from, to, 1)).unwrap_err();
            match &err {
                PresetError::Invalid { field: f, file, .. } => {
                    assert_eq!((f.as_str(), file.as_str()), (field, "/x/p.yaml"), "{err}")
                }
                other => panic!("{from} -> {to}: expected Invalid {field}, got {other}"),
            }
        }
    }

    #[test]
    fn mode_needs_exactly_one_of_lora_and_full() {
        let both = cpu_tiny_text().replace("mode:\n", "mode:\n  full: true\n");
        assert!(matches!(parse(&both), Err(PresetError::Invalid { ref field, .. }) if field == "mode"));
        let mut neither = Preset::builtin("cpu-tiny").unwrap();
        neither.mode.lora = None;
        assert!(matches!(neither.validate(), Err(PresetError::Invalid { ref field, .. }) if field == "mode"));
        let mut full = neither.clone();
        full.mode.full = true;
        full.validate().unwrap();
    }

    #[test]
    fn weights_must_sum_above_zero() {
        let text = cpu_tiny_text().replace("tests_weight: 0.65", "tests_weight: 0");
        let err = parse(&text).unwrap_err();
        assert!(err.to_string().contains("reward.tests_weight"), "{err}");
        let with_judge = cpu_tiny_text().replace("judge: null", "judge: openai:x");
        let p = parse(&with_judge).unwrap();
        let (t, j) = p.reward.effective_weights();
        assert!((t - 0.65).abs() < 1e-12 && (j - 0.35).abs() < 1e-12);
    }

    #[test]
    fn find_tells_names_from_paths() {
        assert_eq!(Preset::find("cpu-tiny").unwrap().name, "cpu-tiny");
        let err = Preset::find("cpu-huge").unwrap_err().to_string();
        assert!(err.contains("cpu-huge") && err.contains("cpu-tiny"), "{err}");
        let err = Preset::find("/nonexistent/p.yaml").unwrap_err().to_string();
        assert!(err.contains("/nonexistent/p.yaml"), "{err}");
        let err = Preset::find("nothere.yaml").unwrap_err();
        assert!(matches!(err, PresetError::Read { .. }));
    }

    #[test]
    fn load_resolves_paths_against_the_file() {
        let dir = std::env::temp_dir().join(format!("preset-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("mine.yaml");
        std::fs::write(&file, cpu_tiny_text()).unwrap();
        let p = Preset::load(&file).unwrap();
        assert_eq!(p.resolve_path("tasks").unwrap(), dir.join("tasks"));
        assert_eq!(p.resolve_path("/abs").unwrap(), PathBuf::from("/abs"));
        // A built-in preset's files come from the binary, never from the source tree.
        let builtin = Preset::builtin("cpu-tiny").unwrap();
        let tasks = builtin.resolve_path(&builtin.tasks).unwrap();
        assert!(!tasks.starts_with(env!("CARGO_MANIFEST_DIR")), "{}", tasks.display());
        assert!(tasks.join("note-cloud/task.yaml").is_file(), "{}", tasks.display());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn lora_count_by_hand() {
        let s = ModelShape {
            hidden_size: 8,
            num_hidden_layers: 2,
            num_attention_heads: 2,
            num_key_value_heads: 1,
            head_dim: 4,
            intermediate_size: 16,
            vocab_size: 10,
            tie_word_embeddings: true,
        };
        let all: Vec<String> = LORA_TARGETS.iter().map(|t| t.to_string()).collect();
        // q 8→8, k 8→4, v 8→4, o 8→8, gate 8→16, up 8→16, down 16→8: in+out sums to 16+12+12+16+24+24+24 = 128.
        assert_eq!(s.lora_parameter_count(2, &all), 2 * 128 * 2);
        assert_eq!(s.lora_parameter_count(2, &["q_proj".to_string()]), 2 * 16 * 2);
        // Per layer: q 64 + k 32 + v 32 + o 64 + gate 128 + up 128 + down 128 = 576, norms 2·8 + 2·4 = 24.
        assert_eq!(s.parameter_count(), 10 * 8 + 2 * (576 + 24) + 8);
    }
}
