//! Local model specs to backends: the built-in models (fetched once and cached), model
//! files and folders, and `hf:` ids, each run by the engine that runs it best.

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;

use agent_llm::models::{catalog, pull};
use agent_llm::{
    LlmError, LocalEngine, LocalLoader, LocalModelOptions, ModelBackend, ModelSpec, ResolveOptions, SamplingDefaults,
};

use crate::{LlamaCppBackend, LlamaCppOptions, LlamaServer, LlamaServerOptions, MistralRsBackend};

/// The default model when a GPU is present.
const GPU_DEFAULT: &str = "Qwen/Qwen3-32B";

/// The engines of this crate as a [`LocalLoader`].
#[derive(Debug, Clone, Copy, Default)]
pub struct Engines;

/// Resolve options that load local models with this crate's engines.
pub fn resolve_options() -> ResolveOptions {
    ResolveOptions { engines: Some(Arc::new(Engines)), ..ResolveOptions::default() }
}

/// What `default` means on this machine: Qwen3-32B from the hub with a CUDA build and a
/// GPU, else the built-in CPU default.
pub fn default_target() -> ModelSpec {
    if MistralRsBackend::gpu_available() {
        ModelSpec::Hf { repo: GPU_DEFAULT.to_string(), revision: None }
    } else {
        ModelSpec::Builtin(catalog::CPU_DEFAULT.to_string())
    }
}

#[async_trait]
impl LocalLoader for Engines {
    async fn load(&self, spec: &ModelSpec, opts: &ResolveOptions) -> Result<Arc<dyn ModelBackend>, LlmError> {
        match spec {
            ModelSpec::Default if MistralRsBackend::gpu_available() => {
                Ok(Arc::new(MistralRsBackend::load_hub(GPU_DEFAULT, None, &opts.local).await?))
            }
            ModelSpec::Default => load_builtin(catalog::CPU_DEFAULT, opts).await,
            ModelSpec::Builtin(name) => load_builtin(name, opts).await,
            ModelSpec::Local(path) => load_local(path, &opts.local).await,
            ModelSpec::Hf { repo, revision } => {
                Ok(Arc::new(MistralRsBackend::load_hub(repo, revision.as_deref(), &opts.local).await?))
            }
            ModelSpec::Scripted(_) | ModelSpec::OpenAi { .. } | ModelSpec::Anthropic { .. } => {
                agent_llm::resolve_model(spec, opts).await
            }
        }
    }
}

/// Makes sure the built-in model `name` is cached (downloading it, reported to
/// `opts.progress`, if needed) and loads it like any local GGUF file, with its recommended sampling.
async fn load_builtin(name: &str, opts: &ResolveOptions) -> Result<Arc<dyn ModelBackend>, LlmError> {
    let path = pull::ensure_builtin(name, opts.progress.clone())
        .await
        .map_err(|e| LlmError::Other(format!("cannot get the built-in model {name}: {e}")))?;
    let mut local = opts.local.clone();
    if let Some(s) = catalog::find(name).and_then(|m| m.sampling) {
        local.sampling = SamplingDefaults {
            temperature: Some(s.temperature),
            top_p: Some(s.top_p),
            top_k: Some(s.top_k),
            repeat_penalty: Some(s.repeat_penalty),
        };
    }
    load_local(&path, &local).await
}

/// Loads a local model file or directory with the engine that runs it best: llama.cpp
/// for GGUF files on the CPU (several times faster than mistral.rs there), mistral.rs
/// for safetensors directories and GPUs.
async fn load_local(path: &Path, opts: &LocalModelOptions) -> Result<Arc<dyn ModelBackend>, LlmError> {
    let is_gguf = path.is_file() && path.extension().is_some_and(|e| e.eq_ignore_ascii_case("gguf"));
    let use_llamacpp = match opts.engine {
        LocalEngine::MistralRs => false,
        LocalEngine::LlamaCpp if !is_gguf => {
            return Err(LlmError::UnknownSpec {
                spec: path.display().to_string(),
                hint: "the llama.cpp engine runs .gguf files only; use `--engine mistral.rs` for a \
                       safetensors directory"
                    .into(),
            })
        }
        LocalEngine::LlamaCpp => true,
        LocalEngine::Auto => is_gguf && (opts.force_cpu || !MistralRsBackend::gpu_available()),
    };
    if !use_llamacpp {
        return Ok(Arc::new(MistralRsBackend::load(path, opts).await?));
    }
    let lora = opts.lora.as_deref().map(gguf_adapter).transpose()?;
    if let Some(parallel) = opts.serve_parallel {
        let server_opts = LlamaServerOptions {
            parallel,
            context_per_request: opts.context_tokens.unwrap_or(0),
            threads: opts.threads.unwrap_or(0),
            lora,
            sampling: opts.sampling,
        };
        return Ok(Arc::new(LlamaServer::start(path, &server_opts).await?));
    }
    let llama_opts = LlamaCppOptions {
        n_ctx: opts.context_tokens.unwrap_or(0),
        threads: opts.threads.unwrap_or(0),
        flash_attention: None,
        prompt_cache_dir: opts.prompt_cache_dir.clone(),
        sampling: opts.sampling,
        lora,
    };
    let path = path.to_path_buf();
    // llama.cpp loads synchronously (mapping the file, allocating the KV cache).
    let backend = tokio::task::spawn_blocking(move || LlamaCppBackend::load_with(&path, &llama_opts))
        .await
        .map_err(|e| LlmError::Other(format!("the llama.cpp loader stopped: {e}")))??;
    Ok(Arc::new(backend))
}

