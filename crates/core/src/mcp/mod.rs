//! The MCP client: servers from the config's `[mcp_servers]` and the project's
//! `.mcp.json`, their tools offered to the model as `server__tool`. A stdio server runs
//! **inside the sandbox container** (started over the engine's exec API, like every
//! other tool); an HTTP server is reached at its URL, where `localhost` is the sandbox.
//!
//! The protocol is spoken here rather than through the official SDK (`rmcp`): rmcp 3
//! turns on serde's `rc` feature, which rebuilds the whole dependency tree (mistral.rs
//! included) differently, and its HTTP client is a second reqwest; the client needs
//! only `initialize`, `tools/list` and `tools/call` over a byte stream or HTTP.

mod config;
mod http;
mod rpc;
mod tools;

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use serde_json::{json, Map, Value};

use crate::tools::ToolSpec;
use agent_sandbox::{Sandbox, StderrTail};

pub use config::{read_mcp_json, valid_server_name, McpServerConfig, McpTransport, PROJECT_MCP_FILE};
pub use tools::{identifier, result_text, tool_spec};

use http::HttpRpc;
use rpc::StdioRpc;

/// The protocol revision asked for (servers answer with the one they speak).
const PROTOCOL_VERSION: &str = "2025-11-25";
/// How long starting a server and listing its tools may take.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// Why MCP servers could not be configured.
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    #[error("MCP server `{server}`: {reason}")]
    Config { server: String, reason: String },
    #[error("cannot read {path}: {reason}")]
    File { path: String, reason: String },
}

/// A server's state, for `/mcp`.
#[derive(Debug, Clone, PartialEq)]
pub struct McpServerStatus {
    pub name: String,
    /// `stdio: COMMAND` or `http: URL`.
    pub transport: String,
    /// `running`, `failed to start: …` or `stopped: …`.
    pub state: String,
    /// The tools as the model knows them.
    pub tools: Vec<String>,
}

enum Connection {
    Stdio { rpc: StdioRpc, sandbox: Sandbox, exec_id: String, stderr: StderrTail },
    Http(HttpRpc),
}

struct Server {
    name: String,
    transport: String,
    conn: Option<Connection>,
    /// Why it failed to start, or why it stopped.
    failure: Mutex<Option<String>>,
    /// (spec, the server's own tool name).
    tools: Vec<(ToolSpec, String)>,
    call_timeout: Duration,
    /// Whether the handshake succeeded.
    started: bool,
}

/// The MCP servers of one session.
#[derive(Default)]
pub struct McpHub {
    servers: Vec<Server>,
    notices: Mutex<Vec<String>>,
}

impl std::fmt::Debug for McpHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpHub").field("servers", &self.servers.iter().map(|s| &s.name).collect::<Vec<_>>()).finish()
    }
}

impl McpHub {
    /// Starts every server (side by side); one that fails is reported and left out.
    pub async fn start(
        sandbox: &Sandbox,
        servers: &BTreeMap<String, McpServerConfig>,
        call_timeout: Duration,
    ) -> McpHub {
        let starts = servers.iter().map(|(name, cfg)| start_server(sandbox, name, cfg, call_timeout));
        let servers: Vec<Server> = futures_util::future::join_all(starts).await;
        let notices = servers
            .iter()
            .filter_map(|s| s.failure().map(|f| format!("MCP server `{}` failed to start: {f}", s.name)))
            .collect();
        McpHub { servers, notices: Mutex::new(notices) }
    }

    /// The specs of every running server's tools.
    pub fn specs(&self) -> Vec<ToolSpec> {
        self.servers.iter().flat_map(|s| s.tools.iter().map(|(spec, _)| spec.clone())).collect()
    }

    /// Whether `tool` is one of the servers' tools.
    pub fn owns(&self, tool: &str) -> bool {
        self.find(tool).is_some()
    }

    fn find(&self, tool: &str) -> Option<(&Server, &str)> {
        self.servers
            .iter()
            .find_map(|s| s.tools.iter().find(|(spec, _)| spec.name == tool).map(|(_, orig)| (s, orig.as_str())))
    }

