//! `agent judge-eval`: a suite of trajectories with expected score ranges, judged by one
//! or more judges several times each, and the judges ranked by how often they land in
//! range, how far they miss, and how much they vary.

use std::path::{Path, PathBuf};

use futures_util::future::join_all;
use serde::{Deserialize, Serialize};

use super::{Judge, JudgeError, JudgedEpisode};

/// One case of the suite (`assets/judge-eval/NAME.yaml`).
#[derive(Debug, Clone, Deserialize)]
pub struct CaseFile {
    /// A short name.
    pub name: String,
    /// What the agent does in this trajectory.
    pub description: String,
    /// Why the expected range is what it is.
    pub why: String,
    /// The expected score range `[low, high]`.
    pub expected: [f64; 2],
    /// The trajectory JSONL, relative to the case file.
    pub trajectory: PathBuf,
    /// How the trajectory was made.
    #[serde(default)]
    pub source: String,
}

/// A loaded case.
#[derive(Debug, Clone)]
pub struct Case {
    /// The case's definition.
    pub file: CaseFile,
    /// Its episode.
    pub episode: JudgedEpisode,
}

/// Loads every `*.yaml` case in `dir`, sorted by name; errors name the file and field.
pub fn load_suite(dir: &Path) -> Result<Vec<Case>, JudgeError> {
    let entries = std::fs::read_dir(dir)
        .map_err(|e| JudgeError::Suite(format!("cannot read the judge-eval suite {}: {e}", dir.display())))?;
    let mut paths: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
        .collect();
    paths.sort();
    let mut cases = Vec::new();
    for path in paths {
        let text = std::fs::read_to_string(&path)
            .map_err(|e| JudgeError::Suite(format!("cannot read {}: {e}", path.display())))?;
        let file: CaseFile = serde_yaml::from_str(&text)
            .map_err(|e| JudgeError::Suite(format!("{} is not a judge-eval case: {e}", path.display())))?;
        let [lo, hi] = file.expected;
        if !(0.0..=1.0).contains(&lo) || !(0.0..=1.0).contains(&hi) || lo > hi {
            return Err(JudgeError::Suite(format!(
                "{}: field `expected` must be [low, high] within 0..1, got [{lo}, {hi}]",
                path.display()
            )));
        }
        let traj = path.parent().unwrap_or(Path::new(".")).join(&file.trajectory);
        let episode = JudgedEpisode::from_trajectory_file(&traj)?;
        cases.push(Case { file, episode });
    }
    if cases.is_empty() {
        return Err(JudgeError::Suite(format!("no *.yaml cases in {}", dir.display())));
    }
    Ok(cases)
}

/// One judge's results on one case.
#[derive(Debug, Clone, Serialize)]
pub struct CaseResult {
    /// The case's name.
    pub case: String,
    /// The expected range.
    pub expected: [f64; 2],
    /// Each attempt's score, or `None` when that judgement failed.
    pub scores: Vec<Option<f64>>,
    /// The failures' reasons.
    pub failures: Vec<String>,
}

impl CaseResult {
    fn in_range(&self, s: f64) -> bool {
        // Scores are read from text with two decimals; a hair outside is inside.
        s >= self.expected[0] - 1e-9 && s <= self.expected[1] + 1e-9
    }

    fn distance(&self, s: f64) -> f64 {
        (self.expected[0] - s).max(s - self.expected[1]).max(0.0)
    }
}

/// One judge's results on the suite.
#[derive(Debug, Clone, Serialize)]
pub struct JudgeResult {
    /// The judge's name (its model spec).
    pub judge: String,
    /// Per case.
    pub cases: Vec<CaseResult>,
    /// Judgements inside the expected range, over all judgements (failures are misses).
    pub pass_rate: f64,
    /// Mean distance of successful judgements to their range (0 inside it).
    pub mean_distance: f64,
    /// Mean over cases of the variance of the scores across attempts.
    pub mean_variance: f64,
    /// Judgements that failed.
    pub failures: usize,
}

