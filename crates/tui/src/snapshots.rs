//! Snapshot tests of whole screens on ratatui's test backend.

use insta::assert_snapshot;
use ratatui::backend::TestBackend;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::Terminal;
use serde_json::json;

use agent_protocol::{ApprovalMode, Event, TokenUsage};

use super::app::{App, AppConfig};
use super::view::draw;

fn app(mode: ApprovalMode) -> App {
    let mut a = App::new(AppConfig {
        model: "scripted:/tmp/demo.yaml".into(),
        workspace: "/home/dev/project".into(),
        approval: mode,
        context_tokens: 32_768,
        files: vec!["src/main.rs".into(), "src/lib.rs".into()],
        commands: Vec::new(),
        log_file: None,
    });
    a.on_core(Event::SessionConfigured {
        run_id: "r".into(),
        model: "scripted:/tmp/demo.yaml".into(),
        image: "agent-base:bookworm".into(),
        container: "agent-r-1".into(),
    });
    a
}

fn screen(a: &mut App, w: u16, h: u16) -> TestBackend {
    let mut term = Terminal::new(TestBackend::new(w, h)).unwrap();
    term.draw(|f| draw(f, a)).unwrap();
    term.backend().clone()
}

fn type_text(a: &mut App, s: &str) {
    for c in s.chars() {
        a.on_key(KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE));
    }
}

fn text_of(b: &TestBackend) -> String {
    b.to_string()
}

#[test]
fn empty_start_screen() {
    let mut a = app(ApprovalMode::Auto);
    let b = screen(&mut a, 80, 16);
    assert!(text_of(&b).contains("workspace  /home/dev/project → /workspace"));
    assert_snapshot!("start_screen", b);
}

#[test]
fn streamed_answer_with_a_code_block() {
    let mut a = app(ApprovalMode::Auto);
    a.user_turn("How do I print in Rust?".into());
    a.on_core(Event::TurnStarted { turn: 1 });
    for piece in [
        "# Printing\n\nUse the ",
        "`println!` macro:\n\n",
        "```rust\nfn main() {\n",
        "    println!(\"hi\");\n}\n```\n",
        "\n- it adds a newline\n- `print!` does not",
    ] {
        a.on_core(Event::AssistantDelta { turn: 1, text: piece.into() });
    }
    let b = screen(&mut a, 80, 22);
    let t = text_of(&b);
    assert!(t.contains("╭─ rust") && t.contains("println!(\"hi\");") && t.contains("• it adds a newline"), "{t}");
    assert!(t.contains("working"), "the composer shows that a turn runs");
    assert_snapshot!("streamed_answer", b);
}

fn bash_call(a: &mut App, id: &str, cmd: &str) {
    a.on_core(Event::ToolCallBegin { call_id: id.into(), tool: "bash".into(), args: json!({ "cmd": cmd }) });
}

#[test]
fn running_and_finished_bash_cells() {
    let mut a = app(ApprovalMode::Auto);
    a.user_turn("build it".into());
    a.on_core(Event::TurnStarted { turn: 1 });
    a.on_core(Event::AssistantMessage { turn: 1, text: "Building.\n<bash>\ncmd: make\n</bash>".into() });
    bash_call(&mut a, "1.1", "make");
    let out: String = (1..=20).map(|i| format!("cc -c file{i}.c\n")).collect();
    a.on_core(Event::ToolCallEnd {
        call_id: "1.1".into(),
        tool: "bash".into(),
        exit_code: Some(0),
        observation: format!("<bash_output>\n{out}</bash_output>"),
        duration_ms: 2300,
        timed_out: false,
    });
    bash_call(&mut a, "1.2", "sleep 300");
    a.on_core(Event::ToolCallOutput { call_id: "1.2".into(), chunk: "waiting...\n".into() });
    let b = screen(&mut a, 80, 24);
    let t = text_of(&b);
    assert!(t.contains("… 12 more lines (Ctrl+O to expand)") && t.contains("exit 0 · 2.3s"), "{t}");
    assert!(t.contains("running… (Esc to interrupt)") && t.contains("waiting..."), "{t}");
    assert_snapshot!("bash_cells", b);
    // Ctrl+O unfolds the output.
    a.on_key(KeyEvent::new(KeyCode::Char('o'), KeyModifiers::CONTROL));
    let t = text_of(&screen(&mut a, 80, 40));
    assert!(t.contains("cc -c file1.c") && !t.contains("more lines"), "{t}");
}

