//! From a model spec to a backend. Remote and scripted backends are built here; models
//! that run in this process are loaded by the [`LocalLoader`] the caller passes in (the
//! binary passes `agent-local`'s), so that nothing in core links an inference engine.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;

use super::{
    AnthropicBackend, AnthropicConfig, LlmError, LocalModelOptions, ModelBackend, ModelSpec, OpenAiBackend,
    OpenAiConfig, ScriptedBackend,
};

/// Loads the specs that run in this process: `default`, built-in names, local paths and
/// `hf:` ids.
#[async_trait]
pub trait LocalLoader: Send + Sync {
    /// Loads `spec`, which is one of the local forms.
    async fn load(&self, spec: &ModelSpec, opts: &ResolveOptions) -> Result<Arc<dyn ModelBackend>, LlmError>;
}

/// How to build a backend from a spec.
#[derive(Clone, Default)]
pub struct ResolveOptions {
    /// Name of the environment variable with the API key of `openai:` models.
    pub api_key_env: Option<String>,
    /// Loading options of local models.
    pub local: LocalModelOptions,
    /// Where a model download reports its progress (hidden by default).
    pub progress: crate::models::Progress,
    /// What loads local models; `None` in a program built without an inference engine,
    /// where local specs are refused with a hint.
    pub engines: Option<Arc<dyn LocalLoader>>,
}

impl fmt::Debug for ResolveOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResolveOptions")
            .field("api_key_env", &self.api_key_env)
            .field("local", &self.local)
            .field("progress", &self.progress)
            .field("engines", &self.engines.as_ref().map(|_| "local"))
            .finish()
    }
}

/// Builds the backend a spec names: remote and scripted ones here, local ones through
/// `opts.engines`.
pub async fn resolve_model(spec: &ModelSpec, opts: &ResolveOptions) -> Result<Arc<dyn ModelBackend>, LlmError> {
    match spec {
        ModelSpec::Scripted(path) => Ok(Arc::new(ScriptedBackend::from_file(path)?)),
        ModelSpec::OpenAi { base_url, model } => {
            let mut cfg = OpenAiConfig::new(base_url.clone(), model.clone());
            cfg.api_key_env = opts.api_key_env.clone();
            Ok(Arc::new(OpenAiBackend::new(cfg)?))
        }
        ModelSpec::Anthropic { model } => {
            let mut cfg = AnthropicConfig::new(model.clone());
            if let Some(var) = &opts.api_key_env {
                cfg.api_key_env = var.clone();
            }
            Ok(Arc::new(AnthropicBackend::new(cfg)?))
        }
        ModelSpec::Default | ModelSpec::Builtin(_) | ModelSpec::Local(_) | ModelSpec::Hf { .. } => {
            match &opts.engines {
                Some(engines) => engines.load(spec, opts).await,
                None => Err(LlmError::UnknownSpec {
                    spec: spec.to_string(),
                    hint: "this program runs no model in-process; use an `openai:`, `anthropic:` or `scripted:` \
                           model, or the `agent` binary, which loads local models"
                        .into(),
                }),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn resolve_builds_remote_backends_or_explains() {
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
    }

    #[tokio::test]
    async fn local_specs_need_an_engine() {
        let dir = tempfile::tempdir().unwrap();
        for spec in [ModelSpec::Default, ModelSpec::Local(dir.path().to_path_buf())] {
            match resolve_model(&spec, &ResolveOptions::default()).await {
                Err(LlmError::UnknownSpec { hint, .. }) => assert!(hint.contains("in-process"), "{hint}"),
                Err(other) => panic!("unexpected error {other}"),
                Ok(_) => panic!("no engine, no local model"),
            }
        }
    }

    #[test]
    fn engine_names_parse() {
        use crate::LocalEngine;
        assert_eq!("llama.cpp".parse::<LocalEngine>().unwrap(), LocalEngine::LlamaCpp);
        assert_eq!("llamacpp".parse::<LocalEngine>().unwrap(), LocalEngine::LlamaCpp);
        assert_eq!("mistral.rs".parse::<LocalEngine>().unwrap(), LocalEngine::MistralRs);
        assert_eq!("Auto".parse::<LocalEngine>().unwrap(), LocalEngine::Auto);
        assert!("vllm".parse::<LocalEngine>().unwrap_err().contains("known: auto"));
    }
}
