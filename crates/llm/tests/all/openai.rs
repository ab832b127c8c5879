//! The OpenAI-compatible backend against a tiny mock HTTP/1.1 server.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agent_llm::{
    ChatMessage, ChatRequest, FinishReason, LlmError, ModelBackend, OpenAiBackend, OpenAiConfig, Role, SamplingParams,
};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// What the mock answers to one request.
#[derive(Clone)]
enum Reply {
    /// An SSE response: the raw pieces are written one by one, `gap` apart; then the
    /// connection is closed, or held open silently when `stall`.
    Sse { pieces: Vec<Vec<u8>>, gap: Duration, stall: bool },
    /// A complete response.
    Full { status: u16, headers: Vec<(&'static str, String)>, body: String },
    /// A chunked SSE response that breaks off in the middle of a chunk.
    Broken { first: String },
}

/// One request the mock received.
#[derive(Debug, Clone)]
struct Recorded {
    head: String,
    body: Value,
}

struct Mock {
    base_url: String,
    requests: Arc<Mutex<Vec<Recorded>>>,
}

impl Mock {
    fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().unwrap().clone()
    }
}

/// Starts a mock server; request number i gets `replies[i]` (the last one repeats).
async fn mock(replies: Vec<Reply>) -> Mock {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let requests = Arc::new(Mutex::new(Vec::new()));
    let recorded = requests.clone();
    tokio::spawn(async move {
        let mut n = 0usize;
        loop {
            let Ok((conn, _)) = listener.accept().await else {
                return;
            };
            let reply = replies[n.min(replies.len() - 1)].clone();
            n += 1;
            let recorded = recorded.clone();
            tokio::spawn(async move { handle(conn, reply, recorded).await });
        }
    });
    Mock { base_url: format!("http://{addr}/v1"), requests }
}

async fn handle(mut conn: TcpStream, reply: Reply, recorded: Arc<Mutex<Vec<Recorded>>>) {
    let mut buf = Vec::new();
    let mut tmp = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        match conn.read(&mut tmp).await {
            Ok(0) | Err(_) => return,
            Ok(k) => buf.extend_from_slice(&tmp[..k]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let len: usize = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length").then(|| v.trim().parse().ok())?
        })
        .unwrap_or(0);
    while buf.len() < head_end + len {
        match conn.read(&mut tmp).await {
            Ok(0) | Err(_) => return,
            Ok(k) => buf.extend_from_slice(&tmp[..k]),
        }
    }
    let body = serde_json::from_slice(&buf[head_end..head_end + len]).unwrap_or(Value::Null);
    recorded.lock().unwrap().push(Recorded { head, body });

    match reply {
        Reply::Sse { pieces, gap, stall } => {
            let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n\
                        connection: close\r\n\r\n";
            if conn.write_all(head.as_bytes()).await.is_err() {
                return;
            }
            for piece in pieces {
                if conn.write_all(&piece).await.is_err() || conn.flush().await.is_err() {
                    return;
                }
                tokio::time::sleep(gap).await;
            }
            if stall {
                tokio::time::sleep(Duration::from_secs(30)).await;
            }
        }
        Reply::Full { status, headers, body } => {
            let mut out = format!(
                "HTTP/1.1 {status} Whatever\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
                 connection: close\r\n",
                body.len()
            );
            for (k, v) in headers {
                out.push_str(&format!("{k}: {v}\r\n"));
            }
            out.push_str("\r\n");
            out.push_str(&body);
            let _ = conn.write_all(out.as_bytes()).await;
        }
        Reply::Broken { first } => {
            let data = format!("data: {first}\n\n");
            let out = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n\
                 {:x}\r\n{data}\r\n100\r\ndata: {{\"cho",
                data.len()
            );
            let _ = conn.write_all(out.as_bytes()).await;
            let _ = conn.flush().await;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let _ = conn.shutdown().await;
}

/// `data: {json}\n\n` as bytes.
fn data(v: Value) -> Vec<u8> {
    format!("data: {v}\n\n").into_bytes()
}

fn content(text: &str) -> Vec<u8> {
    data(json!({"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": null}]}))
}

fn done() -> Vec<u8> {
    b"data: [DONE]\n\n".to_vec()
}

fn sse(pieces: Vec<Vec<u8>>) -> Reply {
    Reply::Sse { pieces, gap: Duration::from_millis(5), stall: false }
}

fn full(status: u16, body: &str) -> Reply {
    Reply::Full { status, headers: Vec::new(), body: body.to_string() }
}

fn config(base_url: &str) -> OpenAiConfig {
    let mut cfg = OpenAiConfig::new(base_url, "test-model");
    cfg.retry.initial_backoff = Duration::from_millis(10);
    cfg.retry.max_backoff = Duration::from_millis(40);
    cfg.idle_timeout = Duration::from_secs(5);
    cfg.connect_timeout = Duration::from_secs(2);
    cfg
}

fn request() -> ChatRequest {
    ChatRequest {
        messages: vec![ChatMessage::new(Role::System, "You are terse."), ChatMessage::new(Role::User, "Say hello")],
        sampling: SamplingParams {
            max_tokens: Some(32),
            temperature: Some(0.5),
            stop: vec!["</bash>".into()],
            ..Default::default()
        },
        tools: vec![],
        grammar: None,
    }
}

/// Runs one chat call, returning the result and the deltas seen.
async fn run(
    cfg: OpenAiConfig,
    cancel: &CancellationToken,
) -> (Result<agent_llm::ChatResponse, LlmError>, Vec<String>) {
    let backend = OpenAiBackend::new(cfg).unwrap();
    let mut deltas = Vec::new();
    let result = backend.chat(&request(), &mut |s: &str| deltas.push(s.to_string()), cancel).await;
    (result, deltas)
}

#[tokio::test]
async fn streamed_reply_text_usage_and_request() {
    // An event split across writes, inside a UTF-8 sequence, with CRLF endings and a
    // keep-alive comment.
    let wörld = content(" wörld");
    let cut = wörld.iter().position(|&b| b == 0xc3).unwrap() + 1;
    let lo = content("lo");
    let server = mock(vec![sse(vec![
        data(json!({"choices": [{"index": 0, "delta": {"role": "assistant"}}]})),
        b": keep-alive\n\n".to_vec(),
        content("Hel"),
        lo[..lo.len() - 2].to_vec(),
        b"\r\n\r\n".to_vec(),
        wörld[..cut].to_vec(),
        wörld[cut..].to_vec(),
        data(json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})),
        data(json!({"choices": [], "usage": {"prompt_tokens": 17, "completion_tokens": 3, "total_tokens": 20}})),
        done(),
    ])])
    .await;
    let var = format!("AGENT_IT_OPENAI_KEY_{}", std::process::id());
    std::env::set_var(&var, "sk-test-123");
    let mut cfg = config(&server.base_url);
    cfg.api_key_env = Some(var);
    let (result, deltas) = run(cfg, &CancellationToken::new()).await;
    let resp = result.unwrap();
    assert_eq!(resp.text, "Hello wörld");
    assert_eq!(deltas, vec!["Hel", "lo", " wörld"]);
    assert_eq!(resp.finish_reason, FinishReason::Stop);
    assert_eq!((resp.usage.prompt_tokens, resp.usage.completion_tokens), (17, 3));
    assert!(resp.decode_tokens_per_sec.is_some_and(|t| t > 0.0));
    assert_eq!(resp.completion_token_ids, None);
    assert_eq!(resp.prompt_token_ids, None);

