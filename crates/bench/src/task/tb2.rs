//! TB2's `task.toml` as Harbor writes it: metadata, the agent's and verifier's
//! timeouts, the environment's network, build timeout and variables, the verifier's
//! and solution's variables, MCP servers, the healthcheck (`task/health.rs`), the
//! artifacts (`task/artifacts.rs`) and the steps of a multi-step task (`task/steps.rs`).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::super::error::TaskError;
use super::steps::StepToml;

/// The parts of `task.toml` a trial uses.
#[derive(Debug, Default, Deserialize)]
pub(super) struct Tb2Toml {
    #[serde(default)]
    pub metadata: Tb2Metadata,
    #[serde(default)]
    pub agent: Tb2Section,
    #[serde(default)]
    pub verifier: Tb2Section,
    #[serde(default)]
    pub environment: Tb2Environment,
    #[serde(default)]
    pub solution: Tb2Section,
    /// Harbor's `[[steps]]` (a multi-step task when not empty).
    #[serde(default)]
    pub steps: Vec<StepToml>,
    /// How a multi-step task's reward is formed: `mean` (Harbor's default) or `final`.
    pub multi_step_reward_strategy: Option<String>,
    /// Container paths copied out after the run (`task/artifacts.rs` reads them).
    pub artifacts: Option<toml::Value>,
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct Tb2Metadata {
    pub difficulty: Option<String>,
    pub category: Option<String>,
}

/// `[agent]`, `[verifier]` and `[solution]`: a timeout and variables.
#[derive(Debug, Default, Deserialize)]
pub(super) struct Tb2Section {
    pub timeout_sec: Option<f64>,
    #[serde(default)]
    pub env: BTreeMap<String, toml::Value>,
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct Tb2Environment {
    pub network_mode: Option<String>,
    /// The older spelling of the network setting.
    pub allow_internet: Option<bool>,
    pub build_timeout_sec: Option<f64>,
    #[serde(default)]
    pub env: BTreeMap<String, toml::Value>,
    #[serde(default)]
    pub mcp_servers: Vec<McpServer>,
    /// `[environment.healthcheck]` (`task/health.rs` reads it).
    pub healthcheck: Option<toml::Value>,
}

/// An MCP server a task offers its agent (`[[environment.mcp_servers]]`).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct McpServer {
    pub name: String,
    /// `stdio`, `sse` or `streamable-http`.
    #[serde(default)]
    pub transport: Option<String>,
    #[serde(default)]
    pub url: Option<String>,
    #[serde(default)]
    pub command: Option<String>,
    #[serde(default)]
    pub args: Vec<String>,
}

/// Variables the task sets, by where they apply.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TaskEnv {
    /// The agent's container (`[environment.env]`).
    pub agent: BTreeMap<String, String>,
    /// The test run only (`[verifier.env]`).
    pub verifier: BTreeMap<String, String>,
    /// The reference solution's run only (`[solution.env]`).
    pub solution: BTreeMap<String, String>,
}

impl Tb2Toml {
    /// Whether the task's containers may reach beyond their own network; a notice when
    /// the setting is honoured only in part.
    pub fn internet(&self, shown: &str) -> Result<(bool, Option<String>), TaskError> {
        let env = &self.environment;
        match env.network_mode.as_deref() {
            None => Ok((env.allow_internet.unwrap_or(true), None)),
            Some("public") => Ok((true, None)),
            Some("no-network") => Ok((false, None)),
            // No allowlisting proxy here: the wider setting keeps the task solvable.
            Some("allowlist") => Ok((
                true,
                Some(
                    "environment.network_mode \"allowlist\" is treated as \"public\": this harness has no allowlist"
                        .into(),
                ),
            )),
            Some(other) => Err(TaskError::BadField {
                path: shown.into(),
                field: "environment.network_mode".into(),
                reason: format!("`{other}` is not one of public, no-network, allowlist"),
            }),
        }
    }

    /// `build_timeout_sec`, when given.
    pub fn build_timeout(&self, shown: &str) -> Result<Option<Duration>, TaskError> {
        match self.environment.build_timeout_sec {
            None => Ok(None),
            Some(v) if v.is_finite() && v > 0.0 => Ok(Some(Duration::from_secs_f64(v))),
            Some(_) => Err(TaskError::BadField {
                path: shown.into(),
                field: "environment.build_timeout_sec".into(),
                reason: "must be > 0".into(),
            }),
        }
    }

