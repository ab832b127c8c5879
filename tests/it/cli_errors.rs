//! Bad input gives one readable line, a non-zero exit, no panic, no container.

use std::process::{Command, Output};

use crate::support;

fn agent(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(support::agent_bin());
    cmd.args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn assert_clean_failure(out: &Output, needle: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "should fail: {stderr}");
    assert!(!stderr.contains("panicked"), "panic: {stderr}");
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one line expected: {stderr}");
    assert!(lines[0].contains(needle), "`{needle}` missing from: {stderr}");
}

#[test]
fn malformed_task_directory() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("task.yaml"), "difficulty: easy\n").unwrap();
    let out = agent(&["run", "--model", "scripted:/dev/null", "--task", dir.path().to_str().unwrap()], &[]);
    assert_clean_failure(&out, "task.yaml");
    assert_clean_failure(&out, "`instruction`");
    let out = agent(&["run", "--model", "scripted:/dev/null", "--task", "/no/such/task"], &[]);
    assert_clean_failure(&out, "/no/such/task");
}

#[test]
fn unknown_model_spec() {
    let out = agent(&["run", "--model", "gpt-banana", "hi"], &[]);
    assert_clean_failure(&out, "gpt-banana");
}

#[test]
fn unreachable_docker_socket() {
    let dir = tempfile::tempdir().unwrap();
    let script = support::script(&dir, "s.yaml", "- \"<finish>\\nmessage: x\\n</finish>\"\n");
    let spec = format!("scripted:{}", script.display());
    let out = agent(&["run", "--model", &spec, "hi"], &[("DOCKER_HOST", "unix:///nonexistent/docker.sock")]);
    assert_clean_failure(&out, "Docker engine");
    assert_clean_failure(&out, "/nonexistent/docker.sock");
}

#[test]
fn unreachable_openai_endpoint() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(support::docker());
    // Port 9 (discard) on loopback: nothing listens there.
    let out =
        agent(&["run", "--no-network", "--json", "--model", "openai:http://127.0.0.1:9/v1#some-model", "hi"], &[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    let events = support::json_events(&stdout);
    let errors: Vec<&serde_json::Value> = events.iter().filter(|e| e["event"] == "error").collect();
    assert_eq!(errors.len(), 1, "{stdout}");
    let msg = errors[0]["message"].as_str().unwrap();
    assert!(msg.contains("127.0.0.1:9") && !msg.contains('\n'), "{msg}");
    let run_id = events
        .iter()
        .find(|e| e["event"] == "session_configured")
        .and_then(|e| e["run_id"].as_str().map(String::from))
        .unwrap();
    assert!(support::containers_of_run(&run_id).is_empty());
}
