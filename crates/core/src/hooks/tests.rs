use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::json;

use super::*;

fn hooks_from(dir: &Path, settings: Value) -> Hooks {
    let mut s = HookSettings::default();
    s.merge_json(&settings.to_string(), &dir.join("settings.json")).unwrap();
    let mut hooks = Hooks::new(s, Some(dir.to_path_buf()));
    hooks.session_id = "sess-1".into();
    hooks
}

fn one(event: &str, matcher: &str, command: &str, timeout: f64) -> Value {
    json!({"hooks": {event: [{"matcher": matcher, "hooks": [{"type": "command", "command": command, "timeout": timeout}]}]}})
}

#[test]
fn settings_merge_match_whole_names_and_refuse_bad_entries() {
    let mut s = HookSettings::default();
    let src = Path::new("a.json");
    s.merge_json(&one("PreToolUse", "Edit|Write", "echo a", 5.0).to_string(), src).unwrap();
    s.merge_json(&one("PreToolUse", "*", "echo b", 5.0).to_string(), src).unwrap();
    s.merge_json(r#"{"permissions": {"allow": []}, "hooks": {"Notification": []}}"#, src).unwrap();
    assert_eq!(s.matching(HookEvent::PreToolUse, &["Write", "file"]).len(), 2);
    // `Edit` must match the whole name, not a part of `MultiEdit`.
    let cmds: Vec<String> =
        s.matching(HookEvent::PreToolUse, &["MultiEdit", "file"]).into_iter().map(|h| h.command).collect();
    assert_eq!(cmds, ["echo b"]);
    assert!(s.matching(HookEvent::PostToolUse, &["Write"]).is_empty());
    assert_eq!(s.unsupported, ["Notification"]);
    let err = s.merge_json(&one("PreToolUse", "(", "x", 1.0).to_string(), src).unwrap_err().to_string();
    assert!(err.contains("matcher `(`") && err.contains("a.json"), "{err}");
    let err = s.merge_json(&one("Stop", "", "x", -1.0).to_string(), src).unwrap_err().to_string();
    assert!(err.contains("timeout -1"), "{err}");
    let err = s
        .merge_json(r#"{"hooks": {"Stop": [{"hooks": [{"type": "prompt", "command": "x"}]}]}}"#, src)
        .unwrap_err()
        .to_string();
    assert!(err.contains("`prompt` is not supported"), "{err}");
}

#[tokio::test]
async fn exit_code_2_blocks_with_stderr_and_other_failures_are_notes() {
    let dir = tempfile::tempdir().unwrap();
    let hooks = hooks_from(dir.path(), one("PreToolUse", "Bash", "echo 'no rm here' >&2; exit 2", 5.0));
    let v = hooks.run(HookEvent::PreToolUse, &["Bash", "bash"], json!({"tool_name": "Bash"}), "auto").await;
    assert_eq!(v.denial().as_deref(), Some("no rm here"));
    // Not matched: nothing runs.
    let v = hooks.run(HookEvent::PreToolUse, &["Read", "file"], json!({}), "auto").await;
    assert_eq!(v, HookVerdict::default());
    let hooks = hooks_from(dir.path(), one("PostToolUse", "", "echo oops >&2; exit 1", 5.0));
    let v = hooks.run(HookEvent::PostToolUse, &["Bash"], json!({}), "auto").await;
    assert!(v.blocked.is_none());
    assert!(v.notes[0].contains("exit code 1") && v.notes[0].contains("oops"), "{:?}", v.notes);
}

#[tokio::test]
async fn json_answers_decide_and_add_context() {
    let dir = tempfile::tempdir().unwrap();
    let deny = r#"echo '{"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny", "permissionDecisionReason": "not on Fridays"}}'"#;
    let allow = r#"echo '{"hookSpecificOutput": {"permissionDecision": "allow"}, "systemMessage": "checked"}'"#;
    let settings = json!({"hooks": {"PreToolUse": [
        {"matcher": "Bash", "hooks": [{"type": "command", "command": allow}]},
        {"matcher": "Write", "hooks": [{"type": "command", "command": deny}]},
    ]}});
    let hooks = hooks_from(dir.path(), settings);
    let v = hooks.run(HookEvent::PreToolUse, &["Bash"], json!({}), "auto").await;
    assert_eq!(
        (v.permission, v.denial(), v.notes.clone()),
        (Some(Permission::Allow), None, vec!["checked".to_string()])
    );
    let v = hooks.run(HookEvent::PreToolUse, &["Write"], json!({}), "auto").await;
    assert_eq!(v.denial().as_deref(), Some("not on Fridays"));
    // Both match: the strictest wins.
    let v = hooks.run(HookEvent::PreToolUse, &["Bash", "Write"], json!({}), "auto").await;
    assert_eq!(v.permission, Some(Permission::Deny));

    let ctx =
        r#"echo '{"hookSpecificOutput": {"hookEventName": "UserPromptSubmit", "additionalContext": "ticket ABC-1"}}'"#;
    let hooks = hooks_from(dir.path(), one("UserPromptSubmit", "", ctx, 5.0));
    let v = hooks.run(HookEvent::UserPromptSubmit, &[], json!({"prompt": "hi"}), "auto").await;
    assert_eq!(v.context, ["ticket ABC-1"]);
    let hooks = hooks_from(dir.path(), one("SessionStart", "", "echo plain context", 5.0));
    let v = hooks.run(HookEvent::SessionStart, &["startup"], json!({"source": "startup"}), "auto").await;
    assert_eq!(v.context, ["plain context"]);
    let stop = r#"echo '{"decision": "block", "reason": "run the tests first"}'"#;
    let hooks = hooks_from(dir.path(), one("Stop", "", stop, 5.0));
    let v = hooks.run(HookEvent::Stop, &[], json!({"stop_hook_active": false}), "auto").await;
    assert_eq!(v.blocked.as_deref(), Some("run the tests first"));
}

#[tokio::test]
async fn the_hook_gets_the_event_as_json_in_the_project_directory() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("seen.json");
    let cmd = format!(
        "cat > {}; pwd > {}.cwd; echo \"$AGENT_PROJECT_DIR\" > {}.env",
        out.display(),
        out.display(),
        out.display()
    );
    let hooks = hooks_from(dir.path(), one("PostToolUse", "Bash", &cmd, 5.0));
    let fields = json!({"tool_name": "Bash", "tool_input": {"command": "ls"}, "tool_response": {"exit_code": 0}});
    let v = hooks.run(HookEvent::PostToolUse, &["Bash"], fields, "ask").await;
    assert_eq!(v, HookVerdict::default());
    let seen: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(seen["hook_event_name"], "PostToolUse");
    assert_eq!(seen["session_id"], "sess-1");
    assert_eq!(seen["permission_mode"], "ask");
    assert_eq!(seen["tool_input"]["command"], "ls");
    assert_eq!(seen["tool_response"]["exit_code"], 0);
    let real = dir.path().canonicalize().unwrap();
    let cwd = std::fs::read_to_string(dir.path().join("seen.json.cwd")).unwrap();
    assert_eq!(Path::new(cwd.trim()).canonicalize().unwrap(), real);
    let env = std::fs::read_to_string(dir.path().join("seen.json.env")).unwrap();
    assert_eq!(env.trim(), dir.path().display().to_string());
}

#[tokio::test]
async fn a_hanging_hook_and_what_it_started_are_killed_at_the_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("child.pid");
    // The child keeps stdout open: only killing the whole group ends the wait.
    let cmd = format!("sleep 300 & echo $! > {}; wait", pid_file.display());
    let hooks = hooks_from(dir.path(), one("PreToolUse", "", &cmd, 1.0));
    let started = Instant::now();
    let v = hooks.run(HookEvent::PreToolUse, &["Bash"], json!({}), "auto").await;
    assert!(started.elapsed() < Duration::from_secs(30), "the hook was not stopped: {:?}", started.elapsed());
    assert!(v.blocked.is_none() && v.permission.is_none(), "{v:?}");
    assert!(v.notes[0].contains("did not finish within 1 s and was killed"), "{:?}", v.notes);
    let pid = std::fs::read_to_string(&pid_file).unwrap().trim().to_string();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        // Gone, or a zombie waiting for its new parent to reap it.
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let running = !state.is_empty() && state.rsplit(')').next().is_some_and(|r| !r.trim_start().starts_with('Z'));
        if !running {
            break;
        }
        assert!(Instant::now() < deadline, "the hook's child {pid} still runs: {state}");
        std::thread::sleep(Duration::from_millis(100));
    }
}
