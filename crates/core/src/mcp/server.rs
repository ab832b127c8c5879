//! One MCP server as the hub sees it: its connection, the handshake (the protocol
//! version the server picks is checked), its tools, a session the server ended started
//! again once, and its tool list fetched again after the server said that it changed.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};

use super::http::{HttpError, HttpRpc};
use super::rpc::StdioRpc;
use super::tools::tool_spec;
use crate::tools::ToolSpec;
use agent_sandbox::{Sandbox, StderrTail};

/// The protocol revision asked for (servers answer with the one they speak).
pub(super) const PROTOCOL_VERSION: &str = "2025-11-25";
/// The revisions this client works with, newest first: what it uses (`initialize`,
/// `tools/list`, `tools/call`, the list-changed notification) is the same in each, and
/// the HTTP headers it sends are ignored by servers older than them.
pub(super) const SUPPORTED_VERSIONS: &[&str] = &[PROTOCOL_VERSION, "2025-06-18", "2025-03-26", "2024-11-05"];
/// How long starting a server and listing its tools may take.
pub(super) const START_TIMEOUT: Duration = Duration::from_secs(60);

/// How the hub reaches a server.
pub(super) enum Connection {
    /// The process is boxed: a sandbox handle is large beside the other variant.
    Stdio {
        rpc: StdioRpc,
        process: Option<Box<Process>>,
    },
    Http(HttpRpc),
}

/// The process of a stdio server in the sandbox (a test speaks over a stream without one).
pub(super) struct Process {
    pub sandbox: Sandbox,
    pub exec_id: String,
    pub stderr: StderrTail,
}

/// Why the handshake with a server failed.
#[derive(Debug, thiserror::Error)]
pub(super) enum HandshakeError {
    #[error(
        "it chose MCP protocol version `{chosen}`, which this client does not speak (it asked for `{asked}` and also accepts {accepted}); use a release of the server that speaks one of those"
    )]
    Version { chosen: String, asked: &'static str, accepted: String },
    #[error("its answer to `initialize` names no protocolVersion; is the URL or command an MCP server?")]
    NoVersion,
    #[error("{0}")]
    Rpc(String),
}

/// One configured server.
pub(super) struct Server {
    pub name: String,
    /// `stdio: COMMAND` or `http: URL`.
    pub transport: String,
    pub conn: Option<Connection>,
    /// Why it failed to start, or why it stopped.
    pub failure: Mutex<Option<String>>,
    /// (spec, the server's own tool name); replaced when the server's tools change.
    pub tools: Mutex<Vec<(ToolSpec, String)>>,
    pub call_timeout: Duration,
    /// Whether the handshake succeeded.
    pub started: bool,
    /// Set by the transport when the server says that its tools changed.
    pub tools_changed: Arc<AtomicBool>,
    /// Held while a session the server ended is started again, so that calls that
    /// meet the end together start one new session, not one each.
    renewing: tokio::sync::Mutex<()>,
}

impl Server {
    /// A server not yet connected.
    pub fn new(name: &str, call_timeout: Duration) -> Self {
        Server {
            name: name.to_string(),
            transport: String::new(),
            conn: None,
            failure: Mutex::new(None),
            tools: Mutex::new(Vec::new()),
            call_timeout,
            started: false,
            tools_changed: Arc::default(),
            renewing: tokio::sync::Mutex::new(()),
        }
    }

    /// Records why the server failed.
    pub fn fail(self, why: String) -> Self {
        if let Ok(mut f) = self.failure.lock() {
            *f = Some(why);
        }
        self
    }

    /// Why it failed to start or stopped, if it did.
    pub fn failure(&self) -> Option<String> {
        self.failure.lock().ok().and_then(|f| f.clone())
    }

    /// The specs and the server's own names of its tools.
    pub fn tools(&self) -> Vec<(ToolSpec, String)> {
        self.tools.lock().map(|t| t.clone()).unwrap_or_default()
    }

    /// The handshake and the list of tools, on a connected server; a failure is kept
    /// in the server's state.
    pub async fn start(mut self) -> Self {
        let started = match self.handshake().await {
            Ok(()) => self.list_tools().await,
            Err(e) => Err(e.to_string()),
        };
        match started {
            Ok(tools) => {
                self.tools = Mutex::new(self.specs_of(&tools));
                self.started = true;
                self
            }
            Err(e) => {
                let why = self.stopped().await.unwrap_or(e);
                self.fail(why)
            }
        }
    }

    /// Sends a request; over HTTP, a session the server ended (HTTP 404) is started
    /// again and the request sent once more.
    pub async fn request(&self, method: &str, params: Value, timeout: Duration) -> Result<Value, String> {
        let rpc = match &self.conn {
            Some(Connection::Http(rpc)) => rpc,
            _ => return self.send(method, params, timeout).await,
        };
        let expired = match rpc.request(method, params.clone(), timeout).await {
            Err(HttpError::SessionExpired { session, .. }) => session,
            other => return other.map_err(|e| e.to_string()),
        };
        self.renew(rpc, &expired).await?;
        match rpc.request(method, params, timeout).await {
            Err(HttpError::SessionExpired { url, .. }) => Err(format!(
                "MCP server `{}` ended its session, and ended the new one at once too (HTTP 404 from {url} after a fresh `initialize`); it may be restarting: try again later, or restart the server",
                self.name
            )),
            other => other.map_err(|e| e.to_string()),
        }
    }

