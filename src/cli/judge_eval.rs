//! `agent judge-eval`: rank judge models on the hand-made trajectory suite.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;

use agent_bench::judge::eval::{evaluate, load_suite, rank};
use agent_bench::judge::report;
use agent_bench::judge::{Judge, JudgeOptions};
use agent_llm::{resolve_model, ModelSpec};

/// Arguments of `agent judge-eval`.
#[derive(Debug, clap::Args)]
pub struct JudgeEvalArgs {
    /// A judge model spec; repeat to compare several (default: the built-in model).
    #[arg(long = "judge")]
    pub judges: Vec<String>,
    /// Judgements per case and judge (their spread is the variance column).
    #[arg(long, default_value_t = 3)]
    pub attempts: u32,
    /// Where the report goes.
    #[arg(long, default_value = "runs/judge-eval")]
    pub output: PathBuf,
    /// The suite: a folder of case files (default: the built-in suite).
    #[arg(long)]
    pub suite: Option<PathBuf>,
    /// The rubric version in prompts/judge/.
    #[arg(long, default_value = "v1")]
    pub prompt: String,
    /// Judgements in flight at once, per judge.
    #[arg(long, default_value_t = 4)]
    pub concurrency: usize,
    /// Longest wait for one judge answer, in seconds.
    #[arg(long, default_value_t = 300)]
    pub timeout_secs: u64,
    /// Tries per judgement (a malformed answer gets a correction message).
    #[arg(long, default_value_t = 3)]
    pub tries: u32,
    /// Tokens of one judge answer.
    #[arg(long, default_value_t = 768)]
    pub max_tokens: u32,
    /// Environment variable with the API key of `openai:`/`anthropic:` judges.
    #[arg(long)]
    pub api_key_env: Option<String>,
    #[command(flatten)]
    pub local: super::LocalArgs,
}

/// Runs the suite against every judge and writes the report.
pub async fn run(args: JudgeEvalArgs) -> anyhow::Result<u8> {
    let suite = match &args.suite {
        Some(dir) => dir.clone(),
        None => agent_core::assets::asset_path("judge-eval")?,
    };
    let cases = load_suite(&suite)?;
    let judges = if args.judges.is_empty() { vec!["default".to_string()] } else { args.judges.clone() };
    let resolve = super::resolve::resolve_options(args.api_key_env.clone(), args.local.options(), false);
    let opts = JudgeOptions {
        prompt_version: args.prompt.clone(),
        attempts: args.tries,
        request_timeout: Duration::from_secs(args.timeout_secs),
        concurrency: args.concurrency,
        max_tokens: args.max_tokens,
        ..JudgeOptions::default()
    };
    let mut results = Vec::new();
    for spec_text in &judges {
        let spec = ModelSpec::parse(spec_text)?;
        let backend = resolve_model(&spec, &resolve).await?;
        let judge = Judge::new(backend, opts.clone())?;
        eprintln!("● judging {} cases × {} with {spec_text}", cases.len(), args.attempts);
        let result = evaluate(&judge, spec_text, &cases, args.attempts).await;
        eprintln!("  {spec_text}: {:.1}% in range, {} failed judgement(s)", result.pass_rate * 100.0, result.failures);
        results.push(result);
    }
    let results = rank(results);
    print!("{}", report::ranking_table(&results));
    std::fs::create_dir_all(&args.output).with_context(|| format!("cannot create {}", args.output.display()))?;
    let write = |name: &str, text: String| {
        let path = args.output.join(name);
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))
    };
    write("report.md", report::markdown(&results, args.attempts))?;
    write("report.html", report::html(&results, args.attempts))?;
    write("results.json", serde_json::to_string_pretty(&results)?)?;
    println!("report: {}", args.output.join("report.html").display());
    Ok(0)
}
