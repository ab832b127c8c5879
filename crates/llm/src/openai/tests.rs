//! Unit tests of the OpenAI-compatible client that need no server.

use std::time::Duration;

use super::collector::Collector;
use super::request::f32_json;
use super::retry::trim_body;
use super::stream::{map_finish_reason, token_ids};
use super::{is_loopback, OpenAiBackend, OpenAiConfig};
use crate::{ChatMessage, ChatRequest, FinishReason, LlmError, Role, SamplingParams, ToolCall, ToolDefinition};

fn backend(stream: bool) -> OpenAiBackend {
    let mut cfg = OpenAiConfig::new("http://127.0.0.1:9/v1/", "m");
    cfg.stream = stream;
    OpenAiBackend::new(cfg).unwrap()
}

#[test]
fn endpoint_joins_cleanly() {
    assert_eq!(OpenAiConfig::new("http://h:1/v1/", "m").endpoint(), "http://h:1/v1/chat/completions");
    assert_eq!(OpenAiConfig::new("http://h:1/v1", "m").endpoint(), "http://h:1/v1/chat/completions");
}

#[test]
fn rejects_bad_urls_and_missing_keys() {
    assert!(OpenAiBackend::new(OpenAiConfig::new("ftp://x/v1", "m")).is_err());
    assert!(OpenAiBackend::new(OpenAiConfig::new("127.0.0.1:8080/v1", "m")).is_err());
    assert!(OpenAiBackend::new(OpenAiConfig::new("http://x/v1", " ")).is_err());
    let mut cfg = OpenAiConfig::new("http://x/v1", "m");
    cfg.api_key_env = Some("AGENT_TEST_SURELY_UNSET_KEY_VAR_1234".into());
    match OpenAiBackend::new(cfg) {
        Err(LlmError::MissingApiKey { var }) => {
            assert_eq!(var, "AGENT_TEST_SURELY_UNSET_KEY_VAR_1234")
        }
        other => panic!("expected MissingApiKey, got {other:?}"),
    }
}

#[test]
fn request_body_fields() {
    let req = ChatRequest {
        messages: vec![ChatMessage::new(Role::System, "sys"), ChatMessage::new(Role::User, "hi")],
        sampling: SamplingParams {
            max_tokens: Some(64),
            temperature: Some(0.7),
            top_p: Some(0.95),
            top_k: None,
            seed: Some(42),
            stop: vec!["</end>".into()],
        },
        tools: vec![],
        grammar: None,
    };
    let body = backend(true).request_body(&req);
    assert_eq!(body["model"], "m");
    assert_eq!(body["messages"][0]["role"], "system");
    assert_eq!(body["messages"][1]["content"], "hi");
    assert_eq!(body["max_tokens"], 64);
    assert_eq!(body["temperature"].as_f64(), Some(0.7));
    assert_eq!(body["top_p"].as_f64(), Some(0.95));
    assert_eq!(body["seed"], 42);
    assert_eq!(body["stop"][0], "</end>");
    assert!(body.get("top_k").is_none());
    assert!(body.get("return_token_ids").is_none());
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"]["include_usage"], true);

    let req = ChatRequest {
        messages: vec![],
        sampling: SamplingParams { top_k: Some(20), ..Default::default() },
        tools: vec![],
        grammar: None,
    };
    let body = backend(false).request_body(&req);
    assert_eq!(body["top_k"], 20);
    assert_eq!(body["stream"], false);
    assert!(body.get("stream_options").is_none());
    assert!(body.get("stop").is_none());
    assert!(body.get("temperature").is_none());
}

#[test]
fn tools_calls_and_results_go_in_the_apis_form() {
    let call = ToolCall { id: "c7".into(), name: "bash".into(), arguments: serde_json::json!({"cmd": "ls"}) };
    let req = ChatRequest {
        messages: vec![
            ChatMessage::new(Role::User, "hi"),
            ChatMessage { tool_calls: vec![call], ..ChatMessage::new(Role::Assistant, "") },
            ChatMessage::tool_result("c7", "a.txt"),
            // A call the model wrote as text: the API never saw its id.
            ChatMessage::new(Role::Assistant, "<tool_call>{...}</tool_call>"),
            ChatMessage::tool_result("call_2_1", "b.txt"),
        ],
        sampling: SamplingParams::default(),
        tools: vec![ToolDefinition {
            name: "bash".into(),
            description: "Run.".into(),
            parameters: serde_json::json!({"type": "object"}),
        }],
        grammar: None,
    };
    let body = backend(false).request_body(&req);
    assert_eq!(body["tools"][0]["type"], "function");
    assert_eq!(body["tools"][0]["function"]["name"], "bash");
    assert_eq!(body["tools"][0]["function"]["parameters"]["type"], "object");
    let m = &body["messages"];
    assert_eq!(m[1]["tool_calls"][0]["id"], "c7");
    assert_eq!(m[1]["tool_calls"][0]["function"]["arguments"], "{\"cmd\":\"ls\"}");
    assert_eq!(m[2]["role"], "tool");
    assert_eq!(m[2]["tool_call_id"], "c7");
    assert_eq!(m[4]["role"], "user");
    assert_eq!(m[4]["content"], "<tool_response>\nb.txt\n</tool_response>");
    assert!(m[4].get("tool_call_id").is_none());
}

