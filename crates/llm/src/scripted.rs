//! A backend that replays given assistant replies, for tests and demos.
//!
//! The script file is a YAML list; each item is either a string (the reply) or a
//! mapping `{reply: "...", delay_ms: 500}` whose delay is spread over the streaming of
//! that reply, so that tests can interrupt mid-generation (a reply streams in up to eight
//! pieces, a long one a few words at a time; cancellation is honoured between pieces):
//!
//! ```yaml
//! - "<bash>\ncmd: ls\n</bash>"
//! - reply: "<finish>\nmessage: done\n</finish>"
//!   delay_ms: 500
//! ```
//!
//! A mapping may also carry `tool_calls`, native calls returned as structured data as an
//! API returns them (`- tool_calls: [{name: bash, arguments: {cmd: ls}}]`, `reply` then
//! optional); a script with any of them makes the backend report native tool support.
//!
//! The file may also be a mapping holding that list under `replies`, with
//! `native_tools: true` to report native tool support for replies that write their calls
//! as text (`<tool_call>` JSON, as a local model's chat template has it):
//!
//! ```yaml
//! native_tools: true
//! replies:
//!   - "<tool_call>\n{\"name\": \"bash\", \"arguments\": {\"cmd\": \"ls\"}}\n</tool_call>"
//! ```

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde_yaml::Value;
use tokio_util::sync::CancellationToken;

use super::{estimate_tokens, ChatRequest, ChatResponse, FinishReason, LlmError, ModelBackend, ToolCall};
use agent_protocol::TokenUsage;

/// The chunks a short reply is streamed in.
const MAX_CHUNKS: usize = 8;

/// The most words one chunk of a long reply carries: a long reply streams a few words at a
/// time, as a model streams tokens, so that a consumer that cancels mid-reply (the loop's
/// cut of a reply that repeats itself) sees the rest of it not sent, as with a real model.
const MAX_WORDS_PER_CHUNK: usize = 4;

/// One scripted reply.
#[derive(Debug, Clone, PartialEq)]
struct Reply {
    text: String,
    delay: Duration,
    tool_calls: Vec<ToolCall>,
}

/// Replays a fixed list of replies, one per [`ModelBackend::chat`] call.
#[derive(Debug)]
pub struct ScriptedBackend {
    replies: Vec<Reply>,
    next: AtomicUsize,
    /// Where the script came from, for messages.
    source: String,
    /// Every request received, for tests that check what the loop sent.
    seen: Mutex<Vec<ChatRequest>>,
    /// The script declares native tool support (`native_tools: true`).
    native: bool,
}

impl ScriptedBackend {
    /// Replays the given replies in order, without delays.
    pub fn new(replies: Vec<String>) -> Self {
        Self {
            replies: replies
                .into_iter()
                .map(|text| Reply { text, delay: Duration::ZERO, tool_calls: Vec::new() })
                .collect(),
            next: AtomicUsize::new(0),
            source: "<inline script>".to_string(),
            seen: Mutex::new(Vec::new()),
            native: false,
        }
    }

    /// Replays replies that are native tool calls returned as structured data (each inner
    /// list is one reply's calls: name and arguments; ids are `call_N`).
    pub fn with_tool_calls(replies: Vec<Vec<(String, serde_json::Value)>>) -> Self {
        let mut n = 0;
        let replies = replies
            .into_iter()
            .map(|calls| Reply {
                text: String::new(),
                delay: Duration::ZERO,
                tool_calls: calls
                    .into_iter()
                    .map(|(name, arguments)| {
                        n += 1;
                        ToolCall { id: format!("call_{n}"), name, arguments }
                    })
                    .collect(),
            })
            .collect();
        Self {
            replies,
            next: AtomicUsize::new(0),
            source: "<inline script>".to_string(),
            seen: Mutex::new(Vec::new()),
            native: false,
        }
    }

