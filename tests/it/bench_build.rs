//! Task images built as the official harness builds them: BuildKit with heredocs,
//! cache mounts and a `# syntax=` line that falls back to the built-in frontend; the
//! classic builder as the fallback; the Python 3.13 stand-in; every build error named.

use std::process::Command;

use crate::bench::{bench, bench_command, results, run_id, trial};
use crate::support;
use crate::support::assert_nothing_left;

/// Both tests build the `heredoc-cache` image under the same tag.
static HEREDOC: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn tests_log(out: &std::path::Path, task: &str) -> String {
    std::fs::read_to_string(out.join(task).join("attempt-0/tests.log")).unwrap_or_default()
}

#[test]
fn a_heredoc_and_cache_mount_task_builds_with_buildkit_on_python_3_13_and_its_oracle_passes() {
    let _turn = HEREDOC.lock().unwrap_or_else(|e| e.into_inner());
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(support::docker());
    let dir = tempfile::tempdir().unwrap();
    let id = run_id("heredoc");
    let task = support::fixture("bench/buildkit/heredoc-cache");
    let out = dir.path().join("r");
    let (code, text, r) = bench(&out, &id, &["--agent", "oracle"], &[&task]);
    assert_eq!(code, 0, "{text}");
    let t = trial(&r, "heredoc-cache", 0);
    assert_eq!(t["resolved"], true, "{t:#}\n{}", tests_log(&out, "heredoc-cache"));
    // Every test of the task passed, the Python 3.13 one among them.
    let tests = t["tests"].as_array().unwrap();
    assert_eq!(tests.len(), 5, "{t:#}");
    assert!(tests.iter().any(|x| x["name"].as_str().unwrap_or("").contains("python_3_13")), "{t:#}");
    // The `# syntax=` frontend cannot be pulled here: said, and the built-in one used.
    let notices = t["notices"].to_string();
    assert!(notices.contains("docker/dockerfile:1.4") && notices.contains("built-in"), "{notices}");
    // The stand-in is recorded in the trial and the run.
    let image = "ghcr.io/laude-institute/t-bench/python-3-13:20250620";
    assert!(t["standins"][image].as_str().unwrap_or("").contains("Python 3.13"), "{t:#}");
    assert!(r["standins"][image].as_str().unwrap_or("").contains("bookworm"), "{r:#}");
    // Built by BuildKit: the image's history has no classic-builder step containers.
    let history = Command::new("docker")
        .args([
            "history",
            "--no-trunc",
            "--format",
            "{{.CreatedBy}} {{.Comment}}",
            "agent-bench-heredoc-cache-client:latest",
        ])
        .output()
        .unwrap();
    let history = String::from_utf8_lossy(&history.stdout);
    assert!(history.contains("buildkit.dockerfile"), "{history}");
    assert_nothing_left(&id);
}

#[test]
fn the_classic_builder_reads_the_same_heredocs_and_cache_mounts() {
    let _turn = HEREDOC.lock().unwrap_or_else(|e| e.into_inner());
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(support::docker());
    let dir = tempfile::tempdir().unwrap();
    let id = run_id("classic");
    let task = support::fixture("bench/buildkit/heredoc-cache");
    let out = dir.path().join("r");
    let o =
        bench_command(&out, &id, &["--agent", "oracle"], &[&task]).env("AGENT_BUILDER", "classic").output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert_eq!(o.status.code(), Some(0), "{text}");
    let r = results(&out);
    let t = trial(&r, "heredoc-cache", 0);
    assert_eq!(t["resolved"], true, "{t:#}\n{}", tests_log(&out, "heredoc-cache"));
    assert!(t["notices"].to_string().contains("classic builder has no cache mounts"), "{t:#}");
    assert_nothing_left(&id);
    support::remove_bench_images(&["heredoc-cache"]);
}

#[test]
fn a_failed_build_names_every_error_of_every_image() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(support::docker());
    let dir = tempfile::tempdir().unwrap();
    let id = run_id("broken");
    let task = support::fixture("bench/buildkit/two-broken");
    let out = dir.path().join("r");
    let (code, text, r) = bench(&out, &id, &["--agent", "oracle"], &[&task]);
    assert_eq!(code, 0, "{text}");
    let t = trial(&r, "two-broken", 0);
    assert_eq!(t["failure_mode"], "env_build_failed", "{t:#}");
    let reason = t["reason"].as_str().unwrap();
    for part in ["service `client`", "exit 3", "exit 4", "service `db`", "exit 5"] {
        assert!(reason.contains(part), "`{part}` missing from: {reason}");
    }
    assert!(t["timings"]["env_build_secs"].as_f64().unwrap() > 0.0, "{t:#}");
    assert_nothing_left(&id);
}
