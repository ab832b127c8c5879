//! The API in process over a backend that records what it was asked: what a client
//! sends is bounded before it reaches the engine.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use agent_llm::{ChatRequest, ChatResponse, FinishReason, LlmError, ModelBackend};
use agent_protocol::TokenUsage;

use super::generate::clamp_max_tokens;
use super::{serve, ServeOptions};

/// Answers `ok`, keeping each request's `max_tokens`; its context holds 64 tokens.
struct Recording(Mutex<Vec<Option<u32>>>);

#[async_trait]
impl ModelBackend for Recording {
    fn name(&self) -> String {
        "recording".into()
    }

    fn context_window(&self) -> Option<u64> {
        Some(64)
    }

    async fn chat(
        &self,
        request: &ChatRequest,
        _on_delta: &mut (dyn for<'s> FnMut(&'s str) + Send),
        _cancel: &CancellationToken,
    ) -> Result<ChatResponse, LlmError> {
        if let Ok(mut seen) = self.0.lock() {
            seen.push(request.sampling.max_tokens);
        }
        Ok(ChatResponse {
            text: "ok".into(),
            finish_reason: FinishReason::Stop,
            usage: TokenUsage::default(),
            completion_token_ids: None,
            prompt_token_ids: None,
            decode_tokens_per_sec: None,
            tool_calls: Vec::new(),
        })
    }
}

#[tokio::test]
async fn a_huge_max_tokens_reaches_the_engine_bounded_by_its_context() {
    let backend = Arc::new(Recording(Mutex::new(Vec::new())));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1/chat/completions", listener.local_addr().unwrap());
    let options = ServeOptions { model_id: "m".into(), listen_host: "127.0.0.1".into(), ..Default::default() };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve(listener, backend.clone(), options, async move {
        let _ = stopped.await;
    }));
    let client = reqwest::Client::new();
    for field in ["max_tokens", "max_completion_tokens"] {
        let body = serde_json::json!({"messages": [{"role": "user", "content": "hi"}], field: 4_000_000_000u32});
        let r = client.post(&url).json(&body).send().await.unwrap();
        assert_eq!(r.status().as_u16(), 200, "{}", r.text().await.unwrap());
    }
    let honest = serde_json::json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 10});
    assert_eq!(client.post(&url).json(&honest).send().await.unwrap().status().as_u16(), 200);
    assert_eq!(*backend.0.lock().unwrap(), vec![Some(64), Some(64), Some(10)]);
    let _ = stop.send(());
    server.await.unwrap().unwrap();
}

#[test]
fn max_tokens_is_bounded_only_where_the_window_is_known() {
    let mut s = agent_llm::SamplingParams { max_tokens: Some(u32::MAX), ..Default::default() };
    clamp_max_tokens(&mut s, None);
    assert_eq!(s.max_tokens, Some(u32::MAX), "an API bounds it itself");
    clamp_max_tokens(&mut s, Some(1 << 40));
    assert_eq!(s.max_tokens, Some(u32::MAX));
    clamp_max_tokens(&mut s, Some(4096));
    assert_eq!(s.max_tokens, Some(4096));
    let mut unset = agent_llm::SamplingParams::default();
    clamp_max_tokens(&mut unset, Some(4096));
    assert_eq!(unset.max_tokens, None);
}
