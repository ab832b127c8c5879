//! Which MCP servers a session starts: `[mcp_servers.NAME]` in the config file (Codex's
//! table) and the project's `.mcp.json` (Claude Code's `mcpServers` object).

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use url::{Host, Url};

use super::McpError;

/// The project file Claude Code reads its MCP servers from.
pub const PROJECT_MCP_FILE: &str = ".mcp.json";

/// One server: a command started in the sandbox (stdio) or a streamable HTTP endpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServerConfig {
    /// The program, run inside the sandbox container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// Its arguments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Variables added to its environment.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// A streamable HTTP endpoint (`localhost` is the sandbox).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Headers sent with every HTTP request (e.g. `Authorization`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// `.mcp.json`'s `type`: `stdio`, `http` (`streamable-http`), or `sse` (refused).
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Seconds a tool call may take before it is given up (default: the sandbox's
    /// command timeout).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_timeout_secs: Option<u64>,
}

/// How to reach a server, checked.
#[derive(Debug, Clone, PartialEq)]
pub enum McpTransport {
    /// `argv` run in the sandbox, `env` as `KEY=VALUE`.
    Stdio { argv: Vec<String>, env: Vec<String> },
    /// A streamable HTTP endpoint, parsed once: the trust decision and the connection
    /// both use this value, so they cannot disagree about where it leads.
    Http { url: Url, headers: Vec<(String, String)> },
}

impl McpTransport {
    /// Whether an HTTP endpoint names the sandbox container (`localhost`, `127.0.0.1`
    /// or `::1`, as the URL parser reads the host); every other host is this computer's
    /// business and needs the user's trust. Stdio servers always run in the sandbox.
    pub fn in_sandbox(&self) -> bool {
        match self {
            McpTransport::Stdio { .. } => true,
            McpTransport::Http { url, .. } => is_sandbox_host(url),
        }
    }
}

/// Whether `url`'s parsed host is the sandbox's loopback (`localhost`, `127.0.0.1`, `::1`).
pub fn is_sandbox_host(url: &Url) -> bool {
    match url.host() {
        Some(Host::Domain(d)) => d == "localhost",
        Some(Host::Ipv4(ip)) => ip == std::net::Ipv4Addr::LOCALHOST,
        Some(Host::Ipv6(ip)) => ip == std::net::Ipv6Addr::LOCALHOST,
        None => false,
    }
}

/// `raw` parsed as an MCP endpoint, or why it is refused. Spellings that parsers read
/// differently (a backslash, credentials before an `@`) are refused outright rather
/// than interpreted: what the user is shown must be where the connection goes.
pub fn parse_endpoint(raw: &str) -> Result<Url, String> {
    if raw.contains('\\') {
        return Err(format!(
            "`url` `{raw}` contains a backslash, which URL parsers read differently; write the URL with `/` only"
        ));
    }
    if raw.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err(format!("`url` `{}` contains spaces or control characters", raw.escape_debug()));
    }
    let url = Url::parse(raw).map_err(|e| format!("`url` `{raw}` is not a valid URL: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!("`url` must start with http:// or https:// (got `{raw}`)"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(format!(
            "`url` `{raw}` has a user name or password before `@`; put credentials in `headers` instead"
        ));
    }
    if url.host().is_none() {
        return Err(format!("`url` `{raw}` names no host"));
    }
    Ok(url)
}

impl McpServerConfig {
    /// The transport, or why the entry cannot be used.
    pub fn transport(&self, name: &str) -> Result<McpTransport, McpError> {
        let bad = |reason: String| McpError::Config { server: name.to_string(), reason };
        match (self.kind.as_deref(), &self.command, &self.url) {
            (Some("sse"), _, _) => Err(bad(
                "the SSE transport is deprecated and not supported; use the server's streamable HTTP endpoint (`url`) or its stdio command".into(),
            )),
            (Some(k), _, _) if !matches!(k, "stdio" | "http" | "streamable-http" | "streamableHttp") => {
                Err(bad(format!("unknown type `{k}` (stdio or http)")))
            }
            (_, Some(_), Some(_)) => Err(bad("give either `command` (stdio) or `url` (HTTP), not both".into())),
            (_, Some(command), None) => {
                let mut argv = vec![command.clone()];
                argv.extend(self.args.iter().cloned());
                Ok(McpTransport::Stdio { argv, env: self.env.iter().map(|(k, v)| format!("{k}={v}")).collect() })
            }
            (_, None, Some(raw)) => Ok(McpTransport::Http {
                url: parse_endpoint(raw).map_err(bad)?,
                headers: self.headers.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            }),
            (_, None, None) => Err(bad("neither `command` nor `url` is set".into())),
        }
    }
}

#[derive(Deserialize)]
struct McpJson {
    #[serde(rename = "mcpServers", default)]
    servers: BTreeMap<String, serde_json::Value>,
}

/// The servers of a project's `.mcp.json` (none when it has no such file). Claude Code's
/// extra keys (`timeout`, `description`, …) are ignored.
pub fn read_mcp_json(project: &Path) -> Result<BTreeMap<String, McpServerConfig>, McpError> {
    let path = project.join(PROJECT_MCP_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeMap::new()),
        Err(e) => return Err(McpError::File { path: path.display().to_string(), reason: e.to_string() }),
    };
    parse_mcp_json(&text, &path)
}

