//! `agent run` end to end: the real binary, a real engine, a scripted model.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support;

fn events(stdout: std::process::ChildStdout) -> impl Iterator<Item = serde_json::Value> {
    BufReader::new(stdout).lines().map_while(Result::ok).filter_map(|l| serde_json::from_str(&l).ok())
}

#[test]
fn hello_world_task_with_a_scripted_model_finishes_and_cleans_up() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(support::docker());
    let dir = tempfile::tempdir().unwrap();
    // The second reply streams slowly so the test can look into the container
    // before the episode ends.
    let script = support::script(
        &dir,
        "hello.yaml",
        r#"
- |
  I'll create the file.
  <bash>
  cmd: echo "Hello, world!" > hello.txt
  </bash>
- reply: |
    <bash>
    cmd: cat hello.txt
    </bash>
  delay_ms: 3000
- |
  <finish>
  message: Created hello.txt with the greeting.
  </finish>
"#,
    );
    let traj = dir.path().join("traj.jsonl");
    let mut child = Command::new(support::agent_bin())
        .args(["run", "--json", "--task"])
        .arg(support::tb1_task("hello-world"))
        .arg("--model")
        .arg(format!("scripted:{}", script.display()))
        .arg("--trajectory")
        .arg(&traj)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut container = String::new();
    let mut run_id = String::new();
    let mut verified = false;
    let mut end = None;
    let mut standin_notice = false;
    for ev in events(child.stdout.take().unwrap()) {
        match ev["event"].as_str() {
            Some("notice") => {
                let m = ev["message"].as_str().unwrap_or_default();
                // `--task` maps the Terminal-Bench base image as `agent bench` does.
                standin_notice |= m.contains("ghcr.io/laude-institute/t-bench") && m.contains("agent-bench-python");
            }
            Some("session_configured") => {
                container = ev["container"].as_str().unwrap().to_string();
                run_id = ev["run_id"].as_str().unwrap().to_string();
            }
            Some("tool_call_end") if ev["call_id"] == "1.1" => {
                assert_eq!(ev["exit_code"], 0, "{ev}");
                // Verify inside the live container, before the episode removes it.
                let out = Command::new("docker").args(["exec", &container, "cat", "/app/hello.txt"]).output().unwrap();
                assert_eq!(String::from_utf8_lossy(&out.stdout), "Hello, world!\n");
                verified = true;
            }
            Some("episode_end") => end = Some(ev.clone()),
            _ => {}
        }
    }
    let status = child.wait().unwrap();
    assert!(verified, "the file was never checked in the container");
    assert!(standin_notice, "the run should say that it substituted the Terminal-Bench base image");
    let end = end.expect("no episode_end event");
    assert_eq!(end["reason"], "finished");
    assert_eq!(status.code(), Some(0));
    assert!(
        support::containers_of_run(&run_id).is_empty(),
        "containers left: {:?}",
        support::containers_of_run(&run_id)
    );
    assert!(support::containers_named(&container).is_empty());
    let lines: Vec<serde_json::Value> =
        std::fs::read_to_string(&traj).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.first().unwrap()["type"], "episode_start");
    assert_eq!(lines.last().unwrap()["type"], "episode_end");
    let turns: Vec<&serde_json::Value> = lines.iter().filter(|l| l["type"] == "turn").collect();
    assert_eq!(turns.len(), 3);
    assert_eq!(turns[1]["observations"][0]["observation"].as_str().map(|s| s.contains("Hello, world!")), Some(true));
}

