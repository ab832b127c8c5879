//! The trainer's checks on a compute device, run by `scripts/gpu-check.sh` (the
//! `agent-gpu-check` binary): a training step on the device against the same step in f64
//! on the CPU, the candle sampler's cached decoding against a full forward pass, and
//! decode and training throughput with utilisation (MFU) on Qwen3-0.6B's shape. Every
//! check lands in one JSON report, failed or not, so one run on a lent GPU says
//! everything it can.

pub mod memory;
pub mod ranks;

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Instant;

use candle_core::{DType, Device, Tensor, D};
use rand::{Rng, SeedableRng};
use serde::Serialize;

use super::backward::backward;
use super::dist::SingleRank;
use super::error::{TensorContext, TrainError};
use super::grpo::PpoSettings;
use super::model::{ForwardMode, KvCache, Qwen3, Qwen3Config, TokenBatch, TrainMode};
use super::optim::{AdamW, AdamWSettings};
use super::throughput::{self, PerfMode, PerfShape, PerfTarget};
use super::update::{grpo_update, Reference, Sample, UpdateSettings};

/// The tolerance of every parity check (relative for losses, gradients and weights,
/// absolute for log-probabilities).
pub const TOLERANCE: f64 = 1e-3;

/// What to run.
#[derive(Debug, Clone)]
pub struct CheckOptions {
    /// The device under test.
    pub device: Device,
    /// Small shapes and few steps (for `--cpu` and smoke runs).
    pub quick: bool,
    /// Peak dense TFLOP/s of the device in f32 and in bf16, for MFU.
    pub peak_tflops_f32: f64,
    pub peak_tflops_bf16: f64,
    /// The program to start as the ranks of the two-process check (the check's own
    /// binary, which answers [`ranks::WORKER_FLAG`]); `None` skips that check.
    pub rank_program: Option<PathBuf>,
}

/// The outcome of one check.
#[derive(Debug, Clone, Serialize)]
pub struct CheckResult {
    pub name: String,
    /// `pass`, `fail`, `error`, `measured` (a throughput figure, nothing to pass) or
    /// `skipped` (not possible on this device; `detail` says why).
    pub status: String,
    pub detail: serde_json::Value,
}

/// Everything one run measured.
#[derive(Debug, Clone, Serialize)]
pub struct CheckReport {
    pub device: String,
    pub tolerance: f64,
    pub checks: Vec<CheckResult>,
    /// What the script did not check, and why.
    pub not_run: Vec<String>,
}

impl CheckReport {
    /// Whether no check failed or errored.
    pub fn passed(&self) -> bool {
        self.checks.iter().all(|c| matches!(c.status.as_str(), "pass" | "measured" | "skipped"))
    }
}

