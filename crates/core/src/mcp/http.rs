//! MCP's streamable HTTP transport, client side: each message is a POST; the answer
//! comes as JSON or as a server-sent event stream that carries it; the server's session
//! id and the negotiated protocol version go with every later request.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use futures_util::StreamExt;
use serde_json::{json, Value};

const SESSION_HEADER: &str = "mcp-session-id";
const VERSION_HEADER: &str = "mcp-protocol-version";

/// A streamable HTTP endpoint.
pub struct HttpRpc {
    client: reqwest::Client,
    url: String,
    headers: Vec<(String, String)>,
    next_id: AtomicU64,
    session: Mutex<Option<String>>,
    version: Mutex<Option<String>>,
}

impl HttpRpc {
    /// A client of `url`; `headers` go with every request (a `Host` among them is the
    /// authority the server checks, when the URL names an address instead).
    pub fn new(url: String, headers: Vec<(String, String)>) -> Result<Self, String> {
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| format!("cannot make an HTTP client: {e}"))?;
        Ok(Self {
            client,
            url,
            headers,
            next_id: AtomicU64::new(1),
            session: Mutex::new(None),
            version: Mutex::new(None),
        })
    }

    /// Remembers the protocol version the server chose (sent with every later request).
    pub fn set_version(&self, version: &str) {
        if let Ok(mut v) = self.version.lock() {
            *v = Some(version.to_string());
        }
    }

    /// Sends a request and waits up to `timeout` for its result.
    pub async fn request(&self, method: &str, params: Value, timeout: Duration) -> Result<Value, String> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        match tokio::time::timeout(timeout, self.post(&msg, Some(id))).await {
            Ok(r) => r,
            Err(_) => Err(format!("no answer to `{method}` within {} s", timeout.as_secs())),
        }
    }

    /// Sends a notification.
    pub async fn notify(&self, method: &str, params: Value) -> Result<(), String> {
        let msg = json!({"jsonrpc": "2.0", "method": method, "params": params});
        tokio::time::timeout(Duration::from_secs(30), self.post(&msg, None))
            .await
            .map_err(|_| format!("no answer to `{method}` within 30 s"))?
            .map(|_| ())
    }

    async fn post(&self, msg: &Value, id: Option<u64>) -> Result<Value, String> {
        let mut req = self
            .client
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(serde_json::to_vec(msg).unwrap_or_default());
        for (k, v) in &self.headers {
            req = req.header(k.as_str(), v.as_str());
        }
        if let Some(s) = self.session.lock().ok().and_then(|s| s.clone()) {
            req = req.header(SESSION_HEADER, s);
        }
        if let Some(v) = self.version.lock().ok().and_then(|v| v.clone()) {
            req = req.header(VERSION_HEADER, v);
        }
        let resp = req.send().await.map_err(|e| format!("cannot reach {}: {}", self.url, root_cause(&e)))?;
        if let Some(s) = resp.headers().get(SESSION_HEADER).and_then(|v| v.to_str().ok()) {
            if let Ok(mut slot) = self.session.lock() {
                *slot = Some(s.to_string());
            }
        }
        let status = resp.status();
        if !status.is_success() {
            let body = resp.text().await.unwrap_or_default();
            return Err(format!(
                "{} answered HTTP {status}: {}",
                self.url,
                body.trim().chars().take(300).collect::<String>()
            ));
        }
        let Some(id) = id else { return Ok(Value::Null) };
        let is_sse = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|c| c.starts_with("text/event-stream"));
        if !is_sse {
            let body: Value = resp.json().await.map_err(|e| format!("the answer is not JSON: {e}"))?;
            return answer_of(&body, id).unwrap_or_else(|| Err("the answer does not answer the request".into()));
        }
        // Read events until the one that answers this request.
        let mut stream = resp.bytes_stream();
        let mut buf = String::new();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| format!("the event stream broke: {e}"))?;
            buf.push_str(&String::from_utf8_lossy(&chunk));
            if buf.contains('\r') {
                buf = buf.replace("\r\n", "\n");
            }
            while let Some(end) = buf.find("\n\n") {
                let event: String = buf.drain(..end + 2).collect();
                let data: Vec<&str> = event
                    .lines()
                    .filter_map(|l| l.strip_prefix("data:"))
                    .map(|d| d.strip_prefix(' ').unwrap_or(d))
                    .collect();
                if data.is_empty() {
                    continue;
                }
                if let Ok(msg) = serde_json::from_str::<Value>(&data.join("\n")) {
                    if let Some(answer) = answer_of(&msg, id) {
                        return answer;
                    }
                }
            }
        }
        Err("the event stream ended without the answer".into())
    }
}

/// The result (or error) in `msg` when it answers request `id`.
fn answer_of(msg: &Value, id: u64) -> Option<Result<Value, String>> {
    if msg.get("id").and_then(Value::as_u64) != Some(id) {
        return None;
    }
    Some(super::rpc::outcome(msg))
}

fn root_cause(e: &reqwest::Error) -> String {
    let mut err: &dyn std::error::Error = e;
    while let Some(src) = err.source() {
        err = src;
    }
    err.to_string()
}