    /// The three variable tables, checked, and notices for values that name host
    /// variables (passed literally: a task gets nothing from the host's environment).
    pub fn env(&self, shown: &str) -> Result<(TaskEnv, Vec<String>), TaskError> {
        let mut notices = Vec::new();
        let env = TaskEnv {
            agent: env_table(shown, "environment.env", &self.environment.env, &mut notices)?,
            verifier: env_table(shown, "verifier.env", &self.verifier.env, &mut notices)?,
            solution: env_table(shown, "solution.env", &self.solution.env, &mut notices)?,
        };
        Ok((env, notices))
    }

    /// The notice for MCP servers, which this agent cannot use yet.
    pub fn mcp_notice(&self) -> Option<String> {
        let names: Vec<&str> = self.environment.mcp_servers.iter().map(|s| s.name.as_str()).collect();
        (!names.is_empty()).then(|| {
            format!(
                "this agent does not support MCP yet: the task's MCP servers ({}) are not offered to it",
                names.join(", ")
            )
        })
    }
}

/// One variable table (`name` is its place in `task.toml`, for errors), checked; a
/// notice for each value that names a host variable (passed literally: a task gets
/// nothing from the host's environment).
pub(super) fn env_table(
    shown: &str,
    name: &str,
    raw: &BTreeMap<String, toml::Value>,
    notices: &mut Vec<String>,
) -> Result<BTreeMap<String, String>, TaskError> {
    let mut out = BTreeMap::new();
    for (key, value) in raw {
        let bad = |reason: &str| TaskError::BadField {
            path: shown.into(),
            field: format!("{name}.{key}"),
            reason: reason.into(),
        };
        if !is_name(key) {
            return Err(bad("not a variable name (letters, digits and `_`, not starting with a digit)"));
        }
        let value = match value {
            toml::Value::String(s) => s.clone(),
            toml::Value::Integer(n) => n.to_string(),
            toml::Value::Float(f) => f.to_string(),
            toml::Value::Boolean(b) => b.to_string(),
            _ => return Err(bad("expected a string, a number or a boolean")),
        };
        if value.contains("${") {
            notices
                .push(format!("{name}.{key} is passed as written: host variables like `{value}` are not substituted"));
        }
        out.insert(key.clone(), value);
    }
    Ok(out)
}

/// A shell variable name.
fn is_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Tb2Toml {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn network_modes() {
        assert_eq!(parse("").internet("t").unwrap(), (true, None));
        assert_eq!(parse("[environment]\nnetwork_mode = \"no-network\"\n").internet("t").unwrap(), (false, None));
        assert_eq!(parse("[environment]\nallow_internet = false\n").internet("t").unwrap(), (false, None));
        let (on, notice) = parse("[environment]\nnetwork_mode = \"allowlist\"\n").internet("t").unwrap();
        assert!(on && notice.unwrap().contains("treated as \"public\""));
        let e = parse("[environment]\nnetwork_mode = \"lan\"\n").internet("t").unwrap_err().to_string();
        assert!(e.contains("environment.network_mode") && e.contains("`lan`"), "{e}");
    }

    #[test]
    fn variables_mcp_and_build_timeout() {
        let t = parse(
            "[environment]\nbuild_timeout_sec = 90.0\n[environment.env]\nA = \"1\"\nN = 2\n\
             [[environment.mcp_servers]]\nname = \"files\"\ntransport = \"stdio\"\ncommand = \"mcp-files\"\nargs = [\"/app\"]\n\
             [verifier.env]\nKEY = \"${OPENAI_API_KEY}\"\n[solution.env]\nSOL = \"yes\"\n",
        );
        assert_eq!(t.build_timeout("t").unwrap(), Some(Duration::from_secs(90)));
        let (env, notices) = t.env("t").unwrap();
        assert_eq!(env.agent, BTreeMap::from([("A".into(), "1".into()), ("N".into(), "2".into())]));
        assert_eq!(env.verifier["KEY"], "${OPENAI_API_KEY}");
        assert_eq!(env.solution["SOL"], "yes");
        assert_eq!(notices.len(), 1);
        assert!(notices[0].contains("verifier.env.KEY"), "{notices:?}");
        assert_eq!(t.environment.mcp_servers[0].args, ["/app"]);
        assert!(t.mcp_notice().unwrap().contains("(files)"));
        let e = parse("[verifier.env]\n\"1X\" = \"a\"\n").env("t").unwrap_err().to_string();
        assert!(e.contains("verifier.env.1X"), "{e}");
        let e = parse("[environment]\nbuild_timeout_sec = 0.0\n").build_timeout("t").unwrap_err().to_string();
        assert!(e.contains("build_timeout_sec"), "{e}");
    }
}
