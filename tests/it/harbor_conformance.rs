//! The Harbor conformance corpus (`tests/fixtures/harbor-conformance/`): tasks written
//! here, each using one part of Harbor's format the way Harbor reads it. A multi-step
//! task (three steps in one environment: a step's own tests over the task's, a step's
//! solution or the task's, working files with a setup hook, `min_reward`, a reward per
//! step and their mean), and a compose file that is an overlay on Harbor's base (a
//! sidecar and `depends_on` for `main`, never `main`'s build; `${VAR:-default}` fed by
//! `[environment.env]`). The oracle resolves both with every step's reward recorded;
//! nop resolves neither.

use serde_json::Value;

use crate::bench::{bench, run_id, trial};
use crate::support;

const TASKS: [&str; 2] = ["compose-overlay-sidecar", "multi-step-notes"];

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
    assert!(steps["notices"].as_array().is_some_and(Vec::is_empty), "{steps}");

    let overlay = trial(&r, "compose-overlay-sidecar", 0);
    let overlay_log = log(&out, "compose-overlay-sidecar/attempt-0/tests.log");
    assert_eq!(overlay["resolved"], true, "{overlay}\n{overlay_log}");
    assert!(overlay.get("steps").is_none(), "a single-step task records no steps: {overlay}");
    assert!(overlay["notices"].as_array().is_some_and(Vec::is_empty), "{overlay}");
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
    support::assert_nothing_left(&id);
    support::remove_bench_images(&TASKS);
}