#[test]
fn edit_diff() {
    let mut a = app(ApprovalMode::Auto);
    a.on_core(Event::ToolCallBegin {
        call_id: "2.1".into(),
        tool: "file".into(),
        args: json!({"action": "edit", "path": "/workspace/src/main.rs", "old_string": "fn main() {\n    println!(\"hello\");\n}\n", "new_string": "fn main() {\n    println!(\"hello, world\");\n}\n"}),
    });
    a.on_core(Event::ToolCallEnd {
        call_id: "2.1".into(),
        tool: "file".into(),
        exit_code: Some(0),
        observation: "<file_output>\nedited /workspace/src/main.rs\n</file_output>".into(),
        duration_ms: 40,
        timed_out: false,
    });
    let b = screen(&mut a, 80, 16);
    let t = text_of(&b);
    assert!(t.contains("-     println!(\"hello\");") && t.contains("+     println!(\"hello, world\");"), "{t}");
    assert_snapshot!("edit_diff", b);
}

#[test]
fn approval_prompt() {
    let mut a = app(ApprovalMode::Ask);
    a.user_turn("clean up".into());
    bash_call(&mut a, "1.1", "rm -rf build/");
    a.on_core(Event::ApprovalRequest {
        call_id: "1.1".into(),
        tool: "bash".into(),
        args: json!({"cmd": "rm -rf build/"}),
        reason: None,
    });
    let b = screen(&mut a, 80, 14);
    let t = text_of(&b);
    assert!(
        t.contains("allow bash?") && t.contains("run `rm -rf build/`") && t.contains("waiting for approval"),
        "{t}"
    );
    assert_snapshot!("approval_prompt", b);
}

#[test]
fn slash_popup() {
    let mut a = app(ApprovalMode::Auto);
    type_text(&mut a, "/");
    let b = screen(&mut a, 80, 20);
    let t = text_of(&b);
    assert!(t.contains("/help") && t.contains("/quit") && t.contains("/compact"), "{t}");
    assert_snapshot!("slash_popup", b);
}

#[test]
fn narrow_layout_of_40_columns() {
    let mut a = app(ApprovalMode::AutoEdit);
    a.user_turn("Show the files, please, with sizes and 日本語 names".into());
    a.on_core(Event::TurnStarted { turn: 1 });
    a.on_core(Event::AssistantMessage {
        turn: 1,
        text: "Listing the **workspace** now; this line is long enough to wrap.\n<bash>\ncmd: ls -la\n</bash>".into(),
    });
    bash_call(&mut a, "1.1", "ls -la /workspace/some/deeply/nested/directory");
    a.on_core(Event::ToolCallEnd {
        call_id: "1.1".into(),
        tool: "bash".into(),
        exit_code: Some(2),
        observation: "<bash_output>\nls: cannot access '/workspace/some/deeply/nested/directory': No such file or directory\n</bash_output>".into(),
        duration_ms: 15,
        timed_out: false,
    });
    a.on_core(Event::TokenUsage {
        turn: 1,
        last: TokenUsage { prompt_tokens: 2900, completion_tokens: 100 },
        total: TokenUsage { prompt_tokens: 2900, completion_tokens: 100 },
        decode_tokens_per_sec: None,
    });
    type_text(&mut a, "next: a message long enough to wrap in the box");
    let b = screen(&mut a, 40, 26);
    let t = text_of(&b);
    assert!(t.contains("日本語") && t.contains("exit 2"), "{t}");
    // The status line does not fit in 40 columns and is cut, not wrapped.
    assert!(t.contains("…\""), "{t}");
    assert_snapshot!("narrow_40_columns", b);
}

#[test]
fn a_long_prompt_shows_its_progress() {
    let mut a = app(ApprovalMode::Auto);
    a.user_turn("Summarise the repository.".into());
    a.on_core(Event::TurnStarted { turn: 1 });
    a.on_core(Event::PromptProgress { turn: 1, evaluated: 1024, total: 3100 });
    let b = screen(&mut a, 80, 12);
    let t = text_of(&b);
    assert!(t.contains("reading the prompt 1,024/3,100 tokens"), "{t}");
    assert!(t.contains("ctx 3.1k/32.8k"), "the context counter shows the prompt: {t}");
    assert_snapshot!("prompt_progress", b);
}

