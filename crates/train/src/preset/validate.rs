//! The checks a preset passes after parsing: ranges and rules across fields, each error
//! naming the field.

use super::{Device, Preset, PresetError, RolloutEngine, SftInto, LORA_TARGETS, TINY_TOY};

impl Preset {
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
        if self.hardware.device == Device::Cpu && self.dtype == super::Dtype::Bf16 {
            return Err(bad(
                "dtype",
                "bf16 runs on CUDA only (candle's CPU matrix products have no bf16): use f32 on the CPU".into(),
            ));
        }
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
                // On the CPU, gpus_per_node counts processes (`--nproc-per-node`), which
                // share the cores and reduce over TCP.
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
        if o.offload && o.zero != Some(3) {
            return Err(bad("optim.offload", "applies to optim.zero 3 only (its shards' optimiser state)".into()));
        }
        if let Some(z) = o.zero {
            if z > 3 {
                return Err(bad(
                    "optim.zero",
                    format!(
                        "must be 0 (replicated), 1 (AdamW state sharded), 2 (state and gradients sharded) or 3 \
                         (weights too), it is {z}"
                    ),
                ));
            }
            if z == 3 && !self.mode.full {
                return Err(bad(
                    "optim.zero",
                    "is 3 (parameter sharding), which shards full updates: a LoRA run's adapters are small and its \
                     base is frozen; use 0"
                        .into(),
                ));
            }
            if z == 3 && !self.recompute {
                return Err(bad(
                    "recompute",
                    "must be true with optim.zero 3: a sharded layer's weights are gathered again for its backward \
                     pass, which recomputes it"
                        .into(),
                ));
            }
            if z == 3 && self.rollout.gpu_memory_fraction.is_some() {
                return Err(bad(
                    "rollout.gpu_memory_fraction",
                    "has no effect with optim.zero 3: the update and the rollouts each have the whole GPU in turn \
                     (the dry run shows both phases); remove it"
                        .into(),
                ));
            }
            if z == 3 && self.rollout.engine != RolloutEngine::Candle {
                return Err(bad(
                    "rollout.engine",
                    "must be candle with optim.zero 3: the sampler is given the gathered policy after every update"
                        .into(),
                ));
            }
        }

        let r = &self.rollout;
        positive("rollout.concurrency", r.concurrency)?;
        if let Some(f) = r.gpu_memory_fraction {
            // The trainer needs some of every GPU: 1 would leave it nothing.
            in_range("rollout.gpu_memory_fraction", f, 0.0, 0.95, "in [0, 0.95]")?;
        }
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
        if r.engine == RolloutEngine::Llamacpp {
            if self.mode.lora.is_none() {
                return Err(bad(
                    "rollout.engine",
                    "llamacpp serves the GGUF base with the trained adapter on top, so it needs mode.lora".into(),
                ));
            }
            if self.sft.as_ref().is_some_and(|s| s.into == SftInto::Weights) {
                return Err(bad(
                    "sft.into",
                    "must be `adapter` with rollout.engine llamacpp (the GGUF base cannot take new weights)".into(),
                ));
            }
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

        if let Some(tools) = &self.tools {
            let known = agent_core::tools::ToolSpecs::builtin().map_err(|e| bad("tools", e.to_string()))?;
            known.only(tools).map_err(|e| bad("tools", e))?;
        }
        if let Some(sft) = &self.sft {
            non_empty("sft.file", &sft.file)?;
            positive("sft.epochs", sft.epochs)?;
            above_zero("sft.lr", sft.lr)?;
            positive("sft.batch", sft.batch)?;
            if sft.file == super::ORACLE_DEMOS && sft.into != SftInto::Adapter {
                return Err(bad(
                    "sft.file",
                    "`oracle` (the reference solutions as demonstrations) needs sft.into: adapter".into(),
                ));
            }
            if sft.into == SftInto::Adapter && self.mode.lora.is_none() {
                return Err(bad("sft.into", "`adapter` needs mode.lora (full updates have no adapter)".into()));
            }
        }

        if let Some([lo, hi]) = self.grpo.task_band {
            if !(0.0..=1.0).contains(&lo) || !(0.0..=1.0).contains(&hi) || lo > hi {
                return Err(bad("grpo.task_band", format!("[{lo}, {hi}]: give [low, high] with 0 ≤ low ≤ high ≤ 1")));
            }
        }
        if self.grpo.refill_rounds > 0 && !self.grpo.dynamic_sampling {
            return Err(bad(
                "grpo.refill_rounds",
                "refills replace the groups dynamic sampling drops: set grpo.dynamic_sampling: true".into(),
            ));
        }
        in_range("eval.temperature", self.eval.temperature, 0.0, f64::MAX, "0 or more")?;
        if let Some(f) = self.eval.heldout_families.iter().find(|f| f.trim().is_empty() || f.contains(',')) {
            return Err(bad(
                "eval.heldout_families",
                format!("`{f}` is not a family name (see `agent tasks list-families`)"),
            ));
        }
        positive("checkpoint.every", self.checkpoint.every)?;
        positive("checkpoint.keep", self.checkpoint.keep)?;
        if let Some(p) = &self.system_prompt {
            non_empty("system_prompt", p)?;
        }
        Ok(())
    }
}
