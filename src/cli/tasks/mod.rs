//! `agent tasks …`: write procedurally generated training and held-out tasks, list the
//! task families, validate task folders (`validate.rs`), and make tasks with a
//! multi-agent pipeline (`synth.rs`).

mod synth;
mod validate;

use std::path::PathBuf;

use clap::{Args, Subcommand};

use agent_core::config::Config;

use agent_bench::generate::{self, GenerateOptions, Split, MANIFEST, MAX_LEVEL};

/// Subcommands of `agent tasks`.
#[derive(Debug, Subcommand)]
pub enum TasksCommand {
    /// Write generated TB1 tasks (each verified by its own tests in its container) and a
    /// manifest.json into a folder that `agent bench` and `agent train` take.
    Generate(GenerateArgs),
    /// List the task families with what each level asks.
    #[command(name = "list-families")]
    ListFamilies(ListFamiliesArgs),
    /// Check task folders (TB1 or TB2) before training or bench: the image builds, the
    /// tests fail untouched, the reference solution passes them in fresh containers
    /// every time, the test weights are valid.
    Validate(validate::ValidateArgs),
    /// Make new tasks from seed tasks: idea, builder and reviewer agents (and a solver
    /// for calibration), every task validated by running it.
    Synth(Box<synth::SynthArgs>),
}

/// Arguments of `agent tasks generate`.
#[derive(Debug, Args)]
pub struct GenerateArgs {
    /// A family to draw from (repeatable; default: every family, in turn). See
    /// `agent tasks list-families`.
    #[arg(long = "family", value_name = "NAME")]
    pub families: Vec<String>,
    /// A folder of family files (`*.toml`, see docs/tasks.md) whose families join the
    /// built-in ones (repeatable).
    #[arg(long = "families-dir", value_name = "DIR")]
    pub family_dirs: Vec<PathBuf>,
    /// Levels 1 to 3, comma-separated, taken in turn; level 1 is meant for the smallest
    /// models (one command, every name given).
    #[arg(long, value_name = "N", value_delimiter = ',', default_value = "1")]
    pub level: Vec<u8>,
    /// `train`, or `heldout`: held-out tasks share no file name, word, field, bug kind or
    /// number with any train task.
    #[arg(long, value_enum, default_value_t = Split::Train)]
    pub split: Split,
    /// Seed: the same seed and arguments write byte-identical tasks.
    #[arg(long)]
    pub seed: u64,
    /// How many tasks.
    #[arg(short = 'n', long = "count", value_name = "N")]
    pub count: usize,
    /// Output folder: new, empty, or written by an earlier `agent tasks generate`
    /// (its tasks are replaced; any other folder is refused).
    pub dir: PathBuf,
}

/// Arguments of `agent tasks list-families`.
#[derive(Debug, Args)]
pub struct ListFamiliesArgs {
    /// A folder of family files to list besides the built-in families (repeatable).
    #[arg(long = "families-dir", value_name = "DIR")]
    pub family_dirs: Vec<PathBuf>,
}

/// Runs a tasks subcommand; `config` reads the settings (with the project's, as far as
/// it is trusted) for the subcommands that run containers.
pub async fn run(cmd: TasksCommand, config: impl FnOnce() -> anyhow::Result<Config>) -> anyhow::Result<u8> {
    match cmd {
        TasksCommand::ListFamilies(args) => {
            list_families(&args.family_dirs)?;
            Ok(0)
        }
        TasksCommand::Generate(args) => generate_tasks(args),
        TasksCommand::Validate(args) => validate::run(args, config()?).await,
        TasksCommand::Synth(args) => synth::run(*args, config()?).await,
    }
}

fn list_families(dirs: &[PathBuf]) -> anyhow::Result<()> {
    use std::io::Write;
    let all = generate::catalog(dirs)?;
    let width = all.iter().map(|f| f.name.len()).max().unwrap_or(0);
    let mut text = String::new();
    for f in &all {
        let origin = if f.origin == generate::BUILT_IN { String::new() } else { format!("  ({})", f.origin) };
        text += &format!("{:width$}  {}{origin}\n", f.name, f.summary);
        for (i, what) in f.levels.iter().enumerate() {
            text += &format!("{:width$}    level {}: {what}\n", "", i + 1);
        }
    }
    text += &format!(
        "\nLevel 1 is meant for the smallest models (Qwen2.5-Coder-0.5B); levels 2 and {MAX_LEVEL} add steps.\n"
    );
    text += &format!("{} families; add your own as family files (docs/tasks.md) with --families-dir DIR.\n", all.len());
    // A reader that stops early (`| head`) is not an error.
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
    Ok(())
}

fn generate_tasks(args: GenerateArgs) -> anyhow::Result<u8> {
    let opts = GenerateOptions {
        families: args.families,
        family_dirs: args.family_dirs,
        levels: args.level,
        split: args.split,
        seed: args.seed,
        count: args.count,
    };
    let tasks = generate::generate(&opts)?;
    let manifest = generate::write_tasks(&args.dir, &tasks, opts.split, opts.seed)?;
    for t in &manifest.tasks {
        println!("{}", t.name);
    }
    eprintln!(
        "● wrote {} {} task(s) (seed {}) to {}; their parameters are in {}",
        manifest.tasks.len(),
        opts.split.as_str(),
        opts.seed,
        args.dir.display(),
        args.dir.join(MANIFEST).display()
    );
    eprintln!("● check them with: agent bench --agent oracle {}", args.dir.display());
    Ok(0)
}
