//! The hub against servers in the test process: an HTTP one on 127.0.0.1 (sessions the
//! server ends, the protocol version it picks, notifications in event streams) and a
//! stdio one on an in-memory stream (a changed tool list).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Map, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use super::test_http::{Reply, Request, TestServer};
use super::*;

const TIMEOUT: Duration = Duration::from_secs(10);

fn tool(name: &str) -> Value {
    json!({"name": name, "description": format!("The {name} tool."), "inputSchema": {"type": "object", "properties": {}}})
}

fn result(req: &Request, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": req.id(), "result": result})
}

fn init_result(req: &Request, version: &str, list_changed: bool) -> Value {
    result(
        req,
        json!({"protocolVersion": version, "capabilities": {"tools": {"listChanged": list_changed}},
            "serverInfo": {"name": "test", "version": "1"}}),
    )
}

/// An SSE event with `msg` as its data.
fn event(msg: &Value) -> Vec<u8> {
    format!("event: message\ndata: {msg}\n\n").into_bytes()
}

/// A started hub of one HTTP server named `srv` at `url`.
async fn http_hub(url: &str) -> McpHub {
    let mut server = Server::new("srv", TIMEOUT);
    server.transport = format!("http: {url}");
    server.conn =
        Some(Connection::Http(HttpRpc::new(url.parse().unwrap(), Vec::new(), server.tools_changed.clone()).unwrap()));
    McpHub::of(vec![server.start().await])
}

/// A started hub of one stdio server named `srv`, spoken to over an in-memory stream;
/// `answer` gives the messages the server writes for each one it reads.
async fn stdio_hub(mut answer: impl FnMut(&Value) -> Vec<Value> + Send + 'static) -> McpHub {
    let (client_read, mut server_write) = tokio::io::duplex(1 << 16);
    let (server_read, client_write) = tokio::io::duplex(1 << 16);
    tokio::spawn(async move {
        let mut lines = BufReader::new(server_read).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let msg: Value = serde_json::from_str(&line).unwrap();
            for out in answer(&msg) {
                server_write.write_all(format!("{out}\n").as_bytes()).await.unwrap();
            }
        }
    });
    let mut server = Server::new("srv", TIMEOUT);
    server.transport = "stdio: test".into();
    let rpc = StdioRpc::new(client_read, Box::pin(client_write), server.tools_changed.clone());
    server.conn = Some(Connection::Stdio { rpc, process: None });
    McpHub::of(vec![server.start().await])
}

fn names(hub: &McpHub) -> Vec<String> {
    hub.specs().into_iter().map(|s| s.name).collect()
}

/// Answers the handshake and `tools/list` (with `tools`) of a server that picks
/// `version` and gives session ids `s1`, `s2`, … for each `initialize`.
fn handshake(req: &Request, inits: &AtomicUsize, version: &str, tools: &[&str]) -> Option<Reply> {
    match req.rpc() {
        "initialize" => {
            let n = inits.fetch_add(1, Ordering::SeqCst) + 1;
            Some(Reply::json(&init_result(req, version, false)).header("mcp-session-id", &format!("s{n}")))
        }
        "notifications/initialized" => Some(Reply::status(202)),
        "tools/list" => {
            let tools: Vec<Value> = tools.iter().map(|t| tool(t)).collect();
            Some(Reply::json(&result(req, json!({"tools": tools}))))
        }
        _ => None,
    }
}

#[tokio::test]
async fn an_ended_http_session_is_started_again_and_the_call_sent_once_more() {
    let inits = AtomicUsize::new(0);
    let server = TestServer::start(move |req| {
        if let Some(reply) = handshake(req, &inits, "2025-06-18", &["echo"]) {
            return reply;
        }
        // The first session has ended; the answer to the second is an event stream.
        if req.header("mcp-session-id") == Some("s1") {
            return Reply::status(404);
        }
        let answer = result(req, json!({"content": [{"type": "text", "text": "café ok"}]}));
        let bytes = event(&answer);
        let cut = bytes.iter().position(|&b| b == 0xC3).unwrap() + 1;
        Reply::sse(vec![bytes[..cut].to_vec(), bytes[cut..].to_vec()])
    })
    .await;
    let hub = http_hub(&server.url).await;
    assert_eq!(hub.take_notices(), Vec::<String>::new());
    assert_eq!(hub.call("srv__echo", &Map::new()).await, ("café ok".to_string(), false));

    let seen: Vec<(String, Option<String>, Option<String>)> = server
        .requests()
        .iter()
        .map(|r| {
            let h = |k: &str| r.header(k).map(str::to_string);
            (r.rpc().to_string(), h("mcp-session-id"), h("mcp-protocol-version"))
        })
        .collect();
    let v = Some("2025-06-18".to_string());
    let s = |n: &str| Some(n.to_string());
    assert_eq!(
        seen,
        vec![
            ("initialize".into(), None, None),
            ("notifications/initialized".into(), s("s1"), v.clone()),
            ("tools/list".into(), s("s1"), v.clone()),
            ("tools/call".into(), s("s1"), v.clone()),
            // The new session starts without the old id or version.
            ("initialize".into(), None, None),
            ("notifications/initialized".into(), s("s2"), v.clone()),
            ("tools/call".into(), s("s2"), v.clone()),
        ]
    );
    // The new session may have other tools: they are listed again, and are the same.
    assert!(hub.tools_changed());
    assert!(!hub.refresh_tools().await);
    assert_eq!(names(&hub), vec!["srv__echo"]);
}

