//! The memory plan against what a training step allocates: a LoRA step of a shape
//! (Qwen3-8B's on a GPU), planned by [`MemoryPlan`] for the same preset, measured as the
//! device's peak use (CUDA: the free memory the driver reports, sampled every millisecond
//! while the step runs; CPU: the process's peak resident set, reset before the model is
//! built). The plan must not under-count: the check passes when the measured peak is at
//! most the planned trainer memory.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use candle_core::{DType, Device};
use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::dist::SingleRank;
use crate::error::TrainError;
use crate::memory_plan::MemoryPlan;
use crate::model::TrainMode;
use crate::optim::{AdamW, AdamWSettings};
use crate::preset::{Device as PresetDevice, Dtype, ModelShape, Preset};
use crate::throughput::{self, PerfShape, PerfTarget};
use crate::update::{sft_step, Sample, UpdateSettings};

const GIB: f64 = (1u64 << 30) as f64;

/// Planned and measured memory of one step.
#[derive(Debug, Clone, Serialize)]
pub struct PlanCheck {
    pub shape: PerfShape,
    pub dtype: String,
    /// Tokens of the one sequence the step trains on.
    pub tokens: usize,
    /// The plan's trainer total, without the CUDA reserve (the context exists before the
    /// first measurement).
    pub planned_gib: f64,
    /// The plan's parts: weights, adapter gradients and AdamW, activations.
    pub planned_weights_gib: f64,
    pub planned_activations_gib: f64,
    /// The peak over the step, from before the model was built.
    pub measured_gib: f64,
    /// measured / planned.
    pub ratio: f64,
    pub how: String,
}

impl PlanCheck {
    /// Whether the plan covers what was measured.
    pub fn passed(&self) -> bool {
        self.measured_gib <= self.planned_gib
    }
}

/// The preset whose plan is checked: Qwen3-8B LoRA on one GPU, one sequence of `tokens` per
/// micro-batch, with `shape`'s dimensions and the device's dtype.
fn preset_for(shape: PerfShape, tokens: usize, device: &Device) -> Result<Preset, TrainError> {
    let mut p = Preset::builtin("qwen3-8b-lora-1xh200")?;
    let (cfg, rank) = shape.config();
    p.model.shape = Some(ModelShape {
        hidden_size: cfg.hidden_size,
        num_hidden_layers: cfg.num_hidden_layers,
        num_attention_heads: cfg.num_attention_heads,
        num_key_value_heads: cfg.num_key_value_heads,
        head_dim: cfg.head_dim(),
        intermediate_size: cfg.intermediate_size,
        vocab_size: cfg.vocab_size,
        tie_word_embeddings: cfg.tie_word_embeddings,
    });
    if let Some(l) = p.mode.lora.as_mut() {
        l.rank = rank;
        l.alpha = 2.0 * rank as f64;
    }
    p.grpo.max_seq_len = tokens;
    p.grpo.max_new_tokens = tokens / 2;
    p.optim.micro_batch = 1;
    p.recompute = true;
    if device.is_cpu() {
        p.hardware.device = PresetDevice::Cpu;
        p.dtype = Dtype::F32;
    }
    Ok(p)
}

/// One LoRA step of `shape` on one `tokens`-long sequence, planned and measured.
pub fn plan_vs_measured(device: &Device, shape: PerfShape, tokens: usize) -> Result<PlanCheck, TrainError> {
    let dtype = if device.is_cpu() { DType::F32 } else { DType::BF16 };
    let plan = plan_for(shape, tokens, device)?;
    let meter = Meter::start(device)?;
    one_step(device, shape, tokens, false, &|| meter.restart())?;
    let (measured, how) = meter.stop()?;
    Ok(PlanCheck::new(shape, dtype, tokens, &plan, measured, how))
}

/// What measures a step's memory: a counter of this process's allocations, say.
pub trait PeakProbe {
    /// Bytes in use now.
    fn live(&self) -> u64;
    /// Starts a new peak at the bytes in use now.
    fn reset_peak(&self);
    /// The highest use since the last reset.
    fn peak(&self) -> u64;
}

