//! The episode loop in-process: stop conditions, interrupts and approvals, with a
//! scripted model and a real sandbox.

use std::sync::Arc;
use std::time::{Duration, Instant};

use agent::agent::{spawn_session, EpisodeSummary, SessionConfig, SessionHandle, ToolExecutor};
use agent::config::EpisodeLimits;
use agent::llm::ScriptedBackend;
use agent::protocol::{ApprovalDecision, ApprovalMode, EndReason, Event, Op};
use agent::tools::ToolSpecs;

use crate::support::{self, TestSandbox};

struct Harness {
    handle: SessionHandle,
    _sandbox: TestSandbox,
    _dir: tempfile::TempDir,
}

async fn start(script_yaml: &str, limits: EpisodeLimits, approval: ApprovalMode, headless: bool) -> Harness {
    let dir = tempfile::tempdir().unwrap();
    let script = support::script(&dir, "s.yaml", script_yaml);
    let model = Arc::new(ScriptedBackend::from_file(&script).unwrap());
    let sandbox = support::sandbox_with(256, false).await;
    let shell = agent::sandbox::Shell::start(&sandbox, 16 * 1024).await.unwrap();
    let executor = ToolExecutor::new(shell, Duration::from_secs(60), 16 * 1024);
    let cfg = SessionConfig {
        limits,
        approval,
        system_prompt: "test".into(),
        end_after_first_task: headless,
        run_id: "it".into(),
        episode_id: "it".into(),
        model_name: "scripted".into(),
        image: "agent-base:bookworm".into(),
        container: sandbox.name().into(),
        trajectory: Some(dir.path().join("t.jsonl")),
    };
    let handle = spawn_session(cfg, model, ToolSpecs::builtin().unwrap(), executor);
    Harness { handle, _sandbox: sandbox, _dir: dir }
}

impl Harness {
    fn send(&self, op: Op) {
        self.handle.ops.send(op).unwrap();
    }

    async fn next_matching(&mut self, pred: impl Fn(&Event) -> bool) -> Event {
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

    async fn finish(mut self) -> (EpisodeSummary, Vec<Event>) {
        let mut rest = Vec::new();
        while let Some(ev) = self.handle.events.recv().await {
            rest.push(ev);
        }
        let (summary, _) = self.handle.join.await.unwrap();
        (summary, rest)
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
