//! The project's settings for each command: the user's configuration with the project's
//! laid over it as far as the user's trust allows (see `agent_core::project`). Headless
//! commands never ask: a trusted project (or `--trust-project`) gets everything, any
//! other only what runs in the sandbox and sends nothing off this computer.

use std::path::PathBuf;

use anyhow::Context;

use agent_core::config::UserConfig;
use agent_core::project::{Project, ProjectSettings, TrustStore};
use agent_protocol::{Event, IgnoredSetting};

/// What a headless command starts from.
pub struct Headless {
    /// The project folder (the current directory).
    pub dir: PathBuf,
    /// The settings to use.
    pub settings: ProjectSettings,
    /// What changed in a trusted project since the user trusted it (and that its
    /// settings that need trust are therefore not used), if it changed.
    pub changed: Option<String>,
}

impl Headless {
    /// The event naming the project's settings that are not used, if any.
    pub fn ignored_event(&self) -> Option<Event> {
        if self.settings.ignored.is_empty() {
            return None;
        }
        Some(Event::ProjectSettingsIgnored {
            project: self.dir.display().to_string(),
            ignored: self
                .settings
                .ignored
                .iter()
                .map(|a| IgnoredSetting { kind: a.kind.name().into(), file: a.file.clone(), what: a.text.clone() })
                .collect(),
            hint: HEADLESS_HINT.into(),
        })
    }

    /// Lines for the user about refused files and items, and about a trusted project
    /// whose agent files changed.
    pub fn refused_notices(&self) -> Vec<String> {
        self.changed.iter().cloned().chain(self.settings.refused().map(|a| a.text.clone())).collect()
    }

    /// Prints the ignored settings and refused files on stderr (commands without an
    /// event stream).
    pub fn announce(&self) {
        for n in self.refused_notices() {
            eprintln!("● {n}");
        }
        if let Some(Event::ProjectSettingsIgnored { project, ignored, hint }) = self.ignored_event() {
            eprintln!("{}", super::print::describe_ignored(&project, &ignored, &hint));
        }
    }
}

const HEADLESS_HINT: &str =
    "To use them, trust the project: open `agent` in that folder and choose Trust, or pass --trust-project.";

/// The settings of a headless command run in the current directory.
pub fn headless(user: &UserConfig, trust_flag: bool) -> anyhow::Result<Headless> {
    let dir = std::env::current_dir().context("cannot read the current directory")?;
    let store = TrustStore::load()?;
    let project = Project::open(&dir, user, &store)?;
    let settings = project.settings(user, project.headless_apply(trust_flag))?;
    let changed = project.changed_notice(trust_flag);
    Ok(Headless { dir: project.files.root, settings, changed })
}

/// The configuration of a headless command without an event stream: what was left
/// out of the project is printed on stderr first.
pub fn announced(user: &UserConfig, trust_flag: bool) -> anyhow::Result<agent_core::config::Config> {
    let headless = headless(user, trust_flag)?;
    headless.announce();
    Ok(headless.settings.config)
}
