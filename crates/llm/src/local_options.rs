//! How to load a model in this process: options read from the command line and the
//! config, carried by [`super::ResolveOptions`] to the engines of `agent-local`.

use std::path::PathBuf;

/// Which inference engine runs a local model.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LocalEngine {
    /// llama.cpp for GGUF files on the CPU, mistral.rs for everything else.
    #[default]
    Auto,
    /// llama.cpp (GGUF files only).
    LlamaCpp,
    /// mistral.rs.
    MistralRs,
}

impl std::str::FromStr for LocalEngine {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().replace(['.', '-', '_'], "").as_str() {
            "auto" => Ok(Self::Auto),
            "llamacpp" => Ok(Self::LlamaCpp),
            "mistralrs" => Ok(Self::MistralRs),
            _ => Err(format!("unknown engine `{s}` (known: auto, llama.cpp, mistral.rs)")),
        }
    }
}

/// How to load a local model.
#[derive(Debug, Clone, Default)]
pub struct LocalModelOptions {
    /// In-situ quantisation of a safetensors model (e.g. `Q4K`, `Q8_0`).
    pub isq: Option<String>,
    /// Stay on the CPU even when a GPU is available.
    pub force_cpu: bool,
    /// Qwen3-style thinking: `Some(false)` disables it in the chat template.
    pub thinking: Option<bool>,
    /// The engine; `Auto` picks llama.cpp for GGUF files on the CPU.
    pub engine: LocalEngine,
    /// llama.cpp's context window in tokens (default: the model's own, at most 32,768).
    pub context_tokens: Option<u32>,
    /// CPU threads for llama.cpp (default: every core).
    pub threads: Option<u32>,
    /// Where llama.cpp keeps the KV cache of a session's first prompt, so that the next
    /// session starting with the same system prompt answers at once; `None` keeps none.
    pub prompt_cache_dir: Option<PathBuf>,
    /// A PEFT LoRA adapter folder applied to a safetensors model: merged into a cached
    /// copy of the base weights (mistral.rs 0.8.1 cannot load a local adapter itself).
    pub lora: Option<PathBuf>,
    /// Sampling where a request sets none (llama.cpp; built-in models bring their own).
    pub sampling: super::SamplingDefaults,
    /// Load a GGUF model on llama.cpp for serving this many requests at once (`agent
    /// serve`): token-level generation with log-probabilities, one KV sequence per request,
    /// `context_tokens` per request. `None` loads the single-conversation chat engine.
    pub serve_parallel: Option<u32>,
}