/// Runs every check on `options.device` and returns the report.
pub fn run(options: &CheckOptions) -> CheckReport {
    let mut checks = Vec::new();
    let mut record = |name: &str, outcome: Result<(bool, serde_json::Value), TrainError>| {
        let (status, detail) = match outcome {
            Ok((true, d)) => ("pass", d),
            Ok((false, d)) => ("fail", d),
            Err(e) => ("error", serde_json::json!({ "error": e.to_string() })),
        };
        eprintln!("{status:>8}  {name}");
        checks.push(CheckResult { name: name.into(), status: status.into(), detail });
    };
    let mut skipped = Vec::new();
    let parity = step_parity(&options.device).map(|p| {
        let ok = p.passed();
        (ok, serde_json::to_value(&p).unwrap_or_default())
    });
    record("training step on the device = f64 step on the CPU", parity);
    // The plan against a real step: Qwen3-8B's shape on a GPU, the 100M shape otherwise.
    let (shape, tokens) =
        if options.quick || options.device.is_cpu() { (PerfShape::M100, 256) } else { (PerfShape::Qwen3_8b, 2048) };
    let plan = memory::plan_vs_measured(&options.device, shape, tokens).map(|c| {
        let ok = c.passed();
        (ok, serde_json::to_value(&c).unwrap_or_default())
    });
    record(&format!("memory plan ≥ a measured LoRA step ({shape:?}, {tokens} tokens)"), plan);
    for backend in ranks::Backend::for_device(&options.device) {
        let name = format!("2 ranks as 2 processes ({backend:?}) = 1 rank, one GRPO step");
        match &options.rank_program {
            Some(program) => {
                let outcome = ranks::rank_parity(&options.device, backend, program).map(|p| {
                    let ok = p.passed();
                    (ok, serde_json::to_value(&p).unwrap_or_default())
                });
                record(&name, outcome);
            }
            None => skipped.push(CheckResult {
                name,
                status: "skipped".into(),
                detail: serde_json::json!({ "reason": "no program to start as the ranks was given" }),
            }),
        }
    }
    for batch in [1, 8] {
        let d = decode_parity(&options.device, batch).map(|p| {
            let ok = p.max_abs_diff <= TOLERANCE;
            (ok, serde_json::to_value(&p).unwrap_or_default())
        });
        record(&format!("cached decoding = full forward ({batch} sequences)"), d);
    }
    let mut measured = Vec::new();
    for dtype in [DType::F32, DType::BF16] {
        if dtype == DType::BF16 && options.device.is_cpu() {
            measured.push(CheckResult {
                name: "throughput in BF16".into(),
                status: "skipped".into(),
                detail: serde_json::json!({ "reason": "candle has no bf16 matrix product on the CPU" }),
            });
            continue;
        }
        let target = PerfTarget { device: options.device.clone(), dtype };
        let peak = if dtype == DType::BF16 { options.peak_tflops_bf16 } else { options.peak_tflops_f32 };
        let (shape, batch, seq, steps) =
            if options.quick { (PerfShape::Tiny, 4, 64, 2) } else { (PerfShape::Qwen3_0_6b, 8, 512, 5) };
        let name = format!("training throughput, {shape:?} LoRA, {dtype:?}");
        match throughput::measure(shape, PerfMode::Step, batch, seq, steps, 1, &target) {
            Ok(r) => {
                let mut detail = serde_json::to_value(&r).unwrap_or_default();
                detail["peak_tflops"] = serde_json::json!(peak);
                detail["mfu"] = serde_json::json!(r.achieved_tflops / peak);
                measured.push(CheckResult { name, status: "measured".into(), detail });
            }
            Err(e) => measured.push(CheckResult {
                name,
                status: "error".into(),
                detail: serde_json::json!({ "error": e.to_string() }),
            }),
        }
        let shape = if options.quick { PerfShape::Tiny } else { PerfShape::Qwen3_0_6b };
        for batch in [1, 8] {
            let name = format!("decode throughput, {shape:?}, {dtype:?}, {batch} sequences");
            let tokens = if options.quick { 8 } else { 64 };
            match decode_speed(shape, &target, batch, tokens) {
                Ok(d) => measured.push(CheckResult {
                    name,
                    status: "measured".into(),
                    detail: serde_json::to_value(&d).unwrap_or_default(),
                }),
                Err(e) => measured.push(CheckResult {
                    name,
                    status: "error".into(),
                    detail: serde_json::json!({ "error": e.to_string() }),
                }),
            }
        }
    }
    for m in skipped.into_iter().chain(measured) {
        eprintln!("{:>8}  {}", m.status, m.name);
        checks.push(m);
    }
    CheckReport {
        device: throughput::device_name(&options.device),
        tolerance: TOLERANCE,
        checks,
        not_run: not_checked(&options.device),
    }
}