    /// Fetches the tool list again when the server said that it changed; whether the
    /// tools differ from before.
    pub async fn refresh(&self) -> Result<bool, String> {
        if !self.started || self.failure().is_some() || !self.tools_changed.swap(false, Ordering::SeqCst) {
            return Ok(false);
        }
        let tools = self.specs_of(&self.list_tools().await?);
        let Ok(mut current) = self.tools.lock() else { return Ok(false) };
        if *current == tools {
            return Ok(false);
        }
        *current = tools;
        Ok(true)
    }

    /// Why a stdio server's output ended (with its exit code and last stderr), once it
    /// has; records it as the server's failure.
    pub async fn stopped(&self) -> Option<String> {
        let Some(Connection::Stdio { rpc, process }) = &self.conn else { return None };
        let closed = rpc.closed()?;
        let why = match process.as_deref() {
            Some(Process { sandbox, exec_id, stderr }) => {
                let mut why = match sandbox.exec_exit_code(exec_id).await {
                    Some(code) => format!("it exited with code {code}"),
                    None => "its output ended".to_string(),
                };
                let tail = stderr.text();
                if !tail.is_empty() {
                    let last: Vec<&str> = tail.lines().rev().take(3).collect::<Vec<_>>().into_iter().rev().collect();
                    why.push_str(&format!(" ({})", last.join(" / ")));
                }
                why
            }
            None => closed,
        };
        if let Ok(mut f) = self.failure.lock() {
            *f = Some(why.clone());
        }
        Some(why)
    }

    /// `initialize` (the version the server picks checked and, over HTTP, sent with
    /// every later request) and `notifications/initialized`.
    async fn handshake(&self) -> Result<(), HandshakeError> {
        let params = json!({
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "agent", "version": env!("CARGO_PKG_VERSION")},
        });
        let init = self.send("initialize", params, START_TIMEOUT).await.map_err(HandshakeError::Rpc)?;
        let chosen = init.get("protocolVersion").and_then(Value::as_str).ok_or(HandshakeError::NoVersion)?;
        if !SUPPORTED_VERSIONS.contains(&chosen) {
            return Err(HandshakeError::Version {
                chosen: chosen.to_string(),
                asked: PROTOCOL_VERSION,
                accepted: SUPPORTED_VERSIONS.iter().skip(1).map(|v| format!("`{v}`")).collect::<Vec<_>>().join(", "),
            });
        }
        if let Some(Connection::Http(rpc)) = &self.conn {
            rpc.set_version(chosen);
        }
        self.notify("notifications/initialized", json!({})).await.map_err(HandshakeError::Rpc)?;
        // Over HTTP the server's own notifications come on a stream the client opens;
        // only a server that may change its tools has anything to say there.
        let list_changed = init.pointer("/capabilities/tools/listChanged").and_then(Value::as_bool) == Some(true);
        if let (Some(Connection::Http(rpc)), true) = (&self.conn, list_changed) {
            rpc.listen();
        }
        Ok(())
    }

    /// Starts a new session after the server ended session `expired`.
    async fn renew(&self, rpc: &HttpRpc, expired: &str) -> Result<(), String> {
        let _one = self.renewing.lock().await;
        if rpc.session().as_deref() != Some(expired) {
            // Another call started the new session while this one waited.
            return Ok(());
        }
        tracing::info!("mcp: server `{}` ended session {expired}; starting a new one", self.name);
        rpc.reset_session();
        self.handshake()
            .await
            .map_err(|e| format!("MCP server `{}` ended its session, and starting a new one failed: {e}", self.name))?;
        // The new session may offer other tools.
        self.tools_changed.store(true, Ordering::SeqCst);
        Ok(())
    }

    /// Every page of `tools/list`.
    async fn list_tools(&self) -> Result<Vec<Value>, String> {
        let mut tools = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..100 {
            let params = match &cursor {
                Some(c) => json!({"cursor": c}),
                None => json!({}),
            };
            let page = self.request("tools/list", params, START_TIMEOUT).await?;
            tools.extend(page.get("tools").and_then(Value::as_array).cloned().unwrap_or_default());
            cursor = page.get("nextCursor").and_then(Value::as_str).map(str::to_string);
            if cursor.is_none() {
                break;
            }
        }
        Ok(tools)
    }

    fn specs_of(&self, tools: &[Value]) -> Vec<(ToolSpec, String)> {
        tools.iter().filter_map(|t| Some((tool_spec(&self.name, t)?, t.get("name")?.as_str()?.to_string()))).collect()
    }

    /// A request without the session renewal (the handshake's own).
    async fn send(&self, method: &str, params: Value, timeout: Duration) -> Result<Value, String> {
        match &self.conn {
            Some(Connection::Stdio { rpc, .. }) => rpc.request(method, params, timeout).await,
            Some(Connection::Http(rpc)) => rpc.request(method, params, timeout).await.map_err(|e| e.to_string()),
            None => Err("not connected".into()),
        }
    }

    async fn notify(&self, method: &str, params: Value) -> Result<(), String> {
        match &self.conn {
            Some(Connection::Stdio { rpc, .. }) => rpc.notify(method, params).await,
            Some(Connection::Http(rpc)) => rpc.notify(method, params).await.map_err(|e| e.to_string()),
            None => Err("not connected".into()),
        }
    }
}
