//! `agent train`: GRPO with LoRA or full updates on our candle Qwen3, with rollouts run
//! through the same agent loop (and bench trials) as every other front end.
//!
//! Without the `engines` feature (on by default) the crate is the model code, the update,
//! the presets and the device checks: what a CUDA build of `agent-gpu-check` needs.

// Without the engines, parts of the model code only the trainer calls are unused.
#![cfg_attr(not(feature = "engines"), allow(dead_code, unused_imports))]

pub mod backward;
pub mod checkpoint;
pub mod dist;
pub mod error;
#[cfg(feature = "engines")]
pub mod eval;
pub mod gpu_check;
pub mod grpo;
pub mod memory_plan;
pub mod metrics;
pub mod model;
pub mod optim;
pub mod plot;
pub mod preset;
#[cfg(feature = "engines")]
mod progress;
#[cfg(feature = "engines")]
pub mod rollout;
#[cfg(feature = "engines")]
pub mod run;
#[cfg(feature = "engines")]
pub mod setup;
#[cfg(feature = "engines")]
pub mod sft;
#[cfg(feature = "engines")]
mod step;
pub mod throughput;
#[cfg(test)]
#[cfg(feature = "engines")]
mod toy_sim;
pub mod update;
#[cfg(feature = "engines")]
pub mod warm_start;
pub mod zero3;

pub use error::TrainError;
#[cfg(feature = "engines")]
pub use eval::EvalReport;
#[cfg(feature = "engines")]
pub use run::{train, AdapterEval, TrainOptions};
