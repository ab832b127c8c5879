//! Model specs as given on the command line (`--model`) and in the config, and their
//! resolution to a backend.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{
    AnthropicBackend, AnthropicConfig, LlamaCppBackend, LlamaCppOptions, LlmError, LocalBackend, LocalEngine,
    LocalModelOptions, ModelBackend, OpenAiBackend, OpenAiConfig, ScriptedBackend,
};

/// The default model when a GPU is present.
const GPU_DEFAULT: &str = "Qwen/Qwen3-32B";

/// How to build a backend from a spec.
#[derive(Debug, Clone, Default)]
pub struct ResolveOptions {
    /// Name of the environment variable with the API key of `openai:` models.
    pub api_key_env: Option<String>,
    /// Loading options of local models.
    pub local: LocalModelOptions,
    /// Show a progress bar while the default model downloads.
    pub progress: bool,
}

/// The accepted forms, for error hints.
const FORMS: &str = "accepted forms: `default` (the built-in model), a built-in model name \
                     (`agent model list`: smollm2-135m, qwen2.5-coder-0.5b, qwen2.5-coder-1.5b), \
                     a local model directory or GGUF file path, `hf:ORG/NAME[@REVISION]`, `openai:URL#MODEL` (e.g. \
                     openai:http://127.0.0.1:8080/v1#Qwen/Qwen3-32B), `anthropic:MODEL` or \
                     `scripted:FILE`";

/// Which model to use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelSpec {
    /// `scripted:FILE` – replays the replies listed in a YAML file.
    Scripted(PathBuf),
    /// `openai:URL#MODEL` – an OpenAI-compatible endpoint.
    OpenAi { base_url: String, model: String },
    /// `default` – the built-in CPU default ([`crate::models::catalog::CPU_DEFAULT`]), or
    /// Qwen3-32B with a CUDA build and a GPU.
    Default,
    /// A built-in model by its catalog name, e.g. `qwen2.5-coder-0.5b` (fetched once and
    /// cached; see `agent model list`).
    Builtin(String),
    /// A local model directory or file.
    Local(PathBuf),
    /// `hf:ORG/NAME[@REV]` – a Hugging Face model id.
    Hf { repo: String, revision: Option<String> },
    /// `anthropic:MODEL` – the Anthropic Messages API (key in `ANTHROPIC_API_KEY`).
    Anthropic { model: String },
}

fn unknown(spec: &str, hint: impl Into<String>) -> LlmError {
    LlmError::UnknownSpec { spec: spec.to_string(), hint: hint.into() }
}

impl ModelSpec {
    /// Parses a spec; see [`ModelSpec`] for the forms.
    pub fn parse(spec: &str) -> Result<Self, LlmError> {
        let s = spec.trim();
        if s.is_empty() {
            return Err(unknown(spec, format!("the model spec is empty; {FORMS}")));
        }
        if s == "default" {
            return Ok(ModelSpec::Default);
        }
        if let Some(model) = crate::models::catalog::find(s) {
            return Ok(ModelSpec::Builtin(model.name.to_string()));
        }
        if let Some(file) = s.strip_prefix("scripted:") {
            if file.is_empty() {
                return Err(unknown(spec, "`scripted:` needs a file, e.g. scripted:replies.yaml"));
            }
            return Ok(ModelSpec::Scripted(PathBuf::from(file)));
        }
        if let Some(rest) = s.strip_prefix("openai:") {
            return parse_openai(spec, rest);
        }
        if let Some(rest) = s.strip_prefix("hf:") {
            return parse_hf(spec, rest);
        }
        if let Some(model) = s.strip_prefix("anthropic:") {
            if model.trim().is_empty() {
                return Err(unknown(spec, "`anthropic:` needs a model name, e.g. anthropic:claude-sonnet-4-5"));
            }
            return Ok(ModelSpec::Anthropic { model: model.trim().to_string() });
        }
        let path = PathBuf::from(s);
        if path.exists() {
            return Ok(ModelSpec::Local(path));
        }
        let looks_like_path = s.contains('/') || s.contains('\\') || s.starts_with('.') || s.ends_with(".gguf");
        let hint = if looks_like_path { format!("no such file or directory; {FORMS}") } else { FORMS.to_string() };
        Err(unknown(spec, hint))
    }
}