/// [`plan_vs_measured`] on the CPU with every token after the first scored, measured by
/// `probe` (the peak above what was in use before the model was built).
pub fn plan_vs_probe(shape: PerfShape, tokens: usize, probe: &dyn PeakProbe) -> Result<PlanCheck, TrainError> {
    let device = Device::Cpu;
    let plan = plan_for(shape, tokens, &device)?;
    let base = probe.live();
    one_step(&device, shape, tokens, true, &|| {
        probe.reset_peak();
        Ok(())
    })?;
    let measured = probe.peak().saturating_sub(base);
    Ok(PlanCheck::new(shape, DType::F32, tokens, &plan, measured, "allocator peak above the start".into()))
}

fn plan_for(shape: PerfShape, tokens: usize, device: &Device) -> Result<MemoryPlan, TrainError> {
    let preset = preset_for(shape, tokens, device)?;
    Ok(MemoryPlan::for_preset(&preset, preset.model.shape.as_ref().ok_or_else(no_shape)?))
}

impl PlanCheck {
    fn new(shape: PerfShape, dtype: DType, tokens: usize, plan: &MemoryPlan, measured: u64, how: String) -> PlanCheck {
        let planned = plan.trainer_bytes - plan.reserve_bytes;
        PlanCheck {
            shape,
            dtype: format!("{dtype:?}"),
            tokens,
            planned_gib: planned as f64 / GIB,
            planned_weights_gib: (plan.weight_bytes + plan.grad_bytes + plan.optimizer_bytes) as f64 / GIB,
            planned_activations_gib: plan.activation_bytes as f64 / GIB,
            measured_gib: measured as f64 / GIB,
            ratio: measured as f64 / planned.max(1) as f64,
            how,
        }
    }
}

/// Builds the model of `shape`, calls `loaded` (the host copy of the random weights is
/// gone by then: it is not the trainer's), and runs one LoRA step on one sequence of
/// `tokens`, the second half scored or (`all_scored`) every token after the first.
fn one_step(
    device: &Device,
    shape: PerfShape,
    tokens: usize,
    all_scored: bool,
    loaded: &dyn Fn() -> Result<(), TrainError>,
) -> Result<(), TrainError> {
    let dtype = if device.is_cpu() { DType::F32 } else { DType::BF16 };
    let (mut cfg, rank) = shape.config();
    cfg.max_position_embeddings = cfg.max_position_embeddings.max(tokens);
    let weights = throughput::random_weights(&cfg, 7)?;
    let target = PerfTarget { device: device.clone(), dtype };
    let model = throughput::model_on(&cfg, &weights, &TrainMode::Lora(throughput::lora_settings(rank)), &target)?;
    drop(weights);
    loaded()?;
    let adam = AdamWSettings { lr: 1e-4, beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.0 };
    let mut opt = AdamW::new(model.trainable(), adam)?;
    let mut rng = rand::rngs::StdRng::seed_from_u64(3);
    let first_scored = if all_scored { 1 } else { tokens / 2 };
    let sample = Sample {
        tokens: (0..tokens).map(|_| rng.gen_range(0..cfg.vocab_size as u32)).collect(),
        mask: (0..tokens).map(|i| u8::from(i >= first_scored)).collect(),
        advantage: 1.0,
        sampler_logp: None,
    };
    let settings = UpdateSettings {
        ppo: crate::grpo::PpoSettings { clip_low: 0.2, clip_high: 0.28, clip_dual: 3.0, kl_coef: 0.0 },
        epochs: 1,
        minibatches: 1,
        micro_batch: 1,
        grad_clip: 1.0,
        recompute: true,
        chunk: crate::model::DEFAULT_CHUNK,
        importance_cap: 2.0,
        pad: 0,
    };
    sft_step(&model, &mut opt, &[&sample], &settings, &SingleRank, 0)?;
    device.synchronize().map_err(|e| TrainError::Other(format!("synchronising the device: {e}")))
}

fn no_shape() -> TrainError {
    TrainError::Other("the checked preset has no model shape".into())
}

/// Peak memory from a starting point: a sampling thread on CUDA, the kernel's peak
/// resident set on the CPU.
struct Meter {
    device: Device,
    base: u64,
    stop: Arc<AtomicBool>,
    /// The GPU's highest use since the last (re)start.
    peak: Arc<AtomicU64>,
    sampler: Option<std::thread::JoinHandle<()>>,
}

