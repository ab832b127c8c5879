//! `agent train`: GRPO with LoRA or full updates on our candle Qwen3, with rollouts run
//! through the same agent loop (and bench trials) as every other front end.

pub mod checkpoint;
pub mod error;
pub mod grpo;
pub mod metrics;
pub mod model;
pub mod optim;
pub mod parallel;
pub mod perf;
pub mod plan;
pub mod plot;
pub mod preset;
pub mod rollout;
pub mod run;
pub mod setup;
pub mod sft;
mod step;
#[cfg(test)]
mod toy_sim;
pub mod update;

pub use error::TrainError;
pub use run::{train, EvalReport, TrainOptions};