fn parse_openai(spec: &str, rest: &str) -> Result<ModelSpec, LlmError> {
    const EXAMPLE: &str = "e.g. openai:http://127.0.0.1:8080/v1#Qwen/Qwen3-32B";
    let Some((url, model)) = rest.rsplit_once('#') else {
        return Err(unknown(spec, format!("`openai:` needs a model name after `#`, {EXAMPLE}")));
    };
    let (url, model) = (url.trim(), model.trim());
    if model.is_empty() {
        return Err(unknown(spec, format!("`openai:` needs a model name after `#`, {EXAMPLE}")));
    }
    let has_host = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .is_some_and(|host| !host.is_empty() && !host.starts_with('/'));
    if !has_host {
        return Err(unknown(spec, format!("the URL must start with http:// or https:// and name a host, {EXAMPLE}")));
    }
    Ok(ModelSpec::OpenAi { base_url: url.to_string(), model: model.to_string() })
}

fn parse_hf(spec: &str, rest: &str) -> Result<ModelSpec, LlmError> {
    const EXAMPLE: &str = "e.g. hf:Qwen/Qwen3-32B or hf:Qwen/Qwen3-32B@main";
    let (repo, revision) = match rest.split_once('@') {
        Some((repo, rev)) => (repo, Some(rev)),
        None => (rest, None),
    };
    let valid_part =
        |p: &str| !p.is_empty() && p.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    let repo_ok = matches!(repo.split_once('/'), Some((org, name)) if valid_part(org) && valid_part(name));
    if !repo_ok {
        return Err(unknown(spec, format!("`hf:` needs a repository id ORG/NAME, {EXAMPLE}")));
    }
    if let Some(rev) = revision {
        if rev.is_empty() || rev.chars().any(char::is_whitespace) {
            return Err(unknown(spec, format!("the revision after `@` is empty or not valid, {EXAMPLE}")));
        }
    }
    Ok(ModelSpec::Hf { repo: repo.to_string(), revision: revision.map(str::to_string) })
}

impl fmt::Display for ModelSpec {
    /// The spec in the form [`ModelSpec::parse`] accepts.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ModelSpec::Scripted(p) => write!(f, "scripted:{}", p.display()),
            ModelSpec::OpenAi { base_url, model } => write!(f, "openai:{base_url}#{model}"),
            ModelSpec::Default => f.write_str("default"),
            ModelSpec::Builtin(name) => f.write_str(name),
            ModelSpec::Local(p) => write!(f, "{}", p.display()),
            ModelSpec::Hf { repo, revision: Some(rev) } => write!(f, "hf:{repo}@{rev}"),
            ModelSpec::Hf { repo, revision: None } => write!(f, "hf:{repo}"),
            ModelSpec::Anthropic { model } => write!(f, "anthropic:{model}"),
        }
    }
}

impl std::str::FromStr for ModelSpec {
    type Err = LlmError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ModelSpec::parse(s)
    }
}

impl ModelSpec {
    /// What `default` means on this machine: Qwen3-32B from the hub with a CUDA build
    /// and a GPU, else the built-in CPU default.
    pub fn default_target() -> ModelSpec {
        if LocalBackend::gpu_available() {
            ModelSpec::Hf { repo: GPU_DEFAULT.to_string(), revision: None }
        } else {
            ModelSpec::Builtin(crate::models::catalog::CPU_DEFAULT.to_string())
        }
    }
}

/// Makes sure the built-in model `name` is cached (downloading it with a progress bar
/// if needed) and loads it like any local GGUF file.
async fn load_builtin(name: &str, opts: &ResolveOptions) -> Result<Arc<dyn ModelBackend>, LlmError> {
    let path = crate::models::pull::ensure_builtin(name, opts.progress)
        .await
        .map_err(|e| LlmError::Other(format!("cannot get the built-in model {name}: {e}")))?;
    let mut local = opts.local.clone();
    if let Some(s) = crate::models::catalog::find(name).and_then(|m| m.sampling) {
        local.sampling = super::SamplingDefaults {
            temperature: Some(s.temperature),
            top_p: Some(s.top_p),
            top_k: Some(s.top_k),
            repeat_penalty: Some(s.repeat_penalty),
        };
    }
    load_local(&path, &local).await
}

