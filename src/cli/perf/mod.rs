//! `agent perf …`: speed measurements for docs/benchmarks.md (Terminal-Bench scores are
//! `agent bench`).

mod model;

use std::path::PathBuf;

use clap::Subcommand;

use agent_train::throughput::{PerfMode, PerfShape};

/// What to measure.
#[derive(Debug, Subcommand)]
pub enum PerfCommand {
    /// A local model: decode and prompt tokens/s, first-turn latency with the real system
    /// prompt, and prompt tokens recomputed per turn over an episode.
    Model(model::ModelPerfArgs),
    /// Training throughput: forward + backward (+ AdamW) tokens/s of a random Qwen3 with LoRA.
    Train {
        #[arg(long, value_enum, default_value = "tiny")]
        shape: PerfShape,
        #[arg(long, value_enum, default_value = "step")]
        mode: PerfMode,
        #[arg(long, default_value_t = 8)]
        batch: usize,
        #[arg(long, default_value_t = 128)]
        seq: usize,
        /// CPU threads (sets RAYON_NUM_THREADS, which candle's matrix products follow).
        #[arg(long)]
        threads: Option<usize>,
        #[arg(long, default_value_t = 5)]
        steps: usize,
        #[arg(long, default_value_t = 1)]
        warmup: usize,
        /// `cpu`, or `cuda` / `cuda:N` (needs a build with `--features cuda`).
        #[arg(long, default_value = "cpu")]
        device: String,
        /// Compute precision.
        #[arg(long, value_enum, default_value = "f32")]
        dtype: agent_train::throughput::PerfDtype,
        /// Also write the report as JSON here.
        #[arg(long)]
        json: Option<PathBuf>,
        /// Recompute each layer in the backward pass (as the GPU presets train).
        #[arg(long)]
        recompute: bool,
        /// Compute every attention score at once instead of in tiles (to compare memory).
        #[arg(long)]
        whole_attention: bool,
    },
    /// The interactive UI's rendering: frame time and key-to-frame latency.
    Tui {
        #[arg(long, default_value_t = 120)]
        width: u16,
        #[arg(long, default_value_t = 40)]
        height: u16,
        #[arg(long, default_value_t = 200)]
        frames: usize,
    },
}

/// Runs a measurement and prints its report.
pub async fn run(cmd: PerfCommand) -> anyhow::Result<u8> {
    match cmd {
        PerfCommand::Model(args) => model::run(args).await,
        PerfCommand::Train {
            shape,
            mode,
            batch,
            seq,
            threads,
            steps,
            warmup,
            device,
            dtype,
            json,
            recompute,
            whole_attention,
        } => {
            if let Some(t) = threads {
                std::env::set_var("RAYON_NUM_THREADS", t.to_string());
            }
            let target = agent_train::throughput::PerfTarget::parse(&device, dtype)?;
            let knobs = agent_train::throughput::MemoryKnobs { recompute, whole_attention };
            let report =
                agent_train::throughput::measure_with(shape, mode, (batch, seq), (steps, warmup), &target, knobs)?;
            let text = serde_json::to_string_pretty(&report)?;
            if let Some(path) = json {
                std::fs::write(&path, &text)?;
            }
            println!("{text}");
            Ok(0)
        }
        PerfCommand::Tui { width, height, frames } => {
            let report = agent_tui::frame_time::measure(width, height, &[100, 1_000, 10_000, 100_000], frames)?;
            print!("{}", agent_tui::frame_time::format_report(&report));
            Ok(0)
        }
    }
}
