//! The synth pipeline end to end with scripted models for its roles, on the real Docker
//! engine: a builder's task is validated by running it (the scaffold's image with
//! pytest, its weighted test runner), reviewed and indexed; a builder whose test no
//! solution passes is rejected by validation.

use std::path::Path;
use std::time::Duration;

use agent_bench::synth::{run_synth, RoleModels, SynthOptions, SynthPlan};
use agent_bench::validate::ValidateOptions;
use agent_core::config::Config;
use agent_llm::ResolveOptions;

use super::support;

fn plan(builder: &str) -> SynthPlan {
    let script = |name: &str| format!("scripted:{}", support::fixture(&format!("synth/{name}")).display());
    SynthPlan {
        seeds: vec![support::fixture("bench/tb2-hello")],
        models: RoleModels {
            idea: script("idea.yaml"),
            builder: script(builder),
            reviewer: script("reviewer.yaml"),
            solver: script("solver.yaml"),
        },
        brainstorm: 2,
        ideas_per_seed: 1,
        build_rounds: 1,
        episode_turns: 6,
        episode_secs: 300,
        calibrate: 0,
        oracle_runs: 2,
        max_similarity: 0.7,
    }
}

fn opts(out: &Path) -> SynthOptions {
    SynthOptions {
        out: out.to_path_buf(),
        resume: false,
        workers: 2,
        claim_timeout: Duration::from_secs(1800),
        max_claims: 2,
        resolve: ResolveOptions::default(),
        validate: ValidateOptions::default(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripted_roles_make_a_valid_task_end_to_end() {
    let docker = support::docker().await;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let lines = std::sync::Mutex::new(Vec::new());
    // With calibration: a solver's pass rate over two attempts.
    let summary = run_synth(
        Some(SynthPlan { calibrate: 2, ..plan("builder.yaml") }),
        &opts(&out),
        &Config::default(),
        &docker,
        &|l| lines.lock().unwrap().push(l),
    )
    .await
    .unwrap();
    let lines = lines.into_inner().unwrap();
    assert_eq!(summary.accepted.len(), 1, "{lines:#?}\n{:#?}", summary.rejected);
    let e = &summary.accepted[0];
    assert_eq!((e.seed.as_str(), e.title.as_str()), ("tb2-hello", "Shout the greeting"));
    assert_eq!((e.difficulty.as_str(), e.category.as_str()), ("easy", "file-operations"));
    assert_eq!((e.validation.oracle_passes, e.validation.oracle_runs, e.validation.nop_score), (2, 2, Some(0.0)));
    assert_eq!((e.pass_rate, e.calibration_attempts), (Some(1.0), Some(2)));
    assert!(e.tokens.calibrate > 0, "{:?}", e.tokens);
    assert_eq!(e.tokens.total, e.tokens.idea + e.tokens.build + e.tokens.review + e.tokens.calibrate, "{:?}", e.tokens);

    // The index and the task folder are what `agent bench` and `agent train` take.
    let index = agent_bench::synth::index::read_index(&out).unwrap();
    assert_eq!(index, summary.accepted);
    let task = out.join("tasks").join(&e.name);
    assert!(task.join("instruction.md").is_file() && !task.join("idea.md").exists());
    let toml = std::fs::read_to_string(task.join("task.toml")).unwrap();
    assert!(toml.contains("difficulty = \"easy\"") && toml.contains("allow_internet = false"), "{toml}");
    let entries = agent_bench::discover(std::slice::from_ref(&out)).unwrap();
    assert_eq!(entries.iter().map(|e| e.name.as_str()).collect::<Vec<_>>(), vec![e.name.as_str()]);

    // The weights are the test runner's: doing half the task scores the lighter test.
    let report = agent_bench::validate::Validator::new(
        docker.clone(),
        Config::default(),
        "it-synth-recheck",
        &dir.path().join("recheck"),
        ValidateOptions { oracle_runs: 1, ..Default::default() },
    )
    .await
    .validate_dir(&task, &dir.path().join("recheck"))
    .await;
    assert_eq!(report.verdict, agent_bench::validate::Verdict::Valid, "{}", report.line());
    // Every item ended once: the idea, the build, the review, the calibration.
    assert_eq!(summary.ended.values().sum::<usize>(), 4, "{:?}", summary.ended);
    support::assert_nothing_left(&agent_bench::synth::run::synth_run_id(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_with_an_impossible_test_is_rejected_by_validation() {
    let docker = support::docker().await;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let summary = run_synth(Some(plan("builder-impossible.yaml")), &opts(&out), &Config::default(), &docker, &|_| {})
        .await
        .unwrap();
    assert!(summary.accepted.is_empty(), "{:?}", summary.accepted);
    assert_eq!(summary.rejected.len(), 1, "{:?}", summary.rejected);
    let r = &summary.rejected[0];
    assert_eq!(r.status, "rejected");
    assert!(r.reason.contains("solution_fails"), "{}", r.reason);
    let rows = std::fs::read_to_string(out.join("rejected.jsonl")).unwrap();
    assert!(rows.contains("solution_fails"), "{rows}");
    assert_eq!(std::fs::read_to_string(out.join("index.jsonl")).unwrap(), "");
    // A second run into the same folder is refused; --resume finds nothing left to do.
    let again = run_synth(Some(plan("builder.yaml")), &opts(&out), &Config::default(), &docker, &|_| {}).await;
    assert!(again.is_err_and(|e| e.to_string().contains("--resume")));
    let resumed = run_synth(None, &SynthOptions { resume: true, ..opts(&out) }, &Config::default(), &docker, &|_| {})
        .await
        .unwrap();
    assert_eq!(resumed.rejected, summary.rejected);
}
