//! The Harbor conformance corpus (`tests/fixtures/harbor-conformance/`): tasks written
//! here, each using one part of Harbor's format the way Harbor reads it. A multi-step
//! task (three steps in one environment: a step's own tests over the task's, a step's
//! solution or the task's, working files with a setup hook, a step's healthcheck and
//! artifacts, `min_reward`, a reward per step and their mean); a compose file that is an
//! overlay on Harbor's base (a sidecar and `depends_on` for `main`, never `main`'s build;
//! `${VAR:-default}` fed by `[environment.env]`); a healthcheck that gates the agent's
//! start on a file a sidecar writes seconds after it starts; and artifacts copied out of
//! the container into the trial's folder after the tests (a link among them left out);
//! `python:3.11-slim` with a wheel built for 3.11 at the newest (stood in by a 3.11).
//! The oracle resolves every task with every step's reward recorded; nop resolves none.
//! A healthcheck that never passes fails the trial as `env_unhealthy` before the agent.

use serde_json::Value;

use crate::bench::{bench, run_id, trial};
use crate::support;

const TASKS: [&str; 5] =
    ["artifacts-report", "compose-overlay-sidecar", "healthcheck-sidecar", "multi-step-notes", "python311-wheel"];

/// `(name, reward)` of each step a trial recorded.
fn step_rewards(t: &Value) -> Vec<(String, Value)> {
    t["steps"]
        .as_array()
        .unwrap_or_else(|| panic!("no steps recorded: {t}"))
        .iter()
        .map(|s| (s["name"].as_str().unwrap_or_default().to_string(), s["reward"].clone()))
        .collect()
}

fn log(out: &std::path::Path, rel: &str) -> String {
    std::fs::read_to_string(out.join(rel)).unwrap_or_else(|e| format!("({rel}: {e})"))
}

#[test]
fn the_oracle_resolves_the_conformance_corpus_with_per_step_rewards_and_nop_nothing() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(support::docker());
    let corpus = support::fixture("harbor-conformance");
    let dir = tempfile::tempdir().unwrap();

    let out = dir.path().join("oracle");
    let id = run_id("conform-oracle");
    let (code, text, r) = bench(&out, &id, &["--agent", "oracle", "-n", "2"], &[corpus.as_path()]);
    assert_eq!(code, 0, "{text}");
    assert_eq!(r["n_trials"], TASKS.len(), "{r}");
    let steps = trial(&r, "multi-step-notes", 0);
    let logs =
        ["create", "append", "count"].map(|s| log(&out, &format!("multi-step-notes/attempt-0/steps/{s}/tests.log")));
    assert_eq!(steps["resolved"], true, "{steps}\n{logs:#?}");
    assert_eq!(steps["score"], 1.0, "{steps}");
    let rewards = step_rewards(steps);
    let want: Vec<(String, Value)> =
        ["create", "append", "count"].iter().map(|n| (n.to_string(), Value::from(1.0))).collect();
    assert_eq!(rewards, want, "{steps}");
    // The last step's tests wrote named rewards; the steps' own folders hold their logs.
    assert_eq!(steps["steps"][2]["rewards"]["lines"], 1.0, "{steps}");
    assert!(logs[2].is_empty() || !logs[2].contains("FAIL"), "{}", logs[2]);
    assert!(out.join("multi-step-notes/attempt-0/steps/create/agent.log").is_file());
    // A step's healthcheck ran after its setup; a step's artifacts are in its own folder.
    let step_check = log(&out, "multi-step-notes/attempt-0/steps/create/healthcheck.log");
    assert!(step_check.trim_end().ends_with("passed, exit 0"), "{step_check}");
    assert_eq!(log(&out, "multi-step-notes/attempt-0/steps/count/artifacts/notes.txt").lines().count(), 2);
    assert!(steps["notices"].as_array().is_some_and(Vec::is_empty), "{steps}");

    let overlay = trial(&r, "compose-overlay-sidecar", 0);
    let overlay_log = log(&out, "compose-overlay-sidecar/attempt-0/tests.log");
    assert_eq!(overlay["resolved"], true, "{overlay}\n{overlay_log}");
    assert!(overlay.get("steps").is_none(), "a single-step task records no steps: {overlay}");
    assert!(overlay["notices"].as_array().is_some_and(Vec::is_empty), "{overlay}");

    // The agent started only once the healthcheck passed: the sidecar's file was there.
    let health = trial(&r, "healthcheck-sidecar", 0);
    let health_log = log(&out, "healthcheck-sidecar/attempt-0/healthcheck.log");
    assert_eq!(health["resolved"], true, "{health}\n{health_log}");
    assert!(health["notices"].as_array().is_some_and(Vec::is_empty), "{health}");
    assert!(health_log.trim_end().lines().last().is_some_and(|l| l.contains("passed")), "{health_log}");

    // The artifacts are in the trial's folder, with what the tests wrote after the agent;
    // the link the solution left is named in a notice and never written on the host.
    let arts = trial(&r, "artifacts-report", 0);
    assert_eq!(arts["resolved"], true, "{arts}\n{}", log(&out, "artifacts-report/attempt-0/tests.log"));
    let kept = out.join("artifacts-report/attempt-0/artifacts");
    assert_eq!(log(&kept, "out/report.txt"), "lines: 3\n");
    assert_eq!(log(&kept, "out/nested/note.txt"), "kept\n");
    assert_eq!(log(&kept, "out/verified.txt"), "verified\n", "copied after the tests");
    assert_eq!(log(&kept, "reports/summary.json"), "{\"ok\": true}\n");
    assert!(std::fs::symlink_metadata(kept.join("out/passwd-link")).is_err(), "a link was written");
    let notices: Vec<&str> = arts["notices"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert!(notices.len() == 1 && notices[0].contains("passwd-link (a link)"), "{notices:?}");
    let manifest: Value = serde_json::from_str(&log(&kept, "manifest.json")).unwrap();
    let statuses: Vec<&str> = manifest.as_array().unwrap().iter().filter_map(|m| m["status"].as_str()).collect();
    assert_eq!(statuses, ["copied", "copied"], "{manifest}");

    // python:3.11-slim stands in as bookworm's own 3.11, so numpy 1.23.5 (wheels up to
    // 3.11) installs; the trial says what stood in.
    let py = trial(&r, "python311-wheel", 0);
    assert_eq!(py["resolved"], true, "{py}\n{}", log(&out, "python311-wheel/attempt-0/tests.log"));
    let standin = py["standins"]["python:3.11-slim"].as_str().unwrap_or_default();
    assert!(standin.contains("CPython 3.11"), "{py}");
    support::assert_nothing_left(&id);

    let out = dir.path().join("nop");
    let id = run_id("conform-nop");
    let (code, text, r) = bench(&out, &id, &["--agent", "nop", "-n", "2"], &[corpus.as_path()]);
    assert_eq!(code, 0, "{text}");
    assert_eq!(r["n_resolved"], 0, "doing nothing resolves nothing: {r}");
    let steps = trial(&r, "multi-step-notes", 0);
    assert_eq!(steps["failure_mode"], "unset", "nop fails by its tests, not the harness: {steps}");
    // The second step's min_reward stops the task: the third step never runs.
    let rewards = step_rewards(steps);
    assert_eq!(rewards, [("create".to_string(), Value::from(0.0)), ("append".to_string(), Value::from(0.0))]);
    assert!(steps["reason"].as_str().unwrap_or_default().contains("min_reward"), "{steps}");
    let overlay = trial(&r, "compose-overlay-sidecar", 0);
    assert_eq!((overlay["resolved"].clone(), overlay["failure_mode"].clone()), (false.into(), "unset".into()));
    // A reward of 0 says why: the test script's output.
    assert!(
        overlay["reason"].as_str().is_some_and(|r| r.contains("wrote reward 0") && r.contains("FAIL")),
        "{overlay}"
    );
    let health = trial(&r, "healthcheck-sidecar", 0);
    assert_eq!((health["resolved"].clone(), health["failure_mode"].clone()), (false.into(), "unset".into()));
    let arts = trial(&r, "artifacts-report", 0);
    assert_eq!(arts["resolved"], false, "{arts}");
    let notices = arts["notices"].to_string();
    assert!(notices.contains("artifact `/app/summary.json` was not copied"), "{notices}");
    // The tests' own file is there all the same: only the missing paths are missing.
    assert!(!out.join("artifacts-report/attempt-0/artifacts/out/verified.txt").exists());
    assert!(out.join("artifacts-report/attempt-0/artifacts/manifest.json").is_file());
    support::assert_nothing_left(&id);
    support::remove_bench_images(&TASKS);
}

