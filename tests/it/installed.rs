//! The binary as `cargo install` leaves it: a copy in a folder of its own, run from an
//! unrelated directory with an empty cache. Its built-in presets, toy tasks and judge
//! cases come from the binary, never from the source tree (`agent train --preset
//! cpu-tiny` and `agent judge-eval` run this way in their own tests).

use crate::support;

#[test]
fn an_installed_binary_runs_the_oracle_on_a_task_folder_from_anywhere() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(support::docker());
    let dir = tempfile::tempdir().unwrap();

    // The oracle on a task folder given by path.
    let task = dir.path().join("work/tb2-hello");
    support::copy_tree(&support::fixture("bench/tb2-hello"), &task);
    let id = format!("it-installed-{}", &uuid::Uuid::new_v4().simple().to_string()[..6]);
    let out = support::installed(dir.path())
        .args(["bench", "--agent", "oracle", "--quiet", "--run-id", &id, "tb2-hello"])
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{text}");
    let results: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join(format!("work/runs/{id}/results.json"))).unwrap(),
    )
    .unwrap();
    assert_eq!(results["n_resolved"], 1, "{results:#}");
    support::remove_bench_images(&["tb2-hello"]);
}