fn signal_mid_episode(sig: i32) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(support::docker());
    let dir = tempfile::tempdir().unwrap();
    let script = support::script(&dir, "s.yaml", "- \"<bash>\\ncmd: sleep 300\\n</bash>\"\n");
    let mut child = Command::new(support::agent_bin())
        .args(["run", "--json", "--no-network", "--model"])
        .arg(format!("scripted:{}", script.display()))
        .arg("sleep a while")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut container = String::new();
    let mut run_id = String::new();
    let mut evs = events(child.stdout.take().unwrap());
    for ev in evs.by_ref() {
        if ev["event"] == "session_configured" {
            container = ev["container"].as_str().unwrap().to_string();
            run_id = ev["run_id"].as_str().unwrap().to_string();
        }
        if ev["event"] == "tool_call_begin" {
            break;
        }
    }
    assert_eq!(support::containers_named(&container).len(), 1);
    std::thread::sleep(Duration::from_millis(300));
    let t = Instant::now();
    // SAFETY: plain kill(2) on our own child's pid.
    unsafe {
        libc::kill(child.id() as i32, sig);
    }
    for _ in evs {}
    let status = child.wait().unwrap();
    eprintln!("exit after signal {sig}: {status:?} in {:?}", t.elapsed());
    assert_eq!(status.code(), Some(128 + sig));
    assert!(support::containers_of_run(&run_id).is_empty(), "left behind: {container}");
}

#[test]
fn sigint_mid_episode_leaves_no_container() {
    signal_mid_episode(libc::SIGINT);
}

#[test]
fn sigterm_mid_episode_leaves_no_container() {
    signal_mid_episode(libc::SIGTERM);
}

/// What a closed SSH session or terminal sends.
#[test]
fn sighup_and_sigquit_mid_episode_leave_no_container() {
    signal_mid_episode(libc::SIGHUP);
    signal_mid_episode(libc::SIGQUIT);
}

#[test]
fn zero_and_negative_limits_in_the_config_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("agent.toml");
    std::fs::write(&cfg, "[sandbox]\npids_limit = 0\nmemory_mb = -1\ncpus = 0\n").unwrap();
    let o = Command::new(support::agent_bin())
        .args(["run", "--model", "scripted:/nonexistent.yaml", "--config"])
        .arg(&cfg)
        .arg("hello")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    for part in ["pids_limit = 0", "memory_mb = -1", "cpus = 0"] {
        assert!(err.contains(part), "{part} not named: {err}");
    }
}

#[test]
fn turn_limit_ends_with_a_nonzero_exit() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(support::docker());
    let dir = tempfile::tempdir().unwrap();
    let script = support::script(
        &dir,
        "s.yaml",
        "- \"<bash>\\ncmd: echo one\\n</bash>\"\n- \"<bash>\\ncmd: echo two\\n</bash>\"\n",
    );
    let out = Command::new(support::agent_bin())
        .args(["run", "--no-network", "--max-turns", "2", "--model"])
        .arg(format!("scripted:{}", script.display()))
        .arg("count")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("the turn limit was reached"), "{stdout}");
    assert!(stdout.contains("$ echo two"), "{stdout}");
}

