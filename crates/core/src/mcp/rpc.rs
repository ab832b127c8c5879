//! JSON-RPC 2.0 over MCP's stdio framing (one JSON message per line): requests matched
//! to their responses by id, the server's pings answered, its notifications noted, the
//! end of its output noticed.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// The longest line read from a server (a huge tool result is still one line).
const MAX_LINE: usize = 16 << 20;
/// The notification a server sends when its tools changed.
pub const TOOLS_LIST_CHANGED: &str = "notifications/tools/list_changed";

type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<Result<Value, String>>>>>;
type Writer = Arc<tokio::sync::Mutex<std::pin::Pin<Box<dyn AsyncWrite + Send>>>>;

/// A JSON-RPC peer on a byte stream.
pub struct StdioRpc {
    writer: Writer,
    pending: Pending,
    next_id: AtomicU64,
    /// Why the server's output ended, once it has.
    closed: Arc<Mutex<Option<String>>>,
    reader: JoinHandle<()>,
}

impl StdioRpc {
    /// Starts reading `reader`; requests are written to `writer`; `tools_changed` is
    /// set when the server says that its tools changed.
    pub fn new(
        reader: impl AsyncRead + Send + Unpin + 'static,
        writer: std::pin::Pin<Box<dyn AsyncWrite + Send>>,
        tools_changed: Arc<AtomicBool>,
    ) -> Self {
        let writer: Writer = Arc::new(tokio::sync::Mutex::new(writer));
        let pending: Pending = Arc::default();
        let closed: Arc<Mutex<Option<String>>> = Arc::default();
        let task = read_loop(BufReader::new(reader), writer.clone(), pending.clone(), closed.clone(), tools_changed);
        Self { writer, pending, next_id: AtomicU64::new(1), closed, reader: tokio::spawn(task) }
    }

    /// Why the server stopped answering, if it did.
    pub fn closed(&self) -> Option<String> {
        self.closed.lock().ok().and_then(|c| c.clone())
    }

    /// Sends a request and waits up to `timeout` for its result (a JSON-RPC error is
    /// `Err` with its message).
    pub async fn request(&self, method: &str, params: Value, timeout: Duration) -> Result<Value, String> {
        if let Some(why) = self.closed() {
            return Err(why);
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        if let Ok(mut p) = self.pending.lock() {
            p.insert(id, tx);
        }
        let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        if let Err(e) = write_line(&self.writer, &msg).await {
            self.forget(id);
            return Err(format!("cannot write to the server: {e}"));
        }
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(self.closed().unwrap_or_else(|| "the server stopped".into())),
            Err(_) => {
                self.forget(id);
                // Tell the server to stop working on it (it may ignore this).
                let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                    "params": {"requestId": id, "reason": "timed out"}});
                let _ = write_line(&self.writer, &cancel).await;
                Err(format!("no answer to `{method}` within {} s", timeout.as_secs()))
            }
        }
    }

    /// Sends a notification.
    pub async fn notify(&self, method: &str, params: Value) -> Result<(), String> {
        let msg = json!({"jsonrpc": "2.0", "method": method, "params": params});
        write_line(&self.writer, &msg).await.map_err(|e| format!("cannot write to the server: {e}"))
    }

    fn forget(&self, id: u64) {
        if let Ok(mut p) = self.pending.lock() {
            p.remove(&id);
        }
    }
}

impl Drop for StdioRpc {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

async fn write_line(writer: &Writer, msg: &Value) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(msg).unwrap_or_default();
    line.push(b'\n');
    let mut w = writer.lock().await;
    w.write_all(&line).await?;
    w.flush().await
}

async fn read_loop(
    mut reader: BufReader<impl AsyncRead + Unpin>,
    writer: Writer,
    pending: Pending,
    closed: Arc<Mutex<Option<String>>>,
    tools_changed: Arc<AtomicBool>,
) {
    let mut line = Vec::new();
    let why = loop {
        line.clear();
        match (&mut reader).take(MAX_LINE as u64).read_until(b'\n', &mut line).await {
            Ok(0) => break "the server's output ended".to_string(),
            Ok(_) => {}
            Err(e) => break format!("reading the server's output failed: {e}"),
        }
        let Ok(msg) = serde_json::from_slice::<Value>(&line) else {
            // Servers may log to stdout by mistake; such lines are not messages.
            tracing::debug!("mcp: not a JSON-RPC message: {}", String::from_utf8_lossy(&line).trim());
            continue;
        };
        dispatch(msg, &writer, &pending, &tools_changed).await;
    };
    if let Ok(mut c) = closed.lock() {
        *c = Some(why.clone());
    }
    let waiting: Vec<_> = pending.lock().map(|mut p| p.drain().collect()).unwrap_or_default();
    for (_, tx) in waiting {
        let _ = tx.send(Err(why.clone()));
    }
}

/// The result of a JSON-RPC response, or its error's message.
pub fn outcome(msg: &Value) -> Result<Value, String> {
    match (msg.get("result"), msg.get("error")) {
        (Some(r), _) => Ok(r.clone()),
        (None, Some(e)) => Err(e.get("message").and_then(Value::as_str).unwrap_or("error").to_string()),
        (None, None) => Err("an answer with neither result nor error".into()),
    }
}

/// Notes a notification from the server: a changed tool list sets `tools_changed` (the
/// list is fetched again before the model's next turn); others do not matter here.
pub fn note_notification(msg: &Value, tools_changed: &AtomicBool) {
    if msg.get("id").is_none() && msg.get("method").and_then(Value::as_str) == Some(TOOLS_LIST_CHANGED) {
        tools_changed.store(true, Ordering::SeqCst);
    }
}

/// Routes one message: a response to its waiter, a request from the server answered
/// (`ping`; nothing else is offered), a notification noted.
async fn dispatch(msg: Value, writer: &Writer, pending: &Pending, tools_changed: &AtomicBool) {
    let method = msg.get("method").and_then(Value::as_str);
    match (method, msg.get("id")) {
        (None, Some(id)) => {
            let Some(id) = id.as_u64() else { return };
            let waiter = pending.lock().ok().and_then(|mut p| p.remove(&id));
            if let Some(tx) = waiter {
                let _ = tx.send(outcome(&msg));
            }
        }
        (Some(method), Some(id)) => {
            let answer = if method == "ping" {
                json!({"jsonrpc": "2.0", "id": id, "result": {}})
            } else {
                json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": format!("{method} is not supported by this client")}})
            };
            let _ = write_line(writer, &answer).await;
        }
        (Some(_), None) => note_notification(&msg, tools_changed),
        (None, None) => {}
    }
}