/// What the report does not cover on `device`, and why.
fn not_checked(device: &Device) -> Vec<String> {
    let mut out =
        vec!["mistral.rs on CUDA against the candle sampler (needs a CUDA build of mistral.rs: see the README)".into()];
    match (device.is_cuda(), cfg!(feature = "nccl-collective")) {
        (false, _) => out.push("NCCL (on the CPU the two ranks exchange gradients over TCP)".into()),
        (true, false) => {
            out.push("NCCL (this program was built without the nccl-collective feature: the ranks used TCP)".into())
        }
        (true, true) => out.push(
            "NCCL between GPUs: both ranks share one GPU, each with its own NCCL_HOSTID, so NCCL moves the data over \
             its socket transport on loopback, not over NVLink or PCIe peer-to-peer as between the GPUs of one host"
                .into(),
        ),
    }
    out.push("more than 2 ranks, more than one host, and a rank that dies during an NCCL collective".into());
    out
}

/// A training step on the device under test against the same step in f64 on the CPU.
#[derive(Debug, Clone, Serialize)]
pub struct StepParity {
    pub reference: String,
    pub candidate: String,
    /// Cross-entropy on the model tokens before the step.
    pub loss_reference: f64,
    pub loss_candidate: f64,
    pub loss_rel_err: f64,
    /// The largest relative error (‖a−b‖/‖b‖) of one adapter's gradient.
    pub grad_rel_err: f64,
    /// The GRPO loss of the step (near zero at the first step: compared absolutely).
    pub grpo_loss_reference: f64,
    pub grpo_loss_candidate: f64,
    /// The adapters after one GRPO step with AdamW, relative to their norm.
    pub adapter_rel_err: f64,
    /// The step's change of the adapters, relative to its norm (AdamW's first step is
    /// close to a sign, so gradients near zero flip it: reported, not checked).
    pub update_rel_err: f64,
}

impl StepParity {
    /// Whether every compared quantity is within [`TOLERANCE`].
    pub fn passed(&self) -> bool {
        self.loss_rel_err <= TOLERANCE
            && self.grad_rel_err <= TOLERANCE
            && self.adapter_rel_err <= TOLERANCE
            && (self.grpo_loss_candidate - self.grpo_loss_reference).abs() <= TOLERANCE
    }
}

/// The parity model: small enough for f64 on the CPU, large enough to use every code path
/// (grouped-query attention, an MLP wider than the hidden size, several layers).
fn parity_config() -> Qwen3Config {
    Qwen3Config {
        vocab_size: 2048,
        hidden_size: 128,
        intermediate_size: 352,
        num_hidden_layers: 3,
        num_attention_heads: 4,
        num_key_value_heads: 2,
        head_dim: Some(32),
        rms_norm_eps: 1e-6,
        rope_theta: 1_000_000.0,
        tie_word_embeddings: true,
        max_position_embeddings: 4096,
        eos_token_id: None,
        model_type: None,
        attention_bias: None,
    }
}

/// A LoRA model of `cfg` with `weights`, on `device` in `dtype`, whose adapters all hold
/// seeded random values (both A and B, so every gradient is non-zero).
fn lora_model(
    cfg: &Qwen3Config,
    weights: &HashMap<String, Tensor>,
    device: &Device,
    dtype: DType,
) -> Result<Qwen3, TrainError> {
    let target = PerfTarget { device: device.clone(), dtype };
    let model = throughput::model_on(cfg, weights, &TrainMode::Lora(throughput::lora_settings(4)), &target)?;
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    for (_, var) in model.trainable() {
        let shape = var.as_tensor().dims().to_vec();
        let n: usize = shape.iter().product();
        let v: Vec<f32> = (0..n).map(|_| rng.gen_range(-0.05f32..0.05)).collect();
        let t = Tensor::from_vec(v, shape, &Device::Cpu)
            .and_then(|t| t.to_dtype(dtype))
            .and_then(|t| t.to_device(device))
            .ctx("setting an adapter")?;
        var.set(&t).ctx("setting an adapter")?;
    }
    Ok(model)
}