    /// The requests received so far, in order.
    pub fn requests(&self) -> Vec<ChatRequest> {
        self.seen.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Loads a YAML script file (see the module documentation).
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, LlmError> {
        let path = path.as_ref();
        let shown = path.display().to_string();
        let err = |reason: String| LlmError::ScriptFile { path: shown.clone(), reason };
        let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
        let (replies, native) = parse_script_file(&text).map_err(err)?;
        Ok(Self { replies, next: AtomicUsize::new(0), source: shown, seen: Mutex::new(Vec::new()), native })
    }

    /// How many replies the script holds.
    pub fn len(&self) -> usize {
        self.replies.len()
    }

    /// Whether the script holds no reply.
    pub fn is_empty(&self) -> bool {
        self.replies.is_empty()
    }

    /// How many replies have been handed out.
    pub fn used(&self) -> usize {
        self.next.load(Ordering::SeqCst).min(self.replies.len())
    }
}

/// Parses a script file: the list of replies, or a mapping holding it under `replies`
/// with `native_tools`; returns the replies and whether native tools are declared.
fn parse_script_file(text: &str) -> Result<(Vec<Reply>, bool), String> {
    let value: Value = serde_yaml::from_str(text).map_err(|e| format!("not valid YAML: {e}"))?;
    let Value::Mapping(map) = value else { return Ok((parse_replies(value)?, false)) };
    let mut replies = Value::Null;
    let mut native = false;
    for (k, v) in map {
        match k.as_str() {
            Some("replies") => replies = v,
            Some("native_tools") => native = v.as_bool().ok_or("`native_tools` must be true or false")?,
            _ => return Err("expected a YAML list of replies, or a mapping with `replies` and `native_tools`".into()),
        }
    }
    Ok((parse_replies(replies)?, native))
}

/// Parses the YAML list of replies.
fn parse_replies(value: Value) -> Result<Vec<Reply>, String> {
    let items = match value {
        Value::Sequence(items) => items,
        Value::Null => Vec::new(),
        _ => return Err("expected a YAML list of replies (strings, or mappings with `reply` and `delay_ms`)".into()),
    };
    items
        .into_iter()
        .enumerate()
        .map(|(i, item)| parse_item(item).map_err(|e| format!("item {}: {e}", i + 1)))
        .collect()
}

fn scalar_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

fn parse_item(item: Value) -> Result<Reply, String> {
    if let Some(text) = scalar_text(&item) {
        return Ok(Reply { text, delay: Duration::ZERO, tool_calls: Vec::new() });
    }
    let Value::Mapping(map) = item else {
        return Err("expected a string or a mapping with `reply` (and optionally `delay_ms`, `tool_calls`)".into());
    };
    let mut text = None;
    let mut delay = Duration::ZERO;
    let mut tool_calls = Vec::new();
    for (k, v) in map {
        match k.as_str() {
            Some("reply") => text = Some(scalar_text(&v).ok_or("`reply` must be a string")?),
            Some("delay_ms") => {
                let ms = v.as_u64().ok_or("`delay_ms` must be a non-negative integer")?;
                delay = Duration::from_millis(ms);
            }
            Some("tool_calls") => tool_calls = parse_tool_calls(v)?,
            Some(other) => return Err(format!("unknown key `{other}` (expected `reply`, `delay_ms`, `tool_calls`)")),
            None => return Err("keys must be strings".into()),
        }
    }
    if text.is_none() && tool_calls.is_empty() {
        return Err("the mapping has no `reply` and no `tool_calls`".into());
    }
    Ok(Reply { text: text.unwrap_or_default(), delay, tool_calls })
}

/// `tool_calls: [{name: bash, arguments: {cmd: ls}, id: optional}]`.
fn parse_tool_calls(v: Value) -> Result<Vec<ToolCall>, String> {
    let Value::Sequence(items) = v else { return Err("`tool_calls` must be a list".into()) };
    items
        .into_iter()
        .enumerate()
        .map(|(i, item)| {
            let name = item.get("name").and_then(Value::as_str).ok_or("each tool call needs a `name`")?.to_string();
            let arguments = match item.get("arguments") {
                Some(a) => serde_json::to_value(a).map_err(|e| format!("bad `arguments`: {e}"))?,
                None => serde_json::Value::Object(serde_json::Map::new()),
            };
            let id = item.get("id").and_then(Value::as_str).map_or_else(|| format!("call_{}", i + 1), str::to_string);
            Ok(ToolCall { id, name, arguments })
        })
        .collect()
}

/// Splits text into at most `max` chunks at whitespace boundaries (a chunk is one or
/// more words, each with its trailing whitespace); the chunks concatenate to `text`.
fn chunks(text: &str, max: usize) -> Vec<&str> {
    let mut starts = vec![0];
    let mut prev_ws = false;
    let mut seen_word = false;
    for (i, c) in text.char_indices() {
        let ws = c.is_whitespace();
        if prev_ws && !ws && seen_word {
            starts.push(i);
        }
        seen_word |= !ws;
        prev_ws = ws;
    }
    let words = starts.len();
    let per_chunk = words.div_ceil(max.max(1));
    let mut out = Vec::new();
    let mut w = 0;
    while w < words {
        let start = starts[w];
        let end = starts.get(w + per_chunk).copied().unwrap_or(text.len());
        out.push(&text[start..end]);
        w += per_chunk;
    }
    out.retain(|c| !c.is_empty());
    out
}

#[async_trait]
impl ModelBackend for ScriptedBackend {
    fn name(&self) -> String {
        format!("scripted:{}", self.source)
    }

