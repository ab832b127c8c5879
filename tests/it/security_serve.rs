//! `agent serve` against the web and the crowd: a page whose name was rebound to
//! 127.0.0.1 (its own name in `Host`) is refused before the model sees anything, more
//! requests than the cap get a 429 at once instead of a queue, and `/v1/models` tells a
//! client no file-system path.

use std::io::{Read, Write};

use futures_util::StreamExt;
use serde_json::{json, Value};

use crate::support;

/// POSTs a chat request to `url` (`http://127.0.0.1:PORT/v1`) with the `Host` header
/// `host`, by hand so that nothing rewrites it; the status and the body.
fn post_with_host(url: &str, host: &str, key: Option<&str>) -> (u16, String) {
    let addr = url.trim_start_matches("http://").trim_end_matches("/v1");
    let body = json!({"messages": [{"role": "user", "content": "hi"}]}).to_string();
    let auth = key.map(|k| format!("Authorization: Bearer {k}\r\n")).unwrap_or_default();
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(
        s,
        "POST /v1/chat/completions HTTP/1.1\r\nHost: {host}\r\n{auth}Content-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let status = out.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = out.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    (status, body)
}

/// The reply text of a chat completion sent the ordinary way.
fn chat(url: &str, key: Option<&str>) -> String {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut r = reqwest::Client::new()
            .post(format!("{url}/chat/completions"))
            .json(&json!({"messages": [{"role": "user", "content": "hi"}]}));
        if let Some(k) = key {
            r = r.bearer_auth(k);
        }
        let r = r.send().await.unwrap();
        assert_eq!(r.status().as_u16(), 200);
        let v: Value = r.json().await.unwrap();
        v["choices"][0]["message"]["content"].as_str().unwrap_or_default().to_string()
    })
}

#[test]
fn a_foreign_host_header_gets_a_403_and_the_request_never_reaches_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let script = support::script(&dir, "s.yaml", "- first\n- second\n- third\n");
    let (_server, url) = support::start_server(&format!("scripted:{}", script.display()), "served");
    for foreign in ["evil.example", "evil.example:8080", "localhost.evil.example", "10.9.8.7"] {
        let (status, body) = post_with_host(&url, foreign, None);
        assert_eq!(status, 403, "{foreign}: {body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["error"]["type"], "invalid_request_error", "{body}");
        assert!(v["error"]["message"].as_str().unwrap().contains("--allowed-host"), "{body}");
    }
    // The four refused requests took no reply: the next honest ones get the first two.
    assert_eq!(chat(&url, None), "first");
    let port = url.trim_end_matches("/v1").rsplit(':').next().unwrap().to_string();
    let (status, body) = post_with_host(&url, &format!("localhost:{port}"), None);
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("second"), "{body}");
}

#[test]
fn the_host_check_comes_before_the_key_and_allowed_hosts_pass() {
    let dir = tempfile::tempdir().unwrap();
    let script = support::script(&dir, "s.yaml", "- first\n- second\n");
    let spec = format!("scripted:{}", script.display());
    let (_server, url) =
        support::start_server_with(&spec, "served", &["--api-key", "k", "--allowed-host", "models.lan"]);
    // Even with the right key, a rebound name is refused (a page cannot know the key, but
    // the refusal costs nothing and does not depend on it).
    let (status, body) = post_with_host(&url, "evil.example", Some("k"));
    assert_eq!(status, 403, "{body}");
    let (status, body) = post_with_host(&url, "evil.example", None);
    assert_eq!(status, 403, "{body}");
    let (status, body) = post_with_host(&url, "models.lan:8080", Some("k"));
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("first"), "{body}");
    let (status, _) = post_with_host(&url, "models.lan:8080", None);
    assert_eq!(status, 401);
}

#[test]
fn beyond_the_request_cap_a_request_gets_a_429_with_retry_after_and_takes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let script = support::script(
        &dir,
        "s.yaml",
        "- reply: \"one two three four five six seven eight\"\n  delay_ms: 3000\n- fast\n",
    );
    let (_server, url) =
        support::start_server_with(&format!("scripted:{}", script.display()), "served", &["--max-connections", "1"]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (status, retry, body, slow_text) = rt.block_on(async {
        let c = reqwest::Client::new();
        // A streamed request holds its slot until its last byte: its first chunk proves it in flight.
        let slow = c
            .post(format!("{url}/chat/completions"))
            .json(&json!({"stream": true, "messages": [{"role": "user", "content": "hi"}]}))
            .send()
            .await
            .unwrap();
        assert_eq!(slow.status().as_u16(), 200);
        let mut stream = slow.bytes_stream();
        let mut slow_text = String::from_utf8_lossy(&stream.next().await.unwrap().unwrap()).into_owned();
        let over = c
            .post(format!("{url}/chat/completions"))
            .json(&json!({"messages": [{"role": "user", "content": "hi"}]}))
            .send()
            .await
            .unwrap();
        let status = over.status().as_u16();
        let retry = over.headers().get("retry-after").map(|v| v.to_str().unwrap().to_string());
        let body = over.text().await.unwrap();
        while let Some(chunk) = stream.next().await {
            slow_text.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
        }
        (status, retry, body, slow_text)
    });
    assert_eq!(status, 429, "{body}");
    assert_eq!(retry.as_deref(), Some("1"));
    let v: Value = serde_json::from_str(&body).unwrap();
    assert!(v["error"]["message"].as_str().unwrap().contains("--max-connections"), "{body}");
    assert!(slow_text.contains("eight") && slow_text.contains("[DONE]"), "{slow_text}");
    // The slot is free again, and the refused request took no reply.
    assert_eq!(chat(&url, None), "fast");
}

#[test]
fn models_shows_names_never_file_system_paths() {
    let dir = tempfile::tempdir().unwrap();
    let script = support::script(&dir, "s.yaml", "- hi\n");
    let adapter = dir.path().join("adapters").join("my-adapter");
    std::fs::create_dir_all(&adapter).unwrap();
    let (_server, url) =
        support::serve(&["--model", &format!("scripted:{}", script.display()), "--lora", adapter.to_str().unwrap()]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let models: Value =
        rt.block_on(async { reqwest::get(format!("{url}/models")).await.unwrap().json().await.unwrap() });
    let entry = &models["data"][0];
    assert_eq!(entry["adapter"], "my-adapter", "{models}");
    assert_eq!(entry["id"], "scripted:s.yaml+my-adapter", "{models}");
    let text = models.to_string();
    let root = dir.path().to_str().unwrap();
    assert!(!text.contains(root) && !text.contains('/'), "a path in /v1/models: {text}");
    // The served model is still reachable by the id it shows.
    let id = entry["id"].as_str().unwrap();
    let one: Value =
        rt.block_on(async { reqwest::get(format!("{url}/models/{id}")).await.unwrap().json().await.unwrap() });
    assert_eq!(one["id"], id, "{one}");
}
