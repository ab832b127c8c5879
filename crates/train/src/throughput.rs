//! Training throughput: forward + backward (+ AdamW) tokens per second of a random
//! Qwen3-shaped model with LoRA, on shapes that the PyTorch + PEFT reference script
//! (`scripts/train-reference.sh`) measures too, on the CPU or a CUDA device, with the
//! model FLOPs per token that utilisation (MFU) is computed from.

use std::collections::HashMap;
use std::path::Path;
use std::time::Instant;

use candle_core::{DType, Device, Tensor};
use serde::Serialize;

use super::backward::backward;
use super::dist::SingleRank;
use super::error::{TensorContext, TrainError};
use super::model::{LoraSettings, Qwen3, Qwen3Config, TrainMode, LORA_TARGETS};
use super::optim::{AdamW, AdamWSettings};
use super::update::{sft_step, Sample, UpdateSettings};

/// A benchmark shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PerfShape {
    /// hidden 64, 2 layers, 4 heads, 2 KV heads, intermediate 128, vocab 1024; LoRA r=8.
    Tiny,
    /// hidden 768, 12 layers, 12 heads, 4 KV heads, intermediate 2048, vocab 32768 (100.7M); LoRA r=16.
    #[value(name = "100m")]
    #[serde(rename = "100m")]
    M100,
    /// Qwen3-0.6B's shape: hidden 1024, 28 layers, 16 heads, 8 KV heads, head 128,
    /// intermediate 3072, vocab 151936, tied head (596M); LoRA r=16.
    #[value(name = "qwen3-0.6b")]
    #[serde(rename = "qwen3-0.6b")]
    Qwen3_0_6b,
    /// Qwen3-8B's shape: hidden 4096, 36 layers, 32 heads, 8 KV heads, head 128,
    /// intermediate 12288, vocab 151936, untied head (8.2B); LoRA r=16.
    #[value(name = "qwen3-8b")]
    #[serde(rename = "qwen3-8b")]
    Qwen3_8b,
}

impl PerfShape {
    /// The model configuration and the LoRA rank of the shape.
    pub fn config(self) -> (Qwen3Config, usize) {
        let (h, l, nh, nkv, hd, i, v, r) = match self {
            PerfShape::Tiny => (64, 2, 4, 2, 16, 128, 1024, 8),
            PerfShape::M100 => (768, 12, 12, 4, 64, 2048, 32768, 16),
            PerfShape::Qwen3_0_6b => (1024, 28, 16, 8, 128, 3072, 151936, 16),
            PerfShape::Qwen3_8b => (4096, 36, 32, 8, 128, 12288, 151936, 16),
        };
        let cfg = Qwen3Config {
            vocab_size: v,
            hidden_size: h,
            intermediate_size: i,
            num_hidden_layers: l,
            num_attention_heads: nh,
            num_key_value_heads: nkv,
            head_dim: Some(hd),
            rms_norm_eps: 1e-6,
            rope_theta: 1_000_000.0,
            tie_word_embeddings: self != PerfShape::Qwen3_8b,
            max_position_embeddings: 4096,
            eos_token_id: None,
            model_type: None,
            attention_bias: None,
        };
        (cfg, r)
    }
}

/// What is timed per step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PerfMode {
    /// Forward, backward and the AdamW update.
    Step,
    /// Forward and backward only.
    Fwdbwd,
    /// The forward pass and the log-probabilities only (what scoring rollouts costs).
    Forward,
}

/// Results of a throughput run.
#[derive(Debug, Clone, Serialize)]
pub struct SpeedReport {
    pub engine: &'static str,
    /// `cpu` or `cuda:N`.
    pub device: String,
    /// `f32` or `bf16`.
    pub dtype: String,
    pub shape: PerfShape,
    pub mode: PerfMode,
    pub params: u64,
    pub trainable_params: u64,
    pub batch: usize,
    pub seq: usize,
    pub threads: usize,
    pub step_secs: Vec<f64>,
    pub median_step_secs: f64,
    pub tokens_per_sec: f64,
    /// Model FLOPs per trained token (see [`flops_per_token`]).
    pub flops_per_token: f64,
    /// `flops_per_token × tokens_per_sec`, in TFLOP/s.
    pub achieved_tflops: f64,
    /// Whether the backward pass recomputed each layer.
    pub recompute: bool,
    /// `tiles` (attention in tiles where the scores are large) or `whole` (every score at once).
    pub attention: &'static str,
    /// The process's peak resident memory (Linux `VmHWM`), model load included; None elsewhere.
    pub peak_rss_mib: Option<f64>,
}

