//! `agent model …`: list and fetch the built-in models, write a tiny random Qwen3.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use clap::Subcommand;

use agent_llm::models::catalog::{self, BUILTIN};
use agent_llm::models::pull::{self, CacheState, PullOptions, PullOutcome};
use agent_llm::ModelSpec;
use agent_local::tiny_qwen3::{self, TinyQwen3Config};

/// Subcommands of `agent model`.
#[derive(Debug, Subcommand)]
pub enum ModelCommand {
    /// List the built-in models: what each is, its size, whether it is cached, and which
    /// one `default` means here.
    List,
    /// Download a built-in model into the cache (once; a valid cached copy is reused) and
    /// print its path.
    Pull {
        /// Which model: smollm2-135m, qwen2.5-coder-0.5b, qwen2.5-coder-1.5b, or `default`
        /// (the CPU default; see `agent model list`).
        #[arg(default_value = "default")]
        name: String,
        /// No progress bar and no summary on stderr (only the path on stdout).
        #[arg(long, short)]
        quiet: bool,
    },
    /// Write a tiny random Qwen3 (config, safetensors, tokenizer) for tests.
    #[command(name = "tiny-qwen3")]
    TinyQwen3 {
        /// Output folder (created if missing).
        dir: PathBuf,
        /// Seed of the random weights.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Decoder layers.
        #[arg(long, default_value_t = 2)]
        layers: usize,
        /// Model width.
        #[arg(long, default_value_t = 64)]
        hidden: usize,
        /// Query heads.
        #[arg(long, default_value_t = 4)]
        heads: usize,
        /// Key/value heads.
        #[arg(long, default_value_t = 2)]
        kv_heads: usize,
        /// Per-head width (default: hidden / heads).
        #[arg(long)]
        head_dim: Option<usize>,
        /// MLP width.
        #[arg(long, default_value_t = 128)]
        intermediate: usize,
        /// Embedding rows (default: the tokenizer's size rounded up to 64).
        #[arg(long)]
        vocab: Option<usize>,
        /// BPE merges to learn for the tokenizer.
        #[arg(long, default_value_t = 400)]
        merges: usize,
    },
    /// Print a safetensors model's next-token logits after some token ids, as mistral.rs
    /// computes them (with `--lora`, the adapter merged the way `agent run --lora` does).
    Logits {
        /// Model folder (config.json + safetensors).
        #[arg(long)]
        model: PathBuf,
        /// PEFT adapter folder.
        #[arg(long)]
        lora: Option<PathBuf>,
        /// Comma-separated prompt token ids.
        #[arg(long, value_delimiter = ',', required = true)]
        tokens: Vec<u32>,
    },
}

/// Runs a model subcommand.
pub async fn run(cmd: ModelCommand) -> anyhow::Result<u8> {
    match cmd {
        ModelCommand::Logits { model, lora, tokens } => {
            let opts = agent_llm::LocalModelOptions { force_cpu: true, lora, ..Default::default() };
            let backend = agent_local::MistralRsBackend::load(&model, &opts).await?;
            let logits = backend.next_token_logits(tokens).await?;
            println!("{}", serde_json::to_string(&logits)?);
            Ok(0)
        }
        ModelCommand::List => list().await,
        ModelCommand::Pull { name, quiet } => {
            let model = pull::lookup(&name)?;
            let opts = PullOptions::from_env(super::resolve::download_progress(quiet))?;
            let started = Instant::now();
            let pulled = pull::pull_builtin(model, &opts).await?;
            if !quiet {
                match pulled.outcome {
                    PullOutcome::Cached => eprintln!("{} is already cached", model.name),
                    PullOutcome::Downloaded => eprintln!(
                        "downloaded {} ({}) from {} in {:.1}s",
                        model.name,
                        human_size(model.size),
                        pulled.from.as_deref().unwrap_or("?"),
                        started.elapsed().as_secs_f64()
                    ),
                }
            }
            println!("{}", pulled.path.display());
            Ok(0)
        }
        ModelCommand::TinyQwen3 {
            dir,
            seed,
            layers,
            hidden,
            heads,
            kv_heads,
            head_dim,
            intermediate,
            vocab,
            merges,
        } => {
            let cfg = TinyQwen3Config {
                seed,
                num_hidden_layers: layers,
                hidden_size: hidden,
                num_attention_heads: heads,
                num_key_value_heads: kv_heads,
                head_dim,
                intermediate_size: intermediate,
                vocab_size: vocab,
                num_merges: merges,
                ..TinyQwen3Config::default()
            };
            tiny_qwen3::write_tiny_qwen3(&dir, &cfg)
                .with_context(|| format!("cannot write a tiny Qwen3 to {}", dir.display()))?;
            println!("{}", dir.display());
            Ok(0)
        }
    }
}

/// `agent model list`: one row per built-in model, then what `default` means.
async fn list() -> anyhow::Result<u8> {
    let models_dir = agent_llm::models::models_dir()?;
    let dir = models_dir.clone();
    // Checking the cache may hash a file (small models, or a big one without a sidecar).
    let states =
        tokio::task::spawn_blocking(move || BUILTIN.iter().map(|m| pull::cache_state(m, &dir)).collect::<Vec<_>>())
            .await?;
    let default = agent_local::default_target();
    let rows: Vec<[String; 5]> = BUILTIN
        .iter()
        .zip(&states)
        .map(|(m, state)| {
            let mark = if default == ModelSpec::Builtin(m.name.to_string()) { "default" } else { "" };
            let cached = match state {
                CacheState::Cached(path) => format!("yes  {}", path.display()),
                CacheState::Missing(_) => "no".to_string(),
                CacheState::Damaged(path) => format!("damaged (fetched again on use)  {}", path.display()),
            };
            [m.name.to_string(), mark.to_string(), m.description.to_string(), human_size(m.size), cached]
        })
        .collect();
    let header = ["NAME", "", "MODEL", "SIZE", "CACHED"].map(String::from);
    let mut widths = [0usize; 5];
    for row in std::iter::once(&header).chain(&rows) {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    for row in std::iter::once(&header).chain(&rows) {
        let line = row
            .iter()
            .zip(widths)
            .enumerate()
            .map(|(i, (cell, w))| if i == 3 { format!("{cell:>w$}") } else { format!("{cell:<w$}") })
            .collect::<Vec<_>>()
            .join("  ");
        println!("{}", line.trim_end());
    }
    println!();
    match &default {
        ModelSpec::Builtin(name) => println!(
            "`default` is {name} (no GPU; set by catalog::CPU_DEFAULT). With a CUDA build and a GPU it is Qwen/Qwen3-32B."
        ),
        other => println!("`default` is {other} (a GPU is present); without one it is {}.", catalog::CPU_DEFAULT),
    }
    println!(
        "Cache: {}  (`agent model pull NAME` fetches a model; built-in names work as --model)",
        models_dir.display()
    );
    Ok(0)
}

/// Bytes as MB or GB (decimal, as download sizes are usually given).
fn human_size(bytes: u64) -> String {
    if bytes >= 1_000_000_000 {
        format!("{:.2} GB", bytes as f64 / 1e9)
    } else {
        format!("{:.0} MB", bytes as f64 / 1e6)
    }
}
