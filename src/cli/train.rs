//! `agent train`: GRPO training runs, their dry-run memory plans, and SFT warm starts.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::Args;

use agent_core::config::Config;
use agent_train::dist::{Collective, WorldEnv};
use agent_train::memory_plan::MemoryPlan;
use agent_train::preset::{LoraSection, Preset, RolloutEngine};
use agent_train::TrainOptions;

use super::signals::Signals;
use super::train_launch::{self, LaunchArgs};

/// Arguments of `agent train`.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct TrainArgs {
    #[command(subcommand)]
    pub command: Option<TrainCommand>,
    /// A built-in preset name (see presets/) or a preset YAML file.
    #[arg(long, default_value = "cpu-tiny")]
    pub preset: String,
    /// Run folder: metrics.jsonl, eval.json, reward.svg, checkpoints, the final adapter.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Task folder (overrides the preset's).
    #[arg(long)]
    pub tasks: Option<PathBuf>,
    /// Held-out task folder for the evaluations before and after (overrides eval.tasks).
    #[arg(long, value_name = "DIR")]
    pub eval_tasks: Option<PathBuf>,
    /// Task families to hold out of training and evaluate alone, comma-separated
    /// (overrides eval.heldout_families; see `agent tasks list-families`).
    #[arg(long, value_name = "NAME,…", value_delimiter = ',')]
    pub heldout_families: Option<Vec<String>>,
    /// Evaluation rollouts on each side (overrides eval.rollouts; 0 skips the evaluations).
    #[arg(long, value_name = "N")]
    pub eval_rollouts: Option<usize>,
    /// Train LoRA adapters (rank 16 on every projection unless the preset sets them).
    #[arg(long, conflicts_with = "full")]
    pub lora: bool,
    /// Update every weight.
    #[arg(long)]
    pub full: bool,
    /// GRPO steps (overrides the preset's).
    #[arg(long)]
    pub steps: Option<usize>,
    /// Seed of every random choice (overrides the preset's).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Who samples the rollouts: `candle` (in process), `mistralrs`, or `llamacpp` (a GGUF
    /// base with the adapter set after each update) (overrides the preset's).
    #[arg(long, value_parser = ["candle", "mistralrs", "mistral.rs", "llamacpp"])]
    pub engine: Option<String>,
    /// ZeRO stage (overrides optim.zero): 0 replicated, 1 optimiser state sharded, 2 and
    /// gradients, 3 and weights (full updates).
    #[arg(long, value_name = "0-3")]
    pub zero: Option<u8>,
    /// Continue from the newest complete checkpoint in --out.
    #[arg(long)]
    pub resume: bool,
    /// Print the plan (memory per GPU, tokens per step, rollouts in flight) and exit.
    #[arg(long)]
    pub dry_run: bool,
    /// A warm start into the LoRA adapter before GRPO: a JSONL file of transcripts, or
    /// `oracle` (each training task's reference solution carried out as the model's own
    /// tool calls through the real loop; the ones that resolve their task are kept).
    #[arg(long, value_name = "FILE.jsonl|oracle", conflicts_with_all = ["sft", "full"])]
    pub warm_start: Option<String>,
    /// Supervised fine-tuning only: cross-entropy on the assistant tokens of this JSONL
    /// file of transcripts (`{"messages": [...]}` per line); writes OUT/sft-model.
    #[arg(long, value_name = "FILE.jsonl")]
    pub sft: Option<PathBuf>,
    /// No progress bars (one line per step instead).
    #[arg(long)]
    pub no_progress: bool,
    /// Processes to start on this host.
    #[command(flatten)]
    pub launch: LaunchArgs,
}

/// Subcommands of `agent train`.
#[derive(Debug, clap::Subcommand)]
pub enum TrainCommand {
    /// Evaluate a trained adapter (and the base model on the same rollouts) on any task
    /// folder: success rates clustered by task, per family, and the paired difference.
    Eval(EvalArgs),
}

