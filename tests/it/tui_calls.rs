//! Each tool call drawn once in the interactive UI (issue 49): a model with native tools
//! that writes its calls as `<tool_call>` JSON text, as a local model does. The real
//! binary in a tmux pane, the real sandbox, a scripted model.

use std::time::{Duration, Instant};

use crate::support;
use crate::tui::{container_exists, container_id, quit_and_check, Tmux};

/// What of a call's text must never reach the screen while the call is read.
fn shows_call_text(screen: &str) -> bool {
    ["<tool", "\"arguments\"", "\"name\""].iter().any(|t| screen.contains(t))
}

#[test]
fn tui_draws_a_streamed_native_call_once_and_a_malformed_one_raw() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(support::docker());
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    // The first reply streams over three seconds, a few words at a time.
    let script = support::script(
        &dir,
        "native.yaml",
        r#"
native_tools: true
replies:
  - reply: "I'll run it.\n<tool_call>\n{\"name\": \"bash\", \"arguments\": {\"cmd\": \"echo streamed-$((6*7))\"}}\n</tool_call>\n"
    delay_ms: 3000
  - "<tool_call>\n{\"name\": \"finish\", \"arguments\": {\"message\": \"Ran it once.\"}}\n</tool_call>"
  - "Trying a tool.\n<tool_call>\n{\"name\": \"bsah\", \"arguments\": {\"cmd\": \"echo raw-call-shown\"}}\n</tool_call>\n"
  - "<tool_call>\n{\"name\": \"finish\", \"arguments\": {\"message\": \"Gave up on it.\"}}\n</tool_call>"
  - reply: "Checking.\n{\"name\": \"bash\", \"arguments\": {\"cmd\": \"echo bare-$((2*3))\"}}\n"
    delay_ms: 2000
  - "<tool_call>\n{\"name\": \"finish\", \"arguments\": {\"message\": \"The bare one ran.\"}}\n</tool_call>"
"#,
    );
    let tmux = Tmux::start(&work, 110, 40);
    tmux.keys(&[
        &format!(
            "XDG_DATA_HOME={} {} --model scripted:{} --approval auto; echo TUI-EXITED rc=$?",
            dir.path().join("data").display(),
            support::agent_bin().display(),
            script.display()
        ),
        "Enter",
    ]);
    tmux.wait_text("Ask anything", Duration::from_secs(600));
    tmux.type_text("!echo cid=$(hostname)");
    tmux.keys(&["Enter"]);
    let screen = tmux.wait_for("the container id", Duration::from_secs(60), |s| container_id(s).is_some());
    let cid = container_id(&screen).unwrap_or_default();
    assert!(container_exists(&cid), "{cid} should be running");

    tmux.type_text("run it");
    tmux.keys(&["Enter"]);
    // Every screen while the reply streams: its prose, never the call's text.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut saw_prose_first = false;
    let screen = loop {
        let s = tmux.screen();
        assert!(!shows_call_text(&s), "the call's text was drawn while it streamed:\n{s}");
        if s.contains("Ran it once.") {
            break s;
        }
        saw_prose_first |= s.contains("I'll run it.") && !s.contains("streamed-42");
        assert!(Instant::now() < deadline, "the call never ran; the screen:\n{s}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(saw_prose_first, "the prose before the call streamed before the call ran");
    assert!(screen.contains("I'll run it."), "{screen}");
    assert_eq!(screen.matches("streamed-$((6*7))").count(), 1, "the call is drawn once, as its cell:\n{screen}");
    assert!(screen.contains("streamed-42"), "the cell shows the output:\n{screen}");

    tmux.type_text("try the other one");
    tmux.keys(&["Enter"]);
    let screen = tmux.wait_text("Gave up on it.", Duration::from_secs(60));
    assert!(screen.contains("Trying a tool."), "{screen}");
    assert!(screen.contains("unknown tool `bsah`"), "the error says what went wrong:\n{screen}");
    assert!(
        screen.contains(r#"{"name": "bsah", "arguments": {"cmd": "echo raw-call-shown"}}"#),
        "the call that could not be read is shown as written:\n{screen}"
    );
    assert_eq!(screen.matches("raw-call-shown").count(), 1, "{screen}");
    // The finish call that followed is its cell only.
    assert!(!screen.contains(r#""message": "Gave up"#), "{screen}");

    // A call object alone on a line (how the small models often write one) is held back
    // too: while it streams and after it ran, its command is on screen once, in its cell.
    tmux.type_text("the bare one");
    tmux.keys(&["Enter"]);
    let deadline = Instant::now() + Duration::from_secs(60);
    let screen = loop {
        let s = tmux.screen();
        assert!(s.matches("bare-$((2*3))").count() <= 1, "the call's text was drawn as prose:\n{s}");
        if s.contains("The bare one ran.") {
            break s;
        }
        assert!(Instant::now() < deadline, "the bare call never ran; the screen:\n{s}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(screen.contains("Checking."), "{screen}");
    assert_eq!(screen.matches("bare-$((2*3))").count(), 1, "drawn once, as its cell:\n{screen}");
    assert!(screen.contains("bare-6"), "the cell shows the output:\n{screen}");

    quit_and_check(&tmux, &cid);
}
