//! The episode loop in-process: stop conditions, interrupts and approvals, with a
//! scripted model and a real sandbox.

use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_core::config::EpisodeLimits;
use agent_core::episode::{spawn_session, EpisodeSummary, SessionConfig, SessionHandle, ToolExecutor};
use agent_core::tools::{ToolFormat, ToolSpecs};
use agent_llm::Role;
use agent_llm::ScriptedBackend;
use agent_protocol::{ApprovalDecision, ApprovalMode, EndReason, Event, Op};

use crate::support::{self, TestSandbox};

/// A session on a real sandbox, driven by ops and read through its events.
pub(crate) struct Harness {
    pub(crate) handle: SessionHandle,
    _sandbox: TestSandbox,
    _dir: tempfile::TempDir,
}

async fn start(script_yaml: &str, limits: EpisodeLimits, approval: ApprovalMode, headless: bool) -> Harness {
    let dir = tempfile::tempdir().unwrap();
    let script = support::script(&dir, "s.yaml", script_yaml);
    let model = Arc::new(ScriptedBackend::from_file(&script).unwrap());
    start_with(dir, model, limits, approval, headless, ToolFormat::Text).await
}

async fn start_with(
    dir: tempfile::TempDir,
    model: Arc<ScriptedBackend>,
    limits: EpisodeLimits,
    approval: ApprovalMode,
    headless: bool,
    tool_format: ToolFormat,
) -> Harness {
    start_custom(dir, model, |cfg| {
        cfg.limits = limits;
        cfg.approval = approval;
        cfg.end_after_first_task = headless;
        cfg.tool_format = tool_format;
    })
    .await
}

/// A session of `model` in a fresh sandbox, its settings changed by `edit`.
pub(crate) async fn start_custom(
    dir: tempfile::TempDir,
    model: Arc<ScriptedBackend>,
    edit: impl FnOnce(&mut SessionConfig),
) -> Harness {
    let sandbox = support::sandbox_with(256, false).await;
    let shell = agent_sandbox::Shell::start(&sandbox, 16 * 1024).await.unwrap();
    let executor = ToolExecutor::new(shell, Duration::from_secs(60), 16 * 1024);
    let mut cfg = SessionConfig {
        limits: EpisodeLimits::default(),
        approval: ApprovalMode::Auto,
        system_prompt: "test".into(),
        end_after_first_task: true,
        run_id: "it".into(),
        episode_id: "it".into(),
        model_name: "scripted".into(),
        image: "agent-base:bookworm".into(),
        container: sandbox.name().into(),
        trajectory: Some(dir.path().join("t.jsonl")),
        tool_format: ToolFormat::Text,
        history: Vec::new(),
        hooks: Default::default(),
        constrain_calls: true,
        repeat_notes: true,
    };
    edit(&mut cfg);
    let handle = spawn_session(cfg, model, ToolSpecs::builtin().unwrap(), executor);
    Harness { handle, _sandbox: sandbox, _dir: dir }
}

impl Harness {
    pub(crate) fn send(&self, op: Op) {
        self.handle.ops.send(op).unwrap();
    }