#[test]
fn a_table_and_links_in_an_answer() {
    let mut a = app(ApprovalMode::Auto);
    a.user_turn("Compare the crates.".into());
    a.on_core(Event::TurnStarted { turn: 1 });
    let md = "## Crates\n\n| crate | lines | role |\n|---|--:|:-:|\n| core | 9000 | loop |\n| tui | 3900 | UI |\n\n\
              See [the docs](https://docs.rs/ratatui) and <https://example.com>.";
    a.on_core(Event::AssistantMessage { turn: 1, text: md.into() });
    a.on_core(Event::TaskComplete);
    let b = screen(&mut a, 80, 18);
    let t = text_of(&b);
    assert!(t.contains("crate │ lines │ role") && t.contains("core  │  9000 │ loop"), "{t}");
    assert!(t.contains("the docs (https://docs.rs/ratatui)") && !t.contains("## Crates"), "{t}");
    assert_snapshot!("table_and_links", b);
}

#[test]
fn custom_commands_in_the_slash_popup() {
    use super::custom_commands::{parse, Scope};
    let mut a = app(ApprovalMode::Auto);
    a.commands = vec![
        parse("review", "---\ndescription: Review the diff\nargument-hint: [file]\n---\nReview $1.", Scope::Project),
        parse("release-notes", "# Draft release notes from the log\n", Scope::User),
    ];
    type_text(&mut a, "/re");
    let b = screen(&mut a, 80, 20);
    let t = text_of(&b);
    assert!(t.contains("/resume") && t.contains("/review") && t.contains("Review the diff [file] (project)"), "{t}");
    assert!(t.contains("/release-notes") && t.contains("(user)"), "{t}");
    assert_snapshot!("custom_commands_popup", b);
}

#[test]
fn plan_mode_prompt() {
    let mut a = app(ApprovalMode::Auto);
    a.set_mode(ApprovalMode::Plan);
    a.user_turn("add a --verbose flag".into());
    a.on_core(Event::TurnStarted { turn: 1 });
    let plan = "Plan:\n1. Add `verbose: bool` to `Args` in src/main.rs.\n2. Print each step when it is set.\n3. Run `cargo test`.";
    a.on_core(Event::AssistantMessage { turn: 1, text: plan.into() });
    a.on_core(Event::PlanProposed { plan: plan.into() });
    a.on_core(Event::TaskComplete);
    let b = screen(&mut a, 80, 18);
    let t = text_of(&b);
    assert!(t.contains("plan ready") && t.contains("in auto mode?") && t.contains("keep planning"), "{t}");
    assert!(t.contains("· plan ·") && t.contains("cargo test"), "{t}");
    assert_snapshot!("plan_mode_prompt", b);
}

#[test]
fn approval_asked_by_a_hook() {
    let mut a = app(ApprovalMode::Auto);
    a.user_turn("publish".into());
    bash_call(&mut a, "1.1", "git push origin main");
    a.on_core(Event::ApprovalRequest {
        call_id: "1.1".into(),
        tool: "bash".into(),
        args: json!({"cmd": "git push origin main"}),
        reason: Some("pushes need a human".into()),
    });
    let b = screen(&mut a, 80, 12);
    let t = text_of(&b);
    assert!(t.contains("allow bash? (pushes need a human)") && t.contains("run `git push origin main`"), "{t}");
    assert_snapshot!("approval_asked_by_a_hook", b);
}

#[test]
fn mcp_servers_listed() {
    use agent_core::mcp::McpServerStatus;
    let mut a = app(ApprovalMode::Ask);
    let servers = vec![
        McpServerStatus {
            name: "time".into(),
            transport: "stdio: /opt/mcp/bin/mcp-server-time --local-timezone UTC".into(),
            state: "running".into(),
            tools: vec!["time__get_current_time".into(), "time__convert_time".into()],
        },
        McpServerStatus {
            name: "broken".into(),
            transport: "stdio: /opt/mcp/bin/missing".into(),
            state: "failed to start: it exited with code 127 (exec: no such file)".into(),
            tools: Vec::new(),
        },
    ];
    a.info(super::mcp_view::describe(&servers));
    let b = screen(&mut a, 80, 14);
    let t = text_of(&b);
    assert!(t.contains("MCP servers (2):") && t.contains("2 tools: time__get_current_time"), "{t}");
    assert!(t.contains("broken · stdio: /opt/mcp/bin/missing · failed to start"), "{t}");
    assert_snapshot!("mcp_servers_listed", b);
}