/// Arguments of `agent train eval`.
#[derive(Debug, Args)]
pub struct EvalArgs {
    /// The adapter folder (`OUT/adapter` of a training run).
    #[arg(long, value_name = "DIR")]
    pub adapter: PathBuf,
    /// The tasks to evaluate on: generated tasks, or any bench folder (TB1/TB2).
    #[arg(long, value_name = "DIR")]
    pub tasks: PathBuf,
    /// The preset the adapter was trained with (its model, tools, prompt and limits).
    #[arg(long, default_value = "cpu-qwen2.5-coder-0.5b-lora")]
    pub preset: String,
    /// Evaluation rollouts (tasks in turn; default: the preset's eval.rollouts).
    #[arg(long, value_name = "N")]
    pub rollouts: Option<usize>,
    /// Sampling temperature (default: the preset's eval.temperature; 0 is greedy).
    #[arg(long)]
    pub temperature: Option<f64>,
    /// Only these families of a generated folder, comma-separated.
    #[arg(long, value_name = "NAME,…", value_delimiter = ',')]
    pub families: Option<Vec<String>>,
    /// Skip the base model's evaluation (no paired comparison).
    #[arg(long)]
    pub no_base: bool,
    /// Who samples: `candle`, `mistralrs` or `llamacpp` (default: the preset's).
    #[arg(long, value_parser = ["candle", "mistralrs", "mistral.rs", "llamacpp"])]
    pub engine: Option<String>,
    /// Seed of the rollouts (default: the preset's).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Output folder (default: runs/train-eval-TIME).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// No progress bars.
    #[arg(long)]
    pub no_progress: bool,
}

fn engine_of(name: &str) -> RolloutEngine {
    match name {
        "candle" => RolloutEngine::Candle,
        "llamacpp" => RolloutEngine::Llamacpp,
        _ => RolloutEngine::Mistralrs,
    }
}

/// Runs `agent train eval`: the training run's own set-up with no warm start and no steps,
/// the adapter loaded after the base model's evaluation.
async fn run_eval(args: EvalArgs, config: Config) -> anyhow::Result<u8> {
    let mut preset = Preset::find(&args.preset)?;
    let settings = agent_train::model::peft::read_adapter_settings(&args.adapter)?;
    preset.mode.full = false;
    preset.mode.lora = Some(LoraSection {
        rank: settings.rank,
        alpha: settings.alpha,
        dropout: 0.0,
        targets: settings.targets.clone(),
    });
    preset.tasks = std::path::absolute(&args.tasks)?.display().to_string();
    preset.eval.tasks = None;
    preset.eval.heldout_families = args.families.clone().unwrap_or_default();
    // A warm start into the adapter is in the adapter already; one into the weights made
    // the model the adapter was trained on, so it is made again. `train` returns after
    // the evaluations, before any step.
    if preset.sft.as_ref().is_some_and(|s| s.into == agent_train::preset::SftInto::Adapter) {
        preset.sft = None;
    }
    if let Some(n) = args.rollouts {
        preset.eval.rollouts = n;
    }
    if preset.eval.rollouts == 0 {
        anyhow::bail!("--rollouts must be at least 1 (the preset {} evaluates none)", preset.name);
    }
    if let Some(t) = args.temperature {
        preset.eval.temperature = t;
    }
    if let Some(seed) = args.seed {
        preset.seed = seed;
    }
    if let Some(engine) = &args.engine {
        preset.rollout.engine = engine_of(engine);
    }
    preset.validate()?;
    let out = args.out.clone().unwrap_or_else(|| PathBuf::from("runs").join(format!("train-eval-{}", timestamp())));
    let pool = super::engines::pool(&config).await?;
    super::bench::sweep_orphans(&pool).await;
    let progress = !args.no_progress && std::io::stderr().is_terminal();
    let mut opts = TrainOptions::single(preset, out.clone(), false, progress, config);
    opts.evaluate_adapter =
        Some(agent_train::AdapterEval { dir: std::path::absolute(&args.adapter)?, with_base: !args.no_base });
    eprintln!("● evaluating {} into {}", args.adapter.display(), out.display());
    let log: Arc<dyn Fn(String) + Send + Sync> = Arc::new(|line: String| eprintln!("● {line}"));
    let mut signals = Signals::install()?;
    let mut evaluation = Training::start(opts, log)?;
    let result = tokio::select! {
        r = &mut evaluation.result => {
            evaluation.done = true;
            r.unwrap_or_else(|_| Err(agent_train::TrainError::Other("the evaluation thread ended without a result".into())))
        }
        sig = signals.recv() => {
            evaluation.stop().await;
            remove_containers(&pool).await;
            eprintln!("✗ interrupted");
            return Ok(Signals::exit_code(sig));
        }
    };
    remove_containers(&pool).await;
    let report = result?;
    println!("{} ({}/eval.json)", report.summary(), out.display());
    Ok(0)
}

