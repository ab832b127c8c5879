//! The GRPO loop: warm start, evaluation, then per step sample tasks, run a group of
//! rollouts per task in containers, score them with the tasks' tests, compute group
//! advantages, update the policy, log, checkpoint; evaluate again at the end.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use agent_sandbox::EnginePool;

use super::checkpoint::{write_atomic, CheckpointState, Checkpoints};
use super::dist::{barrier, blocking, Collective, SingleRank};
use super::error::{TensorContext, TrainError};
use super::eval::{self, families, EvalReport, Evaluation};
use super::metrics::MetricsLog;
use super::model::gguf;
use super::model::lora_gguf::save_adapter_folder;
use super::model::{peft, LoraSettings, Qwen3, TrainMode};
use super::optim::AdamW;
use super::preset::{Preset, RolloutEngine, SftInto};
use super::progress::progress_bar;
use super::rollout::{LlamaCppEngine, MistralrsEngine, PolicySampling, RolloutRunner, RolloutSampler, Sampler};
use super::setup;
use super::step::StepLoop;
use super::update::Reference;
use super::warm_start;
use super::zero3;
use agent_bench::judge::{Judge, JudgeOptions, RewardWeights};
use agent_core::config::Config;

/// How `agent train` was invoked.
pub struct TrainOptions {
    pub preset: Preset,
    pub out: PathBuf,
    /// Continue from the newest complete checkpoint in `out`.
    pub resume: bool,
    /// Show progress bars.
    pub progress: bool,
    /// Sandbox and image settings.
    pub config: Config,
    /// The ranks of a multi-process run ([`SingleRank`] for one process).
    pub world: Arc<dyn Collective>,
    /// The GPU this process trains on (its local rank).
    pub device_ordinal: usize,
    /// How a model spec becomes a backend (the judge's): the same options as every
    /// other command.
    pub resolve: agent_llm::ResolveOptions,
    /// `agent train eval`: evaluate this adapter instead of training (no GRPO, no
    /// checkpoints; the base model first unless told not to).
    pub evaluate_adapter: Option<AdapterEval>,
}

/// An adapter to evaluate (`agent train eval --adapter DIR`).
#[derive(Debug, Clone)]
pub struct AdapterEval {
    /// A PEFT adapter folder (`OUT/adapter` of a run).
    pub dir: PathBuf,
    /// Evaluate the base model on the same rollouts first, for the paired comparison.
    pub with_base: bool,
}

impl TrainOptions {
    /// Options for a one-process run.
    pub fn single(preset: Preset, out: PathBuf, resume: bool, progress: bool, config: Config) -> Self {
        let resolve =
            agent_llm::ResolveOptions { api_key_env: config.api_key_env.clone(), ..agent_local::resolve_options() };
        TrainOptions {
            preset,
            out,
            resume,
            progress,
            config,
            world: Arc::new(SingleRank),
            device_ordinal: 0,
            resolve,
            evaluate_adapter: None,
        }
    }
}

/// The training mode a preset asks for.
pub fn train_mode(preset: &Preset) -> TrainMode {
    match &preset.mode.lora {
        Some(l) if !preset.mode.full => TrainMode::Lora(LoraSettings {
            rank: l.rank,
            alpha: l.alpha,
            dropout: l.dropout,
            targets: l.targets.clone(),
        }),
        _ => TrainMode::Full,
    }
}

