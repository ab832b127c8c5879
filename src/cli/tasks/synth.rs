//! `agent tasks synth SEED... --out DIR`: the multi-agent task pipeline; a line per
//! ended item, then what was made and why the rest was rejected.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Args;

use agent_bench::synth::{run_synth, RoleModels, SynthOptions, SynthPlan, SynthSummary};
use agent_bench::validate::ValidateOptions;
use agent_core::config::Config;

use super::super::signals::Signals;

/// Arguments of `agent tasks synth`.
#[derive(Debug, Args)]
pub struct SynthArgs {
    /// Seed task folders, or folders of tasks (any TB1 or TB2 tasks).
    #[arg(required_unless_present = "resume")]
    pub seeds: Vec<PathBuf>,
    /// Output folder: Harbor task folders under tasks/, index.jsonl, rejected.jsonl,
    /// the queue and every episode's logs.
    #[arg(long)]
    pub out: PathBuf,
    /// Continue the run in --out (killed or stopped): ended items are kept, claimed
    /// ones are done again.
    #[arg(long)]
    pub resume: bool,
    /// The model of every role without its own (`default`, `scripted:FILE`,
    /// `openai:URL#MODEL`, `anthropic:MODEL`, a GGUF path).
    #[arg(long, default_value = "default")]
    pub model: String,
    /// The idea agents' model.
    #[arg(long)]
    pub idea_model: Option<String>,
    /// The builder agents' model.
    #[arg(long)]
    pub builder_model: Option<String>,
    /// The reviewer agents' model.
    #[arg(long)]
    pub reviewer_model: Option<String>,
    /// The calibration's solver model.
    #[arg(long)]
    pub solver_model: Option<String>,
    /// Variations each idea agent brainstorms.
    #[arg(long, default_value_t = 6)]
    pub brainstorm: usize,
    /// Ideas chosen per seed (each is built).
    #[arg(long, default_value_t = 2)]
    pub ideas: usize,
    /// Builder episodes per task; each after the first sees the last validation.
    #[arg(long, default_value_t = 3)]
    pub rounds: u32,
    /// Turns of one builder or reviewer episode.
    #[arg(long, default_value_t = 30)]
    pub turns: u32,
    /// Seconds of one builder or reviewer episode.
    #[arg(long, default_value_t = 1200)]
    pub episode_secs: u64,
    /// Solver attempts per accepted task for its pass rate (0: no calibration).
    #[arg(long, default_value_t = 0)]
    pub calibrate: u32,
    /// Reference-solution runs of each validation.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=20))]
    pub oracle_runs: u32,
    /// Similarity (0–1) to a seed or an accepted task at which a task is a near-duplicate.
    #[arg(long, default_value_t = 0.7)]
    pub max_similarity: f64,
    /// Items worked on at the same time.
    #[arg(long, default_value_t = 1)]
    pub workers: usize,
    /// Seconds after which an item's work is cut off and the item returned to the queue.
    #[arg(long, default_value_t = 7200)]
    pub claim_timeout: u64,
    #[command(flatten)]
    pub host: super::super::host_args::HostArgs,
    /// No download bars.
    #[arg(long)]
    pub quiet: bool,
    /// Local model settings.
    #[command(flatten)]
    pub local: super::super::LocalArgs,
}

/// Runs the pipeline; exits 0 when its queue is empty (whatever it made).
pub async fn run(args: SynthArgs, config: Config) -> anyhow::Result<u8> {
    let mut signals = Signals::install().context("cannot install signal handlers")?;
    let role = |r: &Option<String>| r.clone().unwrap_or_else(|| args.model.clone());
    let plan = (!args.resume).then(|| SynthPlan {
        seeds: args.seeds.iter().map(|s| std::path::absolute(s).unwrap_or(s.clone())).collect(),
        models: RoleModels {
            idea: role(&args.idea_model),
            builder: role(&args.builder_model),
            reviewer: role(&args.reviewer_model),
            solver: role(&args.solver_model),
        },
        brainstorm: args.brainstorm.max(1),
        ideas_per_seed: args.ideas.max(1),
        build_rounds: args.rounds.max(1),
        episode_turns: args.turns.max(1),
        episode_secs: args.episode_secs.max(10),
        calibrate: args.calibrate,
        oracle_runs: args.oracle_runs,
        max_similarity: args.max_similarity.clamp(0.0, 1.0),
    });
    let opts = SynthOptions {
        out: args.out.clone(),
        resume: args.resume,
        workers: args.workers.max(1),
        claim_timeout: Duration::from_secs(args.claim_timeout.max(60)),
        max_claims: 3,
        resolve: super::super::resolve::resolve_options(config.api_key_env.clone(), args.local.options(), args.quiet),
        validate: ValidateOptions { host: args.host.host_env()?, ..Default::default() },
    };
    if args.resume && !args.seeds.is_empty() {
        eprintln!(
            "● --resume continues the plan in {}/synth.json; the seed tasks given are not used",
            args.out.display()
        );
    }
    let docker = agent_sandbox::connect().await?;
    super::super::bench::sweep_orphans(&agent_sandbox::EnginePool::single(docker.clone())).await;
    eprintln!("● synth → {}", args.out.display());
    let line = |l: String| eprintln!("{l}");
    let summary = tokio::select! {
        r = run_synth(plan, &opts, &config, &docker, &line) => r?,
        sig = signals.recv() => {
            eprintln!("● signal received: removing the run's containers");
            agent_sandbox::cleanup_registered().await;
            agent_sandbox::remove_run_settled(&docker, &agent_bench::synth::run::synth_run_id(&args.out)).await;
            eprintln!("● ended items are kept; continue with: agent tasks synth --resume --out {}", args.out.display());
            return Ok(Signals::exit_code(sig));
        }
    };
    print!("{}", report(&summary, &args.out));
    Ok(0)
}

/// What the run made, and why the rest was rejected.
fn report(s: &SynthSummary, out: &std::path::Path) -> String {
    let mut text = format!(
        "\n{} task(s) accepted, {} item(s) rejected or failed; {} tokens; {:.0} s\n",
        s.accepted.len(),
        s.rejected.len(),
        s.tokens,
        s.secs
    );
    for e in &s.accepted {
        let rate = e.pass_rate.map(|r| format!(", solver pass rate {r:.2}")).unwrap_or_default();
        text.push_str(&format!(
            "  ✓ tasks/{}  ({}, {}, from {}, {} round(s){rate})\n",
            e.name, e.difficulty, e.category, e.seed, e.build_rounds
        ));
    }
    for r in &s.rejected {
        text.push_str(&format!("  ✗ {} {} [{}]: {}\n", r.role.as_str(), r.id, r.status, r.reason));
    }
    text.push_str(&format!("index: {}\n", out.join("index.jsonl").display()));
    text
}