/// The servers of a `.mcp.json` document; `path` names it in errors.
pub fn parse_mcp_json(text: &str, path: &Path) -> Result<BTreeMap<String, McpServerConfig>, McpError> {
    let file: McpJson = serde_json::from_str(text)
        .map_err(|e| McpError::File { path: path.display().to_string(), reason: e.to_string() })?;
    let mut out = BTreeMap::new();
    for (name, value) in file.servers {
        let mut entry = value.as_object().cloned().unwrap_or_default();
        entry.retain(|k, _| matches!(k.as_str(), "command" | "args" | "env" | "url" | "headers" | "type"));
        let cfg: McpServerConfig = serde_json::from_value(serde_json::Value::Object(entry)).map_err(|e| {
            McpError::File { path: path.display().to_string(), reason: format!("mcpServers.{name}: {e}") }
        })?;
        out.insert(name, cfg);
    }
    Ok(out)
}

/// Whether a server name can prefix tool names (`name__tool`).
pub fn valid_server_name(name: &str) -> bool {
    !name.is_empty() && !name.contains("__") && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stdio_and_http_entries_and_the_refused_ones() {
        let cfg: BTreeMap<String, McpServerConfig> = toml::from_str(
            "[time]\ncommand = '/opt/mcp/bin/mcp-server-time'\nargs = ['--local-timezone', 'UTC']\nenv = { TZ = 'UTC' }\n\
             [web]\nurl = 'http://localhost:8000/mcp'\nheaders = { Authorization = 'Bearer x' }\n",
        )
        .unwrap();
        assert_eq!(
            cfg["time"].transport("time").unwrap(),
            McpTransport::Stdio {
                argv: vec!["/opt/mcp/bin/mcp-server-time".into(), "--local-timezone".into(), "UTC".into()],
                env: vec!["TZ=UTC".into()]
            }
        );
        assert!(matches!(cfg["web"].transport("web").unwrap(), McpTransport::Http { .. }));
        let sse = McpServerConfig { kind: Some("sse".into()), url: Some("http://x/sse".into()), ..cfg["web"].clone() };
        assert!(sse.transport("s").unwrap_err().to_string().contains("SSE transport is deprecated"));
        let none = McpServerConfig { url: None, ..cfg["web"].clone() };
        assert!(none.transport("n").unwrap_err().to_string().contains("neither `command` nor `url`"));
        assert!(valid_server_name("my-server_2") && !valid_server_name("a__b") && !valid_server_name("a b"));
    }

    fn endpoint(url: &str) -> Result<McpTransport, String> {
        let cfg = McpServerConfig { url: Some(url.into()), ..toml::from_str("").unwrap() };
        cfg.transport("docs").map_err(|e| e.to_string())
    }

    /// The spellings of the report: each is refused, or classified on the host that the
    /// connection will use.
    #[test]
    fn urls_are_refused_or_classified_on_the_parsed_host() {
        for (url, why) in [
            ("http://127.0.0.2:9\\@localhost/mcp", "backslash"),
            ("http://x@127.0.0.2:9/mcp", "user name or password"),
            ("http://x:y@localhost:9/mcp", "user name or password"),
            ("http://:y@localhost:9/mcp", "user name or password"),
            ("ftp://localhost/mcp", "http:// or https://"),
            ("file:///etc/passwd", "http:// or https://"),
            ("http://local\thost:9/", "control characters"),
            ("http://", "not a valid URL"),
        ] {
            let err = endpoint(url).unwrap_err();
            assert!(err.contains("MCP server `docs`") && err.contains(why), "{url}: {err}");
        }
        for (url, sandbox, host) in [
            ("http://localhost:9/mcp", true, "localhost"),
            ("http://LOCALHOST:9/mcp", true, "localhost"),
            ("http://127.0.0.1:9/mcp", true, "127.0.0.1"),
            ("http://[::1]:9/mcp", true, "[::1]"),
            ("http://127.0.0.2:9#@localhost/", false, "127.0.0.2"),
            ("http://127.0.0.2:9?@localhost/", false, "127.0.0.2"),
            ("http://127.0.0.2:9/@localhost/mcp", false, "127.0.0.2"),
            ("http://localhost.evil.example/mcp", false, "localhost.evil.example"),
            ("http://169.254.169.254/mcp", false, "169.254.169.254"),
        ] {
            let t = endpoint(url).unwrap();
            assert_eq!(t.in_sandbox(), sandbox, "{url}");
            let McpTransport::Http { url: parsed, .. } = t else { panic!("{url}") };
            assert_eq!(parsed.host_str(), Some(host), "{url}");
        }
    }

    #[test]
    fn mcp_json_is_read_as_claude_code_writes_it() {
        let dir = tempfile::tempdir().unwrap();
        assert!(read_mcp_json(dir.path()).unwrap().is_empty());
        std::fs::write(
            dir.path().join(".mcp.json"),
            r#"{"mcpServers": {"time": {"type": "stdio", "command": "mcp-server-time", "args": [], "env": {}, "timeout": 5},
                "docs": {"type": "http", "url": "https://example.com/mcp"}}}"#,
        )
        .unwrap();
        let servers = read_mcp_json(dir.path()).unwrap();
        assert_eq!(servers.len(), 2);
        assert!(matches!(servers["time"].transport("time").unwrap(), McpTransport::Stdio { .. }));
        assert!(matches!(servers["docs"].transport("docs").unwrap(), McpTransport::Http { .. }));
    }
}
