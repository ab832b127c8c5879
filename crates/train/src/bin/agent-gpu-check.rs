//! `agent-gpu-check`: the trainer's checks on a compute device, as one JSON report (see
//! `scripts/gpu-check.sh`). A binary of its own so that a CUDA build of it needs only
//! candle's kernels, not a CUDA build of mistral.rs and llama.cpp.

use std::path::PathBuf;
use std::process::ExitCode;

use agent_train::gpu_check::ranks;
use clap::Parser;

#[derive(Parser)]
#[command(name = "agent-gpu-check", about = "The trainer's checks on a compute device, as one JSON report")]
struct Args {
    /// `cpu`, `cuda` or `cuda:N`.
    #[arg(long, default_value = "cuda")]
    device: String,
    /// Small shapes and few steps.
    #[arg(long)]
    quick: bool,
    /// The device's peak dense f32 TFLOP/s (H100/H200 SXM: 67).
    #[arg(long, default_value_t = 67.0)]
    peak_tflops_f32: f64,
    /// The device's peak dense bf16 TFLOP/s (H100/H200 SXM: 989).
    #[arg(long, default_value_t = 989.0)]
    peak_tflops_bf16: f64,
    /// Where the JSON report goes (stdout when absent).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Run as one rank of the two-process check, writing its outcome to this file (the
    /// check starts its workers this way).
    #[arg(long = "rank-worker", hide = true)]
    rank_worker: Option<PathBuf>,
    /// The rank worker's collective backend: `tcp` or `nccl`.
    #[arg(long = "rank-backend", hide = true, default_value = "tcp")]
    rank_backend: String,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let target = match agent_train::throughput::PerfTarget::parse(&args.device, agent_train::throughput::PerfDtype::F32)
    {
        Ok(t) => t,
        Err(e) => {
            eprintln!("✗ {e}");
            return ExitCode::from(2);
        }
    };
    if let Some(out) = &args.rank_worker {
        let worked = ranks::Backend::parse(&args.rank_backend)
            .and_then(|backend| ranks::rank_worker(&target.device, backend, out));
        return match worked {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("✗ {e}");
                ExitCode::FAILURE
            }
        };
    }
    let options = agent_train::gpu_check::CheckOptions {
        device: target.device,
        quick: args.quick,
        peak_tflops_f32: args.peak_tflops_f32,
        peak_tflops_bf16: args.peak_tflops_bf16,
        // The two-process check starts this very program as its ranks.
        rank_program: std::env::current_exe().ok(),
    };
    let report = agent_train::gpu_check::run(&options);
    let text = match serde_json::to_string_pretty(&report) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("✗ cannot write the report: {e}");
            return ExitCode::from(2);
        }
    };
    match &args.out {
        Some(path) => {
            if let Err(e) = std::fs::write(path, &text) {
                eprintln!("✗ cannot write {}: {e}", path.display());
                return ExitCode::from(2);
            }
        }
        None => println!("{text}"),
    }
    if report.passed() {
        ExitCode::SUCCESS
    } else {
        eprintln!("✗ a check failed or could not run: see the report");
        ExitCode::FAILURE
    }
}