/// How a measured step holds its activations.
#[derive(Debug, Clone, Copy, Default)]
pub struct MemoryKnobs {
    /// Recompute each layer in the backward pass (gradient checkpointing).
    pub recompute: bool,
    /// Materialise every attention score (the plain path) instead of tiles.
    pub whole_attention: bool,
}

/// The peak resident memory of this process in MiB (Linux).
fn peak_rss_mib() -> Option<f64> {
    status_bytes("VmHWM:").map(|b| b as f64 / (1024.0 * 1024.0))
}

/// A memory field of `/proc/self/status` (`VmRSS:`, `VmHWM:`, …) in bytes.
pub(crate) fn status_bytes(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Model FLOPs per token of one step in `mode`, the way MFU is usually counted: 2 per
/// weight of every matrix product (the head included, the embedding lookup not) for the
/// forward pass, as much again for the activations' gradients, as much again for the
/// weights' gradients in full training (a frozen base with LoRA has none; the adapters'
/// own products are under 1% and left out), and attention's score and value products
/// (`4·layers·seq·q_width` forward, counted over the whole square as computed) with the
/// same multipliers.
pub fn flops_per_token(cfg: &Qwen3Config, seq: usize, mode: PerfMode, full: bool) -> f64 {
    let (h, i) = (cfg.hidden_size as f64, cfg.intermediate_size as f64);
    let (q, kv) =
        ((cfg.num_attention_heads * cfg.head_dim()) as f64, (cfg.num_key_value_heads * cfg.head_dim()) as f64);
    let per_layer = h * q * 2.0 + h * kv * 2.0 + 3.0 * h * i;
    let matmul = cfg.num_hidden_layers as f64 * per_layer + cfg.vocab_size as f64 * h;
    let attention = 4.0 * cfg.num_hidden_layers as f64 * seq as f64 * q;
    let passes = match mode {
        PerfMode::Forward => 1.0,
        PerfMode::Fwdbwd | PerfMode::Step => {
            if full {
                3.0
            } else {
                2.0
            }
        }
    };
    let attention_passes = if matches!(mode, PerfMode::Forward) { 1.0 } else { 3.0 };
    2.0 * matmul * passes + attention * attention_passes
}

/// Random weights of a Qwen3 of shape `cfg` (uniform ±0.02, norms at 1), on the CPU in f32.
pub fn random_weights(cfg: &Qwen3Config, seed: u64) -> Result<HashMap<String, Tensor>, TrainError> {
    use rand::{Rng, SeedableRng};
    let device = Device::Cpu;
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut tensors = HashMap::new();
    let mut put = |name: String, dims: &[usize], rng: &mut rand::rngs::StdRng, norm: bool| -> Result<(), TrainError> {
        let n: usize = dims.iter().product();
        let v: Vec<f32> = if norm { vec![1.0; n] } else { (0..n).map(|_| rng.gen_range(-0.02f32..0.02)).collect() };
        tensors.insert(name, Tensor::from_vec(v, dims, &device).ctx("random weights")?);
        Ok(())
    };
    let (h, hd, i) = (cfg.hidden_size, cfg.head_dim(), cfg.intermediate_size);
    let (q, kv) = (cfg.num_attention_heads * hd, cfg.num_key_value_heads * hd);
    put("model.embed_tokens.weight".into(), &[cfg.vocab_size, h], &mut rng, false)?;
    for l in 0..cfg.num_hidden_layers {
        let p = format!("model.layers.{l}");
        put(format!("{p}.input_layernorm.weight"), &[h], &mut rng, true)?;
        put(format!("{p}.post_attention_layernorm.weight"), &[h], &mut rng, true)?;
        put(format!("{p}.self_attn.q_norm.weight"), &[hd], &mut rng, true)?;
        put(format!("{p}.self_attn.k_norm.weight"), &[hd], &mut rng, true)?;
        put(format!("{p}.self_attn.q_proj.weight"), &[q, h], &mut rng, false)?;
        put(format!("{p}.self_attn.k_proj.weight"), &[kv, h], &mut rng, false)?;
        put(format!("{p}.self_attn.v_proj.weight"), &[kv, h], &mut rng, false)?;
        put(format!("{p}.self_attn.o_proj.weight"), &[h, q], &mut rng, false)?;
        put(format!("{p}.mlp.gate_proj.weight"), &[i, h], &mut rng, false)?;
        put(format!("{p}.mlp.up_proj.weight"), &[i, h], &mut rng, false)?;
        put(format!("{p}.mlp.down_proj.weight"), &[h, i], &mut rng, false)?;
    }
    put("model.norm.weight".into(), &[h], &mut rng, true)?;
    if !cfg.tie_word_embeddings {
        put("lm_head.weight".into(), &[cfg.vocab_size, h], &mut rng, false)?;
    }
    Ok(tensors)
}

/// A model of shape `cfg` from `weights` (as [`random_weights`] makes them), on
/// `target`'s device in its dtype.
pub fn model_on(
    cfg: &Qwen3Config,
    weights: &HashMap<String, Tensor>,
    mode: &TrainMode,
    target: &PerfTarget,
) -> Result<Qwen3, TrainError> {
    let tensors = weights
        .iter()
        .map(|(k, t)| Ok((k.clone(), t.to_device(&target.device).ctx("moving weights to the device")?)))
        .collect::<Result<HashMap<_, _>, TrainError>>()?;
    Qwen3::from_tensors(cfg.clone(), tensors, mode, target.dtype, &target.device, 0, Path::new("random"))
}

/// The LoRA settings the benchmarks use: every projection, alpha = 2·rank.
pub fn lora_settings(rank: usize) -> LoraSettings {
    LoraSettings {
        rank,
        alpha: 2.0 * rank as f64,
        dropout: 0.0,
        targets: LORA_TARGETS.iter().map(|s| s.to_string()).collect(),
    }
}

/// Where and in what precision a measurement runs.
#[derive(Debug, Clone)]
pub struct PerfTarget {
    pub device: Device,
    pub dtype: DType,
}

/// A compute precision, as the command line names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PerfDtype {
    F32,
    Bf16,
}

