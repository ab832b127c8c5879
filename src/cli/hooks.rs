//! Which hooks a front end runs: the user's settings and, when the project is trusted,
//! the project's for the UI and `agent run`, a named file with `--hooks`, none with
//! `--no-hooks`.

use std::path::Path;

use agent_core::hooks::{HookSettings, Hooks};

/// The hooks of a session in `project` (`settings`: the user's and, when trusted, the
/// project's), and a line for the user about them.
pub fn session_hooks(
    mut settings: HookSettings,
    project: &Path,
    extra: Option<&Path>,
    none: bool,
) -> anyhow::Result<(Hooks, Option<String>)> {
    if none {
        return Ok((Hooks::default(), None));
    }
    if let Some(file) = extra {
        settings.merge_file(file)?;
    }
    let note = describe(&settings);
    Ok((Hooks::new(settings, Some(project.to_path_buf())), note))
}

/// The hooks of a bench run: only those of `file`, run in the current directory.
pub fn bench_hooks(file: Option<&Path>) -> anyhow::Result<(Hooks, Option<String>)> {
    let Some(file) = file else { return Ok((Hooks::default(), None)) };
    let settings = HookSettings::from_file(file)?;
    let note = describe(&settings);
    Ok((Hooks::new(settings, std::env::current_dir().ok()), note))
}

/// "hooks: 1 PreToolUse, 2 Stop", with the events this agent does not run.
fn describe(settings: &HookSettings) -> Option<String> {
    let counts: Vec<String> = settings.counts().iter().map(|(e, n)| format!("{n} {}", e.name())).collect();
    let mut parts = Vec::new();
    if !counts.is_empty() {
        parts.push(format!("hooks: {}", counts.join(", ")));
    }
    if !settings.unsupported.is_empty() {
        parts.push(format!("hook events this agent does not run are ignored: {}", settings.unsupported.join(", ")));
    }
    (!parts.is_empty()).then(|| parts.join("; "))
}
