//! Unit tests of the UI state machine.

use super::*;

fn app() -> App {
    App::new(AppConfig {
        model: "scripted:test".into(),
        workspace: "/home/me/project".into(),
        approval: ApprovalMode::Ask,
        context_tokens: 32_768,
        files: vec!["src/main.rs".into()],
        commands: Vec::new(),
        log_file: None,
    })
}

fn key(code: KeyCode) -> KeyEvent {
    KeyEvent::new(code, KeyModifiers::NONE)
}

fn ctrl(c: char) -> KeyEvent {
    KeyEvent::new(KeyCode::Char(c), KeyModifiers::CONTROL)
}

fn type_text(app: &mut App, s: &str) {
    for c in s.chars() {
        app.on_key(key(KeyCode::Char(c)));
    }
}

#[test]
fn enter_sends_a_user_turn_and_ctrl_j_adds_a_line() {
    let mut a = app();
    type_text(&mut a, "hi");
    a.on_key(ctrl('j'));
    type_text(&mut a, "there");
    let fx = a.on_key(key(KeyCode::Enter));
    assert_eq!(fx, vec![Effect::Op(Op::UserTurn { text: "hi\nthere".into() })]);
    assert!(a.busy);
    assert!(a.composer.is_empty());
}

#[test]
fn esc_interrupts_only_while_busy_and_ctrl_c_twice_quits() {
    let mut a = app();
    assert!(a.on_key(key(KeyCode::Esc)).is_empty());
    a.busy = true;
    assert_eq!(a.on_key(key(KeyCode::Esc)), vec![Effect::Op(Op::Interrupt)]);
    a.busy = false;
    type_text(&mut a, "draft");
    assert!(a.on_key(ctrl('c')).is_empty());
    assert!(a.composer.is_empty(), "the first Ctrl+C clears the input");
    assert_eq!(a.on_key(ctrl('c')), vec![Effect::Quit]);
}

#[test]
fn approvals_follow_the_mode() {
    let mut a = app();
    let req = |id: &str, tool: &str| Event::ApprovalRequest {
        call_id: id.into(),
        tool: tool.into(),
        args: serde_json::json!({"cmd": "ls"}),
        reason: None,
    };
    a.on_core(Event::ToolCallBegin {
        call_id: "1.1".into(),
        tool: "bash".into(),
        args: serde_json::json!({"cmd": "ls"}),
    });
    assert!(a.on_core(req("1.1", "bash")).is_empty());
    assert!(a.approval.is_some());
    let fx = a.on_key(key(KeyCode::Char('a')));
    assert_eq!(fx, vec![Effect::Op(Op::Approval { call_id: "1.1".into(), decision: ApprovalDecision::Approve })]);
    // "always" covers the next bash call.
    assert_eq!(
        a.on_core(req("1.2", "bash")),
        vec![Effect::Op(Op::Approval { call_id: "1.2".into(), decision: ApprovalDecision::Approve })]
    );
    a.on_key(key(KeyCode::BackTab));
    assert_eq!(a.mode, ApprovalMode::AutoEdit);
    assert_eq!(a.on_core(req("1.3", "file")).len(), 1);
    a.mode = ApprovalMode::Ask;
    a.on_core(req("1.4", "file"));
    assert_eq!(
        a.on_key(key(KeyCode::Char('n'))),
        vec![Effect::Op(Op::Approval { call_id: "1.4".into(), decision: ApprovalDecision::Deny })]
    );
}

#[test]
fn bang_runs_a_shell_command_and_slash_opens_the_popup() {
    let mut a = app();
    type_text(&mut a, "!ls -la");
    let fx = a.on_key(key(KeyCode::Enter));
    assert_eq!(fx, vec![Effect::Shell { id: "!1".into(), cmd: "ls -la".into() }]);
    type_text(&mut a, "/co");
    assert_eq!(a.popup.as_ref().map(|p| p.items.len()), Some(2));
    a.on_key(key(KeyCode::Down));
    a.on_key(key(KeyCode::Tab));
    assert_eq!(a.composer.text(), "/cost ");
    a.composer.clear();
    type_text(&mut a, "read @src/m");
    a.on_key(key(KeyCode::Tab));
    assert_eq!(a.composer.text(), "read @src/main.rs ");
}

