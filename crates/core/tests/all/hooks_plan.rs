//! Hooks and plan mode in the episode loop, with a scripted model and a real sandbox:
//! what a hook blocks does not run and the model reads why, a hook hears each call as
//! JSON, a hanging hook is killed, a Stop hook sends the agent back to work, and plan
//! mode refuses file changes until the plan is accepted.

use std::path::Path;
use std::sync::Arc;

use serde_json::{json, Value};

use agent_core::hooks::{HookSettings, Hooks};
use agent_llm::ScriptedBackend;
use agent_protocol::{ApprovalDecision, ApprovalMode, EndReason, Event, Op};

use crate::episode_loop::{start_custom, Harness};
use crate::support::{self, notices, observations};

fn hooks(dir: &Path, settings: Value) -> Hooks {
    let mut s = HookSettings::default();
    s.merge_json(&settings.to_string(), &dir.join("settings.json")).unwrap();
    Hooks::new(s, Some(dir.to_path_buf()))
}

async fn session(script: &str, edit: impl FnOnce(&mut agent_core::episode::SessionConfig, &Path)) -> Harness {
    let dir = tempfile::tempdir().unwrap();
    let model = Arc::new(ScriptedBackend::from_file(support::script(&dir, "s.yaml", script)).unwrap());
    let path = dir.path().to_path_buf();
    start_custom(dir, model, |cfg| edit(cfg, &path)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pre_tool_use_hook_that_exits_2_blocks_bash_and_the_model_reads_why() {
    let out = tempfile::tempdir().unwrap();
    let seen = out.path().join("post.json");
    // The PreToolUse hook refuses any command that touches a file; the PostToolUse hook
    // records what it is given.
    let pre = r#"input=$(cat); case "$input" in *touch*) echo "touch is not allowed here" >&2; exit 2;; esac"#;
    let post = format!("cat > {}", seen.display());
    let settings = json!({"hooks": {
        "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": pre}]}],
        "PostToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": post}]}],
    }});
    let script = "- \"<bash>\\ncmd: touch /tmp/hooked\\n</bash>\"\n\
                  - \"<bash>\\ncmd: test -e /tmp/hooked && echo exists || echo absent\\n</bash>\"\n\
                  - \"<finish>\\nmessage: ok\\n</finish>\"\n";
    let h = session(script, |cfg, dir| cfg.hooks = hooks(dir, settings)).await;
    h.send(Op::UserTurn { text: "go".into() });
    let (summary, events) = h.finish().await;
    assert_eq!(summary.reason, EndReason::Finished);
    let obs = observations(&events);
    assert!(obs[0].contains("blocked by a PreToolUse hook") && obs[0].contains("touch is not allowed here"), "{obs:?}");
    assert!(obs[1].contains("absent"), "the blocked command ran: {obs:?}");
    // The model read the reason: it is in the conversation it was sent.
    assert!(summary.messages.iter().any(|m| m.content.contains("touch is not allowed here")));
    // The PostToolUse hook ran for the call that ran (not for the blocked one), with its JSON.
    let post: Value = serde_json::from_str(&std::fs::read_to_string(&seen).unwrap()).unwrap();
    assert_eq!(post["hook_event_name"], "PostToolUse");
    assert_eq!(post["tool_name"], "Bash");
    assert_eq!(post["tool_input"]["command"], "test -e /tmp/hooked && echo exists || echo absent");
    assert_eq!(post["tool_input"]["cmd"], post["tool_input"]["command"]);
    assert!(post["tool_response"]["output"].as_str().unwrap().contains("absent"), "{post}");
    assert_eq!(post["tool_response"]["exit_code"], 0);
    assert_eq!(post["session_id"], "it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_hook_is_killed_at_its_timeout_and_the_call_goes_on() {
    let settings =
        json!({"hooks": {"PreToolUse": [{"hooks": [{"type": "command", "command": "sleep 300", "timeout": 1}]}]}});
    let script = "- \"<bash>\\ncmd: echo still-ran\\n</bash>\"\n- \"<finish>\\nmessage: ok\\n</finish>\"\n";
    let h = session(script, |cfg, dir| cfg.hooks = hooks(dir, settings)).await;
    let started = std::time::Instant::now();
    h.send(Op::UserTurn { text: "go".into() });
    let (summary, events) = h.finish().await;
    assert_eq!(summary.reason, EndReason::Finished);
    assert!(started.elapsed() < std::time::Duration::from_secs(120), "{:?}", started.elapsed());
    assert!(observations(&events)[0].contains("still-ran"));
    let n = notices(&events);
    assert!(n.iter().any(|m| m.contains("`sleep 300` did not finish within 1 s and was killed")), "{n:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prompt_and_session_hooks_add_context_and_a_stop_hook_sends_the_agent_back() {
    let out = tempfile::tempdir().unwrap();
    let flag = out.path().join("stopped-once");
    let stop = format!(
        "[ -e {0} ] && exit 0; touch {0}; echo '{{\"decision\": \"block\", \"reason\": \"also write /tmp/extra\"}}'",
        flag.display()
    );
    let settings = json!({"hooks": {
        "SessionStart": [{"hooks": [{"type": "command", "command": "echo the team uses tabs"}]}],
        "UserPromptSubmit": [{"hooks": [{"type": "command", "command": "echo '{\"hookSpecificOutput\": {\"additionalContext\": \"ticket ABC-1\"}}'"}]}],
        "Stop": [{"hooks": [{"type": "command", "command": stop}]}],
    }});
    let script = "- \"<finish>\\nmessage: first\\n</finish>\"\n\
                  - \"<bash>\\ncmd: echo x > /tmp/extra && echo wrote-extra\\n</bash>\"\n\
                  - \"<finish>\\nmessage: second\\n</finish>\"\n";
    let h = session(script, |cfg, dir| cfg.hooks = hooks(dir, settings)).await;
    h.send(Op::UserTurn { text: "go".into() });
    let (summary, events) = h.finish().await;
    assert_eq!((summary.reason, summary.turns), (EndReason::Finished, 3));
    assert_eq!(summary.finish_message.as_deref(), Some("second"));
    let first = &summary.messages[0].content;
    assert!(
        first.starts_with("go") && first.contains("the team uses tabs") && first.contains("ticket ABC-1"),
        "{first}"
    );
    assert!(summary.messages.iter().any(|m| m.content.contains("<stop_hook>\nalso write /tmp/extra")));
    assert!(observations(&events)[1].contains("wrote-extra"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_hook_can_refuse_the_prompt() {
    let settings = json!({"hooks": {"UserPromptSubmit": [{"hooks": [{"type": "command", "command": "echo 'no secrets in prompts' >&2; exit 2"}]}]}});
    let h = session("- \"<finish>\\nmessage: never\\n</finish>\"\n", |cfg, dir| {
        cfg.hooks = hooks(dir, settings);
        cfg.end_after_first_task = false;
    })
    .await;
    h.send(Op::UserTurn { text: "my password is hunter2".into() });
    h.send(Op::Shutdown);
    let (summary, events) = h.finish().await;
    assert_eq!(summary.turns, 0, "the model was called");
    assert!(summary.messages.is_empty(), "the prompt was kept: {:?}", summary.messages);
    assert!(notices(&events).iter().any(|m| m.contains("no secrets in prompts")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_mode_refuses_writes_asks_for_commands_and_an_accepted_plan_can_write() {
    let script = "- \"<file>\\naction: write\\npath: /tmp/plan.txt\\ncontent: too early\\n</file>\"\n\
                  - \"<bash>\\ncmd: ls /tmp/plan.txt || echo no-file\\n</bash>\"\n\
                  - Plan. 1. Write /tmp/plan.txt. 2. Check it.\n\
                  - \"<file>\\naction: write\\npath: /tmp/plan.txt\\ncontent: planned\\n</file>\"\n\
                  - \"<bash>\\ncmd: cat /tmp/plan.txt\\n</bash>\"\n\
                  - Done.\n";
    let mut h = session(script, |cfg, _| {
        cfg.approval = ApprovalMode::Plan;
        cfg.end_after_first_task = false;
    })
    .await;
    h.send(Op::UserTurn { text: "write the file".into() });
    let Event::ToolCallEnd { observation, .. } = h.next_matching(|e| matches!(e, Event::ToolCallEnd { .. })).await
    else {
        unreachable!()
    };
    assert!(observation.contains("plan mode is on") && observation.contains("nothing was written"), "{observation}");
    // Every command asks in plan mode, with the reason for the front end.
    let Event::ApprovalRequest { call_id, reason, .. } =
        h.next_matching(|e| matches!(e, Event::ApprovalRequest { .. })).await
    else {
        unreachable!()
    };
    assert!(reason.unwrap_or_default().contains("plan mode"));
    h.send(Op::Approval { call_id, decision: ApprovalDecision::Approve });
    let Event::ToolCallEnd { observation, .. } = h.next_matching(|e| matches!(e, Event::ToolCallEnd { .. })).await
    else {
        unreachable!()
    };
    assert!(observation.contains("no-file"), "the refused write happened: {observation}");
    let Event::PlanProposed { plan } = h.next_matching(|e| matches!(e, Event::PlanProposed { .. })).await else {
        unreachable!()
    };
    assert!(plan.starts_with("Plan. 1."), "{plan}");
    h.next_matching(|e| matches!(e, Event::TaskComplete)).await;
    // Accepted: the front end leaves plan mode and the work starts.
    h.send(Op::SetApprovalMode { mode: ApprovalMode::Auto });
    h.send(Op::UserTurn { text: "I accept the plan.".into() });
    let mut events = Vec::new();
    h.next_matching(|e| {
        events.push(e.clone());
        matches!(e, Event::TaskComplete)
    })
    .await;
    h.send(Op::Shutdown);
    let (summary, rest) = h.finish().await;
    events.extend(rest);
    assert_eq!(summary.reason, EndReason::Shutdown);
    let obs = observations(&events);
    assert!(obs.iter().any(|o| o.contains("planned")), "{obs:?}");
    assert!(!events.iter().any(|e| matches!(e, Event::PlanProposed { .. })), "a plan outside plan mode");
    // The plan-mode reminder went with the prompts of plan mode only.
    let users: Vec<&str> =
        summary.messages.iter().filter(|m| m.role == agent_llm::Role::User).map(|m| m.content.as_str()).collect();
    assert!(users[0].contains("<plan_mode>"));
    assert!(!users.iter().any(|u| u.starts_with("I accept") && u.contains("<plan_mode>")));
}
