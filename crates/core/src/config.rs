//! The configuration: the user's file (`~/.config/agent/config.toml`, or `--config
//! FILE`), with the project's `.agent/config.toml` laid over it key by key as far as the
//! project is trusted (see [`crate::project`]); command-line flags override both.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use crate::sandbox_network::NetworkSetting;
use crate::tools::ToolFormat;
use agent_sandbox::{ContainerConfig, Egress, ImageMap};

/// Errors reading the config, naming the file.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read the config file {path}: {reason}")]
    Read { path: String, reason: String },
    #[error("the config file {path} is not valid: {reason}")]
    Parse { path: String, reason: String },
    #[error("the config file {path} is not valid: {reason}")]
    Invalid { path: String, reason: String },
}

/// The whole configuration.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Model spec used when `--model` is not given.
    pub model: Option<String>,
    /// Name of the environment variable holding the API key of `openai:` models.
    pub api_key_env: Option<String>,
    /// Episode limits.
    pub episode: EpisodeLimits,
    /// Sandbox settings.
    pub sandbox: SandboxSettings,
    /// Image substitutions for hosts that cannot pull (pattern → local image).
    pub image_map: ImageMap,
    /// A system-prompt template that replaces `prompts/system.md` (`{{cwd}}`,
    /// `{{tools}}`, `{{date}}` are filled in when present); training presets for tiny
    /// models use a short one.
    pub system_prompt: Option<String>,
    /// How the model writes its actions: `auto` (native tool calls where the model
    /// supports them, else text), `native` or `text`. `--tool-format` overrides it.
    pub tool_format: ToolFormat,
    /// MCP servers (`[mcp_servers.NAME]`); the project's `.mcp.json` adds to them.
    pub mcp_servers: std::collections::BTreeMap<String, crate::mcp::McpServerConfig>,
    /// The built-in tools the model is offered (default: all); `finish` is always kept.
    /// A short list keeps the prompt short for small models (`tools = ["bash"]`).
    pub tools: Option<Vec<String>>,
    /// Hold every reply to the action format's grammar while sampling, so that a call
    /// cannot be malformed or name a tool that was not offered (local engines; APIs
    /// ignore it). Unset means on.
    pub constrain_calls: Option<bool>,
    /// Tell the model when it makes the same call again with nothing changed in between
    /// (a failing command at once, any call the third time). Unset means off: measured on
    /// the built-in models, the notes did not lower how often they repeat
    /// (docs/benchmarks.md); repeats are counted and loops stopped either way.
    pub repeat_notes: Option<bool>,
    /// The system prompt and tool list: `full`, or `compact` (bash, file and finish with
    /// one-sentence descriptions, a short prompt) for small models. Unset: full (the
    /// compact prompt is measured in docs/benchmarks.md and not yet the default).
    pub prompt_profile: Option<PromptProfile>,
    /// Skills (`[skills]`): folders with a `SKILL.md` in the project and the user's folders.
    pub skills: SkillsSettings,
}

/// `[skills]`: whether skills are offered, and how much of the prompt their list takes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SkillsSettings {
    /// List the skills in the system prompt and offer the `skill` tool (default on).
    pub enabled: bool,
    /// Characters of the system prompt the list may take; the skills beyond it are
    /// listed by name only.
    pub prompt_budget: usize,
}

impl Default for SkillsSettings {
    fn default() -> Self {
        Self { enabled: true, prompt_budget: crate::skills::DEFAULT_PROMPT_BUDGET }
    }
}

/// How much of the system prompt and tool list a model gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PromptProfile {
    /// The whole prompt and every tool.
    Full,
    /// A short prompt and the tools a small model uses, each described in one sentence.
    Compact,
}

/// Stop conditions of an episode.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct EpisodeLimits {
    /// Model turns before the episode stops.
    pub max_turns: u32,
    /// Generated tokens in all before the episode stops.
    pub token_budget: u64,
    /// Wall-clock seconds before the episode stops.
    pub wall_clock_secs: u64,
    /// Consecutive replies without a valid action before the episode stops.
    pub max_parse_failures: u32,
    /// Tokens of context the model accepts; old observations are elided beyond it.
    pub context_tokens: u64,
    /// Maximum tokens per reply.
    pub max_reply_tokens: u32,
    /// Sampling temperature.
    pub temperature: Option<f32>,
}

impl Default for EpisodeLimits {
    fn default() -> Self {
        Self {
            max_turns: 50,
            token_budget: 200_000,
            wall_clock_secs: 3600,
            max_parse_failures: 3,
            context_tokens: 32_768,
            max_reply_tokens: 4096,
            temperature: None,
        }
    }
}

