//! The project `agent` is opened in, as untrusted input. Its agent files
//! (`.agent/config.toml`, `.agent/settings*.json`, `.mcp.json`, `.agent/commands/`) are
//! read once and checked ([`files`]), described item by item ([`asks`]), and laid over the
//! user's settings only as far as the user's trust decision ([`trust`]) allows
//! ([`assemble`]). Nothing a project asks for runs on this computer or sends anything
//! off it before the user decided: not a hook, not a model endpoint, not a key variable,
//! not an HTTP MCP server, not a replaced system prompt. `AGENTS.md` is prompt text read
//! inside the sandbox and needs no trust.

mod asks;
mod assemble;
mod files;
mod trust;

#[cfg(test)]
mod tests;

use std::path::Path;

pub use asks::{command_name, project_asks, Ask, AskKind};
pub use assemble::{assemble, Apply, ProjectSettings};
pub use files::{ProjectFile, ProjectFiles, RefusedFile, COMMANDS_DIR, CONFIG_FILE, MCP_FILE, SETTINGS_FILES};
pub use trust::{TrustEntry, TrustState, TrustStore, TRUST_FILE};

use crate::config::UserConfig;

/// Why the project's settings could not be read or the decision kept.
#[derive(Debug, thiserror::Error)]
pub enum ProjectError {
    #[error("cannot open the project folder {path}: {reason}")]
    Folder { path: String, reason: String },
    #[error("the trust file {path} cannot be used: {reason} (fix it, or delete it to be asked again)")]
    TrustFile { path: String, reason: String },
    #[error("there is no user config folder (is HOME set?) to keep trust decisions in")]
    NoConfigDir,
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error(transparent)]
    Hooks(#[from] crate::hooks::HookSettingsError),
    #[error(transparent)]
    Mcp(#[from] crate::mcp::McpError),
}

/// A project folder, what its files ask for and where the user's trust stands.
#[derive(Debug, Clone)]
pub struct Project {
    /// Its agent files.
    pub files: ProjectFiles,
    /// What they ask for.
    pub asks: Vec<Ask>,
    /// The user's decision.
    pub state: TrustState,
    /// The project's skills: prompt text and sandboxed scripts, which need no trust (the
    /// trust dialog lists them).
    pub skills: crate::skills::Skills,
}

/// What changed in a project's asks since it was trusted.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Changes {
    /// Lines that are new.
    pub added: Vec<String>,
    /// Lines that are gone.
    pub removed: Vec<String>,
}

impl Project {
    /// Reads the project in `dir` and looks up its decision in `store`.
    pub fn open(dir: &Path, user: &UserConfig, store: &TrustStore) -> Result<Project, ProjectError> {
        let files = ProjectFiles::read(dir)?;
        let asks = asks::asks_of(&files, &user.config, &user_file(user));
        let state = store.state(&files);
        let skills = crate::skills::discover_project(&files.root);
        Ok(Project { files, asks, state, skills })
    }

    /// Whether the user must decide before the project's settings are all used: it
    /// asks for something that needs trust and was never trusted, or it was trusted and
    /// its agent files changed in any way since (a sandbox that writes the workspace
    /// could otherwise add harmless-looking items to a trusted project unseen).
    pub fn needs_decision(&self) -> bool {
        match self.state {
            TrustState::Trusted => false,
            TrustState::Changed { .. } => !self.files.is_empty(),
            TrustState::Unknown => self.asks.iter().any(|a| a.needs_trust),
        }
    }

    /// What a run without a dialog uses: everything when the project is trusted as it
    /// is now (or `trust_flag`, `--trust-project`, says so), else only what needs no trust.
    pub fn headless_apply(&self, trust_flag: bool) -> Apply {
        if trust_flag || !self.needs_decision() {
            Apply::All
        } else {
            Apply::SafeOnly
        }
    }

    /// The notice of a headless run in a trusted project whose files changed since: what
    /// changed, and that only what needs no trust is used.
    pub fn changed_notice(&self, trust_flag: bool) -> Option<String> {
        let changes = self.changes().filter(|_| !trust_flag && self.needs_decision())?;
        let lines: Vec<String> = changes
            .added
            .iter()
            .map(|l| format!("+ {l}"))
            .chain(changes.removed.iter().map(|l| format!("- {l}")))
            .collect();
        Some(format!(
            "the project's agent files changed since you trusted it, so only what needs no trust is used \
             (open `agent` there to review the change and trust it again, or pass --trust-project); what changed: {}",
            lines.join("; ")
        ))
    }

    /// The settings of a session in this project, `apply` deciding how much of it is used.
    /// The project's skills are used however much it is trusted (they need no trust),
    /// and win over the user's of the same name.
    pub fn settings(&self, user: &UserConfig, apply: Apply) -> Result<ProjectSettings, ProjectError> {
        let mut settings = assemble::assemble_asks(user, &self.files, self.asks.clone(), apply)?;
        let user_skills = crate::skills::discover(&crate::skills::user_roots());
        settings.skills = self.skills.clone().merged(user_skills);
        Ok(settings)
    }

    /// The dialog's lines (and what a trust decision records).
    pub fn lines(&self) -> Vec<String> {
        self.asks.iter().map(|a| a.text.clone()).collect()
    }

    /// What changed since the project was trusted, when it was and its files changed:
    /// the items asked for that are new or gone, and when those read the same, the
    /// files whose text changed.
    pub fn changes(&self) -> Option<Changes> {
        let TrustState::Changed { before, files } = &self.state else { return None };
        let now = self.lines();
        let mut changes = Changes {
            added: now.iter().filter(|l| !before.contains(l)).cloned().collect(),
            removed: before.iter().filter(|l| !now.contains(l)).cloned().collect(),
        };
        if changes.added.is_empty() && changes.removed.is_empty() {
            let digests = self.files.file_digests();
            for (rel, digest) in &digests {
                match files.get(rel) {
                    None if !files.is_empty() => changes.added.push(format!("{rel} was added")),
                    Some(old) if old != digest => {
                        changes.added.push(format!("{rel} changed (the items it asks for read the same)"))
                    }
                    _ => {}
                }
            }
            changes
                .removed
                .extend(files.keys().filter(|rel| !digests.contains_key(*rel)).map(|rel| format!("{rel} (the file)")));
            if changes.added.is_empty() && changes.removed.is_empty() {
                changes.added.push("the agent files changed (the items they ask for read the same)".into());
            }
        }
        Some(changes)
    }
}

/// How the user's config file is named in refusals.
pub(crate) fn user_file(user: &UserConfig) -> String {
    match &user.path {
        Some(p) => p.display().to_string(),
        None => "your own config".into(),
    }
}