    let reqs = server.requests();
    assert_eq!(reqs.len(), 1);
    let head = reqs[0].head.to_ascii_lowercase();
    assert!(head.starts_with("post /v1/chat/completions "), "{head}");
    assert!(head.contains("authorization: bearer sk-test-123"), "{head}");
    let body = &reqs[0].body;
    assert_eq!(body["model"], "test-model");
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"]["include_usage"], true);
    assert_eq!(body["max_tokens"], 32);
    assert_eq!(body["temperature"].as_f64(), Some(0.5));
    assert_eq!(body["stop"], json!(["</bash>"]));
    assert!(body.get("top_k").is_none());
    assert_eq!(
        body["messages"],
        json!([
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "Say hello"}
        ])
    );
}

#[tokio::test]
async fn streamed_reasoning_and_token_ids() {
    let server = mock(vec![sse(vec![
        data(json!({"prompt_token_ids": [1, 2, 3], "choices": [{"delta": {"reasoning_content": "hmm"}, "token_ids": [10]}]})),
        data(json!({"choices": [{"delta": {"reasoning_content": "..."}, "token_ids": [11]}]})),
        data(json!({"choices": [{"delta": {"content": "ok"}, "token_ids": [12]}]})),
        data(json!({"choices": [{"delta": {}, "finish_reason": "length", "token_ids": []}]})),
        done(),
    ])])
    .await;
    let (result, deltas) = run(config(&server.base_url), &CancellationToken::new()).await;
    let resp = result.unwrap();
    assert_eq!(resp.text, "<think>hmm...</think>ok");
    assert_eq!(deltas.concat(), resp.text);
    assert_eq!(resp.finish_reason, FinishReason::Length);
    assert_eq!(resp.prompt_token_ids, Some(vec![1, 2, 3]));
    assert_eq!(resp.completion_token_ids, Some(vec![10, 11, 12]));
    // No usage reported: counted from the ids.
    assert_eq!((resp.usage.prompt_tokens, resp.usage.completion_tokens), (3, 3));
}