#[test]
fn streaming_builds_one_assistant_cell_and_the_core_ends_the_turn() {
    let mut a = app();
    a.user_turn("go".into());
    a.on_core(Event::TurnStarted { turn: 1 });
    a.on_core(Event::AssistantDelta { turn: 1, text: "Hello ".into() });
    a.on_core(Event::AssistantDelta { turn: 1, text: "world".into() });
    assert!(
        matches!(a.transcript.cells().next_back(), Some(CellKind::Assistant { reply, streaming: true }) if reply.text() == "Hello world")
    );
    a.on_core(Event::AssistantMessage { turn: 1, text: "Hello world".into() });
    a.on_core(Event::ToolCallBegin {
        call_id: "1.1".into(),
        tool: "finish".into(),
        args: serde_json::json!({"message": "ok"}),
    });
    assert!(a.busy);
    a.on_core(Event::ToolCallEnd {
        call_id: "1.1".into(),
        tool: "finish".into(),
        exit_code: Some(0),
        observation: String::new(),
        duration_ms: 1,
        timed_out: false,
    });
    assert!(a.busy, "the core says when the turn's work is over");
    a.on_key(key(KeyCode::Esc));
    assert_eq!(a.hint.as_deref(), Some("interrupting…"));
    a.on_core(Event::TaskComplete);
    assert!(!a.busy);
    assert_eq!(a.hint, None, "the interrupt hint goes with the turn");
}

#[test]
fn a_running_shell_command_shows_output_live_and_esc_stops_it() {
    let mut a = app();
    type_text(&mut a, "!for i in 1 2 3; do echo n$i; sleep 1; done");
    assert_eq!(
        a.on_key(key(KeyCode::Enter)),
        vec![Effect::Shell { id: "!1".into(), cmd: "for i in 1 2 3; do echo n$i; sleep 1; done".into() }]
    );
    a.shell_output("!1", "n1\n");
    a.shell_output("!1", "n2\n");
    assert!(matches!(a.transcript.cells().next_back(), Some(CellKind::Tool(t)) if t.output == "n1\nn2\n"));
    assert!(a.shell_running());
    assert_eq!(a.on_key(key(KeyCode::Esc)), vec![Effect::CancelShells]);
    a.shell_done("!1", "n1\nn2\n".into(), None, true, 1500);
    assert!(!a.shell_running());
    assert!(matches!(a.transcript.cells().next_back(), Some(CellKind::Tool(t)) if t.status == ToolStatus::Interrupted));
    let fx = a.user_turn("next".into());
    assert!(matches!(&fx[..], [Effect::Op(Op::UserTurn { text })] if text.contains("I interrupted it")), "{fx:?}");
}

#[test]
fn shell_results_reach_the_model_with_the_next_message() {
    let mut a = app();
    type_text(&mut a, "!ls");
    a.on_key(key(KeyCode::Enter));
    a.shell_done("!1", "a.txt\n".into(), Some(0), false, 5);
    let fx = a.user_turn("what is there?".into());
    match &fx[..] {
        [Effect::Op(Op::UserTurn { text })] => {
            assert!(
                text.contains("I ran `ls`") && text.contains("a.txt") && text.ends_with("what is there?"),
                "{text}"
            );
            assert_eq!(strip_shell_notes(text), "what is there?");
        }
        other => panic!("{other:?}"),
    }
    // Only once.
    assert_eq!(a.user_turn("again".into()), vec![Effect::Op(Op::UserTurn { text: "again".into() })]);
}