/// Builds the backend for a spec; local models load here (built-in ones are downloaded
/// first if they are not cached).
pub async fn resolve_model(spec: &ModelSpec, opts: &ResolveOptions) -> Result<Arc<dyn ModelBackend>, LlmError> {
    match spec {
        ModelSpec::Scripted(path) => Ok(Arc::new(ScriptedBackend::from_file(path)?)),
        ModelSpec::OpenAi { base_url, model } => {
            let mut cfg = OpenAiConfig::new(base_url.clone(), model.clone());
            cfg.api_key_env = opts.api_key_env.clone();
            Ok(Arc::new(OpenAiBackend::new(cfg)?))
        }
        ModelSpec::Default => {
            if LocalBackend::gpu_available() {
                // With a CUDA build and a GPU, the default is the large model.
                return Ok(Arc::new(LocalBackend::load_hub(GPU_DEFAULT, None, &opts.local).await?));
            }
            load_builtin(crate::models::catalog::CPU_DEFAULT, opts).await
        }
        ModelSpec::Builtin(name) => load_builtin(name, opts).await,
        ModelSpec::Local(path) => load_local(path, &opts.local).await,
        ModelSpec::Hf { repo, revision } => {
            Ok(Arc::new(LocalBackend::load_hub(repo, revision.as_deref(), &opts.local).await?))
        }
        ModelSpec::Anthropic { model } => {
            let mut cfg = AnthropicConfig::new(model.clone());
            if let Some(var) = &opts.api_key_env {
                cfg.api_key_env = var.clone();
            }
            Ok(Arc::new(AnthropicBackend::new(cfg)?))
        }
    }
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
        LocalEngine::Auto => is_gguf && (opts.force_cpu || !LocalBackend::gpu_available()),
    };
    if !use_llamacpp {
        return Ok(Arc::new(LocalBackend::load(path, opts).await?));
    }
    if let Some(adapter) = &opts.lora {
        return Err(LlmError::UnknownSpec {
            spec: adapter.display().to_string(),
            hint: "LoRA adapters apply to safetensors model folders (run through mistral.rs), not GGUF files".into(),
        });
    }
    let llama_opts = LlamaCppOptions {
        n_ctx: opts.context_tokens.unwrap_or(0),
        threads: opts.threads.unwrap_or(0),
        flash_attention: None,
        prompt_cache_dir: opts.prompt_cache_dir.clone(),
        sampling: opts.sampling,
    };
    let path = path.to_path_buf();
    // llama.cpp loads synchronously (mapping the file, allocating the KV cache).
    let backend = tokio::task::spawn_blocking(move || LlamaCppBackend::load_with(&path, &llama_opts))
        .await
        .map_err(|e| LlmError::Other(format!("the llama.cpp loader stopped: {e}")))??;
    Ok(Arc::new(backend))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hint_of(e: LlmError) -> String {
        match e {
            LlmError::UnknownSpec { hint, .. } => hint,
            other => panic!("expected UnknownSpec, got {other:?}"),
        }
    }

    #[test]
    fn parses_each_form() {
        assert_eq!(ModelSpec::parse("default").unwrap(), ModelSpec::Default);
        assert_eq!(ModelSpec::parse("scripted:a/b.yaml").unwrap(), ModelSpec::Scripted("a/b.yaml".into()));
        assert_eq!(
            ModelSpec::parse("openai:http://127.0.0.1:8080/v1#Qwen/Qwen3-32B").unwrap(),
            ModelSpec::OpenAi { base_url: "http://127.0.0.1:8080/v1".into(), model: "Qwen/Qwen3-32B".into() }
        );
        // The model comes after the last `#`.
        assert_eq!(
            ModelSpec::parse("openai:https://h/v1#frag#m").unwrap(),
            ModelSpec::OpenAi { base_url: "https://h/v1#frag".into(), model: "m".into() }
        );
        assert_eq!(
            ModelSpec::parse("hf:Qwen/Qwen3-0.6B").unwrap(),
            ModelSpec::Hf { repo: "Qwen/Qwen3-0.6B".into(), revision: None }
        );
        assert_eq!(
            ModelSpec::parse("hf:org/name@v1.0").unwrap(),
            ModelSpec::Hf { repo: "org/name".into(), revision: Some("v1.0".into()) }
        );
        let dir = std::env::temp_dir();
        assert_eq!(ModelSpec::parse(dir.to_str().unwrap()).unwrap(), ModelSpec::Local(dir.clone()));
    }

    #[test]
    fn parses_builtin_names() {
        for name in ["smollm2-135m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"] {
            assert_eq!(ModelSpec::parse(name).unwrap(), ModelSpec::Builtin(name.into()));
            assert_eq!(ModelSpec::parse(name).unwrap().to_string(), name);
        }
        assert_eq!(ModelSpec::parse("Qwen2.5-Coder-0.5B").unwrap(), ModelSpec::Builtin("qwen2.5-coder-0.5b".into()));
        assert_eq!(ModelSpec::parse("default").unwrap(), ModelSpec::Default);
        let hint = hint_of(ModelSpec::parse("qwen2.5-coder-7b").unwrap_err());
        assert!(hint.contains("qwen2.5-coder-1.5b") && hint.contains("agent model list"), "{hint}");
        #[cfg(not(feature = "cuda"))]
        assert_eq!(ModelSpec::default_target(), ModelSpec::Builtin(crate::models::catalog::CPU_DEFAULT.into()));
    }

    #[test]
    fn display_round_trips() {
        for s in ["default", "scripted:x.yaml", "openai:http://h:1/v1#m", "hf:a/b", "hf:a/b@rev", "anthropic:claude-x"]
        {
            assert_eq!(ModelSpec::parse(s).unwrap().to_string(), s);
            assert_eq!(s.parse::<ModelSpec>().unwrap().to_string(), s);
        }
    }

    #[test]
    fn rejects_bad_specs_with_hints() {
        assert!(hint_of(ModelSpec::parse("openai:http://h/v1").unwrap_err()).contains("e.g. openai:"));
        assert!(hint_of(ModelSpec::parse("openai:http://h/v1#").unwrap_err()).contains("model name"));
        assert!(hint_of(ModelSpec::parse("openai:h/v1#m").unwrap_err()).contains("http://"));
        assert!(ModelSpec::parse("openai:http://#m").is_err());
        assert!(ModelSpec::parse("hf:noslash").is_err());
        assert!(ModelSpec::parse("hf:a/b/c").is_err());
        assert!(ModelSpec::parse("hf:a/b@").is_err());
        assert!(ModelSpec::parse("scripted:").is_err());
        assert!(ModelSpec::parse("anthropic:").is_err());
        assert!(ModelSpec::parse("").is_err());
        let hint = hint_of(ModelSpec::parse("gpt-something").unwrap_err());
        assert!(hint.contains("openai:URL#MODEL") && hint.contains("scripted:FILE") && hint.contains("hf:"));
        assert!(hint_of(ModelSpec::parse("./no/such/model").unwrap_err()).contains("no such file"));
    }

    #[tokio::test]
    async fn resolve_builds_or_explains() {
        let opts = ResolveOptions::default();
        let b = resolve_model(&ModelSpec::parse("openai:http://127.0.0.1:9/v1#m").unwrap(), &opts).await.unwrap();
        assert_eq!(b.name(), "m");
        assert!(matches!(
            resolve_model(&ModelSpec::Scripted("/nonexistent/x.yaml".into()), &opts).await,
            Err(LlmError::ScriptFile { .. })
        ));
        let keyed = ResolveOptions { api_key_env: Some("AGENT_TEST_SURELY_UNSET_KEY_VAR_5678".into()), ..opts.clone() };
        assert!(matches!(
            resolve_model(&ModelSpec::parse("openai:http://127.0.0.1:9/v1#m").unwrap(), &keyed).await,
            Err(LlmError::MissingApiKey { .. })
        ));
        let dir = tempfile::tempdir().unwrap();
        match resolve_model(&ModelSpec::Local(dir.path().to_path_buf()), &opts).await {
            Err(LlmError::UnknownSpec { hint, .. }) => assert!(hint.contains("config.json"), "{hint}"),
            Err(other) => panic!("unexpected error {other}"),
            Ok(_) => panic!("an empty directory is not a model"),
        }
        let llama = ResolveOptions {
            local: LocalModelOptions { engine: LocalEngine::LlamaCpp, ..Default::default() },
            ..opts.clone()
        };
        match resolve_model(&ModelSpec::Local(dir.path().to_path_buf()), &llama).await {
            Err(LlmError::UnknownSpec { hint, .. }) => assert!(hint.contains(".gguf files only"), "{hint}"),
            Err(other) => panic!("unexpected error {other}"),
            Ok(_) => panic!("llama.cpp cannot run a directory"),
        }
    }

    #[test]
    fn engine_names_parse() {
        assert_eq!("llama.cpp".parse::<LocalEngine>().unwrap(), LocalEngine::LlamaCpp);
        assert_eq!("llamacpp".parse::<LocalEngine>().unwrap(), LocalEngine::LlamaCpp);
        assert_eq!("mistral.rs".parse::<LocalEngine>().unwrap(), LocalEngine::MistralRs);
        assert_eq!("Auto".parse::<LocalEngine>().unwrap(), LocalEngine::Auto);
        assert!("vllm".parse::<LocalEngine>().unwrap_err().contains("known: auto"));
    }
}
