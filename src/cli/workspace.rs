//! The host folder that becomes the sandbox's workspace: refused when it holds what
//! decides what runs on the host (the home folder, `/`, the agent's own folders), and
//! the repositories a session created named when it ends.

use std::path::{Path, PathBuf};

use agent_core::config::UserConfig;
use agent_sandbox::{Protected, RepoListing};

/// Refuses `dir` as a workspace when the sandbox could rewrite the user's config, hooks,
/// trust decisions, sessions or models through it (see
/// [`agent_sandbox::refuse_dangerous_workspace`]).
pub(crate) fn refuse_dangerous(dir: &Path, user: &UserConfig) -> Result<(), agent_sandbox::WorkspaceRefused> {
    agent_sandbox::refuse_dangerous_workspace(dir, dirs::home_dir().as_deref(), &protected(user))
}

/// The agent's own folders and the user's config file.
fn protected(user: &UserConfig) -> Vec<Protected> {
    let entry = |path: PathBuf, what: &str| Protected { path, what: what.to_string() };
    let mut out = Vec::new();
    if let Some(d) = dirs::config_dir() {
        out.push(entry(d.join("agent"), "the agent's config folder (config, hooks, trust store)"));
    }
    if let Some(h) = dirs::home_dir() {
        out.push(entry(h.join(".config/agent"), "the agent's commands folder"));
    }
    if let Some(d) = dirs::data_dir() {
        out.push(entry(d.join("agent"), "the agent's data folder (sessions, checkpoints)"));
    }
    match std::env::var_os(agent_llm::models::CACHE_DIR_ENV) {
        Some(d) if !d.is_empty() => out.push(entry(PathBuf::from(d), "the agent's cache (models)")),
        _ => {
            if let Some(d) = dirs::cache_dir() {
                out.push(entry(d.join("agent"), "the agent's cache (models)"));
            }
        }
    }
    if let Some(d) = dirs::state_dir() {
        out.push(entry(d.join("agent"), "the agent's log folder"));
    }
    if let Some(p) = &user.path {
        out.push(entry(p.clone(), "your config file"));
    }
    out
}

/// The repositories below `dir`, listed without blocking the runtime's other tasks.
pub(crate) fn repositories(dir: &Path) -> RepoListing {
    tokio::task::block_in_place(|| agent_sandbox::nested_repositories(dir))
}

/// The line naming the repositories that appeared below the workspace during the
/// session, if any: their config and hooks were written by the sandbox.
pub(crate) fn new_repositories_notice(before: &RepoListing, after: &RepoListing) -> Option<String> {
    let added = after.added_since(before);
    if added.is_empty() {
        return None;
    }
    let names: Vec<String> = added.iter().map(|p| format!("{}/", p.display())).collect();
    Some(format!(
        "the session created nested repositories: {} (their .git/config and hooks were written by the sandbox: \
         inspect them before running git there)",
        names.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_repositories_are_named_with_a_warning() {
        let before = RepoListing { repos: [PathBuf::from("old")].into(), complete: true };
        let after = RepoListing { repos: [PathBuf::from("old"), PathBuf::from("sub")].into(), complete: true };
        let line = new_repositories_notice(&before, &after).unwrap();
        assert!(line.starts_with("the session created nested repositories: sub/ (their .git/config"), "{line}");
        assert_eq!(new_repositories_notice(&after, &after), None);
    }
}