/// Summarises per-case results.
pub fn summarise(judge: String, cases: Vec<CaseResult>) -> JudgeResult {
    let total: usize = cases.iter().map(|c| c.scores.len()).sum();
    let scored: Vec<(f64, &CaseResult)> =
        cases.iter().flat_map(|c| c.scores.iter().flatten().map(move |s| (*s, c))).collect();
    let passed = scored.iter().filter(|(s, c)| c.in_range(*s)).count();
    let mean_distance = if scored.is_empty() {
        1.0
    } else {
        scored.iter().map(|(s, c)| c.distance(*s)).sum::<f64>() / scored.len() as f64
    };
    let variances: Vec<f64> = cases
        .iter()
        .filter_map(|c| {
            let v: Vec<f64> = c.scores.iter().flatten().copied().collect();
            (v.len() > 1).then(|| {
                let mean = v.iter().sum::<f64>() / v.len() as f64;
                v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (v.len() - 1) as f64
            })
        })
        .collect();
    let mean_variance = if variances.is_empty() { 0.0 } else { variances.iter().sum::<f64>() / variances.len() as f64 };
    JudgeResult {
        judge,
        pass_rate: if total == 0 { 0.0 } else { passed as f64 / total as f64 },
        mean_distance,
        mean_variance,
        failures: total - scored.len(),
        cases,
    }
}

/// Runs one judge over the suite, `attempts` judgements per case, all cases at once (the
/// judge's own concurrency limit applies).
pub async fn evaluate(judge: &Judge, spec: &str, cases: &[Case], attempts: u32) -> JudgeResult {
    let runs = cases.iter().map(|case| async move {
        let verdicts = join_all((0..u64::from(attempts.max(1))).map(|n| judge.judge(&case.episode, n))).await;
        let mut scores = Vec::new();
        let mut failures = Vec::new();
        for v in verdicts {
            match v {
                Ok(v) => scores.push(Some(v.score)),
                Err(f) => {
                    scores.push(None);
                    failures.push(f.to_string());
                }
            }
        }
        CaseResult { case: case.file.name.clone(), expected: case.file.expected, scores, failures }
    });
    summarise(spec.to_string(), join_all(runs).await)
}

/// Ranks judges: highest pass rate, then smallest distance, then least variance.
pub fn rank(mut results: Vec<JudgeResult>) -> Vec<JudgeResult> {
    results.sort_by(|a, b| {
        b.pass_rate
            .total_cmp(&a.pass_rate)
            .then(a.mean_distance.total_cmp(&b.mean_distance))
            .then(a.mean_variance.total_cmp(&b.mean_variance))
    });
    results
}

#[cfg(test)]
mod tests {
    use super::*;

    fn case(expected: [f64; 2], scores: Vec<Option<f64>>) -> CaseResult {
        CaseResult { case: "c".into(), expected, scores, failures: vec![] }
    }

    #[test]
    fn statistics_count_failures_as_misses() {
        let r = summarise(
            "j".into(),
            vec![case([0.8, 1.0], vec![Some(0.9), Some(0.7), None]), case([0.0, 0.1], vec![Some(0.0), Some(0.0)])],
        );
        assert!((r.pass_rate - 3.0 / 5.0).abs() < 1e-12);
        assert_eq!(r.failures, 1);
        // Distances 0, 0.1, 0, 0 over four scored judgements.
        assert!((r.mean_distance - 0.025).abs() < 1e-12);
        // Variance of (0.9, 0.7) is 0.02; of (0, 0) is 0.
        assert!((r.mean_variance - 0.01).abs() < 1e-12);
    }

    #[test]
    fn ranking_prefers_pass_rate_then_distance() {
        let a = summarise("a".into(), vec![case([0.0, 0.5], vec![Some(0.9)])]);
        let b = summarise("b".into(), vec![case([0.0, 0.5], vec![Some(0.6)])]);
        let c = summarise("c".into(), vec![case([0.0, 0.5], vec![Some(0.1)])]);
        let names: Vec<String> = rank(vec![a, b, c]).into_iter().map(|r| r.judge).collect();
        assert_eq!(names, ["c", "b", "a"]);
    }

    #[test]
    fn the_shipped_suite_loads() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../assets/judge-eval");
        let cases = load_suite(&dir).unwrap();
        assert!(cases.len() >= 10, "{} cases", cases.len());
        for c in &cases {
            assert!(!c.file.why.trim().is_empty(), "{} documents its range", c.file.name);
            assert!(!c.episode.turns.is_empty(), "{}", c.file.name);
        }
    }
}
