use std::cell::Cell;

use super::*;

fn rollout(status: RolloutStatus, reward: f64) -> Rollout {
    Rollout {
        task: 0,
        member: 1,
        tests_score: reward,
        judge_score: None,
        judge_secs: 0.0,
        reward,
        resolved: reward == 1.0,
        status,
        reason: format!("{status:?}"),
        recording: Recording::default(),
        engine: Some("local".into()),
    }
}

#[tokio::test]
async fn a_crashed_rollout_runs_once_more_and_its_logs_stay_aside() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data-apple-1");
    let tries = Cell::new(0);
    let got = once_more_if_crashed(&dir, "data-apple", 1, || {
        tries.set(tries.get() + 1);
        let first = tries.get() == 1;
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("trial.json"), if first { "crashed" } else { "complete" }).unwrap();
        async move { rollout(if first { RolloutStatus::Crashed } else { RolloutStatus::Complete }, 1.0) }
    })
    .await;
    assert_eq!((tries.get(), got.status), (2, RolloutStatus::Complete));
    assert_eq!(std::fs::read_to_string(dir.join("trial.json")).unwrap(), "complete");
    let aside = tmp.path().join("data-apple-1.crashed/trial.json");
    assert_eq!(std::fs::read_to_string(aside).unwrap(), "crashed");
}

#[tokio::test]
async fn a_rollout_that_crashes_twice_stays_crashed_and_others_run_once() {
    let tmp = tempfile::tempdir().unwrap();
    for (status, want_tries) in [
        (RolloutStatus::Crashed, 2),
        (RolloutStatus::Complete, 1),
        (RolloutStatus::Truncated, 1),
        (RolloutStatus::TimedOut, 1),
    ] {
        let tries = Cell::new(0);
        let got = once_more_if_crashed(&tmp.path().join("never-made"), "t", 0, || {
            tries.set(tries.get() + 1);
            async move { rollout(status, 0.0) }
        })
        .await;
        assert_eq!((got.status, tries.get()), (status, want_tries));
    }
}