#[test]
fn a_healthcheck_that_never_passes_fails_the_trial_before_the_agent() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(support::docker());
    let dir = tempfile::tempdir().unwrap();
    let task = dir.path().join("tasks/healthcheck-never");
    support::copy_tree(&support::fixture("harbor-conformance/healthcheck-sidecar"), &task);
    let toml = std::fs::read_to_string(task.join("task.toml")).unwrap();
    // The table itself, not its name in the file's opening comment.
    let head = &toml[..toml.rfind("\n[environment.healthcheck]").unwrap()];
    let check = "\n[environment.healthcheck]\ncommand = \"test -f /never\"\ninterval_sec = 0.2\nretries = 2\n";
    std::fs::write(task.join("task.toml"), format!("{head}{check}")).unwrap();

    let out = dir.path().join("oracle");
    let id = run_id("conform-unhealthy");
    let (code, text, r) = bench(&out, &id, &["--agent", "oracle"], &[task.as_path()]);
    assert_eq!(code, 0, "{text}");
    let t = trial(&r, "healthcheck-never", 0);
    assert_eq!(t["failure_mode"], "env_unhealthy", "{t}");
    let reason = t["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("`test -f /never` never passed: 2 consecutive failures"), "{reason}");
    // The agent never started: no solution ran, no tests ran.
    assert_eq!(t["timings"]["agent_secs"], 0.0, "{t}");
    assert!(!out.join("healthcheck-never/attempt-0/agent.log").exists());
    assert!(!out.join("healthcheck-never/attempt-0/tests.log").exists());
    let attempts = log(&out, "healthcheck-never/attempt-0/healthcheck.log");
    assert_eq!(attempts.lines().filter(|l| l.contains("failed, exit 1")).count(), 2, "{attempts}");
    support::assert_nothing_left(&id);
    support::remove_bench_images(&["healthcheck-never"]);
}
