//! Harbor tasks as their authors write them (`tests/fixtures/harbor-corpus/`): digest-pinned
//! bases behind registry mirrors, whole solution folders, reward files, offline verifiers
//! with build-time installs. The oracle resolves all ten and nop none, with no image map.

use serde_json::Value;

use crate::bench::{bench, run_id};
use crate::support;

const TASKS: usize = 10;

fn trials(r: &Value) -> &Vec<Value> {
    r["trials"].as_array().unwrap()
}

#[test]
fn the_oracle_resolves_every_corpus_task_and_nop_none() {
    let corpus = support::fixture("harbor-corpus");
    let dir = tempfile::tempdir().unwrap();
    let id = run_id("corpus-oracle");
    let (code, text, r) =
        bench(&dir.path().join("oracle"), &id, &["--agent", "oracle", "-n", "2"], &[corpus.as_path()]);
    assert_eq!(code, 0, "{text}");
    let failed: Vec<String> = trials(&r)
        .iter()
        .filter(|t| t["resolved"] != true)
        .map(|t| format!("{}: [{}] {}", t["task"], t["failure_mode"], t["reason"]))
        .collect();
    assert!(failed.is_empty(), "not resolved by the oracle: {failed:#?}");
    assert_eq!(r["n_resolved"], TASKS, "{r}");
    for t in trials(&r) {
        assert!(t["notices"].is_array() && t["standins"].is_object(), "every record has both: {t}");
    }
    // A digest-pinned base is stood in for, and the record says the digest was not checked.
    let pinned = trials(&r).iter().find(|t| t["task"] == "log-level-count").unwrap();
    let notices = pinned["notices"].to_string();
    assert!(notices.contains("was not verified"), "{notices}");
    assert!(pinned["standins"].to_string().contains("agent-base:bookworm"), "{pinned}");
    let plain = trials(&r).iter().find(|t| t["task"] == "rename-files").unwrap();
    assert!(!plain["notices"].to_string().contains("digest"), "no digest, no notice: {plain}");
    assert!(!text.contains("tests that need uv"), "no task here uses uv: {text}");
    support::assert_nothing_left(&id);

    let id = run_id("corpus-nop");
    let (code, text, r) = bench(&dir.path().join("nop"), &id, &["--agent", "nop", "-n", "2"], &[corpus.as_path()]);
    assert_eq!(code, 0, "{text}");
    assert_eq!(r["n_trials"], TASKS);
    assert_eq!(r["n_resolved"], 0, "doing nothing resolves nothing: {r}");
    assert!(trials(&r).iter().all(|t| t["failure_mode"] == "unset"), "nop fails by its tests, not the harness: {r}");
    support::assert_nothing_left(&id);
}

#[test]
fn standins_list_names_the_mirrored_official_images() {
    let o = std::process::Command::new(support::agent_bin()).args(["sandbox", "standins", "--list"]).output().unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{text}");
    for want in ["debian:bookworm*", "agent-base:bookworm", "debian:trixie*", "python:3*", "ghcr.io/laude-institute"] {
        assert!(text.contains(want), "{want} missing from:\n{text}");
    }
}