#[test]
fn replaying_a_saved_session_rebuilds_the_transcript() {
    use crate::store::Record;
    let mut a = app();
    let records = vec![
        Record::Meta { id: "x".into(), cwd: "/w".into(), model: "m".into(), started_unix: 0 },
        Record::User { text: "hello".into() },
        Record::Event { event: Event::AssistantMessage { turn: 1, text: "Hi there.".into() } },
        Record::Event {
            event: Event::ToolCallBegin {
                call_id: "1.1".into(),
                tool: "bash".into(),
                args: serde_json::json!({"cmd": "ls"}),
            },
        },
        Record::Event {
            event: Event::ToolCallEnd {
                call_id: "1.1".into(),
                tool: "bash".into(),
                exit_code: Some(0),
                observation: "<bash_output>\nfile\n</bash_output>".into(),
                duration_ms: 3,
                timed_out: false,
            },
        },
    ];
    crate::runner::replay(&mut a, &records);
    let cells: Vec<&CellKind> = a.transcript.cells().collect();
    assert!(matches!(cells[1], CellKind::User { text } if text == "hello"));
    assert!(matches!(cells[2], CellKind::Assistant { reply, streaming: false } if reply.text() == "Hi there."));
    assert!(
        matches!(cells[3], CellKind::Tool(t) if t.status == ToolStatus::Done { exit_code: Some(0), duration_ms: 3, timed_out: false })
    );
    assert!(!a.busy);
}

#[test]
fn at_completion_sees_files_created_since_start_and_the_message_carries_them() {
    let dir = tempfile::tempdir().unwrap();
    let mut a = App::new(AppConfig {
        model: "scripted:test".into(),
        workspace: dir.path().display().to_string(),
        approval: ApprovalMode::Ask,
        context_tokens: 32_768,
        files: Vec::new(),
        commands: Vec::new(),
        log_file: None,
    });
    std::fs::write(dir.path().join("notes.txt"), "remember the kumquat\n").unwrap();
    // The list is at most two seconds old when the popup opens.
    a.files_listed = Instant::now().checked_sub(FILES_REFRESH * 2).unwrap();
    type_text(&mut a, "read @no");
    assert_eq!(a.popup.as_ref().and_then(|p| p.current()), Some("@notes.txt"));
    a.on_key(key(KeyCode::Tab));
    let fx = a.on_key(key(KeyCode::Enter));
    match &fx[..] {
        [Effect::Op(Op::UserTurn { text })] => {
            assert!(text.starts_with("read @notes.txt"), "{text}");
            assert!(
                text.contains("<attached_file path=\"notes.txt\">\nremember the kumquat\n</attached_file>"),
                "{text}"
            );
            assert_eq!(strip_shell_notes(text), "read @notes.txt ");
        }
        other => panic!("{other:?}"),
    }
    let shown: Vec<String> = a
        .transcript
        .cells()
        .filter_map(|c| match c {
            CellKind::Info { text } => Some(text.clone()),
            _ => None,
        })
        .collect();
    assert!(shown.iter().any(|t| t.starts_with("attached @notes.txt")), "{shown:?}");
}

#[test]
fn a_large_paste_stays_a_placeholder_in_the_transcript() {
    let mut a = app();
    let big: String = (0..40).map(|i| format!("line {i}\n")).collect();
    a.on_paste(&big);
    let fx = a.on_key(key(KeyCode::Enter));
    assert!(matches!(&fx[..], [Effect::Op(Op::UserTurn { text })] if text.contains("line 39")));
    assert!(matches!(a.transcript.cells().find(|c| matches!(c, CellKind::User { .. })),
        Some(CellKind::User { text }) if text.starts_with("[pasted") && !text.contains("line 39")));
}

#[test]
fn shift_tab_reaches_plan_mode_and_tells_the_core() {
    let mut a = app();
    a.mode = ApprovalMode::Auto;
    assert_eq!(a.on_key(key(KeyCode::BackTab)), vec![Effect::Op(Op::SetApprovalMode { mode: ApprovalMode::Plan })]);
    assert_eq!((a.mode, a.plan_return), (ApprovalMode::Plan, ApprovalMode::Auto));
    // Leaving plan mode: the core goes back to asking the UI about everything.
    assert_eq!(a.on_key(key(KeyCode::BackTab)), vec![Effect::Op(Op::SetApprovalMode { mode: ApprovalMode::Ask })]);
    assert_eq!(a.mode, ApprovalMode::Ask);
    // Between the UI's own modes the core hears nothing.
    assert!(a.on_key(key(KeyCode::BackTab)).is_empty());
    assert_eq!(a.mode, ApprovalMode::AutoEdit);
}