/// Runs (or resumes) a training run.
pub async fn train(
    opts: TrainOptions,
    pool: &EnginePool,
    log: &(dyn Fn(String) + Sync),
) -> Result<EvalReport, TrainError> {
    let preset = &opts.preset;
    let out = &opts.out;
    let world = opts.world.as_ref();
    let (rank, lead) = (world.rank(), world.rank() == 0);
    if preset.rollout.engine == RolloutEngine::Openai {
        return Err(TrainError::Config(
            "rollout.engine `openai` is not available yet: use `candle` (in-process) or `mistralrs`".into(),
        ));
    }
    std::fs::create_dir_all(out).map_err(|e| TrainError::io("create", out, e))?;
    // A model that is not there is the likelier mistake: said before the device is tried.
    setup::hf_model_dir(&preset.model.path)?;
    let (device, dtype) = setup::device_and_dtype(preset, opts.device_ordinal)?;
    // Rank 0 generates the base model and runs the warm start exactly as one process
    // would; the other ranks wait for it and load what it wrote.
    let start_dir = if lead {
        let base = setup::base_model_dir(preset, out)?;
        let start = setup::warm_start(preset, &base, out, &device, dtype, log)?;
        blocking(|| barrier(world))?;
        start
    } else {
        blocking(|| barrier(world))?;
        let base = setup::base_model_dir(preset, out)?;
        let start = if preset.sft.is_some() { out.join("sft-model") } else { base };
        if !start.join("config.json").is_file() {
            return Err(TrainError::bad_file(
                &start,
                format!(
                    "rank {rank} cannot see the model rank 0 prepared: --out must be on a file system every node \
                     shares"
                ),
            ));
        }
        start
    };
    let tokenizer = Arc::new(setup::load_tokenizer(&start_dir)?);
    let renderer = setup::load_renderer(&start_dir)?;
    let im_end = setup::token_id(&tokenizer, "<|im_end|>", &start_dir)?;
    let mode = train_mode(preset);
    // With parameter sharding each rank reads the model a unit at a time and keeps its shards.
    let sharded = preset.zero_stage() == 3;
    let policy = if sharded {
        blocking(|| zero3::load_sharded(&start_dir, dtype, world, &device, true))?
    } else {
        Qwen3::load(&start_dir, &mode, dtype, &device, preset.seed)?
    };
    // A full update's reference is loaded on its own: `merged()` shares storage with the
    // trainable weights, which the optimiser updates in place.
    let reference = match (&mode, preset.grpo.kl_coef > 0.0) {
        (TrainMode::Full, true) if sharded => {
            Some(blocking(|| zero3::load_sharded(&start_dir, dtype, world, &device, false))?)
        }
        (TrainMode::Full, true) => Some(
            Qwen3::load(&start_dir, &TrainMode::Full, dtype, &device, preset.seed)?
                .merged()
                .ctx("loading the reference policy")?,
        ),
        _ => None,
    };
    let mut opt = match &policy.zero3 {
        Some(z) => {
            if preset.optim.offload {
                z.offload()?;
            }
            AdamW::zero3(z.clone(), setup::adam_settings(preset))
        }
        None => setup::optimizer(preset, policy.trainable(), world)?,
    };
    let checkpoints = Checkpoints::new(out.join("checkpoints"), preset.checkpoint.keep);
    let mut state = CheckpointState {
        step: 0,
        optimizer_step: 0,
        seed: preset.seed,
        tasks_drawn: 0,
        eval_before: None,
        task_stats: Default::default(),
    };
    if opts.resume {
        if let Some((dir, saved)) = checkpoints.latest()? {
            load_checkpoint(&policy, &mut opt, &mode, &dir, &saved)?;
            log(format!("resuming after step {} from {}", saved.step, dir.display()));
            state = saved;
        }
    } else if checkpoints.latest()?.is_some() {
        return Err(TrainError::Config(format!(
            "{} already holds checkpoints: pass --resume to continue that run, or choose another --out",
            out.display()
        )));
    }
    // Every rank has read the checkpoints before rank 0 may write new ones.
    blocking(|| barrier(world))?;
    let metrics_path = out.join("metrics.jsonl");
    let mut metrics = if lead {
        Some(
            MetricsLog::open(&metrics_path, Some(state.step))
                .map_err(|e| TrainError::Other(format!("cannot open {}: {e}", metrics_path.display())))?,
        )
    } else {
        None
    };

    // Ranks on one host must not share container names.
    let run_id = match world.world_size() {
        1 => format!("train-{}", agent_sandbox::docker_name_part(&out.display().to_string())),
        _ => format!("train-{}-rank{rank}", agent_sandbox::docker_name_part(&out.display().to_string())),
    };
    let config = setup::rollout_config(preset, &opts.config);
    let tasks_dir = preset.resolve_path(&preset.tasks)?;
    let (ctx, tasks) =
        setup::trial_context(&tasks_dir, config, pool, &out.join("rollouts"), &run_id, preset.task_filter.as_ref())
            .await?;
    if let Some(f) = &preset.task_filter {
        log(format!("training on the {} indexed task(s) with {}", tasks.len(), f.describe()));
    }
    let heldout = &preset.eval.heldout_families;
    let all_tasks = tasks.clone();
    let all_families = families::families_of(&tasks_dir, &tasks)?;
    // `agent train eval` trains on nothing: its families only choose what is evaluated.
    let tasks = if heldout.is_empty() || opts.evaluate_adapter.is_some() {
        tasks
    } else {
        let (kept, _) = families::split_by_family(tasks, heldout, &all_families, false, "training task", &tasks_dir)?;
        log(format!(
            "training on {} task(s); the families {} are held out for the evaluations",
            kept.len(),
            heldout.join(", ")
        ));
        kept
    };
    for engine in pool.engines() {
        let _ = agent_sandbox::remove_run_settled(&engine, &run_id).await;
    }
    {
        // An engine that answers again after it was lost: what its rollouts left there.
        let ids = [run_id.clone(), format!("{run_id}-eval")];
        pool.on_revive(Arc::new(move |engine| {
            let ids = ids.clone();
            Box::pin(async move {
                for id in &ids {
                    let _ = agent_sandbox::remove_run_settled(&engine, id).await;
                }
            })
        }));
    }
    let sampler: Arc<dyn RolloutSampler> = match preset.rollout.engine {
        RolloutEngine::Mistralrs => {
            let work = match world.world_size() {
                1 => out.join("rollout-engine"),
                _ => out.join(format!("rollout-engine-rank{rank}")),
            };
            let engine = MistralrsEngine::start(&policy, &start_dir, &work, device.is_cpu()).await?;
            log("rollouts are sampled by mistral.rs (the policy is reloaded after every update)".into());
            Arc::new(engine)
        }
        RolloutEngine::Llamacpp => {
            let gguf = gguf::source_of(&start_dir).ok_or_else(|| {
                TrainError::Config(format!(
                    "rollout.engine llamacpp needs a GGUF base (a built-in model or a .gguf path); {} is a \
                     safetensors model",
                    preset.model.path
                ))
            })?;
            let work = match world.world_size() {
                1 => out.join("rollout-engine"),
                _ => out.join(format!("rollout-engine-rank{rank}")),
            };
            let alpha = preset.mode.lora.as_ref().map_or(1.0, |l| l.alpha);
            let sequences = preset.rollout.concurrency.div_ceil(world.world_size());
            let engine =
                LlamaCppEngine::start(&policy, &gguf, &work, alpha, sequences, preset.grpo.max_seq_len).await?;
            log(format!(
                "rollouts are sampled by llama.cpp over {} ({sequences} at once; the adapter is set after every update)",
                gguf.display()
            ));
            Arc::new(engine)
        }
        _ => {
            // A sharded policy is gathered whole for the sampler (its optimiser state waits in host memory).
            opt.park(true)?;
            let view = match &policy.zero3 {
                Some(z) => blocking(|| z.gather_all(&policy, world, &device))?,
                None => policy.shared().ctx("viewing the policy")?,
            };
            Arc::new(Sampler::start(view)?)
        }
    };
    let sampling = PolicySampling {
        temperature: preset.grpo.temperature,
        top_p: preset.grpo.top_p,
        max_new_tokens: preset.grpo.max_new_tokens,
        context: preset.grpo.max_seq_len,
    };
    let judge = match &preset.reward.judge {
        Some(spec) => {
            let spec =
                agent_llm::ModelSpec::parse(spec).map_err(|e| TrainError::Config(format!("reward.judge: {e}")))?;
            let backend = agent_llm::resolve_model(&spec, &opts.resolve)
                .await
                .map_err(|e| TrainError::Config(format!("reward.judge: {e}")))?;
            let judge = Judge::new(backend, JudgeOptions::default()).map_err(|e| TrainError::Config(e.to_string()))?;
            Some((
                Arc::new(judge),
                RewardWeights { tests: preset.reward.tests_weight, judge: preset.reward.judge_weight },
            ))
        }
        None => None,
    };
    let runner = RolloutRunner::new(
        ctx,
        tasks,
        sampler.clone(),
        tokenizer.clone(),
        renderer.clone(),
        vec![im_end],
        sampling,
        judge,
        // `rollout.concurrency` is the run's: each rank (GPU) runs its part of it.
        preset.rollout.concurrency.div_ceil(world.world_size()),
    );
    let update = setup::update_settings(preset, im_end);
    let (eval_ctx, eval_tasks, eval_families, eval_dir) = match &preset.eval.tasks {
        Some(dir) => {
            let dir = preset.resolve_path(dir)?;
            let (ctx, tasks) = setup::trial_context(
                &dir,
                setup::rollout_config(preset, &opts.config),
                pool,
                &out.join("eval-rollouts"),
                &format!("{run_id}-eval"),
                None,
            )
            .await?;
            for engine in pool.engines() {
                let _ = agent_sandbox::remove_run_settled(&engine, &format!("{run_id}-eval")).await;
            }
            let fams = families::families_of(&dir, &tasks)?;
            (ctx, tasks, fams, dir)
        }
        None => (runner.ctx.clone(), all_tasks, all_families, tasks_dir.clone()),
    };
    let (eval_tasks, eval_families) = if heldout.is_empty() {
        (eval_tasks, eval_families)
    } else {
        families::split_by_family(eval_tasks, heldout, &eval_families, true, "evaluation task", &eval_dir)?
    };
    let eval_runner = runner.for_evaluation(eval_ctx, eval_tasks, preset.eval.temperature);
    let n_eval = preset.eval.rollouts;
    let evaluate = |name: &'static str| {
        eval::evaluate(&eval_runner, &eval_families, n_eval, preset.seed, out, name, opts.progress, world)
    };

    if n_eval == 0 {
        log("no evaluations (eval.rollouts is 0)".into());
    }
    let skip_base = opts.evaluate_adapter.as_ref().is_some_and(|a| !a.with_base);
    let before = match (n_eval, Evaluation::read(out, "eval-before")) {
        (0, _) => None,
        _ if skip_base => None,
        (_, Some(e)) if state.eval_before.is_some() => Some(e),
        _ => {
            let e = evaluate("eval-before").await?;
            log(format!("success rate before training: {:.1}%", e.clustered.rate * 100.0));
            state.eval_before = Some(e.clustered.rate);
            Some(e)
        }
    };
    if let Some(adapter) = &opts.evaluate_adapter {
        peft::load_adapter_into(&policy, &adapter.dir)?;
        sampler.load_policy(&policy).await?;
        let e = evaluate("eval-adapter").await?;
        log(format!("success rate with the adapter: {:.1}%", e.clustered.rate * 100.0));
        let report = EvalReport::new(before.as_ref(), None, Some(&e), n_eval, preset.eval.temperature, heldout.clone());
        if lead {
            let json = serde_json::to_vec_pretty(&report).map_err(|e| TrainError::Other(e.to_string()))?;
            write_atomic(&out.join("eval.json"), &json)?;
        }
        return Ok(report);
    }
    // A warm start into the adapter comes after the first evaluation, so that "before" is
    // the model the user had; a resumed run has it in its checkpoint already.
    // What GRPO adds is measured from the warm start's evaluation (a resumed run reads it).
    let warm_starts = preset.sft.as_ref().is_some_and(|s| s.into == SftInto::Adapter);
    let warm = match (&mode, state.step) {
        (TrainMode::Lora(settings), 0) if warm_starts => {
            warm_start::warm_start_adapter(preset, &policy, settings, &start_dir, out, &runner, log).await?;
            sampler.load_policy(&policy).await?;
            match n_eval {
                0 => None,
                _ => {
                    let e = evaluate("eval-warm-start").await?;
                    log(format!("success rate after the warm start: {:.1}%", e.clustered.rate * 100.0));
                    Some(e)
                }
            }
        }
        (TrainMode::Lora(_), _) if warm_starts && n_eval > 0 => Evaluation::read(out, "eval-warm-start"),
        _ => None,
    };

    let steps = preset.grpo.steps as u64;
    let bar = progress_bar(opts.progress, steps, "steps");
    bar.set_position(state.step);
    let reference = match (&mode, preset.grpo.kl_coef > 0.0) {
        (TrainMode::Lora(_), true) => Reference::AdaptersOff,
        (TrainMode::Full, true) => reference.as_ref().map(Reference::Model).unwrap_or(Reference::None),
        _ => Reference::None,
    };
    let mut steps_loop = StepLoop {
        preset,
        out,
        log,
        progress: opts.progress,
        runner: &runner,
        sampler: sampler.as_ref(),
        policy: &policy,
        reference,
        opt: &mut opt,
        update: &update,
        metrics: metrics.as_mut(),
        metrics_path: &metrics_path,
        history: if lead { MetricsLog::read(&metrics_path).unwrap_or_default() } else { Vec::new() },
        world,
        checkpoints: &checkpoints,
        mode: &mode,
        start_dir: &start_dir,
        bar: &bar,
        steps,
        sync_secs: 0.0,
    };
    while state.step < steps {
        steps_loop.step(&mut state).await?;
    }
    bar.finish_and_clear();
    let after = match n_eval {
        0 => None,
        _ => {
            let e = evaluate("eval-after").await?;
            log(format!("success rate after training: {:.1}%", e.clustered.rate * 100.0));
            Some(e)
        }
    };
    let report = EvalReport::new(
        before.as_ref(),
        warm.as_ref(),
        after.as_ref(),
        n_eval,
        preset.eval.temperature,
        heldout.clone(),
    );
    let whole = match &policy.zero3 {
        Some(z) => blocking(|| z.gather_to(&policy, world, &candle_core::Device::Cpu, lead))?,
        None => None,
    };
    if lead {
        export_final(whole.as_ref().unwrap_or(&policy), &mode, &start_dir, out)?;
        let json = serde_json::to_vec_pretty(&report).map_err(|e| TrainError::Other(e.to_string()))?;
        write_atomic(&out.join("eval.json"), &json)?;
    }
    Ok(report)
}

