//! Why tests that ran did not resolve a trial, in words for its `reason`: the tests
//! that failed when the output names them (pytest's `-rA` summary), else the reward,
//! the script's exit code and the end of its output.

use super::super::pytest::{parse_pytest, TestResult};
use super::super::verify::TestRun;

/// Failed tests named in a reason before the rest are counted.
const NAMED: usize = 5;

/// The reason a run that scored `reward` (below 1) did not resolve; `script` names
/// the test script (`tests/test.sh`).
pub(super) fn low_reward(run: &TestRun, reward: f64, script: &str) -> String {
    let tests = parse_pytest(&run.output).unwrap_or_default();
    match failed(&tests) {
        Some(names) => format!("{script} wrote reward {reward}: {names}"),
        None => format!("{script} wrote reward {reward}{}", exit_and_tail(run)),
    }
}

/// The reason a run wrote no reward at all.
pub(super) fn no_reward(run: &TestRun, script: &str) -> String {
    format!(
        "{script} wrote no readable reward to {} or {}{}",
        super::super::verify::REWARD_FILE,
        super::super::verify::REWARD_JSON,
        exit_and_tail(run)
    )
}

/// `failed tests: a, b (2 of 7)`, or `None` when no test failed.
pub(super) fn failed(tests: &[TestResult]) -> Option<String> {
    let failed: Vec<&str> = tests.iter().filter(|t| !t.status.is_pass()).map(|t| t.name.as_str()).collect();
    if failed.is_empty() {
        return None;
    }
    let mut names = failed.iter().take(NAMED).copied().collect::<Vec<_>>().join(", ");
    if failed.len() > NAMED {
        names.push_str(", …");
    }
    Some(format!("failed tests: {names} ({} of {})", failed.len(), tests.len()))
}

/// `(exit code N); the output ends with: …` (empty parts left out).
fn exit_and_tail(run: &TestRun) -> String {
    let exit = run.exit_code.map(|c| format!(" (exit code {c})")).unwrap_or_default();
    let lines: Vec<&str> = run.output.trim().lines().rev().take(3).collect();
    let tail: String = lines.into_iter().rev().collect::<Vec<_>>().join(" | ").chars().take(300).collect();
    if tail.is_empty() {
        format!("{exit}; it printed nothing")
    } else {
        format!("{exit}; the output ends with: {tail}")
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use super::*;
    use crate::verify::VerifiedBy;

    fn run(output: &str, exit_code: Option<i64>) -> TestRun {
        TestRun {
            verified_by: VerifiedBy::RewardFile,
            note: None,
            output: output.into(),
            exit_code,
            timed_out: false,
            reward: None,
            rewards: BTreeMap::new(),
            duration: Duration::ZERO,
            setup_secs: 0.0,
        }
    }

    #[test]
    fn a_zero_reward_names_the_failed_tests() {
        let out = "=========== short test summary info ===========\n\
                   PASSED ../tests/test_outputs.py::test_exists\nFAILED ../tests/test_outputs.py::test_content - assert 1 == 2\n\
                   ========= 1 failed, 1 passed in 0.1s =========\n";
        let why = low_reward(&run(out, Some(1)), 0.0, "tests/test.sh");
        assert!(why.starts_with("tests/test.sh wrote reward 0: failed tests: "), "{why}");
        assert!(why.contains("test_content") && why.ends_with("(1 of 2)") && !why.contains("test_exists,"), "{why}");
    }

    #[test]
    fn without_test_names_the_exit_code_and_output_say_why() {
        let why = low_reward(&run("checking\nFAIL: answer=42\n", Some(0)), 0.0, "tests/test.sh");
        assert_eq!(why, "tests/test.sh wrote reward 0 (exit code 0); the output ends with: checking | FAIL: answer=42");
        let why = no_reward(&run("", Some(127)), "tests/test.sh");
        assert!(why.contains("reward.txt") && why.ends_with("(exit code 127); it printed nothing"), "{why}");
    }
}
