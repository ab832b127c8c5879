//! Each tool call drawn once (issue 49): a reply that writes its call as text streams
//! into the transcript without the call's text, and the call is drawn as its tool cell;
//! only a call the core could not read is drawn as written. Whole screens on ratatui's
//! test backend.

// Test helpers outside `#[test]` functions may panic too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use insta::assert_snapshot;
use ratatui::backend::TestBackend;
use ratatui::Terminal;
use serde_json::json;

use agent_protocol::{ApprovalMode, Event};
use agent_tui::view::draw;
use agent_tui::{App, AppConfig};

fn app() -> App {
    let mut a = App::new(AppConfig {
        model: "qwen2.5-coder-1.5b".into(),
        workspace: "/home/dev/project".into(),
        approval: ApprovalMode::Auto,
        context_tokens: 32_768,
        files: Vec::new(),
        commands: Vec::new(),
        log_file: None,
    });
    a.on_core(Event::SessionConfigured {
        run_id: "r".into(),
        model: "qwen2.5-coder-1.5b".into(),
        image: "agent-base:bookworm".into(),
        container: "agent-r-1".into(),
    });
    a
}

fn screen(a: &mut App) -> TestBackend {
    let mut term = Terminal::new(TestBackend::new(80, 18)).unwrap();
    term.draw(|f| draw(f, a)).unwrap();
    term.backend().clone()
}

/// A native call, the way a local model's chat template has it, in the pieces a model
/// streams it in: the opener split across two deltas.
const DELTAS: &[&str] = &[
    "I'll list the files first.\n<tool",
    "_call>\n{\"name\": \"bash\", ",
    "\"arguments\": {\"cmd\": \"ls -la src\"}}\n</tool",
    "_call>\n",
];

fn stream(a: &mut App, deltas: &[&str]) -> String {
    a.on_core(Event::TurnStarted { turn: 1 });
    for d in deltas {
        a.on_core(Event::AssistantDelta { turn: 1, text: (*d).into() });
        let shown = screen(a).to_string();
        assert!(!shown.contains("<tool") && !shown.contains("\"name\""), "the call's text was drawn:\n{shown}");
    }
    deltas.concat()
}

#[test]
fn a_streamed_native_call_is_drawn_once_as_its_cell() {
    let mut a = app();
    a.user_turn("what is in src?".into());
    let text = stream(&mut a, DELTAS);
    let mid = screen(&mut a);
    assert!(mid.to_string().contains("I'll list the files first."), "{mid}");
    a.on_core(Event::AssistantMessage { turn: 1, text });
    a.on_core(Event::ToolCallBegin { call_id: "1.1".into(), tool: "bash".into(), args: json!({"cmd": "ls -la src"}) });
    a.on_core(Event::ToolCallEnd {
        call_id: "1.1".into(),
        tool: "bash".into(),
        exit_code: Some(0),
        observation: "<bash_output>\nmain.rs\nlib.rs\n[exit code 0]\n</bash_output>".into(),
        duration_ms: 40,
        timed_out: false,
    });
    // The turn ends here, so that the screen shows no running clock.
    a.on_core(Event::TaskComplete);
    let b = screen(&mut a);
    let t = b.to_string();
    assert_eq!(t.matches("ls -la src").count(), 1, "the call is drawn once, as its cell:\n{t}");
    assert!(!t.contains("tool_call") && !t.contains("\"arguments\""), "{t}");
    assert_snapshot!("streamed_native_call_drawn_once", b);
}

#[test]
fn a_malformed_native_call_is_shown_as_written() {
    let mut a = app();
    a.user_turn("what is in src?".into());
    let bad =
        ["Let me check.\n<tool", "_call>\n{\"name\": \"bsah\", \"arguments\": {\"cmd\": \"ls\"}}\n", "</tool_call>\n"];
    let text = stream(&mut a, &bad);
    a.on_core(Event::AssistantMessage { turn: 1, text });
    assert!(!screen(&mut a).to_string().contains("bsah"), "hidden until the core says it could not read it");
    a.on_core(Event::ParseError {
        turn: 1,
        message: "unknown tool `bsah`; the tools are: bash, file, search, todo, scratchpad, finish".into(),
    });
    a.on_core(Event::TaskComplete);
    let b = screen(&mut a);
    let t = b.to_string();
    assert!(t.contains("┆ {\"name\": \"bsah\", \"arguments\": {\"cmd\": \"ls\"}}"), "{t}");
    assert!(t.contains("unknown tool `bsah`"), "{t}");
    assert_snapshot!("malformed_native_call_shown_raw", b);
}
