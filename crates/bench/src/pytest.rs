//! Parsing pytest's `-rA` short test summary, the way Terminal-Bench scores TB1 tasks.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The outcome pytest reported for one test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum TestStatus {
    Passed,
    Failed,
    Error,
    Skipped,
    Xfail,
    Xpass,
}

impl TestStatus {
    /// SKIPPED and XFAIL count as passed; FAILED, ERROR and XPASS (an unexpected pass
    /// of a test marked as failing) as failed.
    pub fn is_pass(self) -> bool {
        matches!(self, TestStatus::Passed | TestStatus::Skipped | TestStatus::Xfail)
    }

    fn parse(word: &str) -> Option<TestStatus> {
        Some(match word {
            "PASSED" => TestStatus::Passed,
            "FAILED" => TestStatus::Failed,
            "ERROR" => TestStatus::Error,
            "SKIPPED" => TestStatus::Skipped,
            "XFAIL" => TestStatus::Xfail,
            "XPASS" => TestStatus::Xpass,
            _ => return None,
        })
    }
}

/// One line of the summary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TestResult {
    /// The test id as pytest printed it (`path::test_name`).
    pub name: String,
    pub status: TestStatus,
}

/// Why the output could not be scored.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ParseError {
    #[error("the test output has no pytest summary (no `short test summary info` section; did pytest run with -rA?)")]
    NoSummary,
    #[error("the pytest summary lists no tests")]
    NoTests,
}

/// Parses the last `short test summary info` section of `output`.
pub fn parse_pytest(output: &str) -> Result<Vec<TestResult>, ParseError> {
    let lines: Vec<&str> = output.lines().collect();
    let start = lines
        .iter()
        .rposition(|l| {
            l.trim_start_matches('=').trim_start().starts_with("short test summary info") && l.starts_with('=')
        })
        .ok_or(ParseError::NoSummary)?;
    let mut results = Vec::new();
    for line in &lines[start + 1..] {
        if line.starts_with('=') {
            break;
        }
        let mut words = line.split_whitespace();
        let Some(status) = words.next().and_then(TestStatus::parse) else { continue };
        let rest: Vec<&str> = words.collect();
        let name = if status == TestStatus::Skipped {
            // `SKIPPED [1] path:line: reason`
            rest.iter().find(|w| !w.starts_with('[')).map(|w| w.trim_end_matches(':')).unwrap_or("").to_string()
        } else {
            rest.first().copied().unwrap_or("").to_string()
        };
        results.push(TestResult { name, status });
    }
    if results.is_empty() {
        return Err(ParseError::NoTests);
    }
    Ok(results)
}

/// Every test passed (and there was at least one).
pub fn all_passed(results: &[TestResult]) -> bool {
    !results.is_empty() && results.iter().all(|r| r.status.is_pass())
}

/// The weighted share of passed tests; tests without a weight count 1 when no test
/// has one and 0 otherwise (Terminal-Bench weights name every scored test).
pub fn weighted_score(results: &[TestResult], weights: Option<&BTreeMap<String, f64>>) -> f64 {
    let weight = |r: &TestResult| -> f64 {
        match weights {
            None => 1.0,
            Some(w) => {
                let short = r.name.rsplit("::").next().unwrap_or(&r.name);
                w.get(short).or_else(|| w.get(&r.name)).copied().unwrap_or(0.0)
            }
        }
    };
    let total: f64 = results.iter().map(weight).sum();
    if total <= 0.0 {
        return 0.0;
    }
    // A fold from +0.0: `Sum` for floats starts at -0.0, which results.json would show as
    // a score of `-0.0` when nothing passed.
    results.iter().filter(|r| r.status.is_pass()).map(weight).fold(0.0, |a, w| a + w) / total
}

/// Parses a TB2 reward file (`/logs/verifier/reward.txt`): one number.
pub fn parse_reward(text: &str) -> Option<f64> {
    text.trim().parse::<f64>().ok().filter(|r| r.is_finite())
}