#[tokio::test]
async fn a_session_that_ends_again_after_the_new_start_is_an_error_naming_the_server() {
    let inits = AtomicUsize::new(0);
    let server = TestServer::start(move |req| {
        handshake(req, &inits, "2025-06-18", &["echo"]).unwrap_or_else(|| Reply::status(404))
    })
    .await;
    let hub = http_hub(&server.url).await;
    let (text, failed) = hub.call("srv__echo", &Map::new()).await;
    assert!(failed);
    assert!(text.contains("MCP server `srv`") && text.contains("HTTP 404"), "{text}");
    let calls = server.requests().iter().filter(|r| r.rpc() == "tools/call").count();
    assert_eq!(calls, 2, "one retry, no more");
}

#[tokio::test]
async fn a_protocol_version_the_client_does_not_speak_fails_the_start() {
    let inits = AtomicUsize::new(0);
    let server = TestServer::start(move |req| handshake(req, &inits, "2099-01-01", &["echo"]).unwrap()).await;
    let hub = http_hub(&server.url).await;
    let notices = hub.take_notices();
    assert_eq!(notices.len(), 1, "{notices:?}");
    let n = &notices[0];
    assert!(n.starts_with("MCP server `srv` failed to start:"), "{n}");
    assert!(n.contains("`2099-01-01`") && n.contains("`2025-11-25`") && n.contains("`2025-06-18`"), "{n}");
    assert!(hub.specs().is_empty());
    assert!(hub.status()[0].state.starts_with("failed to start"));
    // Nothing more is sent to a server the client cannot speak with.
    assert_eq!(server.requests().iter().map(Request::rpc).collect::<Vec<_>>(), vec!["initialize"]);
}

#[tokio::test]
async fn an_older_protocol_version_is_accepted_and_sent_as_a_header() {
    let inits = AtomicUsize::new(0);
    let server = TestServer::start(move |req| {
        handshake(req, &inits, "2025-03-26", &["echo"])
            .unwrap_or_else(|| Reply::json(&result(req, json!({"content": [{"type": "text", "text": "ok"}]}))))
    })
    .await;
    let hub = http_hub(&server.url).await;
    assert_eq!(hub.take_notices(), Vec::<String>::new());
    assert_eq!(hub.call("srv__echo", &Map::new()).await, ("ok".to_string(), false));
    let after_init: Vec<Option<String>> =
        server.requests()[1..].iter().map(|r| r.header("mcp-protocol-version").map(str::to_string)).collect();
    assert_eq!(after_init, vec![Some("2025-03-26".to_string()); 3]);
}