#[tokio::test]
async fn non_streamed_reply() {
    let body = json!({
        "id": "x", "object": "chat.completion",
        "prompt_token_ids": [5, 6],
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi there"},
                     "finish_reason": "stop", "token_ids": [7, 8, 9]}],
        "usage": {"prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 5}
    });
    let server = mock(vec![full(200, &body.to_string())]).await;
    let mut cfg = config(&server.base_url);
    cfg.stream = false;
    let (result, deltas) = run(cfg, &CancellationToken::new()).await;
    let resp = result.unwrap();
    assert_eq!(resp.text, "Hi there");
    assert_eq!(deltas, vec!["Hi there"]);
    assert_eq!(resp.finish_reason, FinishReason::Stop);
    assert_eq!((resp.usage.prompt_tokens, resp.usage.completion_tokens), (2, 3));
    assert_eq!(resp.prompt_token_ids, Some(vec![5, 6]));
    assert_eq!(resp.completion_token_ids, Some(vec![7, 8, 9]));
    let reqs = server.requests();
    assert_eq!(reqs[0].body["stream"], false);
    assert!(reqs[0].body.get("stream_options").is_none());
}

#[tokio::test]
async fn usage_is_estimated_when_not_reported() {
    let server = mock(vec![sse(vec![content("abcdefgh"), done()])]).await;
    let (result, _) = run(config(&server.base_url), &CancellationToken::new()).await;
    let resp = result.unwrap();
    assert_eq!(resp.text, "abcdefgh");
    assert_eq!(resp.usage.completion_tokens, agent_llm::estimate_tokens("abcdefgh"));
    assert!(resp.usage.prompt_tokens > 0);
}

#[tokio::test]
async fn retries_429_then_succeeds() {
    let server = mock(vec![
        Reply::Full { status: 429, headers: vec![("retry-after", "0".into())], body: "slow down".into() },
        full(429, "slow down"),
        sse(vec![content("finally"), done()]),
    ])
    .await;
    let started = Instant::now();
    let (result, deltas) = run(config(&server.base_url), &CancellationToken::new()).await;
    assert_eq!(result.unwrap().text, "finally");
    assert_eq!(deltas, vec!["finally"]);
    assert_eq!(server.requests().len(), 3);
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn server_error_forever_gives_up_after_retries() {
    let server = mock(vec![full(500, "boom: the GPU caught fire")]).await;
    let mut cfg = config(&server.base_url);
    cfg.retry.max_retries = 2;
    let (result, deltas) = run(cfg, &CancellationToken::new()).await;
    match result {
        Err(LlmError::Http { status, body, url }) => {
            assert_eq!(status, 500);
            assert!(body.contains("GPU caught fire"), "{body}");
            assert!(url.ends_with("/v1/chat/completions"), "{url}");
        }
        other => panic!("expected an HTTP error, got {other:?}"),
    }
    assert!(deltas.is_empty());
    assert_eq!(server.requests().len(), 3);
}

#[tokio::test]
async fn client_error_is_not_retried() {
    let long_tail = "x".repeat(1000);
    let body = format!("{{\"error\": {{\"message\": \"bad stop sequence\"}}, \"pad\": \"{long_tail}\"}}");
    let server = mock(vec![full(400, &body)]).await;
    let (result, _) = run(config(&server.base_url), &CancellationToken::new()).await;
    let err = result.unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, LlmError::Http { status: 400, .. }), "{err:?}");
    assert!(msg.contains("bad stop sequence"), "{msg}");
    assert!(msg.len() < 600, "the body is trimmed: {msg}");
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn stalled_stream_times_out() {
    let server = mock(vec![Reply::Sse { pieces: vec![content("partial")], gap: Duration::ZERO, stall: true }]).await;
    let mut cfg = config(&server.base_url);
    cfg.idle_timeout = Duration::from_millis(300);
    let started = Instant::now();
    let (result, deltas) = run(cfg, &CancellationToken::new()).await;
    assert!(matches!(result, Err(LlmError::Timeout { .. })), "{result:?}");
    assert!(started.elapsed() < Duration::from_millis(1500), "{:?}", started.elapsed());
    assert_eq!(deltas, vec!["partial"]);
    assert_eq!(server.requests().len(), 1, "no retry after output began");
}

