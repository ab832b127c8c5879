//! `agent tasks validate DIR...`: one line per task with its verdict (or JSON lines),
//! exit status 1 when any task is invalid.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;

use agent_bench::validate::{ValidateOptions, Validator, Verdict};
use agent_bench::VerifyMode;
use agent_core::config::Config;

use super::super::signals::Signals;

/// Arguments of `agent tasks validate`.
#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// Task folders, or folders of tasks (TB1 or TB2 layout; an `agent tasks synth` output).
    #[arg(required = true)]
    pub tasks: Vec<PathBuf>,
    /// One JSON object per task on stdout instead of lines.
    #[arg(long)]
    pub json: bool,
    /// Tasks validated at the same time.
    #[arg(short = 'n', long, default_value_t = 1)]
    pub concurrency: usize,
    /// Runs of the reference solution, each in a fresh container; all must pass.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=20))]
    pub oracle_runs: u32,
    /// Where the runs' logs go (default: runs/validate-RUN_ID).
    #[arg(long)]
    pub logs: Option<PathBuf>,
    /// How tests are run (as `agent bench --verify`).
    #[arg(long, value_enum, default_value_t = VerifyMode::Auto)]
    pub verify: VerifyMode,
    #[command(flatten)]
    pub host: super::super::host_args::HostArgs,
    /// Grant the Linux capabilities a task's compose file asks for (`cap_add`).
    #[arg(long)]
    pub allow_cap_add: bool,
}

/// Validates; exits 0 when every task is valid, 1 otherwise.
pub async fn run(args: ValidateArgs, config: Config) -> anyhow::Result<u8> {
    let mut signals = Signals::install().context("cannot install signal handlers")?;
    let run_id = format!("validate-{}", agent_bench::run::fresh_run_id());
    let logs = args.logs.clone().unwrap_or_else(|| PathBuf::from("runs").join(&run_id));
    let opts = ValidateOptions {
        oracle_runs: args.oracle_runs,
        concurrency: args.concurrency,
        verify: args.verify,
        host: args.host.host_env()?,
        allow_cap_add: args.allow_cap_add,
    };
    let docker = agent_sandbox::connect().await?;
    super::super::bench::sweep_orphans(&agent_sandbox::EnginePool::single(docker.clone())).await;
    if !args.json {
        eprintln!("● validating; the runs' logs go to {}", logs.display());
    }
    let validator = Validator::new(docker.clone(), config, &run_id, &logs, opts).await;
    let json = args.json;
    let print = move |r: &agent_bench::validate::TaskReport| {
        if json {
            match serde_json::to_string(r) {
                Ok(line) => println!("{line}"),
                Err(e) => eprintln!("● {}: cannot encode the report: {e}", r.task),
            }
        } else {
            println!("{}", r.line());
        }
    };
    let reports = tokio::select! {
        r = validator.validate_all(&args.tasks, &print) => r,
        sig = signals.recv() => {
            eprintln!("● signal received: removing the validation's containers");
            agent_sandbox::cleanup_registered().await;
            agent_sandbox::remove_run_settled(&docker, &run_id).await;
            return Ok(Signals::exit_code(sig));
        }
    };
    agent_sandbox::remove_run_settled(&docker, &run_id).await;
    let reports = reports?;
    let valid = reports.iter().filter(|r| r.verdict == Verdict::Valid).count();
    if !json {
        println!("{valid} of {} task(s) valid", reports.len());
    }
    Ok(if valid == reports.len() { 0 } else { 1 })
}
