//! A real coding model, the built-in Qwen2.5-Coder-0.5B (cached by the test set-up),
//! through llama.cpp in the native tool format: it acts in a real sandbox, and every
//! turn's token ids give back exactly the prompt that was rendered and the reply.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_core::config::EpisodeLimits;
use agent_core::episode::{spawn_session, system_prompt, SessionConfig, ToolExecutor};
use agent_core::tools::{Action, ToolFormat, ToolSpecs};
use agent_llm::{ChatRequest, ChatResponse, LlmError, ModelBackend};
use agent_local::{LlamaCppBackend, LlamaCppOptions};
use agent_protocol::{ApprovalMode, EndReason, Op};
use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use crate::support;

/// The llama.cpp backend, keeping every request it was sent.
struct Recording {
    inner: Arc<LlamaCppBackend>,
    requests: Mutex<Vec<ChatRequest>>,
}

#[async_trait]
impl ModelBackend for Recording {
    fn name(&self) -> String {
        self.inner.name()
    }

    async fn chat(
        &self,
        request: &ChatRequest,
        on_delta: &mut (dyn for<'s> FnMut(&'s str) + Send),
        cancel: &CancellationToken,
    ) -> Result<ChatResponse, LlmError> {
        self.requests.lock().unwrap().push(request.clone());
        self.inner.chat(request, on_delta, cancel).await
    }

    fn context_window(&self) -> Option<u64> {
        self.inner.context_window()
    }

    fn native_tools(&self) -> bool {
        self.inner.native_tools()
    }
}

async fn qwen_05b() -> Arc<LlamaCppBackend> {
    let path = agent_llm::models::pull::ensure_builtin("qwen2.5-coder-0.5b", agent_llm::models::Progress::hidden())
        .await
        .unwrap();
    let opts = LlamaCppOptions { n_ctx: 8192, ..Default::default() };
    let backend = tokio::task::spawn_blocking(move || LlamaCppBackend::load_with(&path, &opts)).await.unwrap();
    Arc::new(backend.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qwen_coder_writes_a_file_with_native_calls_and_its_tokens_round_trip() {
    let backend = qwen_05b().await;
    assert!(backend.native_tools(), "Qwen2.5's chat template declares tools");
    let model = Arc::new(Recording { inner: backend.clone(), requests: Mutex::new(Vec::new()) });

    let sandbox = support::sandbox_with(256, false).await;
    let shell = agent_sandbox::Shell::start(&sandbox, 16 * 1024).await.unwrap();
    let specs = ToolSpecs::builtin().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let trajectory = dir.path().join("t.jsonl");
    let cfg = SessionConfig {
        limits: EpisodeLimits { max_turns: 6, max_reply_tokens: 256, temperature: Some(0.0), ..Default::default() },
        approval: ApprovalMode::Auto,
        system_prompt: system_prompt(&specs, shell.cwd(), None, ToolFormat::Native),
        end_after_first_task: true,
        run_id: "it-qwen".into(),
        episode_id: "it-qwen-0".into(),
        model_name: model.name(),
        image: "agent-base:bookworm".into(),
        container: sandbox.name().into(),
        trajectory: Some(trajectory.clone()),
        tool_format: ToolFormat::Native,
        history: Vec::new(),
        hooks: Default::default(),
        constrain_calls: true,
        repeat_notes: true,
    };
    let executor = ToolExecutor::new(shell, Duration::from_secs(60), 16 * 1024);
    let mut handle = spawn_session(cfg, model.clone(), specs, executor);
    handle
        .ops
        .send(Op::UserTurn {
            text: "Use the bash tool to run the command `echo 42 > /tmp/answer.txt`. Then call the finish tool.".into(),
        })
        .unwrap();
    let mut errors = Vec::new();
    while let Some(ev) = handle.events.recv().await {
        if let agent_protocol::Event::Error { message, .. } = ev {
            errors.push(message);
        }
    }
    let (summary, mut executor) = handle.join.await.unwrap();
    let text = std::fs::read_to_string(&trajectory).unwrap();
    assert_eq!(summary.reason, EndReason::Finished, "errors: {errors:?}\n{text}");

    // The file is there, written by the model's own calls.
    let cat = Action {
        tool: "bash".into(),
        args: serde_json::json!({"cmd": "cat /tmp/answer.txt"}).as_object().unwrap().clone(),
    };
    let out = executor.execute(&cat, &CancellationToken::new(), &mut |_| {}).await.unwrap();
    assert!(out.observation.contains("42"), "{}", out.observation);

    // Token-in/token-out: each turn's prompt ids are the rendered prompt, its sampled ids
    // the reply (and the end-of-turn token), and the loss mask covers exactly those.
    let requests = model.requests.lock().unwrap().clone();
    let turns: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["type"] == "turn")
        .collect();
    assert_eq!(turns.len(), requests.len());
    // The calls were the model's own native ones (tagged or its untagged JSON objects).
    assert!(turns.iter().all(|t| !t["actions"].as_array().unwrap().is_empty()), "{text}");
    assert!(turns.iter().all(|t| t["assistant"].as_str().unwrap().contains("\"name\"")), "{text}");
    for (turn, request) in turns.iter().zip(&requests) {
        let ids = |key: &str| -> Vec<u32> {
            turn[key].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
        };
        let prompt = backend.render_prompt(request).await.unwrap();
        assert_eq!(backend.detokenize(ids("prompt_token_ids")).await.unwrap(), prompt);
        assert!(prompt.contains("<tools>") && prompt.contains("\"name\": \"bash\""), "{prompt}");
        let completion = ids("completion_token_ids");
        let reply = backend.detokenize(completion.clone()).await.unwrap();
        let assistant = turn["assistant"].as_str().unwrap();
        assert_eq!(reply.strip_suffix("<|im_end|>").unwrap_or(&reply), assistant);
        assert_eq!(turn["loss_mask"].as_array().unwrap().len(), completion.len());
    }
    drop(executor);
    drop(sandbox);
}