/// Runs `agent train`.
pub async fn run(args: TrainArgs, config: Config) -> anyhow::Result<u8> {
    if let Some(TrainCommand::Eval(e)) = args.command {
        return run_eval(e, config).await;
    }
    let mut preset = Preset::find(&args.preset)?;
    if let Some(tasks) = &args.eval_tasks {
        preset.eval.tasks = Some(std::path::absolute(tasks)?.display().to_string());
    }
    if let Some(n) = args.eval_rollouts {
        preset.eval.rollouts = n;
    }
    if let Some(f) = &args.heldout_families {
        preset.eval.heldout_families = f.iter().map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect();
    }
    if let Some(tasks) = &args.tasks {
        preset.tasks = std::path::absolute(tasks)?.display().to_string();
    }
    if args.full {
        preset.mode.full = true;
        preset.mode.lora = None;
    }
    if args.lora {
        preset.mode.full = false;
        if preset.mode.lora.is_none() {
            preset.mode.lora = Some(LoraSection {
                rank: 16,
                alpha: 32.0,
                dropout: 0.0,
                targets: agent_train::model::LORA_TARGETS.iter().map(|s| s.to_string()).collect(),
            });
        }
    }
    if let Some(steps) = args.steps {
        preset.grpo.steps = steps;
    }
    if let Some(zero) = args.zero {
        preset.optim.zero = Some(zero);
        if zero == 3 {
            // A sharded layer is gathered again for its backward pass: it always recomputes.
            preset.recompute = true;
        } else {
            preset.optim.offload = false;
        }
    }
    if let Some(seed) = args.seed {
        preset.seed = seed;
    }
    if let Some(engine) = &args.engine {
        preset.rollout.engine = engine_of(engine);
    }
    if let Some(file) = &args.warm_start {
        let file = if file == agent_train::warm_start::ORACLE_DEMOS {
            file.clone()
        } else {
            std::path::absolute(file)?.display().to_string()
        };
        let sft = preset.sft.get_or_insert_with(|| agent_train::preset::SftSection {
            file: String::new(),
            // A LoRA adapter takes a larger rate than full weights; a few passes over one
            // demonstration per task.
            epochs: 3,
            lr: 3e-4,
            batch: 8,
            into: agent_train::preset::SftInto::Adapter,
        });
        sft.file = file;
        sft.into = agent_train::preset::SftInto::Adapter;
    }
    if let Some(file) = &args.sft {
        // Supervised fine-tuning alone writes new weights; the engine that would serve
        // rollouts does not matter.
        if preset.rollout.engine == RolloutEngine::Llamacpp {
            preset.rollout.engine = RolloutEngine::Candle;
        }
        let sft = preset.sft.get_or_insert_with(|| agent_train::preset::SftSection {
            file: String::new(),
            epochs: 3,
            lr: 1e-4,
            batch: 8,
            into: agent_train::preset::SftInto::Weights,
        });
        sft.into = agent_train::preset::SftInto::Weights;
        sft.file = std::path::absolute(file)?.display().to_string();
    }
    // The world this process belongs to: the one it is launched into (torchrun, SLURM,
    // our launcher), or the one it is asked to launch.
    let env = WorldEnv::from_env()?;
    if let Some(n) = args.launch.nproc_per_node {
        if env.is_some() {
            anyhow::bail!(
                "--nproc-per-node starts the workers itself, but RANK/WORLD_SIZE say this process already is one \
                 (started by torchrun or SLURM?): drop one of the two"
            );
        }
        preset.hardware.gpus_per_node = n;
        preset.hardware.nodes = args.launch.nnodes;
    } else if let Some(w) = &env {
        preset.hardware.gpus_per_node = w.procs_per_node();
        preset.hardware.nodes = w.nodes();
    }
    preset.validate()?;
    if args.dry_run {
        let shape = match &preset.model.shape {
            Some(s) => *s,
            None => agent_train::setup::shape_of(&preset)?,
        };
        let plan = MemoryPlan::for_preset(&preset, &shape);
        // A closed pipe (`| head`) is not an error worth a panic.
        let _ = writeln!(std::io::stdout(), "{plan}");
        return Ok(if plan.fits { 0 } else { 1 });
    }
    if let Some(shape) = &preset.model.shape {
        MemoryPlan::for_preset(&preset, shape).check()?;
    }
    let out = match &args.out {
        Some(o) => o.clone(),
        // Each process would name its own folder (its own clock); ranks must write into one.
        None if env.as_ref().is_some_and(|w| w.world_size > 1) || args.launch.nnodes > 1 => anyhow::bail!(
            "ranks of one run must write into one folder that every host shares: pass --out DIR (the same on every \
             rank)"
        ),
        None => PathBuf::from("runs").join(format!("train-{}-{}", preset.name, timestamp())),
    };
    if let Some(n) = args.launch.nproc_per_node {
        if args.sft.is_some() {
            anyhow::bail!("--sft runs in one process: drop --nproc-per-node");
        }
        let pool = super::engines::pool(&config).await?;
        super::bench::sweep_orphans(&pool).await;
        return train_launch::launch(&args.launch, n, &out, &pool).await;
    }
    let rank = env.as_ref().map_or(0, |w| w.rank);
    let log: Arc<dyn Fn(String) + Send + Sync> = if rank == 0 {
        Arc::new(|line: String| eprintln!("● {line}"))
    } else {
        // The other ranks compute the same metrics: rank 0 reports them.
        Arc::new(|_: String| {})
    };
    if args.sft.is_some() {
        let (device, dtype) = agent_train::setup::device_and_dtype(&preset, 0)?;
        std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
        let base = agent_train::setup::base_model_dir(&preset, &out)?;
        let dir = agent_train::setup::warm_start(&preset, &base, &out, &device, dtype, &|l| log(l))?;
        println!("{}", dir.display());
        return Ok(0);
    }
    let mut env = env;
    let world: Arc<dyn Collective> = match &mut env {
        None => Arc::new(agent_train::dist::SingleRank),
        Some(w) => join_world(w, &preset, &out).await?,
    };
    let device_ordinal = match (&env, preset.hardware.device) {
        (Some(w), agent_train::preset::Device::Cuda) => {
            w.gpu_ordinal(std::env::var("CUDA_VISIBLE_DEVICES").ok().as_deref())?
        }
        _ => 0,
    };
    let pool = super::engines::pool(&config).await?;
    super::bench::sweep_orphans(&pool).await;
    let progress = rank == 0 && !args.no_progress && std::io::stderr().is_terminal();
    let opts = TrainOptions {
        preset,
        out: out.clone(),
        resume: args.resume,
        progress,
        resolve: super::resolve::resolve_options(config.api_key_env.clone(), Default::default(), !progress),
        config,
        world: world.clone(),
        device_ordinal,
        evaluate_adapter: None,
    };
    if rank == 0 {
        eprintln!("● training into {}", out.display());
    }
    let mut signals = Signals::install()?;
    let mut training = Training::start(opts, log)?;
    let aborted = world.aborted().unwrap_or_default();
    let result = tokio::select! {
        r = &mut training.result => {
            training.done = true;
            r.unwrap_or_else(|_| Err(agent_train::TrainError::Other("the training thread ended without a result".into())))
        }
        () = aborted.cancelled() => {
            Err(agent_train::TrainError::Distributed(world.abort_reason().unwrap_or_default()))
        }
        sig = signals.recv() => {
            world.fail(&format!("rank {rank} was stopped by signal {sig}"));
            training.stop().await;
            remove_containers(&pool).await;
            eprintln!("✗ interrupted; `agent train --resume --out {}` continues from the last checkpoint", out.display());
            return Ok(Signals::exit_code(sig));
        }
    };
    let report = match result {
        Ok(report) => report,
        Err(e) => {
            world.fail(&format!("rank {rank} failed: {e}"));
            training.stop().await;
            remove_containers(&pool).await;
            return Err(e.into());
        }
    };
    // Every rollout removes its containers; this is the net for one whose engine was
    // thought lost and kept them (the run's engines are all asked again).
    remove_containers(&pool).await;
    agent_train::dist::blocking(|| world.finish())?;
    if rank == 0 && report.rollouts == 0 {
        println!("trained without evaluation rollouts ({}/metrics.jsonl, {}/reward.svg)", out.display(), out.display());
    } else if rank == 0 {
        println!("{} ({}/eval.json, {}/reward.svg)", report.summary(), out.display(), out.display());
    }
    Ok(0)
}

