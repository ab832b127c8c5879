//! Subcommands. Each is a client of the library; none reaches into the loop.

mod bench;
mod engines;
mod hooks;
mod host_args;
mod judge_eval;
pub mod log;
mod model;
mod perf;
mod print;
mod project;
mod resolve;
mod run;
mod sandbox;
mod serve;
mod signals;
mod tasks;
mod train;
mod train_launch;
mod tui;
mod workspace;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// A terminal coding agent whose tools all run inside Docker.
#[derive(Debug, Parser)]
#[command(name = "agent", version, about)]
pub struct Cli {
    /// Your config file (default: ~/.config/agent/config.toml); the project's
    /// .agent/config.toml is laid over it as far as you trust the project.
    #[arg(long, global = true)]
    pub config: Option<PathBuf>,
    /// Use every setting of the project's agent files (.agent/, .mcp.json) without
    /// asking: its hooks, model endpoint, key variable, MCP servers and system prompt.
    #[arg(long, global = true)]
    pub trust_project: bool,
    /// Debug logging on stderr (or set AGENT_LOG).
    #[arg(short, long, global = true)]
    pub verbose: bool,
    /// Options of the interactive UI (when no subcommand is given).
    #[command(flatten)]
    pub tui: tui::TuiArgs,
    /// Local model settings of the interactive UI.
    #[command(flatten)]
    pub local: LocalArgs,
    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run one episode headless.
    Run(run::RunArgs),
    /// Run Terminal-Bench tasks and score them.
    Bench(bench::BenchArgs),
    /// Serve a model over an OpenAI-compatible HTTP API.
    Serve(serve::ServeArgs),
    /// Manage sandbox images and containers.
    #[command(subcommand)]
    Sandbox(sandbox::SandboxCommand),
    /// Rank judge models on the hand-made trajectory suite (assets/judge-eval).
    #[command(name = "judge-eval")]
    JudgeEval(judge_eval::JudgeEvalArgs),
    /// List and fetch the built-in models, write a tiny random Qwen3 for tests.
    #[command(subcommand)]
    Model(model::ModelCommand),
    /// Train the policy with GRPO (LoRA or full updates) on tasks run in containers.
    Train(Box<train::TrainArgs>),
    /// Make training tasks: generate them from a seed, validate task folders, synthesise
    /// new ones with model agents.
    #[command(subcommand)]
    Tasks(tasks::TasksCommand),
    /// Measure speed: a local model's (tokens/s, first-turn latency), the trainer's
    /// (tokens/s per step), the interactive UI's (frame time).
    #[command(subcommand)]
    Perf(perf::PerfCommand),
}

/// Settings of local models, shared by `run`, `serve` and `perf model`.
#[derive(Debug, Clone, clap::Args)]
pub struct LocalArgs {
    /// Inference engine for local models: `auto` runs GGUF files on the CPU through
    /// llama.cpp and everything else through mistral.rs.
    #[arg(long, default_value = "auto", value_parser = clap::value_parser!(agent_llm::LocalEngine))]
    pub engine: agent_llm::LocalEngine,
    /// Context window of llama.cpp models in tokens (default: the model's own, at most 32,768).
    #[arg(long, value_name = "TOKENS")]
    pub ctx: Option<u32>,
    /// CPU threads for llama.cpp (default: all cores).
    #[arg(long)]
    pub threads: Option<u32>,
    /// Do not keep the KV cache of the first prompt on disk for the next session.
    #[arg(long)]
    pub no_prompt_cache: bool,
    /// In-situ quantisation of safetensors models (e.g. Q4K, Q8_0).
    #[arg(long)]
    pub isq: Option<String>,
    /// Keep a local model on the CPU even when a GPU is present.
    #[arg(long)]
    pub cpu: bool,
    /// Turn Qwen3-style thinking off (`--think false`) or on.
    #[arg(long)]
    pub think: Option<bool>,
    /// A LoRA adapter from `agent train`: its folder (PEFT files for a safetensors model,
    /// `adapter-model.gguf` for a GGUF model such as the built-in ones) or a llama.cpp
    /// adapter `.gguf` file.
    #[arg(long, value_name = "ADAPTER_DIR")]
    pub lora: Option<PathBuf>,
}

impl LocalArgs {
    /// The library's options.
    pub fn options(&self) -> agent_llm::LocalModelOptions {
        // No cache directory (an unset HOME) only costs speed, never correctness.
        let prompt_cache_dir = if self.no_prompt_cache {
            None
        } else {
            agent_llm::models::cache_root().ok().map(|root| root.join("prompt-cache"))
        };
        agent_llm::LocalModelOptions {
            isq: self.isq.clone(),
            force_cpu: self.cpu,
            thinking: self.think,
            engine: self.engine,
            context_tokens: self.ctx,
            threads: self.threads,
            prompt_cache_dir,
            lora: self.lora.clone(),
            sampling: agent_llm::SamplingDefaults::default(),
            serve_parallel: None,
        }
    }
}

/// Runs the chosen subcommand; returns the process exit code.
pub async fn dispatch(cli: Cli) -> anyhow::Result<u8> {
    let user = agent_core::config::Config::load_user(cli.config.as_deref())?;
    let trust = cli.trust_project;
    // Commands that run anything read the project's settings, as far as it is trusted.
    match cli.command {
        None => tui::run(cli.tui, user, trust, cli.local.options()).await,
        Some(Command::Run(args)) => run::run(args, project::headless(&user, trust)?).await,
        Some(Command::Bench(args)) => bench::run(args, project::announced(&user, trust)?).await,
        Some(Command::Sandbox(cmd)) => sandbox::run(cmd, project::announced(&user, trust)?).await,
        Some(Command::Serve(args)) => serve::run(args, project::announced(&user, trust)?).await,
        Some(Command::Train(args)) => train::run(*args, project::announced(&user, trust)?).await,
        Some(Command::Model(cmd)) => model::run(cmd).await,
        Some(Command::Tasks(cmd)) => tasks::run(cmd, || project::announced(&user, trust)).await,
        Some(Command::JudgeEval(args)) => judge_eval::run(args).await,
        Some(Command::Perf(cmd)) => perf::run(cmd).await,
    }
}
