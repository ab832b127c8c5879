//! The MCP client: servers from the config's `[mcp_servers]` and the project's
//! `.mcp.json`, their tools offered to the model as `server__tool`. A stdio server runs
//! **inside the sandbox container** (started over the engine's exec API, like every
//! other tool); an HTTP server is reached at its URL, where `localhost` is the sandbox.
//!
//! The protocol is spoken here rather than through the official SDK (`rmcp`): rmcp 3
//! turns on serde's `rc` feature, which rebuilds the whole dependency tree (mistral.rs
//! included) differently, and its HTTP client is a second reqwest; the client needs
//! only `initialize`, `tools/list`, `tools/call` and the servers' notice that their
//! tools changed, over a byte stream or HTTP.

mod config;
mod http;
mod rpc;
mod server;
mod sse;
mod tools;

#[cfg(test)]
mod test_http;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;
use std::sync::Mutex;
use std::time::Duration;

use serde_json::{json, Map, Value};
use url::Url;

use crate::tools::{ToolSpec, ToolSpecs};
use agent_sandbox::Sandbox;

pub use config::{
    is_sandbox_host, parse_endpoint, parse_mcp_json, read_mcp_json, valid_server_name, McpServerConfig, McpTransport,
    PROJECT_MCP_FILE,
};
pub use tools::{identifier, result_text, tool_spec};

use http::HttpRpc;
use rpc::StdioRpc;
use server::{Connection, Process, Server};

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

/// The MCP servers of one session.
#[derive(Default)]
pub struct McpHub {
    servers: Vec<Server>,
    notices: Mutex<Vec<String>>,
    /// Every tool name the servers have offered, so that [`McpHub::respec`] can take
    /// the ones that are gone out of a set of specs.
    offered: Mutex<BTreeSet<String>>,
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
        McpHub::of(futures_util::future::join_all(starts).await)
    }

    /// A hub of servers already started (or failed).
    fn of(servers: Vec<Server>) -> McpHub {
        let notices = servers
            .iter()
            .filter_map(|s| s.failure().map(|f| format!("MCP server `{}` failed to start: {f}", s.name)))
            .collect();
        let hub = McpHub { servers, notices: Mutex::new(notices), offered: Mutex::default() };
        hub.remember_offered();
        hub
    }

    /// The specs of every running server's tools.
    pub fn specs(&self) -> Vec<ToolSpec> {
        self.servers.iter().flat_map(|s| s.tools().into_iter().map(|(spec, _)| spec)).collect()
    }

    /// Whether a server said that its tools changed since [`McpHub::refresh_tools`]
    /// last fetched them.
    pub fn tools_changed(&self) -> bool {
        self.servers.iter().any(|s| s.started && s.failure().is_none() && s.tools_changed.load(Ordering::SeqCst))
    }

    /// Fetches `tools/list` again from every server that said its tools changed
    /// (`notifications/tools/list_changed`); whether any server's tools now differ, in
    /// which case the caller takes the new ones with [`McpHub::respec`] before the
    /// model's next turn. A failed fetch keeps the old tools and is reported through
    /// [`McpHub::take_notices`].
    pub async fn refresh_tools(&self) -> bool {
        let fetches = self.servers.iter().map(|s| async move { (s, s.refresh().await) });
        let mut changed = false;
        for (server, outcome) in futures_util::future::join_all(fetches).await {
            match outcome {
                Ok(c) => changed |= c,
                Err(e) => self.note(format!(
                    "MCP server `{}` said its tools changed, but listing them failed: {e}; its earlier tools stay offered",
                    server.name
                )),
            }
        }
        if changed {
            self.remember_offered();
        }
        changed
    }

    /// `specs` with the servers' tools as they are now: every tool a server offered
    /// before is taken out and the current ones added after the others; a tool whose
    /// name is taken is left out and named in the messages returned.
    pub fn respec(&self, specs: &ToolSpecs) -> (ToolSpecs, Vec<String>) {
        let offered = self.offered.lock().map(|o| o.clone()).unwrap_or_default();
        let mut all: Vec<ToolSpec> = specs.iter().filter(|s| !offered.contains(&s.name)).cloned().collect();
        let mut notices = Vec::new();
        for spec in self.specs() {
            if all.iter().any(|s| s.name == spec.name) {
                notices.push(format!("the MCP tool `{}` is left out: another tool has that name", spec.name));
                continue;
            }
            all.push(spec);
        }
        (ToolSpecs::from_specs(all).unwrap_or_else(|| specs.clone()), notices)
    }

    fn remember_offered(&self) {
        let names: Vec<String> = self.specs().into_iter().map(|s| s.name).collect();
        if let Ok(mut o) = self.offered.lock() {
            o.extend(names);
        }
    }

    /// Whether `tool` is one of the servers' tools.
    pub fn owns(&self, tool: &str) -> bool {
        self.find(tool).is_some()
    }

    fn find(&self, tool: &str) -> Option<(&Server, String)> {
        self.servers
            .iter()
            .find_map(|s| s.tools().into_iter().find(|(spec, _)| spec.name == tool).map(|(_, original)| (s, original)))
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
                tools: s.tools().into_iter().map(|(spec, _)| spec.name).collect(),
            })
            .collect()
    }

    /// Whether no server is configured.
    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }
}

