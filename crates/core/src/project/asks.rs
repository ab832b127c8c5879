//! What a project's agent files ask for, one item each, in plain words: the lines of
//! the trust dialog, of the notices of a headless run, and the unit that is applied or
//! dropped. An item `needs_trust` when it would run something on this computer or send
//! something off it (or loosen the sandbox); the rest (limits, tool format, prompt text,
//! servers that run inside the sandbox) is applied without asking.

use serde::{Deserialize, Serialize};

use crate::config::{Config, EpisodeLimits, SandboxSettings};
use crate::hooks::HookSettings;
use crate::mcp::{McpError, McpServerConfig, McpTransport};
use agent_llm::ModelSpec;

use super::files::{ProjectFile, ProjectFiles, MCP_FILE};

/// The kind of thing a project asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AskKind {
    /// A model (an endpoint prompts are sent to, or a file loaded on this computer).
    Model,
    /// A host variable whose value is sent as the API key.
    ApiKey,
    /// A command run on this computer at a session event.
    Hook,
    /// An MCP server.
    McpServer,
    /// A system prompt that replaces the built-in one.
    SystemPrompt,
    /// A sandbox setting that differs from the user's.
    Sandbox,
    /// An image substitution.
    ImageMap,
    /// Episode limits and the tool format.
    Limits,
    /// Custom slash commands (prompt text).
    Commands,
    /// A file that was refused or could not be used.
    Refused,
}

impl AskKind {
    /// The name used in JSON (`hook`, `api_key`, ...).
    pub fn name(self) -> &'static str {
        match self {
            AskKind::Model => "model",
            AskKind::ApiKey => "api_key",
            AskKind::Hook => "hook",
            AskKind::McpServer => "mcp_server",
            AskKind::SystemPrompt => "system_prompt",
            AskKind::Sandbox => "sandbox",
            AskKind::ImageMap => "image_map",
            AskKind::Limits => "limits",
            AskKind::Commands => "commands",
            AskKind::Refused => "refused",
        }
    }
}

/// Where an item lives, so that it can be dropped when it is not applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Target {
    /// A key of `.agent/config.toml` (`["sandbox", "image"]`).
    ConfigKey(Vec<String>),
    /// Every hook of a settings file.
    Hooks(String),
    /// A server of `.mcp.json`.
    McpJson(String),
    /// Nothing to drop (shown only).
    Nothing,
}

/// One thing the project asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ask {
    /// What kind of thing.
    pub kind: AskKind,
    /// The file that asks (relative to the project).
    pub file: String,
    /// What it is, in plain words.
    pub text: String,
    /// Whether it runs on this computer, sends data off it or loosens the sandbox.
    pub needs_trust: bool,
    pub(crate) target: Target,
}

impl Ask {
    fn new(kind: AskKind, file: &str, text: String, needs_trust: bool, target: Target) -> Ask {
        Ask { kind, file: shown(file), text: shown(&text), needs_trust, target }
    }
}

/// The longest line shown for one item; a longer one says how much is left out.
const MAX_SHOWN_CHARS: usize = 400;