    pub(crate) async fn next_matching(&mut self, mut pred: impl FnMut(&Event) -> bool) -> Event {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let ev = tokio::time::timeout_at(deadline.into(), self.handle.events.recv())
                .await
                .expect("timed out waiting for an event")
                .expect("the session ended early");
            if pred(&ev) {
                return ev;
            }
        }
    }

    pub(crate) async fn finish(self) -> (EpisodeSummary, Vec<Event>) {
        let (summary, rest, _dir) = self.finish_keeping_dir().await;
        (summary, rest)
    }

    /// Like [`Self::finish`], keeping the temporary folder (and the trajectory in it).
    async fn finish_keeping_dir(mut self) -> (EpisodeSummary, Vec<Event>, tempfile::TempDir) {
        let mut rest = Vec::new();
        while let Some(ev) = self.handle.events.recv().await {
            rest.push(ev);
        }
        let (summary, _) = self.handle.join.await.unwrap();
        (summary, rest, self._dir)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consecutive_parse_failures_end_the_episode() {
    let script = "- I think I should look around.\n- \"<bash>\\ntimeout_secs: [1\\n</bash>\"\n- Still no action.\n";
    let h =
        start(script, EpisodeLimits { max_parse_failures: 3, ..Default::default() }, ApprovalMode::Auto, true).await;
    h.send(Op::UserTurn { text: "do it".into() });
    let (summary, events) = h.finish().await;
    assert_eq!(summary.reason, EndReason::ParseFailures);
    assert_eq!(summary.turns, 3);
    assert_eq!(events.iter().filter(|e| matches!(e, Event::ParseError { .. })).count(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_budget_and_turn_limit_stop_the_episode() {
    let script = "- \"<bash>\\ncmd: echo 1\\n</bash>\"\n- \"<bash>\\ncmd: echo 2\\n</bash>\"\n- \"<bash>\\ncmd: echo 3\\n</bash>\"\n";
    let h = start(script, EpisodeLimits { token_budget: 5, ..Default::default() }, ApprovalMode::Auto, true).await;
    h.send(Op::UserTurn { text: "go".into() });
    let (summary, _) = h.finish().await;
    assert_eq!(summary.reason, EndReason::TokenBudget);
    assert_eq!(summary.turns, 1);
    let h = start(script, EpisodeLimits { max_turns: 2, ..Default::default() }, ApprovalMode::Auto, true).await;
    h.send(Op::UserTurn { text: "go".into() });
    let (summary, _) = h.finish().await;
    assert_eq!(summary.reason, EndReason::MaxTurns);
    assert_eq!(summary.turns, 2);
}

/// A conversation that outgrows the context even with old observations elided and long
/// messages shortened ends `context_exhausted`, not `token_budget`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overlong_conversation_ends_context_exhausted() {
    let script = "- \"<bash>\\ncmd: yes x | head -c 12000\\n</bash>\"\n- \"<bash>\\ncmd: echo never\\n</bash>\"\n";
    let limits = EpisodeLimits { context_tokens: 600, max_reply_tokens: 100, ..Default::default() };
    let h = start(script, limits, ApprovalMode::Auto, true).await;
    h.send(Op::UserTurn { text: "go".into() });
    let (summary, events) = h.finish().await;
    assert_eq!(summary.reason, EndReason::ContextExhausted, "{events:?}");
    assert_eq!(summary.turns, 1);
    assert!(
        events.iter().any(|e| matches!(e, Event::Error { message, .. } if message.contains("context window"))),
        "{events:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wall_clock_limit_stops_a_long_command() {
    let script = "- \"<bash>\\ncmd: sleep 100\\n</bash>\"\n";
    let h = start(script, EpisodeLimits { wall_clock_secs: 3, ..Default::default() }, ApprovalMode::Auto, true).await;
    let t = Instant::now();
    h.send(Op::UserTurn { text: "go".into() });
    let (summary, _) = h.finish().await;
    assert_eq!(summary.reason, EndReason::WallClock);
    assert!(t.elapsed() < Duration::from_secs(30), "{:?}", t.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interrupts_stop_generation_and_commands_and_the_session_goes_on() {
    let script = r#"
- reply: "<bash>\ncmd: echo never\n</bash> and a lot more text that streams slowly"
  delay_ms: 20000
- "<bash>\ncmd: sleep 300\n</bash>"
- "<bash>\ncmd: echo back\n</bash>\n<finish>\nmessage: done\n</finish>"
"#;
    let mut h = start(script, EpisodeLimits::default(), ApprovalMode::Auto, false).await;
    h.send(Op::UserTurn { text: "first".into() });
    h.next_matching(|e| matches!(e, Event::AssistantDelta { .. })).await;
    let t = Instant::now();
    h.send(Op::Interrupt);
    h.next_matching(|e| matches!(e, Event::Interrupted)).await;
    assert!(t.elapsed() < Duration::from_secs(5), "generation stopped after {:?}", t.elapsed());
    h.send(Op::UserTurn { text: "second".into() });
    h.next_matching(|e| matches!(e, Event::ToolCallBegin { .. })).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let t = Instant::now();
    h.send(Op::Interrupt);
    let end = h.next_matching(|e| matches!(e, Event::ToolCallEnd { .. })).await;
    assert!(t.elapsed() < Duration::from_secs(10), "command stopped after {:?}", t.elapsed());
    let Event::ToolCallEnd { observation, .. } = end else { unreachable!() };
    assert!(observation.contains("interrupted"), "{observation}");
    h.next_matching(|e| matches!(e, Event::Interrupted)).await;
    h.send(Op::UserTurn { text: "third".into() });
    let end = h.next_matching(|e| matches!(e, Event::ToolCallEnd { .. })).await;
    let Event::ToolCallEnd { observation, .. } = end else { unreachable!() };
    assert!(observation.contains("back"), "{observation}");
    h.send(Op::Shutdown);
    let (summary, _) = h.finish().await;
    assert_eq!(summary.reason, EndReason::Shutdown);
    assert_eq!(summary.finish_message.as_deref(), Some("done"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_mode_waits_for_approval_and_reports_denials() {
    let script = "- \"<bash>\\ncmd: touch /tmp/denied\\n</bash>\"\n- \"<bash>\\ncmd: test -e /tmp/denied && echo exists || echo absent\\n</bash>\"\n- \"<finish>\\nmessage: ok\\n</finish>\"\n";
    let mut h = start(script, EpisodeLimits::default(), ApprovalMode::Ask, true).await;
    h.send(Op::UserTurn { text: "go".into() });
    let Event::ApprovalRequest { call_id, .. } = h.next_matching(|e| matches!(e, Event::ApprovalRequest { .. })).await
    else {
        unreachable!()
    };
    h.send(Op::Approval { call_id, decision: ApprovalDecision::Deny });
    let Event::ToolCallEnd { observation, .. } = h.next_matching(|e| matches!(e, Event::ToolCallEnd { .. })).await
    else {
        unreachable!()
    };
    assert!(observation.contains("denied"), "{observation}");
    let Event::ApprovalRequest { call_id, .. } = h.next_matching(|e| matches!(e, Event::ApprovalRequest { .. })).await
    else {
        unreachable!()
    };
    h.send(Op::Approval { call_id, decision: ApprovalDecision::ApproveAlways });
    let Event::ToolCallEnd { observation, .. } = h.next_matching(|e| matches!(e, Event::ToolCallEnd { .. })).await
    else {
        unreachable!()
    };
    assert!(observation.contains("absent"), "{observation}");
    let (summary, _) = h.finish().await;
    assert_eq!(summary.reason, EndReason::Finished);
}

/// Native tool calls returned as structured data (as OpenAI or Anthropic return them):
/// the tools go out as schemas, each call is answered by a tool message with its id and
/// the bare output, a malformed call gets its parse error as its answer, and the
/// trajectory keeps the structured calls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_calls_are_answered_by_tool_messages() {
    let dir = tempfile::tempdir().unwrap();
    let script = support::script(
        &dir,
        "native.yaml",
        "- tool_calls:\n    - {name: bash, arguments: {cmd: 'echo hi > /tmp/n.txt && cat /tmp/n.txt'}}\n    - {name: bash, arguments: {timeout_secs: 5}}\n\
         - tool_calls:\n    - {name: finish, arguments: {message: done}}\n",
    );
    let model = Arc::new(ScriptedBackend::from_file(&script).unwrap());
    assert!(agent_llm::ModelBackend::native_tools(&*model));
    let h =
        start_with(dir, model.clone(), EpisodeLimits::default(), ApprovalMode::Auto, true, ToolFormat::Native).await;
    h.send(Op::UserTurn { text: "write n.txt".into() });
    let (summary, _, dir) = h.finish_keeping_dir().await;
    let trajectory = dir.path().join("t.jsonl");
    assert_eq!(summary.reason, EndReason::Finished);
    assert_eq!(summary.finish_message.as_deref(), Some("done"));
    let requests = model.requests();
    assert_eq!(requests.len(), 2);
    assert!(requests[0].tools.iter().any(|t| t.name == "bash" && t.parameters["required"][0] == "cmd"));
    let m = &requests[1].messages;
    let n = m.len();
    assert_eq!(m[n - 3].role, Role::Assistant);
    assert_eq!(m[n - 3].tool_calls.len(), 2);
    assert_eq!(m[n - 2].role, Role::Tool);
    assert_eq!(m[n - 2].tool_call_id.as_deref(), Some("call_1"));
    assert!(m[n - 2].content.starts_with("hi\n"), "{:?}", m[n - 2].content);
    assert!(!m[n - 2].content.contains("<bash_output>"), "{:?}", m[n - 2].content);
    assert_eq!(m[n - 1].role, Role::Tool);
    assert_eq!(m[n - 1].tool_call_id.as_deref(), Some("call_2"));
    assert!(m[n - 1].content.contains("<parse_error>") && m[n - 1].content.contains("cmd"), "{}", m[n - 1].content);
    let text = std::fs::read_to_string(trajectory).unwrap();
    let turn: serde_json::Value = serde_json::from_str(text.lines().nth(1).unwrap()).unwrap();
    assert_eq!(turn["tool_calls"][0]["name"], "bash");
    assert_eq!(turn["actions"].as_array().unwrap().len(), 1);
    assert_eq!(turn["parse_errors"].as_array().unwrap().len(), 1);
}

/// A local model's native calls stay in its text (`<tool_call>` JSON, as llama.cpp
/// returns them): they are parsed there, the reply goes back verbatim, and each result is
/// a tool message; a reply with no call gets the native format's own error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_calls_in_the_text_are_parsed_and_answered() {
    let dir = tempfile::tempdir().unwrap();
    let call = "<tool_call>\n{\"name\": \"bash\", \"arguments\": {\"cmd\": \"echo one\"}}\n</tool_call>";
    let finish = "<tool_call>\n{\"name\": \"finish\", \"arguments\": {\"message\": \"ok\"}}\n</tool_call>";
    let model = Arc::new(ScriptedBackend::new(vec!["I will just talk.".into(), call.into(), finish.into()]));
    let h =
        start_with(dir, model.clone(), EpisodeLimits::default(), ApprovalMode::Auto, true, ToolFormat::Native).await;
    h.send(Op::UserTurn { text: "say one".into() });
    let (summary, _) = h.finish().await;
    assert_eq!(summary.reason, EndReason::Finished);
    let requests = model.requests();
    let m = &requests[1].messages;
    let last = m.last().unwrap();
    assert_eq!(last.role, Role::User);
    assert!(last.content.contains("your reply called no tool"), "{}", last.content);
    assert!(last.content.contains("<tool_call>"), "{}", last.content);
    let m = &requests[2].messages;
    let n = m.len();
    assert_eq!(m[n - 2].content, call, "the reply goes back verbatim");
    assert!(m[n - 2].tool_calls.is_empty());
    assert_eq!(m[n - 1].role, Role::Tool);
    assert_eq!(m[n - 1].tool_call_id.as_deref(), Some("call_2_1"));
    assert!(m[n - 1].content.starts_with("one\n"), "{:?}", m[n - 1].content);
}

/// A small model that sends the same call again and again, each time with a different
/// result (a file rewritten, a todo item added twice), is warned after three identical
/// replies, with the finish call written in its own format, and stopped after six.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_reply_again_and_again_is_warned_then_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let call = "<tool_call>\n{\"name\": \"bash\", \"arguments\": {\"cmd\": \"date +%s%N\"}}\n</tool_call>";
    let model = Arc::new(ScriptedBackend::new(vec![call.into(); 8]));
    let h =
        start_with(dir, model.clone(), EpisodeLimits::default(), ApprovalMode::Auto, true, ToolFormat::Native).await;
    h.send(Op::UserTurn { text: "print the time".into() });
    let (summary, _) = h.finish().await;
    assert_eq!(summary.reason, EndReason::Repetition);
    assert_eq!(summary.turns, 6);
    let requests = model.requests();
    let warned = |i: usize| requests[i].messages.iter().any(|m| m.content.contains("<loop_warning>"));
    assert!(!warned(2), "warned before the third identical reply");
    let warning = requests[3].messages.last().unwrap();
    assert_eq!(warning.role, Role::User);
    assert!(warning.content.contains("<loop_warning>"), "{}", warning.content);
    assert!(
        warning.content.contains("<tool_call>\n{\"name\": \"finish\", \"arguments\": {\"message\":"),
        "{}",
        warning.content
    );
}
