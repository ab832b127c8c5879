//! The built-in default (SmolLM2 GGUF) through llama.cpp: real inference, prefix reuse
//! across turns, token ids, interruption, and `agent perf model`.

use std::process::Command;

use agent_llm::{
    resolve_model, ChatMessage, ChatRequest, FinishReason, LocalModelOptions, ModelSpec, ResolveOptions, Role,
    SamplingParams,
};
use tokio_util::sync::CancellationToken;

use crate::support;

pub(crate) fn options() -> ResolveOptions {
    ResolveOptions {
        local: LocalModelOptions { context_tokens: Some(4096), ..Default::default() },
        ..agent_local::resolve_options()
    }
}

fn request(messages: Vec<ChatMessage>, max_tokens: u32) -> ChatRequest {
    ChatRequest {
        messages,
        sampling: SamplingParams { max_tokens: Some(max_tokens), temperature: Some(0.0), ..Default::default() },
        tools: vec![],
        grammar: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_model_reuses_the_conversation_prefix_and_reports_token_ids() {
    let model = resolve_model(&ModelSpec::Builtin("smollm2-135m".into()), &options()).await.unwrap();
    let mut messages = vec![
        ChatMessage::new(Role::System, "You are a helpful assistant that answers in one short sentence."),
        ChatMessage::new(Role::User, "What is the capital of France?"),
    ];
    let mut streamed = String::new();
    let first = model
        .chat(&request(messages.clone(), 24), &mut |d| streamed.push_str(d), &CancellationToken::new())
        .await
        .unwrap();
    assert!(!first.text.trim().is_empty());
    assert_eq!(streamed, first.text, "the streamed deltas are the reply");
    let prompt_ids = first.prompt_token_ids.clone().expect("llama.cpp reports prompt token ids");
    assert_eq!(prompt_ids.len() as u64, first.usage.prompt_tokens);
    let completion_ids = first.completion_token_ids.clone().expect("llama.cpp reports sampled token ids");
    assert_eq!(completion_ids.len() as u64, first.usage.completion_tokens);
    let stats = model.last_call_stats().expect("llama.cpp reports call stats");
    assert_eq!(stats.prompt_tokens_computed, Some(stats.prompt_tokens), "nothing was cached before");

    // The next turn repeats the whole conversation and adds to it: only the new part is
    // evaluated.
    messages.push(ChatMessage::new(Role::Assistant, first.text.clone()));
    messages.push(ChatMessage::new(Role::User, "And of Italy?"));
    let second = model.chat(&request(messages, 24), &mut |_| {}, &CancellationToken::new()).await.unwrap();
    let stats = model.last_call_stats().unwrap();
    let cached = stats.prompt_tokens_cached.unwrap();
    let computed = stats.prompt_tokens_computed.unwrap();
    assert_eq!(cached + computed, second.usage.prompt_tokens);
    assert!(cached as usize >= prompt_ids.len(), "the first prompt is reused: {stats:?}");
    assert!(computed < 40, "only the new turn is evaluated: {stats:?}");
    // The second prompt starts with the first prompt's tokens: token-in/token-out.
    let second_ids = second.prompt_token_ids.unwrap();
    assert_eq!(&second_ids[..prompt_ids.len()], &prompt_ids[..]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interrupt_stops_llamacpp_generation_within_a_token() {
    let model = resolve_model(&ModelSpec::Builtin("smollm2-135m".into()), &options()).await.unwrap();
    let mut req =
        request(vec![ChatMessage::new(Role::User, "Write a very long story about a lighthouse keeper.")], 4000);
    req.sampling.temperature = Some(0.8);
    req.sampling.seed = Some(7);
    let (r, seen) = support::chat_cancelled_after(model.as_ref(), &req, 3).await;
    assert_eq!(r.finish_reason, FinishReason::Cancelled);
    assert!(seen <= 4, "{seen} deltas after the interrupt");
    assert!(r.usage.completion_tokens <= 5, "{:?}", r.usage);
    let again = model
        .chat(&request(vec![ChatMessage::new(Role::User, "Say hi.")], 8), &mut |_| {}, &CancellationToken::new())
        .await
        .unwrap();
    assert!(again.usage.completion_tokens > 0);
}

#[test]
fn model_bench_measures_prefix_reuse_and_the_warm_prompt_cache() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("speed.json");
    let out = Command::new(support::agent_bin())
        .args(["perf", "model", "--turns", "3", "--decode-tokens", "16", "--prompt-words", "200", "--json"])
        .arg(&json)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("tokens/s") && stdout.contains("first turn, cold"), "{stdout}");
    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let episode = report["episode"].as_array().unwrap();
    assert_eq!(episode.len(), 3);
    // The real system prompt is long; turns after the first only evaluate what is new.
    let first = &episode[0];
    assert!(first["prompt_tokens"].as_u64().unwrap() > 1000, "{first}");
    assert_eq!(first["prompt_tokens_computed"], first["prompt_tokens"]);
    for turn in &episode[1..] {
        let computed = turn["prompt_tokens_computed"].as_u64().unwrap();
        assert!(computed < 400, "{turn}");
        assert!(turn["prompt_tokens"].as_u64().unwrap() > first["prompt_tokens"].as_u64().unwrap());
    }
    // The second fresh session found the first one's prompt on disk.
    let warm = &report["first_turn_warm"]["call"];
    assert!(warm["prompt_tokens_cached"].as_u64().unwrap() > 1000, "{warm}");
    assert!(report["decode"]["decode_tokens_per_sec"].as_f64().unwrap() > 0.0);
    assert!(report["prompt"]["prompt_tokens_per_sec"].as_f64().unwrap() > 0.0);
}

/// llama.cpp says only "null result" about a damaged file; the error says what is wrong.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_truncated_gguf_is_reported_as_truncated() {
    resolve_model(&ModelSpec::Builtin("smollm2-135m".into()), &options()).await.unwrap();
    let cached = agent_llm::models::models_dir().unwrap().join("smollm2-135m-instruct-q4_1.gguf");
    let bytes = std::fs::read(&cached).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cut = dir.path().join("cut.gguf");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let err = match resolve_model(&ModelSpec::parse(cut.to_str().unwrap()).unwrap(), &options()).await {
        Ok(_) => panic!("a truncated file loaded"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("truncated") && err.contains("bytes missing"), "{err}");
    let html = dir.path().join("page.gguf");
    std::fs::write(&html, "<!DOCTYPE html><html>not found</html>").unwrap();
    let err = match resolve_model(&ModelSpec::parse(html.to_str().unwrap()).unwrap(), &options()).await {
        Ok(_) => panic!("an HTML page loaded"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("not a GGUF file"), "{err}");
}