fn load_checkpoint(
    policy: &Qwen3,
    opt: &mut AdamW,
    mode: &TrainMode,
    dir: &Path,
    state: &CheckpointState,
) -> Result<(), TrainError> {
    match mode {
        TrainMode::Lora(_) => peft::load_adapter_into(policy, &dir.join("adapter"))?,
        TrainMode::Full => match &policy.zero3 {
            Some(z) => {
                let path = dir.join("model").join("model.safetensors");
                let tensors = candle_core::safetensors::load(&path, &candle_core::Device::Cpu)
                    .map_err(|e| TrainError::bad_file(&path, format!("cannot read safetensors: {e}")))?;
                z.load_weights(&tensors).map_err(|e| TrainError::bad_file(&path, e))?
            }
            None => peft::load_full_weights_into(policy, &dir.join("model"))?,
        },
    }
    let path = dir.join(opt.state_file_name());
    if !path.is_file() {
        return Err(TrainError::bad_file(
            dir,
            format!(
                "holds no {}: was it written by a run with another number of processes? Resume with the same \
                 --nproc-per-node and --nnodes",
                opt.state_file_name()
            ),
        ));
    }
    let tensors = candle_core::safetensors::load(&path, policy.device())
        .map_err(|e| TrainError::bad_file(&path, format!("cannot read the optimiser state: {e}")))?;
    opt.load_state(&tensors, state.optimizer_step).map_err(|e| TrainError::bad_file(&path, e))
}

fn export_final(policy: &Qwen3, mode: &TrainMode, base: &Path, out: &Path) -> Result<(), TrainError> {
    let (name, tmp) = match mode {
        TrainMode::Lora(_) => ("adapter", out.join(".tmp-adapter")),
        TrainMode::Full => ("model", out.join(".tmp-model")),
    };
    let _ = std::fs::remove_dir_all(&tmp);
    match mode {
        TrainMode::Lora(s) => save_adapter_folder(policy, s, base, &tmp)?,
        TrainMode::Full => peft::save_full_weights(policy, base, &tmp)?,
    }
    let dest = out.join(name);
    let _ = std::fs::remove_dir_all(&dest);
    std::fs::rename(&tmp, &dest).map_err(|e| TrainError::io("rename", &tmp, e))
}
