//! `agent train`: GRPO training runs, their dry-run memory plans, and SFT warm starts.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;

use agent_core::config::Config;
use agent_train::plan::MemoryPlan;
use agent_train::preset::{LoraSection, Preset, RolloutEngine};
use agent_train::TrainOptions;

use super::signals::Signals;

/// Arguments of `agent train`.
#[derive(Debug, Args)]
pub struct TrainArgs {
    /// A built-in preset name (see presets/) or a preset YAML file.
    #[arg(long, default_value = "cpu-tiny")]
    pub preset: String,
    /// Run folder: metrics.jsonl, eval.json, reward.svg, checkpoints, the final adapter.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Task folder (overrides the preset's).
    #[arg(long)]
    pub tasks: Option<PathBuf>,
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
    /// Who samples the rollouts: `candle` (in process) or `mistralrs` (overrides the preset's).
    #[arg(long, value_parser = ["candle", "mistralrs", "mistral.rs"])]
    pub engine: Option<String>,
    /// Continue from the newest complete checkpoint in --out.
    #[arg(long)]
    pub resume: bool,
    /// Print the plan (memory per GPU, tokens per step, rollouts in flight) and exit.
    #[arg(long)]
    pub dry_run: bool,
    /// Supervised fine-tuning only: cross-entropy on the assistant tokens of this JSONL
    /// file of transcripts (`{"messages": [...]}` per line); writes OUT/sft-model.
    #[arg(long, value_name = "FILE.jsonl")]
    pub sft: Option<PathBuf>,
    /// No progress bars (one line per step instead).
    #[arg(long)]
    pub no_progress: bool,
}

/// Runs `agent train`.
pub async fn run(args: TrainArgs, config: Config) -> anyhow::Result<u8> {
    let mut preset = Preset::find(&args.preset)?;
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
    if let Some(seed) = args.seed {
        preset.seed = seed;
    }
    if let Some(engine) = &args.engine {
        preset.rollout.engine = if engine == "candle" { RolloutEngine::Candle } else { RolloutEngine::Mistralrs };
    }
    if let Some(file) = &args.sft {
        let sft = preset.sft.get_or_insert_with(|| agent_train::preset::SftSection {
            file: String::new(),
            epochs: 3,
            lr: 1e-4,
            batch: 8,
        });
        sft.file = std::path::absolute(file)?.display().to_string();
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
        None => PathBuf::from("runs").join(format!("train-{}-{}", preset.name, timestamp())),
    };
    let log = |line: String| eprintln!("● {line}");
    if args.sft.is_some() {
        let (device, dtype) = agent_train::setup::device_and_dtype(&preset)?;
        std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
        let base = agent_train::setup::base_model_dir(&preset, &out)?;
        let dir = agent_train::setup::warm_start(&preset, &base, &out, &device, dtype, &log)?;
        println!("{}", dir.display());
        return Ok(0);
    }
    let docker = agent_sandbox::connect().await?;
    super::bench::sweep_orphans(&docker).await;
    let opts = TrainOptions {
        preset,
        out: out.clone(),
        resume: args.resume,
        progress: !args.no_progress && std::io::stderr().is_terminal(),
        config,
    };
    eprintln!("● training into {}", out.display());
    let mut signals = Signals::install()?;
    let result = tokio::select! {
        r = agent_train::train(opts, &docker, &log) => r,
        sig = signals.recv() => {
            agent_sandbox::cleanup_registered(&docker).await;
            // Rollouts run under many run ids; a create in flight may land after the
            // first pass: remove what this process owns until nothing is left.
            agent_sandbox::remove_own_settled(&docker).await;
            eprintln!("✗ interrupted; `agent train --resume --out {}` continues from the last checkpoint", out.display());
            return Ok(Signals::exit_code(sig));
        }
    };
    let report = result?;
    println!(
        "success rate {:.1}% → {:.1}% over {} evaluation rollouts ({}/eval.json, {}/reward.svg)",
        report.before * 100.0,
        report.after * 100.0,
        report.rollouts,
        out.display(),
        out.display()
    );
    Ok(0)
}

fn timestamp() -> String {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let (y, m, d) = agent_core::episode::civil_date(secs);
    let t = secs % 86_400;
    format!("{y:04}{m:02}{d:02}-{:02}{:02}{:02}", t / 3600, t / 60 % 60, t % 60)
}