/// Container settings.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct SandboxSettings {
    /// Image used when no task or image is given.
    pub image: String,
    /// CPU cores per container.
    pub cpus: f64,
    /// Memory per container, in MiB.
    pub memory_mb: i64,
    /// Process limit per container.
    pub pids_limit: i64,
    /// Network access for containers: `true`/`"on"` (the public internet, never the
    /// host, its LANs or cloud metadata), `"allowlist"` (`allow_hosts` only) or
    /// `false`/`"off"`.
    pub network: NetworkSetting,
    /// Hosts the sandbox may reach (`host`, `host:port`, an address or a block): all it
    /// reaches with `"allowlist"`; with `"on"`, exceptions to the refused ranges.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allow_hosts: Vec<String>,
    /// Bytes of command output kept for the model (head and tail).
    pub max_output_bytes: usize,
    /// Default per-command timeout in seconds.
    pub command_timeout_secs: u64,
    /// The Docker engines sandboxes are placed on (`[[sandbox.engines]]`); the local
    /// engine alone when empty. Only the user's own config may name them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub engines: Vec<agent_sandbox::EngineSpec>,
}

impl SandboxSettings {
    /// A container of `image` with these limits and network setting: the one place the
    /// config's sandbox section becomes container settings (episodes and bench trials).
    pub fn container_config(&self, image: impl Into<String>, run_id: &str, episode_id: &str) -> ContainerConfig {
        let mut cfg = ContainerConfig::new(image.into(), run_id, episode_id);
        cfg.cpus = self.cpus;
        cfg.memory_bytes = self.memory_mb << 20;
        cfg.pids_limit = self.pids_limit;
        cfg.network = self.network.enabled();
        cfg.egress =
            Egress { only_allowed: self.network == NetworkSetting::Allowlist, allow: self.allow_hosts.clone() };
        cfg
    }
}

impl Default for SandboxSettings {
    fn default() -> Self {
        Self {
            image: agent_sandbox::BASE_IMAGE.into(),
            cpus: 2.0,
            memory_mb: 4096,
            pids_limit: 1024,
            network: NetworkSetting::On,
            allow_hosts: Vec::new(),
            max_output_bytes: 16 * 1024,
            command_timeout_secs: 120,
            engines: Vec::new(),
        }
    }
}

/// The user's own configuration, before any project file is laid over it.
#[derive(Debug, Clone, Default)]
pub struct UserConfig {
    /// The file it came from (none: the defaults).
    pub path: Option<PathBuf>,
    /// The file's keys, for laying a project's over them.
    pub table: toml::Table,
    /// The configuration it gives on its own.
    pub config: Config,
}

impl Config {
    /// The user's configuration: `explicit` when given, else
    /// `~/.config/agent/config.toml`; the defaults when there is none.
    pub fn load_user(explicit: Option<&Path>) -> Result<UserConfig, ConfigError> {
        let path = match explicit {
            Some(p) => Some(p.to_path_buf()),
            None => dirs::config_dir().map(|d| d.join("agent/config.toml")).filter(|p| p.is_file()),
        };
        let Some(path) = path else { return Ok(UserConfig::default()) };
        let text = std::fs::read_to_string(&path)
            .map_err(|e| ConfigError::Read { path: path.display().to_string(), reason: e.to_string() })?;
        let table: toml::Table = toml::from_str(&text)
            .map_err(|e| ConfigError::Parse { path: path.display().to_string(), reason: e.to_string() })?;
        let config = Self::from_table(table.clone(), &path)?;
        Ok(UserConfig { path: Some(path), table, config })
    }

