//! MCP's streamable HTTP transport, client side: each message is a POST; the answer
//! comes as JSON or as a server-sent event stream that carries it; the server's session
//! id and the negotiated protocol version go with every later request. A GET stream,
//! when the server offers one, carries the server's own notifications.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use reqwest::{Method, RequestBuilder, Response, StatusCode};
use serde_json::{json, Value};
use tokio::task::JoinHandle;
use url::Url;

use super::rpc::note_notification;
use super::sse::SseDecoder;

const SESSION_HEADER: &str = "mcp-session-id";
const VERSION_HEADER: &str = "mcp-protocol-version";
/// The most one event may hold (a huge tool result is still one event), as on stdio.
const MAX_EVENT: usize = 16 << 20;
/// The longest wait between two tries to open the server's GET stream.
const MAX_LISTEN_DELAY: Duration = Duration::from_secs(60);

/// Why an exchange with an HTTP server failed.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// HTTP 404 to a request that carried a session id: the server ended the session,
    /// and the client has to start a new one.
    #[error("{url} no longer knows session `{session}` (HTTP 404)")]
    SessionExpired { url: String, session: String },
    /// Anything else, worded for the user.
    #[error("{0}")]
    Failed(String),
}

/// What the requests and the listener for the server's own messages share.
struct Endpoint {
    client: reqwest::Client,
    url: Url,
    headers: Vec<(String, String)>,
    session: Mutex<Option<String>>,
    version: Mutex<Option<String>>,
    /// Set when the server says that its tools changed.
    tools_changed: Arc<AtomicBool>,
}

/// A streamable HTTP endpoint.
pub struct HttpRpc {
    endpoint: Arc<Endpoint>,
    next_id: AtomicU64,
    /// The task that reads the server's GET stream, once started.
    listener: Mutex<Option<JoinHandle<()>>>,
}

