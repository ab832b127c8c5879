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
        let asks = project_asks(&files, &user.config);
        let state = store.state(&files);
        Ok(Project { files, asks, state })
    }

    /// Whether the user must decide before the project's settings are all used: it
    /// asks for something that needs trust and is not trusted as it is now.
    pub fn needs_decision(&self) -> bool {
        self.asks.iter().any(|a| a.needs_trust) && self.state != TrustState::Trusted
    }

    /// What a run without a dialog uses: everything when the project is trusted (or
    /// `trust_flag`, `--trust-project`, says so), else only what needs no trust.
    pub fn headless_apply(&self, trust_flag: bool) -> Apply {
        if trust_flag || !self.needs_decision() {
            Apply::All
        } else {
            Apply::SafeOnly
        }
    }

    /// The settings of a session in this project, `apply` deciding how much of it is used.
    pub fn settings(&self, user: &UserConfig, apply: Apply) -> Result<ProjectSettings, ProjectError> {
        assemble::assemble_asks(user, &self.files, self.asks.clone(), apply)
    }

    /// The dialog's lines (and what a trust decision records).
    pub fn lines(&self) -> Vec<String> {
        self.asks.iter().map(|a| a.text.clone()).collect()
    }

    /// What changed since the project was trusted, when it was and its files changed.
    pub fn changes(&self) -> Option<Changes> {
        let TrustState::Changed { before } = &self.state else { return None };
        let now = self.lines();
        Some(Changes {
            added: now.iter().filter(|l| !before.contains(l)).cloned().collect(),
            removed: before.iter().filter(|l| !now.contains(l)).cloned().collect(),
        })
    }
}