fn parity_samples(vocab: usize) -> Vec<Sample> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(5);
    [(40, 1.0f32), (33, -1.0), (48, 0.5), (25, -0.5)]
        .iter()
        .map(|&(len, advantage)| Sample {
            tokens: (0..len).map(|_| rng.gen_range(0..vocab as u32)).collect(),
            mask: (0..len).map(|t| u8::from(t >= 12)).collect(),
            advantage,
            sampler_logp: None,
        })
        .collect()
}

fn to_f64(t: &Tensor) -> Result<Vec<f64>, TrainError> {
    t.to_device(&Device::Cpu)
        .and_then(|t| t.to_dtype(DType::F64))
        .and_then(|t| t.flatten_all())
        .and_then(|t| t.to_vec1::<f64>())
        .ctx("reading a tensor back")
}

/// ‖a−b‖ / ‖b‖ (‖a−b‖ when b is zero).
fn rel_err(a: &[f64], b: &[f64]) -> f64 {
    let diff: f64 = a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum::<f64>().sqrt();
    let norm: f64 = b.iter().map(|y| y * y).sum::<f64>().sqrt();
    if norm > 0.0 {
        diff / norm
    } else {
        diff
    }
}

struct StepOutcome {
    loss: f64,
    grads: Vec<Vec<f64>>,
    grpo_loss: f64,
    before: Vec<f64>,
    after: Vec<f64>,
}

fn one_step(
    cfg: &Qwen3Config,
    weights: &HashMap<String, Tensor>,
    device: &Device,
    dtype: DType,
) -> Result<StepOutcome, TrainError> {
    let model = lora_model(cfg, weights, device, dtype)?;
    let samples = parity_samples(cfg.vocab_size);
    let seqs: Vec<(&[u32], &[u8])> = samples.iter().map(|s| (s.tokens.as_slice(), s.mask.as_slice())).collect();
    let batch = TokenBatch::new(&seqs, 0, device).ctx("building a batch")?;
    let n = batch.len() as f64;
    let head = |model: &Qwen3, hidden: &Tensor| -> candle_core::Result<Tensor> {
        let (logp, _) = super::model::token_logprobs(model, hidden, &batch, super::model::DEFAULT_CHUNK)?;
        logp.to_dtype(DType::F64)?.sum_all()?.neg()? / n
    };
    let (loss, grads) = backward(&model, &batch.ids, ForwardMode { train: true, ..Default::default() }, false, &head)?;
    let grads = grads
        .iter()
        .map(|g| g.as_ref().map(to_f64).unwrap_or_else(|| Ok(Vec::new())))
        .collect::<Result<Vec<_>, _>>()?;
    let before = flat_adapters(&model)?;
    let mut opt = AdamW::new(model.trainable(), parity_adam())?;
    let stats =
        grpo_update(&model, Reference::AdaptersOff, &mut opt, &samples, &SingleRank, &parity_settings(), PARITY_SEED)?;
    let after = flat_adapters(&model)?;
    Ok(StepOutcome { loss, grads, grpo_loss: stats.loss, before, after })
}

/// The seed of the parity step's shuffle.
const PARITY_SEED: u64 = 3;

fn parity_adam() -> AdamWSettings {
    AdamWSettings { lr: 1e-3, beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.01 }
}

/// One mini-batch of two micro-batches, clipping, recomputation and the KL term: every
/// part of the update that could differ between devices or between rank counts.
fn parity_settings() -> UpdateSettings {
    UpdateSettings {
        ppo: PpoSettings { clip_low: 0.2, clip_high: 0.28, clip_dual: 3.0, kl_coef: 0.05 },
        epochs: 1,
        minibatches: 1,
        micro_batch: 2,
        grad_clip: 1.0,
        recompute: true,
        chunk: 64,
        importance_cap: 2.0,
        pad: 0,
    }
}

/// Every adapter of `model`, flattened in order, in f64 on the host.
fn flat_adapters(model: &Qwen3) -> Result<Vec<f64>, TrainError> {
    let mut out = Vec::new();
    for (_, v) in model.trainable() {
        out.extend(to_f64(v.as_tensor())?);
    }
    Ok(out)
}