/// The training, on a thread of its own with its own runtime and engine connection: a
/// rank blocked in a collective must not keep this one from seeing a signal or the death
/// of another rank.
struct Training {
    result: tokio::sync::oneshot::Receiver<Result<agent_train::EvalReport, agent_train::TrainError>>,
    cancel: tokio_util::sync::CancellationToken,
    done: bool,
}

impl Training {
    fn start(opts: TrainOptions, log: Arc<dyn Fn(String) + Send + Sync>) -> anyhow::Result<Training> {
        let (tx, result) = tokio::sync::oneshot::channel();
        let cancel = tokio_util::sync::CancellationToken::new();
        let stop = cancel.clone();
        std::thread::Builder::new()
            .name("train".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = tx.send(Err(agent_train::TrainError::Other(format!(
                            "cannot start the training runtime: {e}"
                        ))));
                        return;
                    }
                };
                let result = rt.block_on(async {
                    tokio::select! {
                        r = async {
                            // Made on this runtime: its connections belong to it.
                            let pool = agent_sandbox::EnginePool::connect(&opts.config.sandbox.engines)
                                .await
                                .map_err(|e| agent_train::TrainError::Other(e.to_string()))?;
                            agent_train::train(opts, &pool, &|l| log(l)).await
                        } => r,
                        () = stop.cancelled() => Err(agent_train::TrainError::Other("stopped".into())),
                    }
                });
                // Rollouts in flight were dropped with the future; their tasks go with the runtime.
                rt.shutdown_timeout(std::time::Duration::from_secs(10));
                let _ = tx.send(result);
            })
            .context("starting the training thread")?;
        Ok(Training { result, cancel, done: false })
    }

    /// Stops the training (its rollouts are dropped at their next await) and waits for
    /// the thread to end, so that no container is created after the cleanup that follows.
    async fn stop(&mut self) {
        self.cancel.cancel();
        if !self.done {
            self.done = true;
            let _ = tokio::time::timeout(std::time::Duration::from_secs(30), &mut self.result).await;
        }
    }
}

