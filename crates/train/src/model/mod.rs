//! The trainable Qwen3: configuration, weights, LoRA, chunked log-probs, adapter files.

pub mod attention;
pub mod config;
pub mod gguf;
pub mod layer_backward;
/// The CPU kernels live in their own crate, compiled with optimisations even in dev builds.
pub use agent_train_kernels::{frozen, fused};
pub mod logprobs;
pub mod lora;
/// llama.cpp's adapter file (its name comes from the engines).
#[cfg(feature = "engines")]
pub mod lora_gguf;
pub mod peft;
pub mod prefix;
pub mod qwen3;

pub use config::Qwen3Config;
pub use logprobs::{token_logprobs, TokenBatch, DEFAULT_CHUNK};
pub use lora::{ForwardMode, Linear, Lora, LoraSettings, Param, LORA_TARGETS};
pub use prefix::{shared_len, SharedPrefix};
pub use qwen3::{KvCache, Qwen3, TrainMode};

#[cfg(test)]
mod kernel_tests;
#[cfg(test)]
mod logprob_tests;
#[cfg(test)]
pub(crate) mod tests;