#[tokio::test]
async fn a_list_changed_notification_over_stdio_refreshes_the_tools() {
    let lists = Arc::new(AtomicUsize::new(0));
    let listed = lists.clone();
    let hub = stdio_hub(move |msg| {
        let id = msg.get("id").cloned().unwrap_or(Value::Null);
        let ok = |result: Value| json!({"jsonrpc": "2.0", "id": id, "result": result});
        match msg.get("method").and_then(Value::as_str) {
            Some("initialize") => vec![ok(json!({"protocolVersion": "2025-06-18",
                "capabilities": {"tools": {"listChanged": true}}, "serverInfo": {"name": "t", "version": "1"}}))],
            Some("tools/list") => {
                // First [a]; then [a, b]; then [b].
                let tools = match listed.fetch_add(1, Ordering::SeqCst) {
                    0 => vec![tool("a")],
                    1 => vec![tool("a"), tool("b")],
                    _ => vec![tool("b")],
                };
                vec![ok(json!({"tools": tools}))]
            }
            // The call changes the tools: the server says so before it answers.
            Some("tools/call") => vec![
                json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}),
                ok(json!({"content": [{"type": "text", "text": "done"}]})),
            ],
            _ => Vec::new(),
        }
    })
    .await;
    assert_eq!(names(&hub), vec!["srv__a"]);
    assert!(!hub.tools_changed());
    let builtin = ToolSpecs::builtin().unwrap();
    let (specs, notices) = hub.respec(&builtin);
    assert!(notices.is_empty());
    assert_eq!(specs.len(), builtin.len() + 1);

    assert_eq!(hub.call("srv__a", &Map::new()).await, ("done".to_string(), false));
    assert!(hub.tools_changed());
    assert!(hub.refresh_tools().await);
    assert!(!hub.tools_changed());
    assert_eq!(names(&hub), vec!["srv__a", "srv__b"]);
    let (specs, _) = hub.respec(&specs);
    assert_eq!(specs.names()[builtin.len()..], ["srv__a", "srv__b"]);
    assert!(hub.owns("srv__b"));

    // A tool the server no longer offers leaves the specs.
    assert_eq!(hub.call("srv__b", &Map::new()).await, ("done".to_string(), false));
    assert!(hub.refresh_tools().await);
    let (specs, _) = hub.respec(&specs);
    assert_eq!(specs.names()[builtin.len()..], ["srv__b"]);
    assert!(specs.get("bash").is_some() && !hub.owns("srv__a"));
    // Nothing announced, nothing fetched.
    assert!(!hub.refresh_tools().await);
    assert_eq!(lists.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn a_list_changed_notification_in_an_http_answer_stream_refreshes_the_tools() {
    let inits = AtomicUsize::new(0);
    let changed = Arc::new(Mutex::new(false));
    let server = TestServer::start(move |req| {
        let tools: &[&str] = if *changed.lock().unwrap() { &["a", "b"] } else { &["a"] };
        if let Some(reply) = handshake(req, &inits, "2025-11-25", tools) {
            return reply;
        }
        *changed.lock().unwrap() = true;
        let note = json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"});
        let answer = result(req, json!({"content": [{"type": "text", "text": "done"}]}));
        // The notification's event ends mid-line in the first chunk.
        let bytes = [event(&note), event(&answer)].concat();
        let cut = event(&note).len() + 10;
        Reply::sse(vec![bytes[..cut].to_vec(), bytes[cut..].to_vec()])
    })
    .await;
    let hub = http_hub(&server.url).await;
    assert_eq!(names(&hub), vec!["srv__a"]);
    assert_eq!(hub.call("srv__a", &Map::new()).await, ("done".to_string(), false));
    assert!(hub.tools_changed());
    assert!(hub.refresh_tools().await);
    assert_eq!(names(&hub), vec!["srv__a", "srv__b"]);
}

#[tokio::test]
async fn a_list_changed_notification_on_the_servers_get_stream_is_heard() {
    let inits = AtomicUsize::new(0);
    let lists = AtomicUsize::new(0);
    let server = TestServer::start(move |req| match req.rpc() {
        "initialize" => {
            inits.fetch_add(1, Ordering::SeqCst);
            Reply::json(&init_result(req, "2025-06-18", true)).header("mcp-session-id", "s1")
        }
        "notifications/initialized" => Reply::status(202),
        "tools/list" => {
            let tools = if lists.fetch_add(1, Ordering::SeqCst) == 0 { vec![tool("a")] } else { vec![tool("b")] };
            Reply::json(&result(req, json!({"tools": tools})))
        }
        "GET" => {
            let note = json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"});
            Reply::sse(vec![b": hello\n\n".to_vec(), event(&note)]).open()
        }
        _ => Reply::status(400),
    })
    .await;
    let hub = http_hub(&server.url).await;
    assert_eq!(names(&hub), vec!["srv__a"]);
    let heard = async {
        while !hub.tools_changed() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(TIMEOUT, heard).await.unwrap();
    assert!(hub.refresh_tools().await);
    assert_eq!(names(&hub), vec!["srv__b"]);
    let get = server.requests().into_iter().find(|r| r.method == "GET").unwrap();
    assert_eq!(get.header("accept"), Some("text/event-stream"));
    assert_eq!(get.header("mcp-session-id"), Some("s1"));
    assert_eq!(get.header("mcp-protocol-version"), Some("2025-06-18"));
}