/// Joins the world `env` describes (the rendezvous checks that every rank runs this
/// binary with this preset, seed and output folder), and fills in from the rendezvous's
/// host list the local rank the environment left out; on CUDA tensors then go over NCCL.
async fn join_world(env: &mut WorldEnv, preset: &Preset, out: &std::path::Path) -> anyhow::Result<Arc<dyn Collective>> {
    if preset.hardware.device == agent_train::preset::Device::Cuda && env.world_size > 1 && !cfg!(feature = "nccl") {
        anyhow::bail!(
            "this build of agent has no NCCL, and CUDA ranks would send every gradient through host memory over \
             TCP: rebuild with `cargo build --release --features nccl` to train on several GPUs"
        );
    }
    let text = serde_json::to_string(preset).context("encoding the preset for the rendezvous")?;
    let out = std::path::absolute(out).unwrap_or_else(|_| out.to_path_buf());
    let identity = agent_train::dist::Identity::of_this_process(&text, preset.seed, &out)?;
    let timeout =
        agent_train::dist::seconds_from_env("AGENT_RENDEZVOUS_TIMEOUT_SECS", train_launch::RENDEZVOUS_TIMEOUT);
    let env2 = env.clone();
    let tcp = tokio::task::spawn_blocking(move || agent_train::dist::rendezvous(&env2, &identity, timeout))
        .await
        .context("the rendezvous task failed")??;
    env.place_on_hosts(tcp.hosts());
    nccl_or_tcp(tcp, env, preset)
}

#[cfg(feature = "nccl")]
fn nccl_or_tcp(
    tcp: agent_train::dist::TcpWorld,
    env: &WorldEnv,
    preset: &Preset,
) -> anyhow::Result<Arc<dyn Collective>> {
    if preset.hardware.device == agent_train::preset::Device::Cuda {
        let gpu = env.gpu_ordinal(std::env::var("CUDA_VISIBLE_DEVICES").ok().as_deref())?;
        return Ok(Arc::new(agent_train::dist::NcclWorld::on_gpu(tcp, gpu)?));
    }
    Ok(Arc::new(tcp))
}

#[cfg(not(feature = "nccl"))]
fn nccl_or_tcp(
    tcp: agent_train::dist::TcpWorld,
    _env: &WorldEnv,
    _preset: &Preset,
) -> anyhow::Result<Arc<dyn Collective>> {
    Ok(Arc::new(tcp))
}

/// Removes this process's rollout containers, and those of ranks that died.
async fn remove_containers(pool: &agent_sandbox::EnginePool) {
    agent_sandbox::cleanup_registered().await;
    // Rollouts run under many run ids; a create in flight may land after the first
    // pass: remove what this process owns until nothing is left.
    for engine in pool.reachable().await {
        agent_sandbox::remove_own_settled(&engine).await;
    }
    super::bench::sweep_orphans(pool).await;
}

fn timestamp() -> String {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let (y, m, d) = agent_llm::date::civil_date(secs);
    let t = secs % 86_400;
    format!("{y:04}{m:02}{d:02}-{:02}{:02}{:02}", t / 3600, t / 60 % 60, t % 60)
}