/// `text` made safe to print: the project wrote it, so control characters (an escape
/// sequence could redraw the terminal, a newline could push a line out of sight) are
/// shown escaped, long runs of spaces (that would push the rest out of sight) are
/// counted instead, and a huge value is cut with a note of its length.
fn shown(text: &str) -> String {
    let mut out = String::new();
    let mut spaces = 0usize;
    let flush = |out: &mut String, spaces: &mut usize| {
        if *spaces > 8 {
            out.push_str(&format!(" [{spaces} spaces] "));
        } else {
            out.extend(std::iter::repeat_n(' ', *spaces));
        }
        *spaces = 0;
    };
    for c in text.chars() {
        if c == ' ' {
            spaces += 1;
            continue;
        }
        flush(&mut out, &mut spaces);
        if c.is_control() {
            out.extend(c.escape_default());
        } else if invisible(c) {
            out.push_str(&format!("\\u{{{:x}}}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    flush(&mut out, &mut spaces);
    let total = out.chars().count();
    if total > MAX_SHOWN_CHARS {
        let mut cut: String = out.chars().take(MAX_SHOWN_CHARS).collect();
        cut.push_str(&format!(" … ({} more characters)", total - MAX_SHOWN_CHARS));
        return cut;
    }
    out
}

/// Characters that print nothing yet change what the text around them looks like:
/// zero-width ones and the bidirectional overrides and isolates that can show
/// `rm -rf ~` as something harmless.
fn invisible(c: char) -> bool {
    matches!(c, '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2060}'..='\u{2064}' | '\u{2066}'..='\u{2069}' | '\u{FEFF}')
}

/// Everything the project's files ask for; `user` is the user's own configuration (what
/// the project's settings are compared with).
pub fn project_asks(files: &ProjectFiles, user: &Config) -> Vec<Ask> {
    asks_of(files, user, "your own config")
}

/// [`project_asks`], `user_file` naming the user's config file in refusals.
pub(crate) fn asks_of(files: &ProjectFiles, user: &Config, user_file: &str) -> Vec<Ask> {
    let mut asks = Vec::new();
    for r in &files.refused {
        asks.push(Ask::new(
            AskKind::Refused,
            &r.rel,
            format!("{} is refused: {}", r.rel, r.reason),
            false,
            Target::Nothing,
        ));
    }
    if let Some(file) = &files.config {
        config_asks(file, user, user_file, &mut asks);
    }
    for file in &files.settings {
        hook_asks(file, &mut asks);
    }
    if let Some(file) = &files.mcp_json {
        match crate::mcp::parse_mcp_json(&file.text, &files.root.join(MCP_FILE)) {
            Ok(servers) => {
                for (name, cfg) in &servers {
                    let target = Target::McpJson(name.to_string());
                    asks.push(if user.mcp_servers.contains_key(name) {
                        shadow_ask(&file.rel, name, user_file, target)
                    } else {
                        mcp_ask(&file.rel, name, cfg, target)
                    });
                }
            }
            Err(e) => asks.push(invalid(file, e.to_string())),
        }
    }
    if !files.commands.is_empty() {
        let names: Vec<String> = files.commands.iter().map(|c| format!("/{}", command_name(&c.rel))).collect();
        asks.push(Ask::new(
            AskKind::Commands,
            super::files::COMMANDS_DIR,
            format!("custom commands (prompt text): {}", names.join(", ")),
            false,
            Target::Nothing,
        ));
    }
    asks
}

/// `.agent/commands/git/commit.md` → `git:commit`.
pub fn command_name(rel: &str) -> String {
    let inner = rel.strip_prefix(super::files::COMMANDS_DIR).unwrap_or(rel).trim_start_matches('/');
    inner.strip_suffix(".md").unwrap_or(inner).replace('/', ":")
}

fn invalid(file: &ProjectFile, reason: String) -> Ask {
    // A parse error's first line says where, its last what (the lines between draw a caret).
    let lines: Vec<&str> = reason.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    let what = match (lines.first(), lines.last()) {
        (Some(a), Some(b)) if a != b => format!("{a}: {b}"),
        (Some(a), _) => a.to_string(),
        _ => String::new(),
    };
    Ask::new(
        AskKind::Refused,
        &file.rel,
        format!("{} is not valid and is not used: {what}", file.rel),
        false,
        Target::Nothing,
    )
}

fn key(parts: &[&str]) -> Target {
    Target::ConfigKey(parts.iter().map(|p| p.to_string()).collect())
}

fn config_asks(file: &ProjectFile, user: &Config, user_file: &str, asks: &mut Vec<Ask>) {
    let table: toml::Table = match toml::from_str(&file.text) {
        Ok(t) => t,
        Err(e) => return asks.push(invalid(file, e.to_string())),
    };
    let project: Config = match toml::from_str(&file.text) {
        Ok(c) => c,
        Err(e) => return asks.push(invalid(file, e.to_string())),
    };
    let f = file.rel.as_str();
    let mut endpoint = None;
    if let Some(spec) = &project.model {
        let (text, sends, trust) = match ModelSpec::parse(spec) {
            Ok(ModelSpec::Default | ModelSpec::Builtin(_)) => (format!("model: {spec} (built in)"), None, false),
            // The replies file may be any file of this computer, and its text is then
            // written into the session as the model's words.
            Ok(ModelSpec::Scripted(_)) => {
                (format!("model: {spec} — replies read from a file on this computer"), None, true)
            }
            Ok(ModelSpec::OpenAi { base_url, .. }) => (
                format!("model endpoint: {spec} — your prompts, the project's code and command output are sent to {base_url}"),
                Some(base_url),
                true,
            ),
            Ok(ModelSpec::Anthropic { .. }) => (
                format!("model: {spec} — your prompts and the project's code are sent to Anthropic's API"),
                Some("Anthropic's API".to_string()),
                true,
            ),
            Ok(ModelSpec::Hf { .. }) => {
                (format!("model: {spec} — downloaded from the Hugging Face hub and run on this computer"), None, true)
            }
            Ok(ModelSpec::Local(path)) => {
                (format!("model: {} — a model file loaded on this computer", path.display()), None, true)
            }
            Err(e) => (format!("model: {spec} (not a valid model spec: {e})"), None, true),
        };
        endpoint = sends;
        asks.push(Ask::new(AskKind::Model, f, text, trust, key(&["model"])));
    }
    if let Some(var) = &project.api_key_env {
        let to = endpoint
            .or_else(|| user.model.as_deref().and_then(|s| ModelSpec::parse(s).ok()).and_then(endpoint_of))
            .unwrap_or_else(|| "the model endpoint".into());
        let yours = user.api_key_env.as_deref() == Some(var.as_str());
        asks.push(Ask::new(
            AskKind::ApiKey,
            f,
            format!("API key: the value of your variable ${var} is sent to {to}"),
            !yours,
            key(&["api_key_env"]),
        ));
    }
    if let Some(prompt) = &project.system_prompt {
        asks.push(Ask::new(
            AskKind::SystemPrompt,
            f,
            format!("system prompt: replaced by the project's ({} characters)", prompt.chars().count()),
            true,
            key(&["system_prompt"]),
        ));
    }
    if let Some(toml::Value::Table(sandbox)) = table.get("sandbox") {
        if sandbox.contains_key("engines") {
            // Where containers run (and with which keys) is the user's choice alone: an
            // engine named by a cloned repository would receive the workspace and could
            // run anything on the host behind it.
            asks.push(Ask::new(
                AskKind::Refused,
                f,
                "sandbox engines: a project cannot choose the Docker engines; set [[sandbox.engines]] in your own config".into(),
                false,
                key(&["sandbox", "engines"]),
            ));
        }
        for (name, value) in sandbox.iter().filter(|(k, _)| k.as_str() != "engines") {
            asks.push(sandbox_ask(f, name, value, &project.sandbox, &user.sandbox));
        }
    }
    if let Some(toml::Value::Table(map)) = table.get("image_map") {
        for (pattern, image) in map {
            let image = image.as_str().unwrap_or_default();
            let same = user.image_map.lookup(pattern) == Some(image);
            asks.push(Ask::new(
                AskKind::ImageMap,
                f,
                format!("image map: {pattern} → {image} (an image that may be pulled from a registry)"),
                !same,
                key(&["image_map", pattern]),
            ));
        }
    }
    for (name, cfg) in &project.mcp_servers {
        let target = key(&["mcp_servers", name]);
        asks.push(if user.mcp_servers.contains_key(name) {
            shadow_ask(f, name, user_file, target)
        } else {
            mcp_ask(f, name, cfg, target)
        });
    }
    let mut limits: Vec<String> = Vec::new();
    if let Some(toml::Value::Table(episode)) = table.get("episode") {
        for (k, v) in episode {
            match raised(k, &project.episode, &user.episode) {
                Some(yours) => asks.push(Ask::new(
                    AskKind::Limits,
                    f,
                    format!("episode limit raised: {k} = {v} (yours: {yours}); only you can raise a limit"),
                    true,
                    key(&["episode", k]),
                )),
                None => limits.push(format!("{k} = {v}")),
            }
        }
    }
    if let Some(v) = table.get("tool_format") {
        limits.push(format!("tool_format = {v}"));
    }
    // Fewer tools only takes abilities away from the model.
    if let Some(v) = table.get("tools") {
        limits.push(format!("tools = {v}"));
    }
    if !limits.is_empty() {
        asks.push(Ask::new(AskKind::Limits, f, format!("settings: {}", limits.join(", ")), false, Target::Nothing));
    }
}

/// The endpoint a spec sends prompts to, if it sends them anywhere.
fn endpoint_of(spec: ModelSpec) -> Option<String> {
    match spec {
        ModelSpec::OpenAi { base_url, .. } => Some(base_url),
        ModelSpec::Anthropic { .. } => Some("Anthropic's API".into()),
        _ => None,
    }
}

/// The user's value of the episode limit `name` when the project's is higher (a
/// looser limit needs trust); `None` when it is the same or tighter, or not a limit.
fn raised(name: &str, p: &EpisodeLimits, u: &EpisodeLimits) -> Option<u64> {
    let pick = |e: &EpisodeLimits| -> Option<u64> {
        Some(match name {
            "max_turns" => u64::from(e.max_turns),
            "token_budget" => e.token_budget,
            "wall_clock_secs" => e.wall_clock_secs,
            "max_parse_failures" => u64::from(e.max_parse_failures),
            "context_tokens" => e.context_tokens,
            "max_reply_tokens" => u64::from(e.max_reply_tokens),
            _ => return None,
        })
    };
    let (mine, yours) = (pick(p)?, pick(u)?);
    (mine > yours).then_some(yours)
}

/// One `[sandbox]` key of the project, compared with the user's value. Tighter limits
/// and output settings apply freely; anything looser (or another image) needs trust.
fn sandbox_ask(f: &str, name: &str, value: &toml::Value, p: &SandboxSettings, u: &SandboxSettings) -> Ask {
    let (text, trust) = match name {
        "image" => (
            format!("sandbox image: {} (yours: {}; it may be pulled from a registry)", p.image, u.image),
            p.image != u.image,
        ),
        // off < allowlist < on: a project may only move down that order.
        "network" => {
            (format!("sandbox network: {} (yours: {})", p.network, u.network), p.network.looser_than(u.network))
        }
        // Every host the user did not list opens the firewall further.
        "allow_hosts" => {
            let added = crate::sandbox_network::hosts_added(&p.allow_hosts, &u.allow_hosts);
            let text = format!("sandbox network hosts: {} (added: {})", p.allow_hosts.join(", "), added.join(", "));
            (text, !added.is_empty())
        }
        "cpus" => (format!("sandbox CPUs: {} (yours: {})", p.cpus, u.cpus), p.cpus > u.cpus),
        "memory_mb" => {
            (format!("sandbox memory: {} MiB (yours: {} MiB)", p.memory_mb, u.memory_mb), p.memory_mb > u.memory_mb)
        }
        "pids_limit" => {
            (format!("sandbox processes: {} (yours: {})", p.pids_limit, u.pids_limit), p.pids_limit > u.pids_limit)
        }
        // Output is held in this computer's memory; a longer timeout keeps a runaway
        // command going: only the user may raise either.
        "max_output_bytes" => (
            format!("command output kept: {} bytes (yours: {} bytes)", p.max_output_bytes, u.max_output_bytes),
            p.max_output_bytes > u.max_output_bytes,
        ),
        "command_timeout_secs" => (
            format!("command timeout: {} s (yours: {} s)", p.command_timeout_secs, u.command_timeout_secs),
            p.command_timeout_secs > u.command_timeout_secs,
        ),
        // A setting not weighed here may loosen the sandbox: the user decides.
        _ => (format!("sandbox setting: {name} = {value}"), true),
    };
    Ask::new(AskKind::Sandbox, f, text, trust, key(&["sandbox", name]))
}

/// A server run in the sandbox applies freely; one this computer connects to needs
/// trust; one whose entry cannot be used (a URL that is refused) is named with its file.
fn mcp_ask(f: &str, name: &str, cfg: &McpServerConfig, target: Target) -> Ask {
    let transport = cfg.transport(name);
    let in_sandbox = transport.as_ref().is_ok_and(McpTransport::in_sandbox);
    match transport {
        Ok(McpTransport::Stdio { argv, .. }) => Ask::new(
            AskKind::McpServer,
            f,
            format!("MCP server `{name}`: runs `{}` inside the sandbox", argv.join(" ")),
            false,
            target,
        ),
        Ok(McpTransport::Http { url, headers }) if in_sandbox => Ask::new(
            AskKind::McpServer,
            f,
            format!("MCP server `{name}`: {url} inside the sandbox{}", header_note(&headers)),
            false,
            target,
        ),
        Ok(McpTransport::Http { url, headers }) => Ask::new(
            AskKind::McpServer,
            f,
            format!("MCP server `{name}`: this computer connects to {url}{}", header_note(&headers)),
            true,
            target,
        ),
        Err(McpError::Config { reason, .. }) => {
            Ask::new(AskKind::Refused, f, format!("MCP server `{name}` of {f} is refused: {reason}"), false, target)
        }
        Err(e) => Ask::new(AskKind::Refused, f, format!("MCP server `{name}` of {f} is refused: {e}"), false, target),
    }
}

/// A project server with the name of one of the user's: never merged into the user's
/// entry (it would inherit the user's headers, a token among them); refused unless the
/// project is trusted, and then it replaces the user's entry whole.
fn shadow_ask(f: &str, name: &str, user_file: &str, target: Target) -> Ask {
    Ask::new(
        AskKind::Refused,
        f,
        format!(
            "MCP server `{name}` of {f} has the name of your server `{name}` in {user_file}: it is refused \
             (your own is used) unless you trust the project, and then it replaces yours whole"
        ),
        true,
        target,
    )
}

fn header_note(headers: &[(String, String)]) -> String {
    if headers.is_empty() {
        String::new()
    } else {
        let names: Vec<&str> = headers.iter().map(|(k, _)| k.as_str()).collect();
        format!(" (with the headers {})", names.join(", "))
    }
}

fn hook_asks(file: &ProjectFile, asks: &mut Vec<Ask>) {
    let mut settings = HookSettings::default();
    if let Err(e) = settings.merge_json(&file.text, std::path::Path::new(&file.rel)) {
        return asks.push(invalid(file, e.to_string()));
    }
    for (event, matcher, hook) in settings.entries() {
        let on = match matcher {
            Some(m) => format!("{} ({m})", event.name()),
            None => event.name().to_string(),
        };
        asks.push(Ask::new(
            AskKind::Hook,
            &file.rel,
            format!("hook on {on}: runs `{}` on this computer", hook.command),
            true,
            Target::Hooks(file.rel.clone()),
        ));
    }
}