impl PerfTarget {
    /// `cpu`, `cuda` or `cuda:N`, in `dtype`.
    pub fn parse(device: &str, dtype: PerfDtype) -> Result<PerfTarget, TrainError> {
        let device = match device {
            "cpu" => Device::Cpu,
            "cuda" => cuda_device(0)?,
            other => match other.strip_prefix("cuda:").and_then(|n| n.parse::<usize>().ok()) {
                Some(n) => cuda_device(n)?,
                None => {
                    return Err(TrainError::Config(format!("unknown device `{other}`: use `cpu`, `cuda` or `cuda:N`")))
                }
            },
        };
        let dtype = match dtype {
            PerfDtype::F32 => DType::F32,
            PerfDtype::Bf16 => DType::BF16,
        };
        Ok(PerfTarget { device, dtype })
    }
}

/// CUDA device `n`, or an error that says what to do.
pub fn cuda_device(n: usize) -> Result<Device, TrainError> {
    Device::new_cuda(n).map_err(|e| {
        TrainError::Config(format!(
            "CUDA device {n} is not usable ({e}); this needs a build with --features cuda and a GPU"
        ))
    })
}

impl Default for PerfTarget {
    fn default() -> Self {
        PerfTarget { device: Device::Cpu, dtype: DType::F32 }
    }
}

/// `cpu` or `cuda:N`.
pub fn device_name(device: &Device) -> String {
    match device.location() {
        candle_core::DeviceLocation::Cpu => "cpu".into(),
        candle_core::DeviceLocation::Cuda { gpu_id } => format!("cuda:{gpu_id}"),
        candle_core::DeviceLocation::Metal { gpu_id } => format!("metal:{gpu_id}"),
    }
}

/// Times `steps` training steps (after `warmup` untimed ones) on random tokens.
pub fn measure(
    shape: PerfShape,
    mode: PerfMode,
    batch: usize,
    seq: usize,
    steps: usize,
    warmup: usize,
    target: &PerfTarget,
) -> Result<SpeedReport, TrainError> {
    measure_with(shape, mode, (batch, seq), (steps, warmup), target, MemoryKnobs::default())
}