/// Starts one server: connect, `initialize`, `tools/list`. Failures are kept in the
/// server's state.
async fn start_server(sandbox: &Sandbox, name: &str, cfg: &McpServerConfig, default_timeout: Duration) -> Server {
    let call_timeout = cfg.tool_timeout_secs.map(Duration::from_secs).unwrap_or(default_timeout);
    let mut server = Server::new(name, call_timeout);
    if !valid_server_name(name) {
        return server.fail("the name must be letters, digits, `-` and `_`, without `__`".into());
    }
    let transport = match cfg.transport(name) {
        Ok(t) => t,
        Err(McpError::Config { reason, .. }) => return server.fail(reason),
        Err(e) => return server.fail(e.to_string()),
    };
    server.conn = match transport {
        McpTransport::Stdio { argv, env } => {
            server.transport = format!("stdio: {}", argv.join(" "));
            match sandbox.exec_stdio(&argv, &env).await {
                Ok(io) => Some(Connection::Stdio {
                    rpc: StdioRpc::new(io.reader, io.writer, server.tools_changed.clone()),
                    process: Some(Box::new(Process {
                        sandbox: sandbox.clone(),
                        exec_id: io.exec_id,
                        stderr: io.stderr,
                    })),
                }),
                Err(e) => return server.fail(e.to_string()),
            }
        }
        McpTransport::Http { url, headers } => {
            server.transport = format!("http: {url}");
            let (url, headers) = match in_sandbox(sandbox, url, headers).await {
                Ok(x) => x,
                Err(e) => return server.fail(e),
            };
            match HttpRpc::new(url, headers, server.tools_changed.clone()) {
                Ok(rpc) => Some(Connection::Http(rpc)),
                Err(e) => return server.fail(e),
            }
        }
    };
    server.start().await
}

/// An HTTP server's URL as the sandbox sees it: `localhost` (`127.0.0.1`, `::1`) is the
/// sandbox container, reached at its address with the original authority as `Host`.
/// The parsed URL is changed in place (its host only), never re-read from text, so the
/// connection goes where the trust decision saw it go.
async fn in_sandbox(
    sandbox: &Sandbox,
    url: Url,
    mut headers: Vec<(String, String)>,
) -> Result<(Url, Vec<(String, String)>), String> {
    if !is_sandbox_host(&url) {
        return Ok((url, headers));
    }
    let ip = sandbox.ip_address().await.ok_or_else(|| {
        "the sandbox has no network address (is its network off?), so its localhost cannot be reached".to_string()
    })?;
    let url = sandbox_address(url, &ip, &mut headers)?;
    Ok((url, headers))
}

/// `url` (whose host is the sandbox's loopback) pointed at the container's address
/// `ip`; its authority goes into `headers` as `Host` unless one is set.
fn sandbox_address(mut url: Url, ip: &str, headers: &mut Vec<(String, String)>) -> Result<Url, String> {
    let authority = match (url.host_str(), url.port()) {
        (Some(h), Some(p)) => format!("{h}:{p}"),
        (Some(h), None) => h.to_string(),
        (None, _) => return Err("the URL names no host".into()),
    };
    let addr: std::net::IpAddr =
        ip.parse().map_err(|e| format!("the sandbox's address `{ip}` is not an IP address: {e}"))?;
    url.set_ip_host(addr).map_err(|()| format!("cannot point {url} at the sandbox's address {ip}"))?;
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        headers.push(("host".into(), authority));
    }
    Ok(url)
}

#[cfg(test)]
mod address_tests {
    use super::*;

    /// The sandbox's loopback becomes the container's address by changing the parsed
    /// host alone: path, query and port stay, the original authority goes as `Host`.
    #[test]
    fn the_sandbox_address_replaces_only_the_host() {
        for (raw, host) in [("http://localhost:8000/mcp?a=1", "localhost:8000"), ("http://[::1]/mcp", "[::1]")] {
            let mut headers = Vec::new();
            let url = sandbox_address(Url::parse(raw).unwrap(), "172.17.0.5", &mut headers).unwrap();
            assert_eq!(url.host_str(), Some("172.17.0.5"), "{raw}");
            assert_eq!(url.path(), "/mcp");
            assert_eq!(url.port(), Url::parse(raw).unwrap().port());
            assert_eq!(headers, vec![("host".to_string(), host.to_string())]);
        }
        let mut headers = vec![("Host".to_string(), "mcp.local".to_string())];
        sandbox_address(Url::parse("http://localhost/").unwrap(), "fd00::5", &mut headers).unwrap();
        assert_eq!(headers.len(), 1, "a Host the user set is kept");
        assert!(sandbox_address(Url::parse("http://localhost/").unwrap(), "not an ip", &mut Vec::new()).is_err());
    }
}