impl Meter {
    fn start(device: &Device) -> Result<Meter, TrainError> {
        let mut m = Meter {
            device: device.clone(),
            base: 0,
            stop: Arc::new(AtomicBool::new(false)),
            peak: Arc::new(AtomicU64::new(0)),
            sampler: None,
        };
        match device {
            Device::Cpu => {
                reset_peak_rss();
                m.base = throughput::status_bytes("VmRSS:").unwrap_or(0);
            }
            _ => {
                m.base = gpu_used(device)?;
                m.sampler = Some(gpu_sampler(device, m.stop.clone(), m.peak.clone())?);
            }
        }
        Ok(m)
    }

    /// From here on the peak is measured anew (what loading the model took transiently,
    /// such as an f32 copy on its way to bf16, is not the trainer's).
    fn restart(&self) -> Result<(), TrainError> {
        if self.device.is_cpu() {
            reset_peak_rss();
        } else {
            self.device.synchronize().map_err(|e| TrainError::Other(format!("synchronising the device: {e}")))?;
            self.peak.store(gpu_used(&self.device)?, Ordering::Relaxed);
        }
        Ok(())
    }

    /// The peak above the starting point, and how it was measured.
    fn stop(mut self) -> Result<(u64, String), TrainError> {
        if self.device.is_cpu() {
            let peak = throughput::status_bytes("VmHWM:").unwrap_or(0);
            return Ok((peak.saturating_sub(self.base), "peak resident set (VmHWM) above the start".into()));
        }
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.sampler.take() {
            h.join().map_err(|_| TrainError::Other("the memory sampler panicked".into()))?;
        }
        let peak = self.peak.load(Ordering::Relaxed);
        Ok((peak.saturating_sub(self.base), "device memory in use (total − free), sampled every ms".into()))
    }
}

/// Resets the kernel's peak resident set of this process (Linux ≥ 4.0); without it the
/// peak is the whole process's.
fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

#[cfg(feature = "candle-cuda")]
fn gpu_used(device: &Device) -> Result<u64, TrainError> {
    let Device::Cuda(d) = device else { return Ok(0) };
    let ctx = d.cuda_stream().context().clone();
    ctx.bind_to_thread().map_err(|e| TrainError::Other(format!("binding the CUDA context: {e:?}")))?;
    let (free, total) = candle_core::cuda_backend::cudarc::driver::result::mem_get_info()
        .map_err(|e| TrainError::Other(format!("reading the device's free memory: {e:?}")))?;
    Ok((total - free) as u64)
}

#[cfg(feature = "candle-cuda")]
fn gpu_sampler(
    device: &Device,
    stop: Arc<AtomicBool>,
    peak: Arc<AtomicU64>,
) -> Result<std::thread::JoinHandle<()>, TrainError> {
    let Device::Cuda(d) = device else { return Err(TrainError::Other("not a CUDA device".into())) };
    let ctx = d.cuda_stream().context().clone();
    Ok(std::thread::spawn(move || {
        if ctx.bind_to_thread().is_err() {
            return;
        }
        while !stop.load(Ordering::Relaxed) {
            if let Ok((free, total)) = candle_core::cuda_backend::cudarc::driver::result::mem_get_info() {
                peak.fetch_max((total - free) as u64, Ordering::Relaxed);
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }))
}

#[cfg(not(feature = "candle-cuda"))]
fn gpu_used(_device: &Device) -> Result<u64, TrainError> {
    Err(TrainError::Other("this build has no CUDA".into()))
}

#[cfg(not(feature = "candle-cuda"))]
fn gpu_sampler(
    _device: &Device,
    _stop: Arc<AtomicBool>,
    _peak: Arc<AtomicU64>,
) -> Result<std::thread::JoinHandle<()>, TrainError> {
    Err(TrainError::Other("this build has no CUDA".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On the CPU, a step of the 100M shape stays within its plan, and the plan is not
    /// wildly above it (the check would then say little).
    #[test]
    fn the_plan_covers_a_measured_cpu_step() {
        let check = plan_vs_measured(&Device::Cpu, PerfShape::M100, 256).unwrap();
        println!("{check:?}");
        assert!(check.passed(), "{check:?}");
        assert!(check.ratio > 0.3, "the plan is far above what was used: {check:?}");
        assert!(check.planned_weights_gib > 0.3, "{check:?}");
    }
}
