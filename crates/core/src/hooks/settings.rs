//! Hook settings in Claude Code's format: `{"hooks": {"PreToolUse": [{"matcher": "Bash",
//! "hooks": [{"type": "command", "command": "...", "timeout": 30}]}]}}`, read from the
//! user's and the project's settings files and merged (every matching hook runs).

use std::path::{Path, PathBuf};

use std::time::Duration;

use regex::Regex;
use serde::Deserialize;

use super::HookEvent;

/// A hook's timeout when its entry names none (Claude Code's default).
pub const DEFAULT_HOOK_TIMEOUT: Duration = Duration::from_secs(60);

/// Why the hook settings could not be read.
#[derive(Debug, thiserror::Error)]
pub enum HookSettingsError {
    #[error("cannot read the hook settings {path}: {reason}")]
    Read { path: String, reason: String },
    #[error("the hook settings {path} are not valid: {reason}")]
    Invalid { path: String, reason: String },
}

/// One hook: a command run on the host with the event as JSON on its stdin.
#[derive(Debug, Clone)]
pub struct HookCommand {
    /// Run with `sh -c` in the project directory.
    pub command: String,
    /// Killed (with everything it started) after this long.
    pub timeout: Duration,
    /// The settings file it came from, for messages.
    pub source: PathBuf,
}

/// Hooks that run for the tools (or sources) their matcher accepts.
#[derive(Debug, Clone)]
pub struct HookGroup {
    /// `None` matches everything (`""`, `"*"` or no matcher).
    matcher: Option<Regex>,
    /// The matcher as written, for people.
    pattern: Option<String>,
    /// The hooks of the group.
    pub hooks: Vec<HookCommand>,
}

impl HookGroup {
    /// Whether the group runs for a call known by any of `names`. As in Claude Code,
    /// the matcher is a regular expression that must match a whole name.
    pub fn matches(&self, names: &[&str]) -> bool {
        match &self.matcher {
            None => true,
            Some(re) => names.iter().any(|n| re.is_match(n)),
        }
    }
}

/// Every configured hook, by event.
#[derive(Debug, Clone, Default)]
pub struct HookSettings {
    groups: Vec<(HookEvent, HookGroup)>,
    /// Events in the files that this agent does not run (e.g. `Notification`).
    pub unsupported: Vec<String>,
}

#[derive(Deserialize)]
struct FileShape {
    #[serde(default)]
    hooks: serde_json::Map<String, serde_json::Value>,
}

#[derive(Deserialize)]
struct GroupShape {
    #[serde(default)]
    matcher: Option<String>,
    hooks: Vec<EntryShape>,
}

#[derive(Deserialize)]
struct EntryShape {
    #[serde(rename = "type", default = "command_type")]
    kind: String,
    command: Option<String>,
    /// Seconds.
    timeout: Option<f64>,
}

fn command_type() -> String {
    "command".into()
}

impl HookSettings {
    /// The user's settings (`~/.config/agent/settings.json`); a project's are added by
    /// `project::assemble`, only when the project is trusted.
    pub fn load_user() -> Result<HookSettings, HookSettingsError> {
        let mut settings = HookSettings::default();
        if let Some(file) = dirs::config_dir().map(|d| d.join("agent/settings.json")).filter(|f| f.is_file()) {
            settings.merge_file(&file)?;
        }
        Ok(settings)
    }

    /// Only the hooks of one settings file (`agent bench --hooks FILE`).
    pub fn from_file(path: &Path) -> Result<HookSettings, HookSettingsError> {
        let mut settings = HookSettings::default();
        settings.merge_file(path)?;
        Ok(settings)
    }

    /// Adds the hooks of one settings file.
    pub fn merge_file(&mut self, path: &Path) -> Result<(), HookSettingsError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| HookSettingsError::Read { path: path.display().to_string(), reason: e.to_string() })?;
        self.merge_json(&text, path)
    }

    /// Adds the hooks of one settings document; `source` names it in messages.
    pub fn merge_json(&mut self, text: &str, source: &Path) -> Result<(), HookSettingsError> {
        let invalid = |reason: String| HookSettingsError::Invalid { path: source.display().to_string(), reason };
        let file: FileShape = serde_json::from_str(text).map_err(|e| invalid(e.to_string()))?;
        for (event_name, groups) in file.hooks {
            let Some(event) = HookEvent::from_name(&event_name) else {
                if !self.unsupported.contains(&event_name) {
                    self.unsupported.push(event_name);
                }
                continue;
            };
            let groups: Vec<GroupShape> = serde_json::from_value(groups).map_err(|e| {
                invalid(format!("hooks.{event_name}: {e} (expected a list of {{\"matcher\", \"hooks\"}})"))
            })?;
            for group in groups {
                let pattern = match group.matcher.as_deref().map(str::trim) {
                    None | Some("") | Some("*") => None,
                    Some(pattern) => Some(pattern.to_string()),
                };
                let matcher = match &pattern {
                    None => None,
                    Some(pattern) => Some(
                        Regex::new(&format!("^(?:{pattern})$"))
                            .map_err(|e| invalid(format!("hooks.{event_name}: matcher `{pattern}`: {e}")))?,
                    ),
                };
                let mut hooks = Vec::new();
                for entry in group.hooks {
                    if entry.kind != "command" {
                        return Err(invalid(format!(
                            "hooks.{event_name}: hook type `{}` is not supported (only `command`)",
                            entry.kind
                        )));
                    }
                    let Some(command) = entry.command.filter(|c| !c.trim().is_empty()) else {
                        return Err(invalid(format!("hooks.{event_name}: a hook has no `command`")));
                    };
                    let timeout = match entry.timeout {
                        None => DEFAULT_HOOK_TIMEOUT,
                        Some(t) if t.is_finite() && t > 0.0 => Duration::from_secs_f64(t),
                        Some(t) => {
                            return Err(invalid(format!(
                                "hooks.{event_name}: timeout {t} for `{command}` (seconds, more than 0)"
                            )))
                        }
                    };
                    hooks.push(HookCommand { command, timeout, source: source.to_path_buf() });
                }
                self.groups.push((event, HookGroup { matcher, pattern, hooks }));
            }
        }
        Ok(())
    }

    /// Whether no hook is configured.
    pub fn is_empty(&self) -> bool {
        self.groups.iter().all(|(_, g)| g.hooks.is_empty())
    }

    /// The hooks to run for `event` and a call (or source) known by `names`, in the
    /// order they were configured; a command configured twice runs once.
    pub fn matching(&self, event: HookEvent, names: &[&str]) -> Vec<HookCommand> {
        let mut out: Vec<HookCommand> = Vec::new();
        for (e, group) in &self.groups {
            if *e != event || !group.matches(names) {
                continue;
            }
            for hook in &group.hooks {
                if !out.iter().any(|h| h.command == hook.command) {
                    out.push(hook.clone());
                }
            }
        }
        out
    }

    /// Every hook with its event and matcher as written (`None`: every call), in order.
    pub fn entries(&self) -> impl Iterator<Item = (HookEvent, Option<&str>, &HookCommand)> {
        self.groups.iter().flat_map(|(e, g)| g.hooks.iter().map(move |h| (*e, g.pattern.as_deref(), h)))
    }

    /// How many hooks each event has, for `/hooks` and start-up notes.
    pub fn counts(&self) -> Vec<(HookEvent, usize)> {
        HookEvent::ALL
            .iter()
            .map(|e| (*e, self.groups.iter().filter(|(g, _)| g == e).map(|(_, g)| g.hooks.len()).sum()))
            .filter(|(_, n)| *n > 0)
            .collect()
    }
}
