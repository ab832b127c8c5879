//! `agent bench`: Terminal-Bench runs.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use clap::Args;

use agent_bench::{AgentKind, BenchOptions, VerifyMode};
use agent_core::config::Config;

use super::signals::Signals;

/// Arguments of `agent bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Task directories, or directories of task directories (TB1 or TB2 layout).
    #[arg(required_unless_present = "resume")]
    pub tasks: Vec<PathBuf>,
    /// Trials run at the same time.
    #[arg(short = 'n', long, default_value_t = 1)]
    pub concurrency: usize,
    /// Attempts per task.
    #[arg(short = 'k', long, default_value_t = 1)]
    pub attempts: u32,
    /// Who does the task: our agent, the reference solution, or nothing.
    #[arg(long, value_enum, default_value_t = AgentKind::Agent)]
    pub agent: AgentKind,
    /// Model of `--agent agent` (`scripted:FILE`, `openai:URL#MODEL`, a path, `hf:ORG/NAME`, `default`).
    #[arg(long)]
    pub model: Option<String>,
    /// Run id (default: a timestamp); names the run directory and labels its containers.
    #[arg(long)]
    pub run_id: Option<String>,
    /// Run directory (default: runs/RUN_ID).
    #[arg(long)]
    pub output: Option<PathBuf>,
    /// Continue an interrupted run (with --run-id or --output): finished trials are kept.
    #[arg(long)]
    pub resume: bool,
    /// How tests are run: the task's script, or a pytest in the container when the
    /// script cannot fetch its runner.
    #[arg(long, value_enum, default_value_t = VerifyMode::Auto)]
    pub verify: VerifyMode,
    #[command(flatten)]
    pub host: super::host_args::HostArgs,
    /// Grant the Linux capabilities a task's compose file asks for (`cap_add`); without
    /// this flag such a task's trials fail before anything starts.
    #[arg(long)]
    pub allow_cap_add: bool,
    /// Multiply every task's agent and test timeouts (slow or loaded machines).
    #[arg(long, default_value_t = 1.0, value_parser = positive_f64)]
    pub timeout_multiplier: f64,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
    /// Action format of our agent: `auto` (native tool calls where the model supports
    /// them), `native` or `text`. Default: the config's, else auto.
    #[arg(long, value_name = "FORMAT", value_parser = clap::value_parser!(agent_core::tools::ToolFormat))]
    pub tool_format: Option<agent_core::tools::ToolFormat>,
    /// Run the hooks of this settings file (Claude Code's format) in our agent's
    /// episodes; a bench run has none otherwise.
    #[arg(long, value_name = "FILE")]
    pub hooks: Option<PathBuf>,
    /// Tries of a trial after the Docker engine running it stopped answering, each on
    /// another engine of `[[sandbox.engines]]`.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub retries: u32,
    /// Local model settings.
    #[command(flatten)]
    pub local: super::LocalArgs,
}

/// Runs the bench; exits 0 when the run completed (whatever its score).
pub async fn run(args: BenchArgs, mut config: Config) -> anyhow::Result<u8> {
    if let Some(format) = args.tool_format {
        config.tool_format = format;
    }
    let mut signals = Signals::install().context("cannot install signal handlers")?;
    let host = args.host.host_env()?;
    let (hooks, hooks_note) = super::hooks::bench_hooks(args.hooks.as_deref())?;
    if let Some(note) = hooks_note {
        eprintln!("● {note}");
    }
    let opts = BenchOptions {
        tasks: args.tasks,
        concurrency: args.concurrency,
        attempts: args.attempts,
        agent: args.agent,
        model: args.model,
        run_id: args.run_id,
        output: args.output,
        resume: args.resume,
        verify: args.verify,
        host,
        resolve: super::resolve::resolve_options(config.api_key_env.clone(), args.local.options(), args.quiet),
        progress: !args.quiet,
        timeout_multiplier: args.timeout_multiplier,
        allow_cap_add: args.allow_cap_add,
        hooks,
        retries: args.retries,
    };
    let schedule = agent_bench::schedule(&opts)?;
    let pool = super::engines::pool(&config).await?;
    sweep_orphans(&pool).await;
    eprintln!("● run {} → {}", schedule.run_id, schedule.run_dir.display());
    let started = Instant::now();
    let notice = |n: String| eprintln!("● {n}");
    let outcome = tokio::select! {
        r = agent_bench::run_bench(&schedule, &opts, &config, &pool, &notice) => r,
        sig = signals.recv() => {
            eprintln!("● signal received: removing this run's containers and networks");
            agent_sandbox::cleanup_registered().await;
            for engine in pool.engines() {
                agent_sandbox::remove_run_settled(&engine, &schedule.run_id).await;
            }
            eprintln!("● finished trials are kept; continue with: agent bench --resume --output {}", schedule.run_dir.display());
            return Ok(Signals::exit_code(sig));
        }
    };
    // Every trial removes its containers; this is the net for one whose engine was
    // thought lost and kept them.
    for engine in pool.reachable().await {
        agent_sandbox::remove_run_settled(&engine, &schedule.run_id).await;
    }
    let results = match outcome {
        Ok(r) => r,
        Err(e) => {
            for engine in pool.engines() {
                agent_sandbox::remove_run_settled(&engine, &schedule.run_id).await;
            }
            return Err(e.into());
        }
    };
    let report = schedule.run_dir.join("report.html");
    agent_bench::results::write_atomic(&report, agent_bench::report::html_report(&results).as_bytes())?;
    print!("{}", agent_bench::report::summary_table(&results, Some(started.elapsed().as_secs_f64())));
    println!("results: {}\nreport:  {}", schedule.run_dir.join("results.json").display(), report.display());
    Ok(0)
}

/// Removes the containers, networks and volumes of runs whose process is gone (a
/// killed run leaves them; its own `--resume` would too, but another run may never come),
/// on every engine of the pool that answers.
pub async fn sweep_orphans(pool: &agent_sandbox::EnginePool) {
    for engine in pool.engines() {
        sweep_engine(&engine).await;
    }
}

async fn sweep_engine(docker: &agent_sandbox::Engine) {
    if let Ok(removed) = agent_sandbox::prune(docker, agent_sandbox::PruneScope::Orphaned).await {
        let networks = removed.iter().filter(|r| r.starts_with("network ")).count();
        let volumes = removed.iter().filter(|r| r.starts_with("volume ")).count();
        if !removed.is_empty() {
            eprintln!(
                "● removed {} container(s), {networks} network(s) and {volumes} volume(s) left by runs that were killed{}",
                removed.len() - networks - volumes,
                if docker.name() == "local" { String::new() } else { format!(" (engine {})", docker.name()) }
            );
        }
    }
}

fn positive_f64(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("`{s}` is not a positive number")),
    }
}