/// One GRPO step (gradient clipping, recomputation, the KL term against the adapters
/// switched off, two micro-batches) on `device` in f32 against the same step in f64 on
/// the CPU, from the same weights and adapters.
pub fn step_parity(device: &Device) -> Result<StepParity, TrainError> {
    let cfg = parity_config();
    let weights = throughput::random_weights(&cfg, 7)?;
    let reference = one_step(&cfg, &weights, &Device::Cpu, DType::F64)?;
    let candidate = one_step(&cfg, &weights, device, DType::F32)?;
    let grad_rel_err = reference
        .grads
        .iter()
        .zip(&candidate.grads)
        .map(|(r, c)| if r.len() == c.len() { rel_err(c, r) } else { f64::INFINITY })
        .fold(0.0, f64::max);
    let delta = |o: &StepOutcome| -> Vec<f64> { o.after.iter().zip(&o.before).map(|(a, b)| a - b).collect() };
    Ok(StepParity {
        reference: "cpu f64".into(),
        candidate: format!("{} f32", throughput::device_name(device)),
        loss_reference: reference.loss,
        loss_candidate: candidate.loss,
        loss_rel_err: (candidate.loss - reference.loss).abs() / reference.loss.abs().max(1e-12),
        grad_rel_err,
        grpo_loss_reference: reference.grpo_loss,
        grpo_loss_candidate: candidate.grpo_loss,
        adapter_rel_err: rel_err(&candidate.after, &reference.after),
        update_rel_err: rel_err(&delta(&candidate), &delta(&reference)),
    })
}

/// The candle sampler's cached, batched decoding against a full forward pass.
#[derive(Debug, Clone, Serialize)]
pub struct DecodeParity {
    pub device: String,
    pub sequences: usize,
    pub tokens_compared: usize,
    /// The largest |log p(cached decoding) − log p(full forward)| of a sampled token.
    pub max_abs_diff: f64,
}

fn log_softmax_at(logits: &Tensor, token: u32) -> Result<f64, TrainError> {
    let v = logits.to_dtype(DType::F64).and_then(|t| t.to_vec1::<f64>()).ctx("reading logits")?;
    let m = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let lse = v.iter().map(|x| (x - m).exp()).sum::<f64>().ln() + m;
    Ok(v[token as usize] - lse)
}

fn argmax(logits: &Tensor) -> Result<u32, TrainError> {
    logits.argmax(D::Minus1).and_then(|t| t.to_scalar::<u32>()).ctx("picking a token")
}