    /// The configuration of a parsed file; `path` names it in errors.
    pub fn from_table(table: toml::Table, path: &Path) -> Result<Config, ConfigError> {
        let config: Config = toml::Value::Table(table).try_into().map_err(|e: toml::de::Error| ConfigError::Parse {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
        config.validate().map_err(|reason| ConfigError::Invalid { path: path.display().to_string(), reason })?;
        Ok(config)
    }

    /// Parses one config file.
    pub fn from_file(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError::Read { path: path.display().to_string(), reason: e.to_string() })?;
        // The parser's message keeps its lines: it draws a caret under the bad spot.
        let config: Config = toml::from_str(&text)
            .map_err(|e| ConfigError::Parse { path: path.display().to_string(), reason: e.to_string() })?;
        config.validate().map_err(|reason| ConfigError::Invalid { path: path.display().to_string(), reason })?;
        Ok(config)
    }

    /// Checks the values the types cannot: every limit must be positive. There is no
    /// "unlimited": the sandbox limits are what stops a fork bomb or a memory leak from
    /// taking the host, and an episode without a turn or context limit never ends.
    pub fn validate(&self) -> Result<(), String> {
        let mut bad = Vec::new();
        let s = &self.sandbox;
        if !s.cpus.is_finite() || s.cpus < 0.01 {
            bad.push(format!("[sandbox] cpus = {} (at least 0.01 cores)", s.cpus));
        }
        if s.memory_mb < MIN_MEMORY_MB {
            bad.push(format!("[sandbox] memory_mb = {} (at least {MIN_MEMORY_MB} MiB)", s.memory_mb));
        }
        if s.pids_limit < MIN_PIDS {
            bad.push(format!("[sandbox] pids_limit = {} (at least {MIN_PIDS} processes)", s.pids_limit));
        }
        if s.max_output_bytes == 0 {
            bad.push("[sandbox] max_output_bytes = 0 (at least 1)".into());
        }
        if s.command_timeout_secs == 0 {
            bad.push("[sandbox] command_timeout_secs = 0 (at least 1)".into());
        }
        bad.extend(crate::sandbox_network::bad_hosts(&s.allow_hosts));
        let e = &self.episode;
        for (name, value) in [
            ("max_turns", u64::from(e.max_turns)),
            ("token_budget", e.token_budget),
            ("wall_clock_secs", e.wall_clock_secs),
            ("max_parse_failures", u64::from(e.max_parse_failures)),
            ("context_tokens", e.context_tokens),
            ("max_reply_tokens", u64::from(e.max_reply_tokens)),
        ] {
            if value == 0 {
                bad.push(format!("[episode] {name} = 0 (at least 1)"));
            }
        }
        if bad.is_empty() {
            Ok(())
        } else {
            Err(format!("{}; limits have no \"unlimited\" value: set a large number instead", bad.join(", ")))
        }
    }
}

/// Lays `over`'s keys over `base`'s: tables merge key by key, any other value replaces.
pub fn merge_tables(base: &mut toml::Table, over: toml::Table) {
    for (k, v) in over {
        match (base.get_mut(&k), v) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => merge_tables(b, o),
            (_, v) => {
                base.insert(k, v);
            }
        }
    }
}

/// Lays a project's config table over the user's as [`merge_tables`] does, except that
/// an MCP server of the project replaces the user's server of that name whole: merged
/// key by key, a project that changes only `url` would inherit the user's `headers`
/// (a bearer token) and send them wherever it points.
pub fn merge_project(base: &mut toml::Table, project: toml::Table) {
    if let (Some(toml::Value::Table(theirs)), Some(toml::Value::Table(mine))) =
        (project.get("mcp_servers"), base.get_mut("mcp_servers"))
    {
        for name in theirs.keys() {
            mine.remove(name);
        }
    }
    merge_tables(base, project);
}

/// The least memory a sandbox may have (the shell and a few tools need this much).
const MIN_MEMORY_MB: i64 = 64;
/// The fewest processes a sandbox may run (the shell, its wrapper and a command).
const MIN_PIDS: i64 = 16;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_full_file_and_rejects_unknown_keys() {
        let cfg: Config = toml::from_str(
            "model = 'scripted:x.yaml'\n[episode]\nmax_turns = 7\n[sandbox]\nnetwork = false\n[image_map]\n'python:*' = 'agent-base:bookworm'\n",
        )
        .unwrap();
        assert_eq!(cfg.episode.max_turns, 7);
        assert_eq!(cfg.sandbox.network, NetworkSetting::Off);
        assert_eq!(cfg.image_map.lookup("python:3"), Some("agent-base:bookworm"));
        assert!(toml::from_str::<Config>("[episode]\nmax_turn = 7\n").is_err());
    }

    #[test]
    fn zero_and_negative_limits_are_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(&path, "[sandbox]\npids_limit = 0\ncpus = 0\nmemory_mb = -5\n[episode]\nmax_turns = 0\n")
            .unwrap();
        let err = Config::from_file(&path).unwrap_err().to_string();
        for part in ["pids_limit = 0", "cpus = 0", "memory_mb = -5", "max_turns = 0", "no \"unlimited\""] {
            assert!(err.contains(part), "{part} missing from: {err}");
        }
        assert!(Config::default().validate().is_ok());
    }
}
