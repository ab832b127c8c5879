//! Models that run in this process: llama.cpp for GGUF files on the CPU, mistral.rs for
//! safetensors folders and GPUs, behind `agent_llm::ModelBackend`; the loader that
//! turns local model specs into them ([`Engines`], passed to core as its
//! `LocalLoader`); the speed benchmark of a model ([`model_speed`]); and a tiny random Qwen3
//! for tests ([`tiny_qwen3`]).

pub mod constraint;
mod llamacpp;
mod loader;
pub mod lora_merge;
mod mistralrs;
pub mod model_speed;
mod rng;
pub mod tiny_qwen3;

pub use llamacpp::{
    reference_logits as llamacpp_reference_logits, reference_logits_of_ids as llamacpp_reference_logits_of_ids,
    LlamaCppBackend, LlamaCppOptions, LlamaRollouts, LlamaServer, LlamaServerOptions, PromptText, RolloutEngineOptions,
    TokenChooser, TokenReply, TokenRequest, Vocabulary, LORA_GGUF_FILE,
};
pub use loader::{default_target, resolve_options, Engines};
pub use mistralrs::{MistralRsBackend, TokenCompletion};