/// Decodes 16 greedy tokens after prompts of different lengths, `batch` sequences at a
/// time through [`Qwen3::decode_batch`] (8 rows, as the sampler pads them), and scores
/// the same tokens with one forward pass over each whole sequence.
pub fn decode_parity(device: &Device, batch: usize) -> Result<DecodeParity, TrainError> {
    let cfg = parity_config();
    let weights = throughput::random_weights(&cfg, 9)?;
    let model = lora_model(&cfg, &weights, device, DType::F32)?.merged().ctx("merging adapters")?;
    let mut rng = rand::rngs::StdRng::seed_from_u64(13);
    let steps = 16;
    let prompts: Vec<Vec<u32>> =
        (0..batch).map(|i| (0..5 + 3 * i).map(|_| rng.gen_range(0..cfg.vocab_size as u32)).collect()).collect();
    let mut caches: Vec<KvCache> = vec![KvCache::default(); batch];
    let mut seqs = prompts.clone();
    let mut decoded: Vec<Vec<f64>> = vec![Vec::new(); batch];
    let mut next = Vec::with_capacity(batch);
    for (i, cache) in caches.iter_mut().enumerate() {
        let logits = model.forward_cached(&prompts[i], cache).ctx("prefill")?;
        let t = argmax(&logits)?;
        decoded[i].push(log_softmax_at(&logits, t)?);
        next.push(t);
    }
    for _ in 1..steps {
        let mut refs: Vec<&mut KvCache> = caches.iter_mut().collect();
        let logits = model.decode_batch(&next, &mut refs, 8.max(batch)).ctx("decoding")?;
        for (i, l) in logits.iter().enumerate() {
            seqs[i].push(next[i]);
            let t = argmax(l)?;
            decoded[i].push(log_softmax_at(l, t)?);
            next[i] = t;
        }
    }
    for (i, s) in seqs.iter_mut().enumerate() {
        s.push(next[i]);
    }
    let mut max_abs_diff = 0.0f64;
    let mut compared = 0;
    for (i, seq) in seqs.iter().enumerate() {
        let mask: Vec<u8> = (0..seq.len()).map(|t| u8::from(t >= prompts[i].len())).collect();
        let b = TokenBatch::new(&[(seq.as_slice(), mask.as_slice())], 0, device).ctx("building a batch")?;
        let hidden = model.hidden(&b.ids, ForwardMode::default()).ctx("the forward pass")?;
        let (logp, _) = super::model::token_logprobs(&model, &hidden, &b, 64).ctx("log-probabilities")?;
        let full = to_f64(&logp)?;
        for (a, f) in decoded[i].iter().zip(&full) {
            max_abs_diff = max_abs_diff.max((a - f).abs());
            compared += 1;
        }
    }
    Ok(DecodeParity {
        device: throughput::device_name(device),
        sequences: batch,
        tokens_compared: compared,
        max_abs_diff,
    })
}

/// Decoding throughput of the candle sampler's model code.
#[derive(Debug, Clone, Serialize)]
pub struct DecodeSpeed {
    pub device: String,
    pub dtype: String,
    pub shape: PerfShape,
    pub sequences: usize,
    pub prompt_tokens: usize,
    pub decoded_tokens: usize,
    pub seconds: f64,
    pub tokens_per_sec: f64,
}

/// Prefills `batch` prompts of 128 tokens, then times `tokens` batched decoding steps.
pub fn decode_speed(
    shape: PerfShape,
    target: &PerfTarget,
    batch: usize,
    tokens: usize,
) -> Result<DecodeSpeed, TrainError> {
    let (cfg, _) = shape.config();
    let weights = throughput::random_weights(&cfg, 3)?;
    let model = throughput::model_on(&cfg, &weights, &TrainMode::Full, target)?;
    // The host copy is not needed once the model holds its own (GBs for the large shapes).
    drop(weights);
    let mut rng = rand::rngs::StdRng::seed_from_u64(17);
    let prompt_len = 128;
    let mut caches: Vec<KvCache> = vec![KvCache::default(); batch];
    let mut next = Vec::with_capacity(batch);
    for cache in caches.iter_mut() {
        let prompt: Vec<u32> = (0..prompt_len).map(|_| rng.gen_range(0..cfg.vocab_size as u32)).collect();
        next.push(argmax(&model.forward_cached(&prompt, cache).ctx("prefill")?)?);
    }
    target.device.synchronize().ctx("waiting for the device")?;
    let start = Instant::now();
    for _ in 0..tokens {
        let mut refs: Vec<&mut KvCache> = caches.iter_mut().collect();
        let logits = model.decode_batch(&next, &mut refs, batch).ctx("decoding")?;
        for (i, l) in logits.iter().enumerate() {
            next[i] = argmax(l)?;
        }
    }
    target.device.synchronize().ctx("waiting for the device")?;
    let seconds = start.elapsed().as_secs_f64();
    Ok(DecodeSpeed {
        device: throughput::device_name(&target.device),
        dtype: format!("{:?}", target.dtype).to_lowercase(),
        shape,
        sequences: batch,
        prompt_tokens: prompt_len,
        decoded_tokens: tokens * batch,
        seconds,
        tokens_per_sec: (tokens * batch) as f64 / seconds,
    })
}
