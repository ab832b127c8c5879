//! Hooks as Claude Code has them: commands run on the host at `SessionStart`,
//! `UserPromptSubmit`, `PreToolUse`, `PostToolUse` and `Stop`, with the event as JSON on
//! stdin. Exit code 2 blocks (its stderr goes to the model, or to the user for a
//! prompt); a JSON answer on stdout may allow, deny, ask or add context; any other
//! failure is shown to the user and the work goes on.

mod command;
mod settings;
mod tool_names;

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::{json, Map, Value};

pub use command::{run_hook, HookExit, HookRun};
pub use settings::{HookCommand, HookSettings, HookSettingsError, DEFAULT_HOOK_TIMEOUT};
pub use tool_names::{claude_tool_input, claude_tool_name};

/// The events hooks can be attached to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum HookEvent {
    SessionStart,
    UserPromptSubmit,
    PreToolUse,
    PostToolUse,
    Stop,
}

impl HookEvent {
    /// Every event, in the order of a session.
    pub const ALL: [HookEvent; 5] = [
        HookEvent::SessionStart,
        HookEvent::UserPromptSubmit,
        HookEvent::PreToolUse,
        HookEvent::PostToolUse,
        HookEvent::Stop,
    ];

    /// The name in settings files and in the hook's input (`hook_event_name`).
    pub fn name(self) -> &'static str {
        match self {
            HookEvent::SessionStart => "SessionStart",
            HookEvent::UserPromptSubmit => "UserPromptSubmit",
            HookEvent::PreToolUse => "PreToolUse",
            HookEvent::PostToolUse => "PostToolUse",
            HookEvent::Stop => "Stop",
        }
    }

    /// The event of a settings file's key.
    pub fn from_name(name: &str) -> Option<HookEvent> {
        HookEvent::ALL.into_iter().find(|e| e.name() == name)
    }
}

/// A permission answer of a `PreToolUse` hook.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Permission {
    /// Run without asking the user.
    Allow,
    /// Ask the user even in a mode that would not.
    Ask,
    /// Do not run; the reason goes to the model.
    Deny,
}

/// What the hooks of one event decided, all of them together.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HookVerdict {
    /// Exit code 2 or a `block`/`deny` decision: the reason (stderr or `reason`).
    pub blocked: Option<String>,
    /// A `PreToolUse` permission decision (the strictest of the hooks').
    pub permission: Option<Permission>,
    /// The reason given with `permission`.
    pub permission_reason: Option<String>,
    /// Context for the model (`additionalContext`; a prompt or session hook's stdout).
    pub context: Vec<String>,
    /// Lines for the user: failures that did not block, `systemMessage`s.
    pub notes: Vec<String>,
    /// `"continue": false`: the work stops, with this reason for the user.
    pub stop: Option<String>,
}

/// The hooks of one session and what every hook input carries.
#[derive(Debug, Clone, Default)]
pub struct Hooks {
    settings: Arc<HookSettings>,
    /// Where the hooks run (the project on the host) and `AGENT_PROJECT_DIR`.
    pub project_dir: Option<PathBuf>,
    /// `session_id` in the input.
    pub session_id: String,
    /// `transcript_path` in the input (the trajectory file).
    pub transcript_path: Option<PathBuf>,
}

impl Hooks {
    /// Hooks from `settings`, run in `project_dir`.
    pub fn new(settings: HookSettings, project_dir: Option<PathBuf>) -> Self {
        Self { settings: Arc::new(settings), project_dir, session_id: String::new(), transcript_path: None }
    }

    /// Whether any hook is configured.
    pub fn is_empty(&self) -> bool {
        self.settings.is_empty()
    }

    /// The settings (for `/hooks` and start-up notes).
    pub fn settings(&self) -> &HookSettings {
        &self.settings
    }

    /// Runs the hooks of `event` for a call (or source) known by `names`, with `fields`
    /// added to the common input, and combines their answers.
    pub async fn run(&self, event: HookEvent, names: &[&str], fields: Value, mode: &str) -> HookVerdict {
        let hooks = self.settings.matching(event, names);
        if hooks.is_empty() {
            return HookVerdict::default();
        }
        let mut input = Map::new();
        input.insert("session_id".into(), json!(self.session_id));
        input.insert(
            "transcript_path".into(),
            json!(self.transcript_path.as_ref().map(|p| p.display().to_string()).unwrap_or_default()),
        );
        let dir = self.project_dir.clone().or_else(|| std::env::current_dir().ok());
        input.insert("cwd".into(), json!(dir.as_ref().map(|d| d.display().to_string()).unwrap_or_default()));
        input.insert("hook_event_name".into(), json!(event.name()));
        input.insert("permission_mode".into(), json!(mode));
        if let Value::Object(extra) = fields {
            input.extend(extra);
        }
        let bytes = serde_json::to_vec(&Value::Object(input)).unwrap_or_default();
        let project = dir.as_ref().map(|d| d.display().to_string()).unwrap_or_default();
        let env = [("AGENT_PROJECT_DIR", project.clone()), ("CLAUDE_PROJECT_DIR", project)];
        // Hooks of one event run side by side, as in Claude Code.
        let runs =
            futures_util::future::join_all(hooks.iter().map(|h| run_hook(h, &bytes, dir.as_deref(), &env))).await;
        let mut verdict = HookVerdict::default();
        for (hook, run) in hooks.iter().zip(runs) {
            verdict.absorb(event, hook, run);
        }
        verdict
    }
}