#[test]
fn streamed_tool_calls_are_joined_by_index() {
    let mut out = Collector::new(1);
    out.push_tool_calls(
        &serde_json::json!([{"index": 0, "id": "a", "function": {"name": "bash", "arguments": "{\"cm"}}]),
    );
    out.push_tool_calls(&serde_json::json!([{"index": 0, "function": {"arguments": "d\": \"ls\"}"}}]));
    out.push_tool_calls(&serde_json::json!([{"index": 1, "function": {"name": "finish", "arguments": "not json"}}]));
    // Out-of-range indices are ignored rather than allocated for.
    out.push_tool_calls(&serde_json::json!([{"index": 1000000, "function": {"name": "x"}}]));
    let resp = out.finish(FinishReason::Stop, &mut |_| {});
    assert_eq!(resp.tool_calls.len(), 2);
    assert_eq!(resp.tool_calls[0].id, "a");
    assert_eq!(resp.tool_calls[0].arguments, serde_json::json!({"cmd": "ls"}));
    assert_eq!(resp.tool_calls[1].id, "call_2");
    assert_eq!(resp.tool_calls[1].arguments, serde_json::json!("not json"));
}

#[test]
fn backoff_grows_and_is_capped() {
    let mut cfg = OpenAiConfig::new("http://127.0.0.1:9/v1", "m");
    cfg.retry.initial_backoff = Duration::from_millis(500);
    cfg.retry.max_backoff = Duration::from_secs(4);
    let b = OpenAiBackend::new(cfg).unwrap().cfg.retry;
    let d0 = b.backoff(0);
    assert!(d0 >= Duration::from_millis(500) && d0 <= Duration::from_millis(625), "{d0:?}");
    let d1 = b.backoff(1);
    assert!(d1 >= Duration::from_secs(1) && d1 <= Duration::from_millis(1250), "{d1:?}");
    for a in 3..40 {
        assert!(b.backoff(a) <= Duration::from_secs(4));
    }
}

#[test]
fn trim_body_limits_and_flattens() {
    assert_eq!(trim_body("  {\"error\":\n\"x\"}  "), "{\"error\": \"x\"}");
    let long = "é".repeat(500);
    let t = trim_body(&long);
    assert_eq!(t.chars().count(), 301);
    assert!(t.ends_with('…'));
    assert_eq!(trim_body(""), "(empty body)");
}

#[test]
fn helpers() {
    assert_eq!(map_finish_reason("stop"), FinishReason::Stop);
    assert_eq!(map_finish_reason("length"), FinishReason::Length);
    assert_eq!(map_finish_reason("tool_calls"), FinishReason::Stop);
    assert_eq!(map_finish_reason("content_filter"), FinishReason::Other);
    assert_eq!(token_ids(Some(&serde_json::json!([1, 2, 3]))), Some(vec![1, 2, 3]));
    assert_eq!(token_ids(Some(&serde_json::json!([1, "x"]))), None);
    assert_eq!(token_ids(None), None);
    assert!(is_loopback(&reqwest::Url::parse("http://localhost:1/v1").unwrap()));
    assert!(is_loopback(&reqwest::Url::parse("http://127.0.0.2:1/v1").unwrap()));
    assert!(is_loopback(&reqwest::Url::parse("http://[::1]:1/v1").unwrap()));
    assert!(!is_loopback(&reqwest::Url::parse("https://api.openai.com/v1").unwrap()));
    assert_eq!(f32_json(0.7).as_f64(), Some(0.7));
}

#[test]
fn collector_wraps_reasoning() {
    let mut seen = Vec::new();
    let mut on_delta = |s: &str| seen.push(s.to_string());
    let mut c = Collector::new(5);
    c.push_reasoning("hmm", &mut on_delta);
    c.push_reasoning(" ok", &mut on_delta);
    c.push_content("Answer", &mut on_delta);
    let r = c.finish(FinishReason::Stop, &mut on_delta);
    assert_eq!(r.text, "<think>hmm ok</think>Answer");
    assert_eq!(seen.concat(), r.text);
    assert_eq!(r.usage.prompt_tokens, 5);

    let mut c = Collector::new(0);
    c.push_reasoning("only thinking", &mut |_: &str| {});
    let r = c.finish(FinishReason::Cancelled, &mut |_: &str| {});
    assert_eq!(r.text, "<think>only thinking</think>");
}
