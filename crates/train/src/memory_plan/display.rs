//! The dry-run table of a [`MemoryPlan`].

use std::fmt;

use super::{MemoryPlan, GIB, LOGPROB_CHUNK_TOKENS};
use crate::preset::{Device, Dtype, RolloutEngine};

/// Bytes in GiB.
pub(super) fn gib(bytes: u64) -> f64 {
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

fn row(f: &mut fmt::Formatter<'_>, label: &str, bytes: u64) -> fmt::Result {
    writeln!(f, "  {label:<52}{:>10.2}", gib(bytes))
}

fn signed_row(f: &mut fmt::Formatter<'_>, label: &str, need: u64, have: u64) -> fmt::Result {
    writeln!(f, "  {label:<52}{:>10.2}", (have as f64 - need as f64) / GIB as f64)
}

impl MemoryPlan {
    fn world_line(&self) -> String {
        if self.device != Device::Cuda {
            return "1 (one CPU process)".to_string();
        }
        let plural = |n: usize| if n == 1 { "" } else { "s" };
        let how = match self.zero {
            0 => "data parallel, replicated: each GPU holds everything below".to_string(),
            1 => format!("data parallel, ZeRO-1: AdamW state sharded 1/{}, weights replicated", self.world_size),
            3 => format!(
                "data parallel, ZeRO-3: weights, summed gradients and AdamW state sharded 1/{}, a unit gathered \
                 while used",
                self.world_size
            ),
            _ => format!(
                "data parallel, ZeRO-2: AdamW state and summed gradients sharded 1/{}, weights replicated",
                self.world_size
            ),
        };
        format!(
            "{} ({} node{} × {} GPU{}); {how}",
            self.world_size,
            self.nodes,
            plural(self.nodes),
            self.gpus_per_node,
            plural(self.gpus_per_node)
        )
    }

    fn trainer_rows(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let dt = self.dtype;
        let shard = if self.zero > 0 { format!("; 1/{}", self.world_size) } else { String::new() };
        if self.phase_exclusive {
            row(f, &format!("  weights ({dt}{shard})"), self.weight_bytes)?;
            row(f, "  largest unit gathered (+ its trainable copy)", self.gathered_bytes)?;
        } else {
            row(f, &format!("  weights ({dt}, whole on every GPU)"), self.weight_bytes)?;
            row(f, &format!("  gradient sums ({dt}, every trainable parameter)"), self.grad_bytes)?;
        }
        if self.grad_transient_bytes > 0 {
            let what = if self.recompute { "one layer's, recompute" } else { "a micro-batch's, no recompute" };
            row(f, &format!("  backward's own gradients ({what})"), self.grad_transient_bytes)?;
        }
        if self.grad_shard_bytes > 0 {
            row(f, &format!("  summed gradient shard ({dt}{shard})"), self.grad_shard_bytes)?;
        }
        let master = if dt == Dtype::Bf16 { " + f32 master" } else { "" };
        if self.host_optimizer_bytes > 0 {
            row(
                f,
                &format!("  optimiser (a unit's share; {:.1} GiB in host memory)", gib(self.host_optimizer_bytes)),
                self.optimizer_bytes,
            )?;
        } else {
            row(f, &format!("  optimiser (AdamW m, v in f32{master}{shard})"), self.optimizer_bytes)?;
        }
        if self.reference_bytes > 0 {
            row(f, "  reference model (KL)", self.reference_bytes)?;
        }
        let how = if self.recompute { "recompute" } else { "no recompute" };
        row(
            f,
            &format!("  activations ({} tokens, {how})", thousands(self.micro_batch_tokens)),
            self.activation_bytes,
        )?;
        row(f, "    of which attention scores", self.attention_bytes)?;
        row(f, &format!("  log-prob pass ({LOGPROB_CHUNK_TOKENS}-token chunks, rows kept)"), self.logprob_bytes)?;
        if !self.phase_exclusive {
            row(f, "  shared prompt's keys and values (+ gradients)", self.prefix_bytes)?;
        }
        row(f, "  reduction and update buffers", self.comm_bytes)?;
        if self.reserve_bytes > 0 {
            row(f, "  CUDA context and slack", self.reserve_bytes)?;
        }
        row(f, "  total", self.trainer_bytes)?;
        if let (Some(budget), true) = (self.trainer_budget_bytes, self.phase_exclusive) {
            row(f, "  share (the whole GPU: rollouts run apart)", budget)?;
            signed_row(f, "  headroom", self.trainer_bytes, budget)?;
        } else if let Some(budget) = self.trainer_budget_bytes {
            row(f, &format!("  share (1 − rollout.gpu_memory_fraction {:.2})", self.rollout_fraction), budget)?;
            signed_row(f, "  headroom", self.trainer_bytes, budget)?;
        }
        Ok(())
    }

    fn engine_rows(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let copy = match (self.engine, self.lora) {
            (RolloutEngine::Candle, Some(_)) => "  weights (the trainer's, adapters unmerged)".to_string(),
            (RolloutEngine::Candle, None) if self.phase_exclusive => {
                "  the whole policy, gathered between updates".to_string()
            }
            (RolloutEngine::Candle, None) => "  weights (shares the trainer's)".to_string(),
            (RolloutEngine::Mistralrs, _) => format!("  its own copy of the weights ({})", self.dtype),
            (RolloutEngine::Openai, _) => "  weights (none: an external server)".to_string(),
            (RolloutEngine::Llamacpp, _) => "  the quantised GGUF base (llama.cpp)".to_string(),
        };
        row(f, &copy, self.rollout_weight_bytes)?;
        row(
            f,
            &format!(
                "  KV cache ({} in flight here, {:.2} GiB each)",
                self.rollouts_in_flight_per_gpu,
                gib(self.kv_bytes_per_rollout)
            ),
            self.rollout_kv_bytes,
        )?;
        if self.rollout_reload_bytes > 0 {
            row(f, "  second copy while reloading (no KV then)", self.rollout_reload_bytes)?;
        }
        row(f, "  total (copy + the larger of the two)", self.rollout_bytes)?;
        if let (Some(budget), true) = (self.rollout_budget_bytes, self.phase_exclusive) {
            row(f, "  share (the GPU less the shards kept meanwhile)", budget)?;
            signed_row(f, "  headroom", self.rollout_bytes, budget)?;
        } else if let Some(budget) = self.rollout_budget_bytes {
            row(f, &format!("  share (rollout.gpu_memory_fraction {:.2})", self.rollout_fraction), budget)?;
            signed_row(f, "  headroom", self.rollout_bytes, budget)?;
        }
        Ok(())
    }
}

impl fmt::Display for MemoryPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let unit = if self.device == Device::Cuda { "per GPU" } else { "CPU process" };
        let mode = match self.lora {
            Some((r, n)) => format!("LoRA r={r} on {n} projections"),
            None => "full update".to_string(),
        };
        writeln!(f, "Plan for preset {} ({}, {}, {mode})", self.preset, self.device, self.dtype)?;
        writeln!(f, "  {:<52}{}", "world size", self.world_line())?;
        writeln!(f, "  {:<52}{} ({})", "parameters", count(self.base_params), self.base_params)?;
        writeln!(
            f,
            "  {:<52}{} ({:.2}% of the model)",
            "trainable",
            count(self.trainable_params),
            100.0 * self.trainable_params as f64 / self.base_params.max(1) as f64
        )?;
        writeln!(f)?;
        writeln!(f, "  {:<52}{:>10}", format!("memory, {unit}"), "GiB")?;
        writeln!(f, "  trainer")?;
        self.trainer_rows(f)?;
        writeln!(f, "  rollout engine ({})", self.engine)?;
        self.engine_rows(f)?;
        if self.phase_exclusive {
            row(f, "the larger phase", self.total_bytes)?;
        } else {
            row(f, "trainer + engine", self.total_bytes)?;
        }
        match self.memory_bytes {
            Some(m) => {
                row(f, "available (hardware.gpu_memory_gib)", m)?;
                let verdict = if self.fits {
                    "yes".to_string()
                } else {
                    format!("NO, {:.1} GiB short", gib(self.shortfall_bytes()))
                };
                writeln!(f, "  {:<52}{:>10}", "fits", verdict)?;
            }
            None => writeln!(f, "  {:<52}{:>10}", "available", "not declared (not checked)")?,
        }
        writeln!(f)?;
        writeln!(f, "  per step")?;
        writeln!(
            f,
            "  {:<52}{} ({} per rank), {} in flight",
            "rollouts",
            thousands(self.rollouts_per_step),
            thousands(self.rollouts_per_rank),
            self.rollouts_in_flight
        )?;
        writeln!(
            f,
            "  {:<52}≤ {} (≤ {} per rank)",
            "tokens",
            thousands(self.tokens_per_step),
            thousands(self.tokens_per_rank)
        )?;
        writeln!(f, "  {:<52}{}", "forward+backward passes per rank", self.micro_batches_per_rank)?;
        if !self.fits {
            writeln!(f)?;
            writeln!(f, "  does not fit. {}", self.advice.join(" "))?;
        }
        Ok(())
    }
}
