//! `agent train`: GRPO with LoRA or full updates on our candle Qwen3.

pub mod metrics;
pub mod plan;
pub mod plot;
pub mod preset;