#[test]
fn an_accepted_plan_starts_work_in_the_previous_mode() {
    let mut a = app();
    a.mode = ApprovalMode::AutoEdit;
    a.on_key(key(KeyCode::BackTab));
    a.on_key(key(KeyCode::BackTab));
    assert_eq!((a.mode, a.plan_return), (ApprovalMode::Plan, ApprovalMode::Auto));
    // In plan mode even a file read the UI would let through in auto asks when the core
    // says so, and bash is never auto-approved.
    let bash = Event::ApprovalRequest {
        call_id: "1.1".into(),
        tool: "bash".into(),
        args: serde_json::json!({"cmd": "ls"}),
        reason: Some("plan mode: every command asks".into()),
    };
    assert!(a.on_core(bash).is_empty());
    assert!(a.approval.is_some());
    a.on_key(key(KeyCode::Char('y')));
    a.on_core(Event::PlanProposed { plan: "1. Edit main.rs".into() });
    a.on_core(Event::TaskComplete);
    assert_eq!(a.pending_plan.as_deref(), Some("1. Edit main.rs"));
    let fx = a.on_key(key(KeyCode::Char('y')));
    assert_eq!(a.mode, ApprovalMode::Auto);
    assert!(a.pending_plan.is_none());
    assert_eq!(fx[0], Effect::Op(Op::SetApprovalMode { mode: ApprovalMode::Ask }));
    assert!(matches!(&fx[1], Effect::Op(Op::UserTurn { text }) if text == crate::plan_mode::PLAN_ACCEPTED), "{fx:?}");
    assert!(a.busy);
}

#[test]
fn a_rejected_plan_keeps_plan_mode_for_the_feedback() {
    let mut a = app();
    a.on_key(key(KeyCode::BackTab));
    a.on_key(key(KeyCode::BackTab));
    a.on_key(key(KeyCode::BackTab));
    assert_eq!(a.mode, ApprovalMode::Plan);
    a.on_core(Event::PlanProposed { plan: "1. Delete everything".into() });
    a.on_core(Event::TaskComplete);
    assert!(a.on_key(key(KeyCode::Char('n'))).is_empty());
    assert_eq!((a.mode, a.pending_plan.clone()), (ApprovalMode::Plan, None));
    type_text(&mut a, "keep the tests");
    let fx = a.on_key(key(KeyCode::Enter));
    assert!(matches!(&fx[0], Effect::Op(Op::UserTurn { text }) if text == "keep the tests"), "{fx:?}");
}

#[test]
fn a_hook_that_asks_is_asked_even_in_auto_mode() {
    let mut a = app();
    a.mode = ApprovalMode::Auto;
    let req = Event::ApprovalRequest {
        call_id: "1.1".into(),
        tool: "bash".into(),
        args: serde_json::json!({"cmd": "git push"}),
        reason: Some("the PreToolUse hook asks about pushes".into()),
    };
    assert!(a.on_core(req).is_empty());
    assert_eq!(a.approval.as_ref().and_then(|p| p.reason.as_deref()), Some("the PreToolUse hook asks about pushes"));
}