impl HttpRpc {
    /// A client of `url`; `headers` go with every request (a `Host` among them is the
    /// authority the server checks, when the URL names an address instead);
    /// `tools_changed` is set when the server says that its tools changed.
    pub fn new(url: Url, headers: Vec<(String, String)>, tools_changed: Arc<AtomicBool>) -> Result<Self, String> {
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            // A redirect would take the connection somewhere the trust decision never
            // saw (a server in the sandbox could send this computer anywhere).
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| format!("cannot make an HTTP client: {e}"))?;
        let endpoint =
            Endpoint { client, url, headers, session: Mutex::new(None), version: Mutex::new(None), tools_changed };
        Ok(Self { endpoint: Arc::new(endpoint), next_id: AtomicU64::new(1), listener: Mutex::new(None) })
    }

    /// Remembers the protocol version the server chose (sent with every later request).
    pub fn set_version(&self, version: &str) {
        if let Ok(mut v) = self.endpoint.version.lock() {
            *v = Some(version.to_string());
        }
    }

    /// The session id the server gave, if any.
    pub fn session(&self) -> Option<String> {
        self.endpoint.session()
    }

    /// Forgets the session id and the protocol version, so that a new `initialize`
    /// goes out without them (as the spec asks after the server ended a session).
    pub fn reset_session(&self) {
        if let Ok(mut s) = self.endpoint.session.lock() {
            *s = None;
        }
        if let Ok(mut v) = self.endpoint.version.lock() {
            *v = None;
        }
    }

    /// Sends a request and waits up to `timeout` for its result.
    pub async fn request(&self, method: &str, params: Value, timeout: Duration) -> Result<Value, HttpError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        match tokio::time::timeout(timeout, self.post(&msg, Some(id))).await {
            Ok(r) => r,
            Err(_) => Err(HttpError::Failed(format!("no answer to `{method}` within {} s", timeout.as_secs()))),
        }
    }

    /// Sends a notification.
    pub async fn notify(&self, method: &str, params: Value) -> Result<(), HttpError> {
        let msg = json!({"jsonrpc": "2.0", "method": method, "params": params});
        tokio::time::timeout(Duration::from_secs(30), self.post(&msg, None))
            .await
            .map_err(|_| HttpError::Failed(format!("no answer to `{method}` within 30 s")))?
            .map(|_| ())
    }

    /// Opens the stream on which the server sends messages of its own (that its tools
    /// changed), and opens it again whenever it ends, until the transport is dropped;
    /// a server that offers none (HTTP 405) is left alone. Starts once.
    pub fn listen(&self) {
        let Ok(mut slot) = self.listener.lock() else { return };
        if slot.is_none() {
            *slot = Some(tokio::spawn(listen_loop(self.endpoint.clone())));
        }
    }

    async fn post(&self, msg: &Value, id: Option<u64>) -> Result<Value, HttpError> {
        let body = serde_json::to_vec(msg).map_err(|e| HttpError::Failed(format!("cannot encode the message: {e}")))?;
        let ep = &self.endpoint;
        let (req, session) = ep.request(Method::POST);
        let req = req
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body);
        let resp = req.send().await.map_err(|e| HttpError::Failed(ep.unreachable(&e)))?;
        let resp = ep.check(resp, session).await?;
        let Some(id) = id else { return Ok(Value::Null) };
        if !is_event_stream(&resp) {
            let body: Value = resp
                .json()
                .await
                .map_err(|e| HttpError::Failed(format!("the answer from {} is not JSON: {e}", ep.url)))?;
            return ep.take(body, Some(id)).unwrap_or_else(|| {
                Err(HttpError::Failed(format!("the answer from {} does not answer the request", ep.url)))
            });
        }
        // Read events until the one that answers this request; the server's
        // notifications may come first.
        let mut stream = resp.bytes_stream();
        let mut sse = SseDecoder::default();
        loop {
            let (events, ended) = match stream.next().await {
                Some(Ok(chunk)) => (sse.feed(&chunk), false),
                Some(Err(e)) => {
                    return Err(HttpError::Failed(format!(
                        "the event stream from {} broke: {}",
                        ep.url,
                        root_cause(&e)
                    )))
                }
                None => (sse.finish().into_iter().collect(), true),
            };
            for data in events {
                if let Some(answer) = ep.take_event(&data, Some(id)) {
                    return answer;
                }
            }
            if ended {
                return Err(HttpError::Failed(format!("the event stream from {} ended without the answer", ep.url)));
            }
            if sse.buffered() > MAX_EVENT {
                return Err(HttpError::Failed(format!(
                    "an event from {} is longer than {} MiB; giving up on it",
                    ep.url,
                    MAX_EVENT >> 20
                )));
            }
        }
    }
}

impl Drop for HttpRpc {
    fn drop(&mut self) {
        if let Some(task) = self.listener.lock().ok().and_then(|mut l| l.take()) {
            task.abort();
        }
    }
}

/// How one try to read the server's GET stream ended.
enum Listened {
    /// The server offers no such stream.
    Unsupported,
    /// The stream was open and then ended.
    Ended,
    /// It could not be opened, or broke.
    Failed(String),
}

async fn listen_loop(endpoint: Arc<Endpoint>) {
    let mut delay = Duration::from_secs(1);
    loop {
        let opened = Instant::now();
        match endpoint.listen_once().await {
            Listened::Unsupported => return,
            // A stream that stayed open a while is opened again soon; one that keeps
            // failing or closing at once is tried less and less often.
            Listened::Ended if opened.elapsed() > Duration::from_secs(30) => delay = Duration::from_secs(1),
            Listened::Ended => delay = (delay * 2).min(MAX_LISTEN_DELAY),
            Listened::Failed(why) => {
                tracing::debug!("mcp: the GET stream of {} failed: {why}", endpoint.url);
                delay = (delay * 2).min(MAX_LISTEN_DELAY);
            }
        }
        tokio::time::sleep(delay).await;
    }
}

impl Endpoint {
    fn session(&self) -> Option<String> {
        self.session.lock().ok().and_then(|s| s.clone())
    }

    /// A request with the configured headers, the session id and the protocol
    /// version; the session id it carries.
    fn request(&self, method: Method) -> (RequestBuilder, Option<String>) {
        let mut req = self.client.request(method, self.url.clone());
        for (k, v) in &self.headers {
            req = req.header(k.as_str(), v.as_str());
        }
        let session = self.session();
        if let Some(s) = &session {
            req = req.header(SESSION_HEADER, s.as_str());
        }
        if let Some(v) = self.version.lock().ok().and_then(|v| v.clone()) {
            req = req.header(VERSION_HEADER, v);
        }
        (req, session)
    }

