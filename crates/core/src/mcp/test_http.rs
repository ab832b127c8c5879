//! A small HTTP/1.1 server on 127.0.0.1 for the transport's tests (the crate has no
//! HTTP server among its dependencies): one request per connection, answered by a
//! handler; event streams go out in separate chunks, with a pause between them, so
//! that the client reads them split.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// A request the server received.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    /// Names in lowercase.
    pub headers: Vec<(String, String)>,
    /// The JSON body (`Null` without one).
    pub body: Value,
}

impl Request {
    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    /// The JSON-RPC method of the body, or the HTTP method for a GET.
    pub fn rpc(&self) -> &str {
        self.body.get("method").and_then(Value::as_str).unwrap_or(&self.method)
    }

    /// The JSON-RPC id of the body.
    pub fn id(&self) -> Value {
        self.body.get("id").cloned().unwrap_or(Value::Null)
    }
}

/// An answer.
pub struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    chunks: Vec<Vec<u8>>,
    /// Whether the response stays open after its chunks (a GET stream).
    keep_open: bool,
}

impl Reply {
    /// A JSON body.
    pub fn json(body: &Value) -> Reply {
        Reply {
            status: 200,
            headers: vec![("content-type".into(), "application/json".into())],
            chunks: vec![body.to_string().into_bytes()],
            keep_open: false,
        }
    }

    /// An empty answer with this status.
    pub fn status(status: u16) -> Reply {
        Reply { status, headers: Vec::new(), chunks: Vec::new(), keep_open: false }
    }

    /// An event stream sent in these chunks.
    pub fn sse(chunks: Vec<Vec<u8>>) -> Reply {
        Reply {
            status: 200,
            headers: vec![("content-type".into(), "text/event-stream".into())],
            chunks,
            keep_open: false,
        }
    }

    /// The same, left open after the chunks until the client goes.
    pub fn open(mut self) -> Reply {
        self.keep_open = true;
        self
    }

    /// With one more header.
    pub fn header(mut self, name: &str, value: &str) -> Reply {
        self.headers.push((name.into(), value.into()));
        self
    }
}

type Handler = Arc<dyn Fn(&Request) -> Reply + Send + Sync>;

/// The running server; stops when dropped.
pub struct TestServer {
    pub url: String,
    /// Every request, in order.
    pub requests: Arc<Mutex<Vec<Request>>>,
    task: JoinHandle<()>,
}

impl TestServer {
    /// Listens on a free port of 127.0.0.1.
    pub async fn start(handler: impl Fn(&Request) -> Reply + Send + Sync + 'static) -> TestServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/mcp", listener.local_addr().unwrap());
        let requests: Arc<Mutex<Vec<Request>>> = Arc::default();
        let handler: Handler = Arc::new(handler);
        let seen = requests.clone();
        let task = tokio::spawn(async move {
            while let Ok((sock, _)) = listener.accept().await {
                tokio::spawn(serve(sock, handler.clone(), seen.clone()));
            }
        });
        TestServer { url, requests, task }
    }

    /// The requests so far.
    pub fn requests(&self) -> Vec<Request> {
        self.requests.lock().unwrap().clone()
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(mut sock: TcpStream, handler: Handler, seen: Arc<Mutex<Vec<Request>>>) {
    let Some(req) = read_request(&mut sock).await else { return };
    seen.lock().unwrap().push(req.clone());
    let reply = handler(&req);
    let mut head = format!("HTTP/1.1 {} X\r\nconnection: close\r\n", reply.status);
    for (k, v) in &reply.headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    let streamed = reply.headers.iter().any(|(_, v)| v == "text/event-stream");
    if streamed {
        head.push_str("transfer-encoding: chunked\r\n\r\n");
    } else {
        head.push_str(&format!("content-length: {}\r\n\r\n", reply.chunks.concat().len()));
    }
    if sock.write_all(head.as_bytes()).await.is_err() {
        return;
    }
    for chunk in &reply.chunks {
        let framed = if streamed {
            [format!("{:x}\r\n", chunk.len()).into_bytes(), chunk.clone(), b"\r\n".to_vec()].concat()
        } else {
            chunk.clone()
        };
        if sock.write_all(&framed).await.is_err() || sock.flush().await.is_err() {
            return;
        }
        if streamed {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    if reply.keep_open {
        // Until the client hangs up.
        let _ = sock.read(&mut [0u8; 1]).await;
        return;
    }
    if streamed {
        let _ = sock.write_all(b"0\r\n\r\n").await;
    }
    let _ = sock.shutdown().await;
}

async fn read_request(sock: &mut TcpStream) -> Option<Request> {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1024];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = sock.read(&mut byte).await.ok().filter(|&n| n > 0)?;
        buf.extend_from_slice(&byte[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let method = lines.next()?.split(' ').next()?.to_string();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let len: usize = headers.iter().find(|(k, _)| k == "content-length").and_then(|(_, v)| v.parse().ok()).unwrap_or(0);
    let mut body = buf[head_end..].to_vec();
    while body.len() < len {
        let n = sock.read(&mut byte).await.ok().filter(|&n| n > 0)?;
        body.extend_from_slice(&byte[..n]);
    }
    let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
    Some(Request { method, headers, body })
}