/// Parses Harbor's other reward file (`/logs/verifier/reward.json`): an object of named
/// rewards, scored by its `reward` when it has one, else by the mean of its numbers.
pub fn parse_reward_json(text: &str) -> Option<f64> {
    let value: serde_json::Value = serde_json::from_str(text).ok()?;
    if let Some(r) = value.as_f64() {
        return Some(r).filter(|r| r.is_finite());
    }
    let named = value.as_object()?;
    if let Some(r) = named.get("reward") {
        return r.as_f64().filter(|r| r.is_finite());
    }
    let values: Vec<f64> = named.values().filter_map(serde_json::Value::as_f64).filter(|r| r.is_finite()).collect();
    (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    const OUT: &str = "\
============================= test session starts ==============================
collected 5 items

../tests/test_outputs.py .F.sx                                           [100%]

=================================== FAILURES ===================================
___________________________ test_hello_file_content ____________________________
E   AssertionError: short test summary info is not here
=========================== short test summary info ============================
PASSED ../tests/test_outputs.py::test_hello_file_exists
FAILED ../tests/test_outputs.py::test_hello_file_content - AssertionError: Expected 'Hello'
PASSED ../tests/test_outputs.py::test_third
SKIPPED [1] ../tests/test_outputs.py:20: not on this platform
XFAIL ../tests/test_outputs.py::test_known - bug 12
==================== 1 failed, 2 passed, 1 skipped, 1 xfailed in 0.12s ====================
";

    #[test]
    fn parses_every_status_and_scores() {
        let r = parse_pytest(OUT).unwrap();
        assert_eq!(r.len(), 5);
        assert_eq!(
            r[1],
            TestResult { name: "../tests/test_outputs.py::test_hello_file_content".into(), status: TestStatus::Failed }
        );
        assert_eq!(r[3].name, "../tests/test_outputs.py:20");
        assert!(r[3].status.is_pass() && r[4].status.is_pass());
        assert!(!all_passed(&r));
        let no_fail: Vec<_> = r.iter().filter(|t| t.status != TestStatus::Failed).cloned().collect();
        assert!(all_passed(&no_fail));
        assert!((weighted_score(&r, None) - 0.8).abs() < 1e-9);
        let w = BTreeMap::from([("test_hello_file_content".to_string(), 3.0), ("test_hello_file_exists".into(), 1.0)]);
        assert!((weighted_score(&r, Some(&w)) - 0.25).abs() < 1e-9);
        let failed: Vec<_> = r.iter().filter(|t| t.status == TestStatus::Failed).cloned().collect();
        let none = weighted_score(&failed, None);
        assert!(none == 0.0 && none.is_sign_positive(), "{none:?} (results.json must not say -0.0)");
    }

    #[test]
    fn xpass_and_error_fail() {
        let out = "=== short test summary info ===\nXPASS t.py::a\nPASSED t.py::b\n=== 1 passed ===\n";
        assert!(!all_passed(&parse_pytest(out).unwrap()));
        let out = "=== short test summary info ===\nERROR t.py::a - ImportError\n=== 1 error ===\n";
        assert!(!all_passed(&parse_pytest(out).unwrap()));
    }

    #[test]
    fn missing_summary_is_a_parse_error() {
        assert_eq!(parse_pytest("bash: pytest: command not found\n"), Err(ParseError::NoSummary));
        assert_eq!(parse_pytest("=== short test summary info ===\n=== no tests ran ===\n"), Err(ParseError::NoTests));
        assert_eq!(parse_reward(" 1.0\n"), Some(1.0));
        assert_eq!(parse_reward("yes"), None);
        assert_eq!(parse_reward_json(r#"{"reward": 0.25, "style": 1.0}"#), Some(0.25));
        assert_eq!(parse_reward_json(r#"{"correct": 1.0, "style": 0.5, "note": "x"}"#), Some(0.75));
        assert_eq!(parse_reward_json("1"), Some(1.0));
        assert_eq!(parse_reward_json(r#"{"reward": "high"}"#), None);
        assert_eq!(parse_reward_json("{}"), None);
        assert_eq!(parse_reward_json("[1, 2]"), None);
    }
}