#[test]
fn rewind_popup() {
    let mut a = app(ApprovalMode::Auto);
    for (i, msg) in ["write hello.txt with a greeting", "now translate it to French"].iter().enumerate() {
        a.user_turn(msg.to_string());
        a.checkpoint_before_last_message(Some(format!("c{i}")));
        a.on_core(Event::TaskComplete);
    }
    // A fixed clock keeps the snapshot stable.
    for c in &mut a.checkpoints {
        c.at = "12:00".into();
    }
    a.open_rewind();
    let b = screen(&mut a, 80, 16);
    let t = text_of(&b);
    assert!(t.contains("now translate it to French") && t.contains("before this message"), "{t}");
    assert_snapshot!("rewind_popup", b);
    a.on_key(KeyEvent::new(KeyCode::Enter, KeyModifiers::NONE));
    let t = text_of(&screen(&mut a, 80, 16));
    assert!(t.contains("code and conversation") && t.contains("conversation only") && t.contains("code only"), "{t}");
}

/// What the model and a tool print reaches the screen escaped: an OSC 52 sequence (it
/// would write the user's clipboard) and bidi and zero-width characters are shown as
/// `\u{…}`, in the reply, the tool's output and the approval prompt, and no cell holds
/// an ESC, BEL or bidi control.
#[test]
fn escape_sequences_and_bidi_text_from_the_model_and_tools_are_drawn_escaped() {
    let osc52 = "\x1b]52;c;aGk=\x07";
    let mut a = app(ApprovalMode::Ask);
    a.user_turn("show it".into());
    a.on_core(Event::TurnStarted { turn: 1 });
    a.on_core(Event::AssistantMessage {
        turn: 1,
        text: format!("Copied{osc52} done. Open `invoice\u{202e}fdp.exe`\u{200b}.\n<bash>\ncmd: cat notes\n</bash>"),
    });
    bash_call(&mut a, "1.1", "cat notes");
    a.on_core(Event::ToolCallEnd {
        call_id: "1.1".into(),
        tool: "bash".into(),
        exit_code: Some(0),
        observation: format!("<bash_output>\nout{osc52}put\r\u{2066}isolated\u{2069}\n</bash_output>"),
        duration_ms: 100,
        timed_out: false,
    });
    a.on_core(Event::ApprovalRequest {
        call_id: "1.2".into(),
        tool: "bash".into(),
        args: json!({ "cmd": format!("printf '{osc52}'") }),
        reason: None,
    });
    let b = screen(&mut a, 100, 20);
    let t = text_of(&b);
    assert!(t.contains("Copied\\u{1b}]52;c;aGk=\\u{7} done"), "{t}");
    assert!(t.contains("invoice\\u{202e}fdp.exe") && t.contains("\\u{200b}"), "{t}");
    assert!(t.contains("out\\u{1b}]52;c;aGk=\\u{7}put\\u{d}\\u{2066}isolated\\u{2069}"), "{t}");
    assert!(t.contains("run `printf '\\u{1b}]52;c;aGk=\\u{7}'`"), "{t}");
    let raw: String = b.buffer().content().iter().map(|c| c.symbol()).collect();
    assert!(!raw.chars().any(super::sanitize::is_unsafe), "a control or bidi character reached a cell");
    assert_snapshot!("escaped_control_and_bidi_text", b);
}

#[test]
fn skills_listed() {
    use agent_core::skills::{Skill, SkillSource, Skills};
    let mut a = app(ApprovalMode::Ask);
    let skill = |name: &str, source: SkillSource, shown: &str, description: &str| Skill {
        name: name.into(),
        description: description.into(),
        allowed_tools: if name == "changelog" { vec!["Bash(python3:*)".into(), "Read".into()] } else { Vec::new() },
        body: String::new(),
        source,
        dir: "/x".into(),
        shown_path: shown.into(),
        files: Vec::new(),
        sandbox_dir: None,
    };
    let skills = Skills {
        skills: vec![
            skill("changelog", SkillSource::Project, ".claude/skills/changelog/SKILL.md", "Add an entry to CHANGELOG.md."),
            skill("pdf-report", SkillSource::User, "~/.claude/skills/pdf-report/SKILL.md", "Turn Markdown into a PDF."),
        ],
        notices: vec![
            "the skill ~/.claude/skills/changelog/SKILL.md is not used: a skill named `changelog` was already found in .claude/skills/changelog/SKILL.md".into(),
        ],
    };
    a.info(skills.describe());
    let b = screen(&mut a, 80, 16);
    let t = text_of(&b);
    assert!(t.contains("skills (2):") && t.contains("changelog · project · .claude/skills/changelog/SKILL.md"), "{t}");
    assert!(t.contains("pdf-report · user · ~/.claude/skills/pdf-report/SKILL.md"), "{t}");
    assert_snapshot!("skills_listed", b);
}