    /// Keeps the session id the server gave and turns a failed status into an error;
    /// `session` is the id the request carried.
    async fn check(&self, resp: Response, session: Option<String>) -> Result<Response, HttpError> {
        if let Some(s) = resp.headers().get(SESSION_HEADER).and_then(|v| v.to_str().ok()) {
            if let Ok(mut slot) = self.session.lock() {
                *slot = Some(s.to_string());
            }
        }
        let status = resp.status();
        if status.is_success() {
            return Ok(resp);
        }
        if let (StatusCode::NOT_FOUND, Some(session)) = (status, session) {
            return Err(HttpError::SessionExpired { url: self.url.to_string(), session });
        }
        let body = resp.text().await.unwrap_or_default();
        Err(HttpError::Failed(format!(
            "{} answered HTTP {status}: {}",
            self.url,
            body.trim().chars().take(300).collect::<String>()
        )))
    }

    fn unreachable(&self, e: &reqwest::Error) -> String {
        format!("cannot reach {}: {}", self.url, root_cause(e))
    }

    /// Takes one event's data: notes the server's notifications, and gives the answer
    /// to request `id` when the event carries it.
    fn take_event(&self, data: &str, id: Option<u64>) -> Option<Result<Value, HttpError>> {
        match serde_json::from_str::<Value>(data) {
            Ok(msg) => self.take(msg, id),
            Err(e) => {
                tracing::debug!(
                    "mcp: an event from {} is not JSON ({e}): {}",
                    self.url,
                    data.chars().take(200).collect::<String>()
                );
                None
            }
        }
    }

    /// Takes a message (or a batch of them, which 2025-03-26 allowed).
    fn take(&self, msg: Value, id: Option<u64>) -> Option<Result<Value, HttpError>> {
        let batch = match msg {
            Value::Array(batch) => batch,
            one => vec![one],
        };
        let mut answer = None;
        for msg in batch {
            note_notification(&msg, &self.tools_changed);
            if id.is_some() && msg.get("id").and_then(Value::as_u64) == id {
                answer = Some(super::rpc::outcome(&msg).map_err(HttpError::Failed));
            }
        }
        answer
    }

    /// Reads the GET stream once, noting the server's notifications.
    async fn listen_once(&self) -> Listened {
        let (req, session) = self.request(Method::GET);
        let resp = match req.header("accept", "text/event-stream").send().await {
            Ok(r) => r,
            Err(e) => return Listened::Failed(self.unreachable(&e)),
        };
        if resp.status() == StatusCode::METHOD_NOT_ALLOWED {
            return Listened::Unsupported;
        }
        let resp = match self.check(resp, session).await {
            Ok(r) => r,
            Err(e) => return Listened::Failed(e.to_string()),
        };
        if !is_event_stream(&resp) {
            return Listened::Unsupported;
        }
        let mut stream = resp.bytes_stream();
        let mut sse = SseDecoder::default();
        while let Some(chunk) = stream.next().await {
            let chunk = match chunk {
                Ok(c) => c,
                Err(e) => return Listened::Failed(format!("the stream broke: {}", root_cause(&e))),
            };
            for data in sse.feed(&chunk) {
                let _ = self.take_event(&data, None);
            }
            if sse.buffered() > MAX_EVENT {
                return Listened::Failed(format!("an event is longer than {} MiB", MAX_EVENT >> 20));
            }
        }
        if let Some(data) = sse.finish() {
            let _ = self.take_event(&data, None);
        }
        Listened::Ended
    }
}

fn is_event_stream(resp: &Response) -> bool {
    resp.headers().get("content-type").and_then(|v| v.to_str().ok()).is_some_and(|c| c.starts_with("text/event-stream"))
}

fn root_cause(e: &reqwest::Error) -> String {
    let mut err: &dyn std::error::Error = e;
    while let Some(src) = err.source() {
        err = src;
    }
    err.to_string()
}