#[tokio::test]
async fn broken_stream_after_output_is_not_retried() {
    let first = json!({"choices": [{"delta": {"content": "half"}}]}).to_string();
    let server = mock(vec![Reply::Broken { first }]).await;
    let (result, deltas) = run(config(&server.base_url), &CancellationToken::new()).await;
    match result {
        Err(LlmError::Unreachable { reason, .. }) => {
            assert!(reason.contains("mid-reply"), "{reason}")
        }
        other => panic!("expected Unreachable, got {other:?}"),
    }
    assert_eq!(deltas, vec!["half"]);
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn connection_refused_is_unreachable() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut cfg = config(&format!("http://127.0.0.1:{port}/v1"));
    cfg.retry.max_retries = 1;
    let started = Instant::now();
    let (result, _) = run(cfg, &CancellationToken::new()).await;
    let err = result.unwrap_err();
    let msg = err.to_string();
    match &err {
        LlmError::Unreachable { url, reason } => {
            assert_eq!(url, &format!("http://127.0.0.1:{port}/v1/chat/completions"));
            assert!(reason.contains("refused"), "{reason}");
        }
        other => panic!("expected Unreachable, got {other:?}"),
    }
    assert!(msg.contains(&format!("127.0.0.1:{port}")), "{msg}");
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn cancellation_mid_stream_returns_partial_text() {
    let server = mock(vec![Reply::Sse {
        pieces: vec![content("one "), content("two ")],
        gap: Duration::from_millis(10),
        stall: true,
    }])
    .await;
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        trigger.cancel();
    });
    let started = Instant::now();
    let (result, deltas) = run(config(&server.base_url), &cancel).await;
    let resp = result.unwrap();
    assert!(started.elapsed() < Duration::from_millis(1000), "{:?}", started.elapsed());
    assert_eq!(resp.finish_reason, FinishReason::Cancelled);
    assert_eq!(resp.text, "one two ");
    assert_eq!(deltas, vec!["one ", "two "]);
    assert!(resp.usage.completion_tokens > 0);
}

#[tokio::test]
async fn cancellation_inside_the_delta_callback() {
    let server = mock(vec![Reply::Sse {
        pieces: vec![content("a"), content("b"), content("c")],
        gap: Duration::from_millis(50),
        stall: true,
    }])
    .await;
    let backend = OpenAiBackend::new(config(&server.base_url)).unwrap();
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    let mut deltas = Vec::new();
    let started = Instant::now();
    let resp = backend
        .chat(
            &request(),
            &mut |s: &str| {
                deltas.push(s.to_string());
                trigger.cancel();
            },
            &cancel,
        )
        .await
        .unwrap();
    assert!(started.elapsed() < Duration::from_millis(1000));
    assert_eq!(resp.finish_reason, FinishReason::Cancelled);
    assert_eq!(resp.text, "a");
    assert_eq!(deltas, vec!["a"]);
}

#[tokio::test]
async fn missing_api_key_is_reported() {
    let mut cfg = OpenAiConfig::new("http://127.0.0.1:1/v1", "m");
    cfg.api_key_env = Some("AGENT_IT_SURELY_UNSET_API_KEY_VAR".into());
    match OpenAiBackend::new(cfg) {
        Err(LlmError::MissingApiKey { var }) => {
            assert_eq!(var, "AGENT_IT_SURELY_UNSET_API_KEY_VAR")
        }
        other => panic!("expected MissingApiKey, got {other:?}"),
    }
}
