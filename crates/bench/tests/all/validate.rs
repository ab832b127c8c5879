//! `agent tasks validate`'s checks on hand-made tasks, each broken one way: every one
//! gets its own verdict, and the valid one passes every check.

use std::collections::BTreeMap;

use agent_bench::validate::{ValidateOptions, Validator, Verdict};
use agent_core::config::Config;

use super::support;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_broken_task_gets_its_own_verdict() {
    let docker = support::docker().await;
    let dir = tempfile::tempdir().unwrap();
    // A copy: the flaky task counts its runs in a folder of its own.
    support::copy_tree(&support::fixture("validate"), &dir.path().join("tasks"));
    let run_id = format!("it-validate-{}", uuid::Uuid::new_v4().simple());
    let opts = ValidateOptions { oracle_runs: 3, concurrency: 2, ..Default::default() };
    let validator = Validator::new(docker, Config::default(), &run_id, &dir.path().join("logs"), opts).await;
    let reports = validator.validate_all(&[dir.path().join("tasks")], &|_| {}).await.unwrap();
    let by_name: BTreeMap<&str, _> = reports.iter().map(|r| (r.task.as_str(), r)).collect();
    let lines: Vec<String> = reports.iter().map(|r| r.line()).collect();
    let verdicts: BTreeMap<&str, Verdict> = by_name.iter().map(|(k, r)| (*k, r.verdict)).collect();
    assert_eq!(
        verdicts,
        BTreeMap::from([
            ("broken-build", Verdict::BuildFailed),
            ("flaky", Verdict::Flaky),
            ("passes-untouched", Verdict::PassesUntouched),
            ("solution-fails", Verdict::SolutionFails),
            ("valid", Verdict::Valid),
        ]),
        "{lines:#?}"
    );

    let valid = by_name["valid"];
    assert_eq!((valid.nop_score, valid.oracle_passes, valid.oracle_runs), (Some(0.0), 3, 3), "{lines:#?}");
    assert_eq!(valid.times.oracle_secs.len(), 3);
    assert!(valid.times.nop_secs > 0.0 && valid.times.oracle_secs.iter().all(|s| *s > 0.0));
    // It says nothing of its network, so it was also run without one (and needs none).
    assert_eq!(valid.offline_ok, Some(true), "{lines:#?}");
    assert!(valid.line().starts_with("valid "), "{}", valid.line());

    let flaky = by_name["flaky"];
    assert_eq!((flaky.oracle_passes, flaky.oracle_runs), (2, 3), "{lines:#?}");
    assert!(flaky.reason.contains("passed 2 of 3 runs"), "{}", flaky.reason);
    assert!(by_name["solution-fails"].reason.contains("failed 3 of 3 runs"), "{}", by_name["solution-fails"].reason);
    assert!(
        by_name["broken-build"].reason.contains("exit") || by_name["broken-build"].reason.contains('7'),
        "{}",
        by_name["broken-build"].reason
    );
    assert!(by_name["passes-untouched"].reason.contains("doing nothing resolves it"));
    // The nop run's logs are where the report says.
    assert!(valid.logs.join("oracle-3").join("tests.log").is_file(), "{}", valid.logs.display());
    support::assert_nothing_left(&run_id);
}