/// [`measure`], with the activations held as `knobs` say.
pub fn measure_with(
    shape: PerfShape,
    mode: PerfMode,
    (batch, seq): (usize, usize),
    (steps, warmup): (usize, usize),
    target: &PerfTarget,
    knobs: MemoryKnobs,
) -> Result<SpeedReport, TrainError> {
    use rand::{Rng, SeedableRng};
    let device = target.device.clone();
    let (cfg, rank) = shape.config();
    let mut rng = rand::rngs::StdRng::seed_from_u64(1);
    let tensors = random_weights(&cfg, 0)?;
    let params: u64 = tensors.values().map(|t| t.elem_count() as u64).sum();
    let vocab = cfg.vocab_size;
    let flops = flops_per_token(&cfg, seq, mode, false);
    let mut model = model_on(&cfg, &tensors, &TrainMode::Lora(lora_settings(rank)), target)?;
    if knobs.whole_attention {
        model.tiles.materialise_up_to = usize::MAX;
    }
    // The host copy is not needed once the model holds its own (GBs for the large shapes).
    drop(tensors);
    let trainable: u64 = model.trainable().iter().map(|(_, v)| v.as_tensor().elem_count() as u64).sum();
    let adam = AdamWSettings { lr: 1e-4, beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.0 };
    let mut opt = AdamW::new(model.trainable(), adam)?;
    let samples: Vec<Sample> = (0..batch)
        .map(|_| Sample {
            tokens: (0..seq).map(|_| rng.gen_range(0..vocab as u32)).collect(),
            mask: vec![1; seq],
            advantage: 0.0,
            sampler_logp: None,
        })
        .collect();
    let refs: Vec<&Sample> = samples.iter().collect();
    let settings = UpdateSettings {
        ppo: super::grpo::PpoSettings { clip_low: 0.2, clip_high: 0.28, clip_dual: 3.0, kl_coef: 0.0 },
        epochs: 1,
        minibatches: 1,
        micro_batch: batch,
        grad_clip: 0.0,
        recompute: knobs.recompute,
        chunk: super::model::DEFAULT_CHUNK,
        importance_cap: 2.0,
        pad: 0,
    };
    let mut times = Vec::new();
    for k in 0..warmup + steps {
        let t = Instant::now();
        match mode {
            PerfMode::Step => {
                sft_step(&model, &mut opt, &refs, &settings, &SingleRank, k as u64)?;
            }
            PerfMode::Forward => {
                super::update::sample_logprobs(
                    &model,
                    &refs,
                    super::model::ForwardMode::default(),
                    (batch, 0, settings.chunk),
                    &SingleRank,
                )?;
            }
            PerfMode::Fwdbwd => {
                let seqs: Vec<(&[u32], &[u8])> =
                    samples.iter().map(|s| (s.tokens.as_slice(), s.mask.as_slice())).collect();
                let b = super::model::TokenBatch::new(&seqs, 0, &device).ctx("building a batch")?;
                let n = b.len() as f64;
                let head = |model: &Qwen3, hidden: &Tensor| -> candle_core::Result<Tensor> {
                    let (logp, _) = super::model::token_logprobs(model, hidden, &b, settings.chunk)?;
                    logp.sum_all()?.neg()? / n
                };
                backward(
                    &model,
                    &b.ids,
                    super::model::ForwardMode { train: true, ..Default::default() },
                    knobs.recompute,
                    &head,
                )?;
            }
        }
        // CUDA queues work asynchronously: the step ends when the device is done.
        device.synchronize().ctx("waiting for the device")?;
        if k >= warmup {
            times.push(t.elapsed().as_secs_f64());
        }
    }
    let mut sorted = times.clone();
    sorted.sort_by(f64::total_cmp);
    let median = sorted.get(sorted.len() / 2).copied().unwrap_or(f64::NAN);
    let tokens_per_sec = (batch * seq) as f64 / median;
    Ok(SpeedReport {
        engine: "candle",
        device: device_name(&device),
        dtype: format!("{:?}", target.dtype).to_lowercase(),
        shape,
        mode,
        params,
        trainable_params: trainable,
        batch,
        seq,
        threads: candle_core::utils::get_num_threads(),
        step_secs: times,
        median_step_secs: median,
        tokens_per_sec,
        flops_per_token: flops,
        achieved_tflops: flops * tokens_per_sec / 1e12,
        recompute: knobs.recompute,
        attention: if knobs.whole_attention { "whole" } else { "tiles" },
        peak_rss_mib: peak_rss_mib(),
    })
}