    fn native_tools(&self) -> bool {
        self.native || self.replies.iter().any(|r| !r.tool_calls.is_empty())
    }

    async fn chat(
        &self,
        request: &ChatRequest,
        on_delta: &mut (dyn for<'s> FnMut(&'s str) + Send),
        cancel: &CancellationToken,
    ) -> Result<ChatResponse, LlmError> {
        if let Ok(mut seen) = self.seen.lock() {
            seen.push(request.clone());
        }
        let index = self.next.fetch_add(1, Ordering::SeqCst);
        let Some(reply) = self.replies.get(index) else {
            self.next.store(self.replies.len(), Ordering::SeqCst);
            return Err(LlmError::ScriptExhausted { path: self.source.clone(), used: self.replies.len() });
        };
        let words = reply.text.split_whitespace().count();
        let pieces = chunks(&reply.text, MAX_CHUNKS.max(words.div_ceil(MAX_WORDS_PER_CHUNK)));
        let pause = if pieces.is_empty() { Duration::ZERO } else { reply.delay / pieces.len() as u32 };
        let mut text = String::new();
        let mut finish_reason = FinishReason::Stop;
        let mut first_token = None;
        for piece in pieces {
            if cancel.is_cancelled() {
                finish_reason = FinishReason::Cancelled;
                break;
            }
            if pause.is_zero() {
                tokio::task::yield_now().await;
            } else {
                tokio::select! {
                    biased;
                    _ = cancel.cancelled() => {
                        finish_reason = FinishReason::Cancelled;
                        break;
                    }
                    _ = tokio::time::sleep(pause) => {}
                }
            }
            if cancel.is_cancelled() {
                finish_reason = FinishReason::Cancelled;
                break;
            }
            first_token.get_or_insert_with(Instant::now);
            text.push_str(piece);
            on_delta(piece);
        }
        let usage = TokenUsage {
            prompt_tokens: request.messages.iter().map(|m| estimate_tokens(&m.content)).sum(),
            completion_tokens: estimate_tokens(&text),
        };
        let decode_tokens_per_sec = first_token.and_then(|t: Instant| {
            let secs = t.elapsed().as_secs_f64();
            (!reply.delay.is_zero() && secs > 0.0 && usage.completion_tokens > 0)
                .then(|| usage.completion_tokens as f64 / secs)
        });
        Ok(ChatResponse {
            text,
            finish_reason,
            usage,
            completion_token_ids: None,
            prompt_token_ids: None,
            decode_tokens_per_sec,
            tool_calls: if finish_reason == FinishReason::Cancelled { Vec::new() } else { reply.tool_calls.clone() },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ChatMessage, Role};

    fn parse_script(text: &str) -> Result<Vec<Reply>, String> {
        parse_replies(serde_yaml::from_str(text).map_err(|e| e.to_string())?)
    }

    fn req() -> ChatRequest {
        ChatRequest { messages: vec![ChatMessage::new(Role::User, "hello there")], ..Default::default() }
    }

    #[test]
    fn chunks_are_word_aligned_and_complete() {
        for text in ["", "one", "  lead and trail  ", "a b c d e f g h i j k l m n o p q", "ü ñ 你好 🦀 x\ny\tz"]
        {
            let cs = chunks(text, 8);
            assert_eq!(cs.concat(), text);
            assert!(cs.len() <= 8);
            for c in cs.iter().skip(1) {
                assert!(!c.starts_with(char::is_whitespace), "{c:?}");
            }
        }
        assert_eq!(chunks("a b c", 8), vec!["a ", "b ", "c"]);
        assert_eq!(chunks("a b c d", 2), vec!["a b ", "c d"]);
        assert_eq!(chunks("  a b", 8), vec!["  a ", "b"]);
    }

    #[test]
    fn parses_strings_and_mappings() {
        let r = parse_script("- hello\n- reply: \"slow one\"\n  delay_ms: 300\n- 42\n").unwrap();
        assert_eq!(r.len(), 3);
        assert_eq!(r[0], Reply { text: "hello".into(), delay: Duration::ZERO, tool_calls: vec![] });
        assert_eq!(r[1], Reply { text: "slow one".into(), delay: Duration::from_millis(300), tool_calls: vec![] });
        assert_eq!(r[2].text, "42");
        assert!(parse_script("").unwrap().is_empty());
        assert!(parse_script("a: b").is_err());
        assert!(parse_script("- {delay_ms: 3}").unwrap_err().contains("item 1"));
        assert!(parse_script("- {reply: x, other: 1}").unwrap_err().contains("other"));
        assert!(parse_script("- [1, 2]").is_err());
        let r = parse_script("- tool_calls: [{name: bash, arguments: {cmd: ls}}, {name: finish, id: f}]\n").unwrap();
        assert_eq!(r[0].text, "");
        assert_eq!(r[0].tool_calls[0].id, "call_1");
        assert_eq!(r[0].tool_calls[0].arguments, serde_json::json!({"cmd": "ls"}));
        assert_eq!(r[0].tool_calls[1].id, "f");
        assert!(parse_script("- tool_calls: [{arguments: {}}]").unwrap_err().contains("name"));
        assert!(parse_script("- {reply: x, delay_ms: -1}").is_err());
    }

    #[test]
    fn a_script_may_declare_native_tools() {
        let (r, native) =
            parse_script_file("native_tools: true\nreplies:\n  - \"<tool_call>{}</tool_call>\"\n").unwrap();
        assert!(native);
        assert_eq!(r[0].text, "<tool_call>{}</tool_call>");
        assert!(!parse_script_file("- hi\n").unwrap().1, "a list declares nothing");
        assert!(parse_script_file("native_tools: maybe\nreplies: []").is_err());
        assert!(parse_script_file("a: b").unwrap_err().contains("replies"));
        let dir = tempfile_dir("native");
        let file = dir.join("native.yaml");
        std::fs::write(&file, "native_tools: true\nreplies: [hi]\n").unwrap();
        let b = ScriptedBackend::from_file(&file).unwrap();
        assert!(b.native_tools());
        assert_eq!(b.len(), 1);
        std::fs::write(&file, "- hi\n").unwrap();
        assert!(!ScriptedBackend::from_file(&file).unwrap().native_tools());
        std::fs::remove_dir_all(&dir).ok();
    }

    fn tempfile_dir(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("agent-scripted-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[tokio::test]
    async fn replays_in_order_then_exhausts() {
        let b = ScriptedBackend::new(vec!["first reply here".into(), "second".into()]);
        let cancel = CancellationToken::new();
        let mut seen = Vec::new();
        let r = b.chat(&req(), &mut |s: &str| seen.push(s.to_string()), &cancel).await.unwrap();
        assert_eq!(r.text, "first reply here");
        assert_eq!(seen, vec!["first ", "reply ", "here"]);
        assert_eq!(r.finish_reason, FinishReason::Stop);
        assert_eq!(r.usage.prompt_tokens, estimate_tokens("hello there"));
        assert_eq!(r.usage.completion_tokens, estimate_tokens("first reply here"));
        let r = b.chat(&req(), &mut |_: &str| {}, &cancel).await.unwrap();
        assert_eq!(r.text, "second");
        assert_eq!(b.used(), 2);
        match b.chat(&req(), &mut |_: &str| {}, &cancel).await {
            Err(LlmError::ScriptExhausted { used, .. }) => assert_eq!(used, 2),
            other => panic!("expected ScriptExhausted, got {other:?}"),
        }
        assert!(b.chat(&req(), &mut |_: &str| {}, &cancel).await.is_err());
    }

    #[tokio::test]
    async fn cancellation_mid_reply() {
        let dir = std::env::temp_dir().join(format!("agent-scripted-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("script.yaml");
        std::fs::write(&file, "- reply: \"a b c d e f g h\"\n  delay_ms: 800\n- after\n").unwrap();
        let b = ScriptedBackend::from_file(&file).unwrap();
        assert_eq!(b.len(), 2);
        let cancel = CancellationToken::new();
        let c2 = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(250)).await;
            c2.cancel();
        });
        let started = Instant::now();
        let mut seen = String::new();
        let r = b.chat(&req(), &mut |s: &str| seen.push_str(s), &cancel).await.unwrap();
        assert!(started.elapsed() < Duration::from_millis(600), "{:?}", started.elapsed());
        assert_eq!(r.finish_reason, FinishReason::Cancelled);
        assert!(!r.text.is_empty() && r.text.len() < "a b c d e f g h".len(), "{:?}", r.text);
        assert_eq!(seen, r.text);
        // The next call gets the next reply.
        let r = b.chat(&req(), &mut |_: &str| {}, &CancellationToken::new()).await.unwrap();
        assert_eq!(r.text, "after");
        std::fs::remove_dir_all(&dir).ok();
    }

    #[tokio::test]
    async fn long_replies_stream_a_few_words_at_a_time_until_cancelled() {
        let text = "word ".repeat(100);
        let b = ScriptedBackend::new(vec![text.clone(), text.clone()]);
        let mut pieces = Vec::new();
        let r = b.chat(&req(), &mut |s: &str| pieces.push(s.to_string()), &CancellationToken::new()).await.unwrap();
        assert_eq!(r.text, text);
        assert_eq!(pieces.len(), 25);
        assert!(pieces.iter().all(|p| p.split_whitespace().count() <= MAX_WORDS_PER_CHUNK));
        // A consumer that cancels from its delta callback gets nothing more.
        let cancel = CancellationToken::new();
        let mut seen = 0;
        let r = b
            .chat(
                &req(),
                &mut |_: &str| {
                    seen += 1;
                    if seen == 3 {
                        cancel.cancel();
                    }
                },
                &cancel,
            )
            .await
            .unwrap();
        assert_eq!(seen, 3);
        assert_eq!(r.finish_reason, FinishReason::Cancelled);
        assert_eq!(r.text, "word ".repeat(12));
    }

    #[tokio::test]
    async fn already_cancelled_returns_nothing() {
        let b = ScriptedBackend::new(vec!["x y z".into()]);
        let cancel = CancellationToken::new();
        cancel.cancel();
        let r = b.chat(&req(), &mut |_: &str| panic!("no delta expected"), &cancel).await.unwrap();
        assert_eq!(r.finish_reason, FinishReason::Cancelled);
        assert_eq!(r.text, "");
    }

    #[test]
    fn missing_file_is_a_script_file_error() {
        match ScriptedBackend::from_file("/nonexistent/agent/script.yaml") {
            Err(LlmError::ScriptFile { path, .. }) => assert!(path.contains("script.yaml")),
            other => panic!("expected ScriptFile, got {other:?}"),
        }
    }
}
