//! Model specs as given on the command line (`--model`) and in the config.

use std::fmt;
use std::path::PathBuf;

use super::LlmError;

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
}
