//! The settings a session runs with: the user's, with as much of the project's laid over
//! them as the trust decision allows. The one place a project's files take effect.

use std::collections::BTreeMap;

use crate::config::{merge_project, Config, UserConfig};
use crate::hooks::HookSettings;
use crate::mcp::McpServerConfig;

use super::asks::{asks_of, Ask, AskKind, Target};
use super::files::{ProjectFile, ProjectFiles};
use super::ProjectError;

/// How much of the project's settings a session uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Apply {
    /// Everything (the project is trusted, for good or for this session).
    All,
    /// Only what runs nowhere but in the sandbox and sends nothing anywhere (an
    /// untrusted project in a headless run).
    SafeOnly,
    /// None of it ("open without the project's settings").
    Nothing,
}

/// The settings of a session in a project.
#[derive(Debug, Clone)]
pub struct ProjectSettings {
    /// The configuration.
    pub config: Config,
    /// The user's hooks, and the project's when it is trusted.
    pub hooks: HookSettings,
    /// MCP servers: the user's, the project's `.mcp.json` and its config's (a name in
    /// both of the project's files: the config's); a project's server of the name of
    /// one of the user's replaces it whole, and only when the project is trusted.
    pub mcp_servers: BTreeMap<String, McpServerConfig>,
    /// The project's custom commands in use.
    pub commands: Vec<ProjectFile>,
    /// Everything the project's files ask for.
    pub asks: Vec<Ask>,
    /// What they ask for and is not used (refused files are in `asks` only).
    pub ignored: Vec<Ask>,
    /// How much was applied.
    pub apply: Apply,
    /// The project's skills, then the user's (see [`super::Project::settings`]).
    pub skills: crate::skills::Skills,
}

impl ProjectSettings {
    /// What was refused, as lines for the user (a refusal that trust lifts is not one
    /// when the project is trusted).
    pub fn refused(&self) -> impl Iterator<Item = &Ask> {
        let trusted = self.apply == Apply::All;
        self.asks.iter().filter(move |a| a.kind == AskKind::Refused && !(a.needs_trust && trusted))
    }
}

/// The user's settings with the project's laid over them as `apply` allows.
pub fn assemble(user: &UserConfig, files: &ProjectFiles, apply: Apply) -> Result<ProjectSettings, ProjectError> {
    assemble_asks(user, files, asks_of(files, &user.config, &super::user_file(user)), apply)
}

/// [`assemble`] with what the files ask for already known (see [`super::Project::settings`]).
pub(crate) fn assemble_asks(
    user: &UserConfig,
    files: &ProjectFiles,
    asks: Vec<Ask>,
    apply: Apply,
) -> Result<ProjectSettings, ProjectError> {
    let dropped = |a: &Ask| match apply {
        // A refused item is never applied, however much the project is trusted (unless
        // trust is what it waits for).
        _ if a.kind == AskKind::Refused && !a.needs_trust && a.target != Target::Nothing => true,
        Apply::All => false,
        Apply::SafeOnly => a.needs_trust,
        Apply::Nothing => true,
    };
    let ignored: Vec<Ask> = asks.iter().filter(|a| a.kind != AskKind::Refused && dropped(a)).cloned().collect();

    let mut table = user.table.clone();
    let mut config_servers: Vec<String> = Vec::new();
    let mut source = user.path.clone().unwrap_or_else(|| "the default configuration".into());
    if let (Some(file), false) = (&files.config, apply == Apply::Nothing) {
        let path = files.root.join(&file.rel);
        match toml::from_str::<toml::Table>(&file.text) {
            Ok(mut project) => {
                for a in asks.iter().filter(|a| dropped(a)) {
                    if let Target::ConfigKey(key) = &a.target {
                        remove_key(&mut project, key);
                    }
                }
                if let Some(toml::Value::Table(servers)) = project.get("mcp_servers") {
                    config_servers = servers.keys().cloned().collect();
                }
                merge_project(&mut table, project);
                source = path;
            }
            // Trusted, a broken file is the user's to fix; untrusted, it is not used
            // (the asks say so) and must not keep the user from working.
            Err(e) if apply == Apply::All => {
                return Err(crate::config::ConfigError::Parse {
                    path: path.display().to_string(),
                    reason: e.to_string(),
                }
                .into())
            }
            Err(_) => {}
        }
    }
    let config = match Config::from_table(table, &source) {
        Ok(c) => c,
        Err(e) if apply == Apply::All => return Err(e.into()),
        // An untrusted project's values that the types or limits refuse: without them.
        Err(_) => user.config.clone(),
    };

    let mut hooks = HookSettings::load_user()?;
    if apply == Apply::All {
        for file in &files.settings {
            hooks.merge_json(&file.text, &files.root.join(&file.rel))?;
        }
    }

    let mcp_json = match (apply, &files.mcp_json) {
        (Apply::Nothing, _) | (_, None) => BTreeMap::new(),
        (_, Some(f)) => match crate::mcp::parse_mcp_json(&f.text, &files.root.join(&f.rel)) {
            Ok(servers) => servers,
            // Trusted: a broken `.mcp.json` is an error, as a broken config is.
            Err(e) if apply == Apply::All => return Err(e.into()),
            Err(_) => BTreeMap::new(),
        },
    };
    let mut mcp_servers = config.mcp_servers.clone();
    for (name, server) in mcp_json {
        let refused = asks.iter().any(|a| dropped(a) && matches!(&a.target, Target::McpJson(n) if *n == name));
        if !refused && !config_servers.contains(&name) {
            // Replaces a user's server of that name whole (its asks allowed that).
            mcp_servers.insert(name, server);
        }
    }
    let commands = if apply == Apply::Nothing { Vec::new() } else { files.commands.clone() };
    Ok(ProjectSettings { config, hooks, mcp_servers, commands, asks, ignored, apply, skills: Default::default() })
}

/// Removes `key` (a path of table names) from `table`.
fn remove_key(table: &mut toml::Table, key: &[String]) {
    match key {
        [] => {}
        [last] => {
            table.remove(last);
        }
        [first, rest @ ..] => {
            if let Some(toml::Value::Table(inner)) = table.get_mut(first) {
                remove_key(inner, rest);
            }
        }
    }
}
