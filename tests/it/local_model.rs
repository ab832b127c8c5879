//! Local inference on real weights: a generated tiny Qwen3 through mistral.rs, and the
//! built-in default (SmolLM2 GGUF, through llama.cpp) running a real task.

use std::process::Command;

use agent_llm::{ChatMessage, ChatRequest, FinishReason, LocalModelOptions, ModelBackend, Role, SamplingParams};
use agent_local::tiny_qwen3::{write_tiny_qwen3, TinyQwen3Config};
use agent_local::MistralRsBackend;
use tokio_util::sync::CancellationToken;

use crate::support;

fn tiny_model() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    // Room for the real system prompt, which this small vocabulary spends many tokens on.
    let cfg = TinyQwen3Config { max_position_embeddings: 32_768, ..Default::default() };
    write_tiny_qwen3(dir.path(), &cfg).unwrap();
    dir
}

fn request(max_tokens: u32) -> ChatRequest {
    ChatRequest {
        messages: vec![
            ChatMessage::new(Role::System, "You are terse."),
            ChatMessage::new(Role::User, "List the files in /app."),
        ],
        sampling: SamplingParams { max_tokens: Some(max_tokens), temperature: Some(0.0), ..Default::default() },
        tools: vec![],
        grammar: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tiny_qwen3_loads_offline_and_greedy_decoding_is_deterministic() {
    let dir = tiny_model();
    let opts = LocalModelOptions { force_cpu: true, ..Default::default() };
    let model = MistralRsBackend::load(dir.path(), &opts).await.unwrap();
    let cancel = CancellationToken::new();
    let mut deltas = 0;
    let a = model.chat(&request(24), &mut |_| deltas += 1, &cancel).await.unwrap();
    let b = model.chat(&request(24), &mut |_| {}, &cancel).await.unwrap();
    assert!(a.usage.completion_tokens > 0, "{a:?}");
    assert!(deltas > 0);
    assert_eq!(a.text, b.text, "greedy decoding differs between two runs");
    assert!(a.usage.completion_tokens <= 24);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interrupt_stops_generation_and_the_model_stays_usable() {
    let dir = tiny_model();
    let opts = LocalModelOptions { force_cpu: true, ..Default::default() };
    let model = MistralRsBackend::load(dir.path(), &opts).await.unwrap();
    let mut req = request(100_000);
    req.sampling.temperature = Some(1.0);
    let (r, seen) = support::chat_cancelled_after(&model, &req, 3).await;
    assert_eq!(r.finish_reason, FinishReason::Cancelled);
    assert!(seen <= 4, "{seen} deltas after the interrupt");
    let again = model.chat(&request(8), &mut |_| {}, &CancellationToken::new()).await.unwrap();
    assert!(again.usage.completion_tokens > 0);
}

#[test]
fn served_tiny_qwen3_runs_an_episode_through_the_openai_backend() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(support::docker());
    let dir = tiny_model();
    let (mut server, url) = support::start_server(dir.path().to_str().unwrap(), "tiny");
    let cfg = dir.path().join("agent.toml");
    std::fs::write(&cfg, "[episode]\nmax_reply_tokens = 32\ntemperature = 0.0\n").unwrap();
    let out = Command::new(support::agent_bin())
        .arg("--config")
        .arg(&cfg)
        .args(["run", "--json", "--no-network", "--max-turns", "2", "--model", &format!("openai:{url}#tiny"), "hi"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let events = support::json_events(&stdout);
    let messages: Vec<&serde_json::Value> = events.iter().filter(|e| e["event"] == "assistant_message").collect();
    assert!(!messages.is_empty(), "{stdout}");
    let end = events.iter().find(|e| e["event"] == "episode_end").expect("no episode_end");
    // A random model will not finish the task; the episode must still end cleanly.
    assert!(["max_turns", "parse_failures", "finished"].contains(&end["reason"].as_str().unwrap()), "{end}");
    unsafe {
        // SAFETY: plain kill(2) on our own child's pid.
        libc::kill(server.id() as i32, libc::SIGTERM);
    }
    server.wait().unwrap();
}

#[test]
fn default_model_runs_the_hello_world_task() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(support::docker());
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("agent.toml");
    // Three short turns: replies are parsed and observations go back to the model.
    std::fs::write(&cfg, "[episode]\nmax_reply_tokens = 64\n").unwrap();
    let out = Command::new(support::agent_bin())
        .arg("--config")
        .arg(&cfg)
        // The task's own agent timeout (360 s) can be tight on a loaded machine; this test
        // checks the episode mechanics, not speed (`agent perf model` measures that).
        .args(["run", "--max-turns", "3", "--timeout-secs", "1800", "--model", "smollm2-135m", "--task"])
        .arg(support::tb1_task("hello-world"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("{stdout}");
    assert!(stdout.contains("tokens/s decode"), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    // A 135M model rarely solves it: the episode must end for a reported reason (finish,
    // the turn limit, or three replies in a row without a valid action) after real turns.
    let finished = stdout.contains("✔ finished:");
    let stopped_after_feedback = stdout.contains("── turn 2 ──") && stdout.contains("■ stopped: ");
    assert!(finished || stopped_after_feedback, "{stdout}");
}