    /// Calls a tool; the text for the model and whether it failed. A server that
    /// stopped is reported (once) through [`McpHub::take_notices`].
    pub async fn call(&self, tool: &str, args: &Map<String, Value>) -> (String, bool) {
        let Some((server, original)) = self.find(tool) else {
            return (format!("`{tool}` is not a tool of any running MCP server"), true);
        };
        if let Some(why) = server.failure() {
            return (format!("the MCP server `{}` is not running: {why}", server.name), true);
        }
        let params = json!({"name": original, "arguments": args});
        match server.request("tools/call", params, server.call_timeout).await {
            Ok(result) => result_text(&result),
            Err(e) => {
                if let Some(why) = server.stopped().await {
                    self.note(format!("MCP server `{}` stopped: {why}", server.name));
                    return (format!("the MCP server `{}` stopped: {why}", server.name), true);
                }
                (format!("the call failed: {e}"), true)
            }
        }
    }

    /// Looks for servers that stopped since the last look (their output ended) and
    /// reports each once.
    pub async fn check(&self) {
        for server in &self.servers {
            if server.failure().is_none() {
                if let Some(why) = server.stopped().await {
                    self.note(format!("MCP server `{}` stopped: {why}; its tools now fail", server.name));
                }
            }
        }
    }

    /// Messages for the user since the last call (failed starts, servers that stopped).
    pub fn take_notices(&self) -> Vec<String> {
        self.notices.lock().map(|mut n| std::mem::take(&mut *n)).unwrap_or_default()
    }

    fn note(&self, message: String) {
        if let Ok(mut n) = self.notices.lock() {
            n.push(message);
        }
    }

    /// Every server's state, for `/mcp`.
    pub fn status(&self) -> Vec<McpServerStatus> {
        self.servers
            .iter()
            .map(|s| McpServerStatus {
                name: s.name.clone(),
                transport: s.transport.clone(),
                state: match (s.failure(), s.started) {
                    (Some(f), false) => format!("failed to start: {f}"),
                    (Some(f), true) => format!("stopped: {f}"),
                    (None, _) => "running".into(),
                },
                tools: s.tools.iter().map(|(spec, _)| spec.name.clone()).collect(),
            })
            .collect()
    }

    /// Whether no server is configured.
    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }
}

impl Server {
    fn failure(&self) -> Option<String> {
        self.failure.lock().ok().and_then(|f| f.clone())
    }

    async fn request(&self, method: &str, params: Value, timeout: Duration) -> Result<Value, String> {
        match &self.conn {
            Some(Connection::Stdio { rpc, .. }) => rpc.request(method, params, timeout).await,
            Some(Connection::Http(rpc)) => rpc.request(method, params, timeout).await,
            None => Err("not connected".into()),
        }
    }

    async fn notify(&self, method: &str, params: Value) -> Result<(), String> {
        match &self.conn {
            Some(Connection::Stdio { rpc, .. }) => rpc.notify(method, params).await,
            Some(Connection::Http(rpc)) => rpc.notify(method, params).await,
            None => Err("not connected".into()),
        }
    }

    /// Why a stdio server's output ended (with its exit code and last stderr), once it
    /// has; records it as the server's failure.
    async fn stopped(&self) -> Option<String> {
        let Some(Connection::Stdio { rpc, sandbox, exec_id, stderr }) = &self.conn else { return None };
        rpc.closed()?;
        let mut why = match sandbox.exec_exit_code(exec_id).await {
            Some(code) => format!("it exited with code {code}"),
            None => "its output ended".to_string(),
        };
        let tail = stderr.text();
        if !tail.is_empty() {
            let last: Vec<&str> = tail.lines().rev().take(3).collect::<Vec<_>>().into_iter().rev().collect();
            why.push_str(&format!(" ({})", last.join(" / ")));
        }
        if let Ok(mut f) = self.failure.lock() {
            *f = Some(why.clone());
        }
        Some(why)
    }
}