/// The llama.cpp adapter file a `--lora` argument names for a GGUF model: the file
/// itself, or `adapter-model.gguf` in the folder `agent train` wrote.
fn gguf_adapter(arg: &Path) -> Result<std::path::PathBuf, LlmError> {
    if arg.is_file() && arg.extension().is_some_and(|e| e.eq_ignore_ascii_case("gguf")) {
        return Ok(arg.to_path_buf());
    }
    let inside = arg.join(crate::LORA_GGUF_FILE);
    if inside.is_file() {
        return Ok(inside);
    }
    let hint = if arg.join("adapter_config.json").is_file() {
        format!(
            "this adapter folder has PEFT files but no {} for llama.cpp; adapters written by \
             `agent train` since it trains GGUF bases carry one, a PEFT-only adapter needs the \
             model's safetensors folder (run through mistral.rs)",
            crate::LORA_GGUF_FILE
        )
    } else {
        format!(
            "a GGUF model takes a LoRA adapter as a llama.cpp adapter GGUF file or a folder holding {}",
            crate::LORA_GGUF_FILE
        )
    };
    Err(LlmError::UnknownSpec { spec: arg.display().to_string(), hint })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn local_specs_load_or_explain() {
        let opts = resolve_options();
        let dir = tempfile::tempdir().unwrap();
        match agent_llm::resolve_model(&ModelSpec::Local(dir.path().to_path_buf()), &opts).await {
            Err(LlmError::UnknownSpec { hint, .. }) => assert!(hint.contains("config.json"), "{hint}"),
            Err(other) => panic!("unexpected error {other}"),
            Ok(_) => panic!("an empty directory is not a model"),
        }
        let llama = ResolveOptions {
            local: LocalModelOptions { engine: LocalEngine::LlamaCpp, ..Default::default() },
            ..opts.clone()
        };
        match agent_llm::resolve_model(&ModelSpec::Local(dir.path().to_path_buf()), &llama).await {
            Err(LlmError::UnknownSpec { hint, .. }) => assert!(hint.contains(".gguf files only"), "{hint}"),
            Err(other) => panic!("unexpected error {other}"),
            Ok(_) => panic!("llama.cpp cannot run a directory"),
        }
        let b = agent_llm::resolve_model(&ModelSpec::parse("openai:http://127.0.0.1:9/v1#m").unwrap(), &opts)
            .await
            .unwrap();
        assert_eq!(b.name(), "m", "remote specs still resolve through the local loader's options");
    }

    #[test]
    fn a_gguf_model_takes_the_adapter_file_or_the_folder_agent_train_wrote() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("mine.gguf");
        std::fs::write(&file, b"GGUF").unwrap();
        assert_eq!(gguf_adapter(&file).unwrap(), file);
        let folder = dir.path().join("adapter");
        std::fs::create_dir(&folder).unwrap();
        std::fs::write(folder.join("adapter_config.json"), "{}").unwrap();
        match gguf_adapter(&folder) {
            Err(LlmError::UnknownSpec { hint, .. }) => {
                assert!(hint.contains("PEFT files but no adapter-model.gguf"), "{hint}")
            }
            other => panic!("a PEFT-only folder cannot serve a GGUF model: {other:?}"),
        }
        std::fs::write(folder.join(crate::LORA_GGUF_FILE), b"GGUF").unwrap();
        assert_eq!(gguf_adapter(&folder).unwrap(), folder.join("adapter-model.gguf"));
    }

    #[cfg(not(feature = "cuda"))]
    #[test]
    fn the_cpu_default_is_the_built_in_model() {
        assert_eq!(default_target(), ModelSpec::Builtin(catalog::CPU_DEFAULT.into()));
    }
}