/// `agent run --task` takes a TB2 task through the bench's loader and environment; the
/// episode is built as everywhere else: the config's system-prompt template and the
/// `AGENTS.md` of the shell's starting directory go into the prompt.
#[test]
fn a_tb2_task_runs_with_the_configured_prompt_and_the_projects_agents_md() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(support::docker());
    let dir = tempfile::tempdir().unwrap();
    let task = dir.path().join("tb2-greet");
    std::fs::create_dir_all(task.join("environment")).unwrap();
    std::fs::create_dir_all(task.join("tests")).unwrap();
    std::fs::write(task.join("instruction.md"), "Write hello to /app/greeting.txt.\n").unwrap();
    std::fs::write(
        task.join("task.toml"),
        "version = \"1.0\"\n[agent]\ntimeout_sec = 120.0\n[verifier]\ntimeout_sec = 30.0\n",
    )
    .unwrap();
    std::fs::write(
        task.join("environment/Dockerfile"),
        "FROM agent-base:bookworm\nWORKDIR /app\nRUN echo 'Greetings are lower case here.' > /app/AGENTS.md\n",
    )
    .unwrap();
    std::fs::write(task.join("tests/test.sh"), "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n").unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(&config, "system_prompt = \"House rules for {{cwd}}.\\n{{project_instructions}}\\n{{tools}}\"\n")
        .unwrap();
    let script = support::script(
        &dir,
        "greet.yaml",
        r#"
- |
  <file>
  action: write
  path: greeting.txt
  content: hello
  </file>
- reply: |
    <finish>
    message: Wrote greeting.txt.
    </finish>
  delay_ms: 3000
"#,
    );
    let traj = dir.path().join("traj.jsonl");
    let mut child = Command::new(support::agent_bin())
        .arg("--config")
        .arg(&config)
        .args(["run", "--json", "--tool-format", "text", "--task"])
        .arg(&task)
        .arg("--model")
        .arg(format!("scripted:{}", script.display()))
        .arg("--trajectory")
        .arg(&traj)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut run_id = String::new();
    let mut container = String::new();
    let mut written = false;
    for ev in events(child.stdout.take().unwrap()) {
        match ev["event"].as_str() {
            Some("session_configured") => {
                container = ev["container"].as_str().unwrap().to_string();
                run_id = ev["run_id"].as_str().unwrap().to_string();
            }
            Some("tool_call_end") if ev["call_id"] == "1.1" => {
                let out =
                    Command::new("docker").args(["exec", &container, "cat", "/app/greeting.txt"]).output().unwrap();
                written = String::from_utf8_lossy(&out.stdout).trim() == "hello";
            }
            _ => {}
        }
    }
    assert_eq!(child.wait().unwrap().code(), Some(0));
    assert!(written, "greeting.txt was not written in the task's container");
    let start: serde_json::Value =
        serde_json::from_str(std::fs::read_to_string(&traj).unwrap().lines().next().unwrap()).unwrap();
    let prompt = start["system_prompt"].as_str().unwrap();
    assert!(prompt.starts_with("House rules for /app."), "{prompt}");
    assert!(prompt.contains("Greetings are lower case here."), "{prompt}");
    assert!(prompt.contains("<file>"), "the tool section is missing: {prompt}");
    assert!(support::containers_of_run(&run_id).is_empty(), "{:?}", support::containers_of_run(&run_id));
    assert_eq!(support::networks_of_run(&run_id), Vec::<String>::new());
}

/// The hooks of a trusted project's `.agent/settings.json` reach `agent run`'s episode: a
/// `PreToolUse` hook that exits 2 keeps a command from running, and `--no-hooks` does
/// not (an untrusted project's hooks never run: see `trust.rs`).
#[test]
fn agent_run_runs_the_projects_hooks_unless_told_not_to() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(support::docker());
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join(".agent")).unwrap();
    std::fs::write(
        dir.path().join(".agent/settings.json"),
        r#"{"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "echo 'use the file tool' >&2; exit 2"}]}]}}"#,
    )
    .unwrap();
    let script = support::script(
        &dir,
        "s.yaml",
        "- \"<bash>\\ncmd: echo ran-it\\n</bash>\"\n- \"<finish>\\nmessage: ok\\n</finish>\"\n",
    );
    let run = |extra: &[&str]| {
        let out = Command::new(support::agent_bin())
            .current_dir(dir.path())
            // Only the project's settings: not the settings of whoever runs the tests.
            .env("XDG_CONFIG_HOME", dir.path().join("config"))
            .args(["run", "--json", "--model"])
            .arg(format!("scripted:{}", script.display()))
            .args(extra)
            .arg("say hi")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        let events: Vec<serde_json::Value> =
            out.stdout.split(|b| *b == b'\n').filter_map(|l| serde_json::from_slice(l).ok()).collect();
        let obs = events
            .iter()
            .find(|e| e["event"] == "tool_call_end")
            .map(|e| e["observation"].as_str().unwrap_or_default().to_string())
            .unwrap_or_default();
        let notices: Vec<String> = events
            .iter()
            .filter(|e| e["event"] == "notice")
            .map(|e| e["message"].as_str().unwrap_or_default().to_string())
            .collect();
        (obs, notices)
    };
    let (obs, notices) = run(&["--trust-project"]);
    assert!(obs.contains("blocked by a PreToolUse hook") && obs.contains("use the file tool"), "{obs}");
    assert!(!obs.contains("ran-it"), "{obs}");
    assert!(notices.iter().any(|n| n == "hooks: 1 PreToolUse"), "{notices:?}");
    let (obs, _) = run(&["--trust-project", "--no-hooks"]);
    assert!(obs.contains("ran-it"), "{obs}");
}