/// Starts one server: connect, `initialize`, `tools/list`. Failures are kept in the
/// server's state.
async fn start_server(sandbox: &Sandbox, name: &str, cfg: &McpServerConfig, default_timeout: Duration) -> Server {
    let call_timeout = cfg.tool_timeout_secs.map(Duration::from_secs).unwrap_or(default_timeout);
    let mut server = Server {
        name: name.to_string(),
        transport: String::new(),
        conn: None,
        failure: Mutex::new(None),
        tools: Vec::new(),
        call_timeout,
        started: false,
    };
    let fail = |server: Server, why: String| {
        if let Ok(mut f) = server.failure.lock() {
            *f = Some(why);
        }
        server
    };
    if !valid_server_name(name) {
        return fail(server, "the name must be letters, digits, `-` and `_`, without `__`".into());
    }
    let transport = match cfg.transport(name) {
        Ok(t) => t,
        Err(McpError::Config { reason, .. }) => return fail(server, reason),
        Err(e) => return fail(server, e.to_string()),
    };
    server.conn = match transport {
        McpTransport::Stdio { argv, env } => {
            server.transport = format!("stdio: {}", argv.join(" "));
            match sandbox.exec_stdio(&argv, &env).await {
                Ok(io) => Some(Connection::Stdio {
                    rpc: StdioRpc::new(io.reader, io.writer),
                    sandbox: sandbox.clone(),
                    exec_id: io.exec_id,
                    stderr: io.stderr,
                }),
                Err(e) => return fail(server, e.to_string()),
            }
        }
        McpTransport::Http { url, headers } => {
            server.transport = format!("http: {url}");
            let (url, headers) = match in_sandbox(sandbox, &url, headers).await {
                Ok(x) => x,
                Err(e) => return fail(server, e),
            };
            match HttpRpc::new(url, headers) {
                Ok(rpc) => Some(Connection::Http(rpc)),
                Err(e) => return fail(server, e),
            }
        }
    };
    match initialize(&server).await {
        Ok(tools) => {
            server.tools = tools
                .iter()
                .filter_map(|t| Some((tool_spec(name, t)?, t.get("name")?.as_str()?.to_string())))
                .collect();
            server.started = true;
            server
        }
        Err(e) => {
            let why = server.stopped().await.unwrap_or(e);
            fail(server, why)
        }
    }
}

/// The handshake and the list of tools (all pages).
async fn initialize(server: &Server) -> Result<Vec<Value>, String> {
    let params = json!({
        "protocolVersion": PROTOCOL_VERSION,
        "capabilities": {},
        "clientInfo": {"name": "agent", "version": env!("CARGO_PKG_VERSION")},
    });
    let init = server.request("initialize", params, START_TIMEOUT).await?;
    if let (Some(Connection::Http(rpc)), Some(v)) = (&server.conn, init.get("protocolVersion").and_then(Value::as_str))
    {
        rpc.set_version(v);
    }
    server.notify("notifications/initialized", json!({})).await?;
    let mut tools = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..100 {
        let params = match &cursor {
            Some(c) => json!({"cursor": c}),
            None => json!({}),
        };
        let page = server.request("tools/list", params, START_TIMEOUT).await?;
        tools.extend(page.get("tools").and_then(Value::as_array).cloned().unwrap_or_default());
        cursor = page.get("nextCursor").and_then(Value::as_str).map(str::to_string);
        if cursor.is_none() {
            break;
        }
    }
    Ok(tools)
}

/// An HTTP server's URL as the sandbox sees it: `localhost` (and `127.0.0.1`) is the
/// sandbox container, reached at its address with the original authority as `Host`.
async fn in_sandbox(
    sandbox: &Sandbox,
    url: &str,
    mut headers: Vec<(String, String)>,
) -> Result<(String, Vec<(String, String)>), String> {
    let Some((scheme, rest)) = url.split_once("://") else { return Ok((url.to_string(), headers)) };
    let authority = rest.split('/').next().unwrap_or_default();
    let host = authority.rsplit_once(':').map_or(authority, |(h, _)| h);
    if !matches!(host, "localhost" | "127.0.0.1" | "[::1]") {
        return Ok((url.to_string(), headers));
    }
    let ip = sandbox.ip_address().await.ok_or_else(|| {
        "the sandbox has no network address (is its network off?), so its localhost cannot be reached".to_string()
    })?;
    let port = authority.rsplit_once(':').map(|(_, p)| format!(":{p}")).unwrap_or_default();
    let path = &rest[authority.len()..];
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        headers.push(("host".into(), authority.to_string()));
    }
    Ok((format!("{scheme}://{ip}{port}{path}"), headers))
}