impl HookVerdict {
    /// Folds one hook's run into the verdict.
    fn absorb(&mut self, event: HookEvent, hook: &HookCommand, run: HookRun) {
        let who = format!("{} hook `{}`", event.name(), short(&hook.command));
        match run.exit {
            HookExit::Code(2) => {
                let reason = run.stderr.trim();
                let reason = if reason.is_empty() { format!("blocked by the {who}") } else { reason.to_string() };
                join_into(&mut self.blocked, reason);
            }
            HookExit::Code(0) => self.absorb_output(event, &run.stdout),
            HookExit::Code(code) => {
                self.notes.push(format!("{who} failed with exit code {code}: {}", first_lines(&run.stderr)));
            }
            HookExit::Signalled => self.notes.push(format!("{who} was killed by a signal")),
            HookExit::TimedOut => self.notes.push(format!(
                "{who} did not finish within {} s and was killed (set `timeout` in {})",
                hook.timeout.as_secs_f64(),
                hook.source.display()
            )),
            HookExit::NotStarted(e) => self.notes.push(format!("{who} could not be started: {e}")),
        }
    }

    /// A successful hook's stdout: a JSON answer, or (for prompt and session hooks)
    /// plain text that is context for the model.
    fn absorb_output(&mut self, event: HookEvent, stdout: &str) {
        let text = stdout.trim();
        let answer = if text.starts_with('{') { serde_json::from_str::<Value>(text).ok() } else { None };
        let Some(answer) = answer else {
            if !text.is_empty() && matches!(event, HookEvent::UserPromptSubmit | HookEvent::SessionStart) {
                self.context.push(text.to_string());
            }
            return;
        };
        let field = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
        if answer.get("continue").and_then(Value::as_bool) == Some(false) {
            self.stop = Some(
                field(&answer, "stopReason").unwrap_or_else(|| format!("a {} hook stopped the work", event.name())),
            );
        }
        if let Some(m) = field(&answer, "systemMessage") {
            self.notes.push(m);
        }
        let reason = field(&answer, "reason");
        let specific = answer.get("hookSpecificOutput").cloned().unwrap_or(Value::Null);
        if let Some(c) = field(&specific, "additionalContext") {
            self.context.push(c);
        }
        match field(&answer, "decision").as_deref() {
            Some("block") => {
                let r = reason.clone().unwrap_or_else(|| format!("blocked by a {} hook", event.name()));
                join_into(&mut self.blocked, r);
            }
            // The older `PreToolUse` answers.
            Some("approve") if event == HookEvent::PreToolUse => self.decide(Permission::Allow, reason.clone()),
            _ => {}
        }
        if event == HookEvent::PreToolUse {
            let decision = match field(&specific, "permissionDecision").as_deref() {
                Some("allow") => Some(Permission::Allow),
                Some("ask") => Some(Permission::Ask),
                Some("deny") => Some(Permission::Deny),
                _ => None,
            };
            if let Some(d) = decision {
                self.decide(d, field(&specific, "permissionDecisionReason"));
            }
        }
    }

    /// Keeps the strictest permission decision (deny over ask over allow).
    fn decide(&mut self, permission: Permission, reason: Option<String>) {
        if self.permission.is_none_or(|p| permission > p) {
            self.permission = Some(permission);
            self.permission_reason = reason;
        }
    }

    /// Why the call must not run: a block, or a `deny` decision.
    pub fn denial(&self) -> Option<String> {
        if let Some(b) = &self.blocked {
            return Some(b.clone());
        }
        (self.permission == Some(Permission::Deny))
            .then(|| self.permission_reason.clone().unwrap_or_else(|| "denied by a PreToolUse hook".into()))
    }
}

fn join_into(slot: &mut Option<String>, text: String) {
    match slot {
        Some(s) => {
            s.push('\n');
            s.push_str(&text);
        }
        None => *slot = Some(text),
    }
}

fn short(command: &str) -> String {
    let line = command.lines().next().unwrap_or_default();
    if line.chars().count() > 60 {
        format!("{}…", line.chars().take(60).collect::<String>())
    } else {
        line.to_string()
    }
}

fn first_lines(text: &str) -> String {
    let t: Vec<&str> = text.trim().lines().take(3).collect();
    if t.is_empty() {
        "(no output on stderr)".into()
    } else {
        t.join(" / ")
    }
}

#[cfg(test)]
mod tests;