#[test]
fn esc_esc_lists_checkpoints_newest_first_and_asks_what_to_restore() {
    let mut a = app();
    a.user_turn("first change".into());
    a.checkpoint_before_last_message(Some("c1".into()));
    a.on_core(Event::TaskStarted { history_len: 0 });
    a.on_core(Event::TaskComplete);
    a.user_turn("second change".into());
    a.checkpoint_before_last_message(Some("c2".into()));
    a.on_core(Event::TaskStarted { history_len: 4 });
    a.on_core(Event::TaskComplete);
    assert_eq!(a.checkpoints.iter().map(|c| (c.cells, c.history)).collect::<Vec<_>>(), [(1, Some(0)), (2, Some(4))]);
    // One Esc does nothing; two in a row open the list.
    a.on_key(key(KeyCode::Esc));
    assert!(a.popup.is_none());
    a.on_key(key(KeyCode::Esc));
    let p = a.popup.clone().unwrap();
    assert_eq!(p.kind, crate::popup::PopupKind::Rewind);
    assert_eq!(p.items[0].0, "second change");
    // The older one, then "conversation only".
    a.on_key(key(KeyCode::Down));
    assert!(a.on_key(key(KeyCode::Enter)).is_empty());
    assert_eq!(a.popup.as_ref().unwrap().kind, crate::popup::PopupKind::RewindMode(0));
    a.on_key(key(KeyCode::Down));
    let fx = a.on_key(key(KeyCode::Enter));
    assert_eq!(fx, vec![Effect::Rewind { index: 0, mode: crate::rewind::RewindMode::Conversation }]);
    // While the agent works, rewinding waits.
    a.busy = true;
    a.open_rewind();
    assert!(a.popup.is_none() && a.hint.as_deref().unwrap_or_default().contains("Esc interrupts"));
}

/// The calls of the newest reply: (tool, drawn raw).
fn reply_calls(a: &App) -> Vec<(Option<String>, bool)> {
    match a.transcript.cells().rev().find(|c| matches!(c, CellKind::Assistant { .. })) {
        Some(CellKind::Assistant { reply, .. }) => reply.calls().map(|c| (c.tool(), c.shown)).collect(),
        _ => Vec::new(),
    }
}

#[test]
fn a_parse_error_shows_the_calls_as_written_and_a_call_that_runs_is_its_cell_only() {
    let mut a = app();
    a.user_turn("go".into());
    a.on_core(Event::TurnStarted { turn: 1 });
    let text = "<tool_call>\n{\"name\": \"bsah\"}\n</tool_call>\n<tool_call>\n{\"name\": \"bash\", \"arguments\": {\"cmd\": \"ls\"}}\n</tool_call>";
    for piece in text.split_inclusive('\n') {
        a.on_core(Event::AssistantDelta { turn: 1, text: piece.into() });
    }
    a.on_core(Event::AssistantMessage { turn: 1, text: text.into() });
    let hidden = vec![(Some("bsah".to_string()), false), (Some("bash".to_string()), false)];
    assert_eq!(reply_calls(&a), hidden);
    a.on_core(Event::ParseError { turn: 1, message: "unknown tool `bsah`".into() });
    assert_eq!(reply_calls(&a), vec![(Some("bsah".to_string()), true), (Some("bash".to_string()), true)]);
    a.on_core(Event::ToolCallBegin {
        call_id: "1.1".into(),
        tool: "bash".into(),
        args: serde_json::json!({"cmd": "ls"}),
    });
    assert_eq!(reply_calls(&a), vec![(Some("bsah".to_string()), true), (Some("bash".to_string()), false)]);
    // The next turn's calls start hidden; the old reply keeps its raw call.
    a.on_core(Event::TurnStarted { turn: 2 });
    a.on_core(Event::AssistantDelta { turn: 2, text: "<bash>\ncmd: ls\n</bash>".into() });
    assert_eq!(reply_calls(&a), vec![(Some("bash".to_string()), false)]);
}

#[test]
fn an_interrupted_reply_draws_what_it_held_back() {
    let mut a = app();
    a.user_turn("go".into());
    a.on_core(Event::TurnStarted { turn: 1 });
    a.on_core(Event::AssistantDelta { turn: 1, text: "Compare a <tool".into() });
    let prose = |a: &App| match a.transcript.cells().next_back() {
        Some(CellKind::Assistant { reply, .. }) => reply.prose(),
        _ => String::new(),
    };
    assert_eq!(prose(&a), "Compare a ");
    a.on_core(Event::Interrupted);
    let reply = a.transcript.cells().rev().find(|c| matches!(c, CellKind::Assistant { .. }));
    assert!(
        matches!(reply, Some(CellKind::Assistant { reply, streaming: false }) if reply.prose() == "Compare a <tool")
    );
}
