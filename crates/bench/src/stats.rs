//! Scores of a run: accuracy, unbiased pass@k, standard error, and breakdowns.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::results::TrialRecord;
use agent_protocol::TokenUsage;

/// Trials and resolved trials of one group (category, difficulty).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Group {
    pub trials: usize,
    pub resolved: usize,
    pub accuracy: f64,
}

/// The run's summary.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Summary {
    pub n_tasks: usize,
    pub n_trials: usize,
    pub n_resolved: usize,
    pub accuracy: f64,
    /// Standard error of the accuracy (see [`standard_error`]).
    pub stderr: f64,
    /// Unbiased pass@k for every k up to the attempts each task has.
    pub pass_at_k: BTreeMap<u32, f64>,
    pub by_category: BTreeMap<String, Group>,
    pub by_difficulty: BTreeMap<String, Group>,
    pub failure_modes: BTreeMap<String, usize>,
    pub verified_by: BTreeMap<String, usize>,
    pub tokens: TokenUsage,
    /// Sum of the trials' wall times.
    pub trial_secs_total: f64,
    pub trial_secs_mean: f64,
    /// Model turns in all trials.
    #[serde(default)]
    pub turns: u64,
    /// Turns whose reply had a parse error.
    #[serde(default)]
    pub parse_error_turns: u64,
    /// `parse_error_turns / turns` (0 without turns).
    #[serde(default)]
    pub parse_error_rate: f64,
    /// Tool calls in all trials that repeated an identical earlier call with nothing
    /// changed in between.
    #[serde(default)]
    pub repeated_calls: u64,
    /// Trials with at least one repeated call.
    #[serde(default)]
    pub trials_with_repeated_calls: usize,
    /// Turns whose reply wrote letters nothing the model was shown had.
    #[serde(default)]
    pub foreign_letter_turns: u64,
}

/// The unbiased estimator of pass@k for one task with `n` trials of which `c`
/// resolved: 1 − C(n−c, k) / C(n, k) (Chen et al., 2021), computed as a product.
pub fn pass_at_k(n: u32, c: u32, k: u32) -> f64 {
    if k == 0 || k > n {
        return f64::NAN;
    }
    if n - c < k {
        return 1.0;
    }
    let mut fail = 1.0;
    for i in (n - c + 1)..=n {
        fail *= 1.0 - k as f64 / i as f64;
    }
    1.0 - fail
}

/// The standard error the Terminal-Bench leaderboard reports: each attempt index is
/// one run over all tasks, and the error is the sample standard deviation of the
/// runs' accuracies over √runs. With a single attempt, the binomial √(p(1−p)/n).
pub fn standard_error(trials: &[TrialRecord]) -> f64 {
    let mut runs: BTreeMap<u32, (usize, usize)> = BTreeMap::new();
    for t in trials {
        let e = runs.entry(t.attempt).or_default();
        e.0 += 1;
        e.1 += t.resolved as usize;
    }
    if runs.len() >= 2 {
        let accs: Vec<f64> = runs.values().map(|(n, r)| *r as f64 / *n as f64).collect();
        let m = accs.len() as f64;
        let mean = accs.iter().sum::<f64>() / m;
        let var = accs.iter().map(|a| (a - mean).powi(2)).sum::<f64>() / (m - 1.0);
        return (var / m).sqrt();
    }
    let n = trials.len() as f64;
    if n == 0.0 {
        return 0.0;
    }
    let p = trials.iter().filter(|t| t.resolved).count() as f64 / n;
    (p * (1.0 - p) / n).sqrt()
}

fn group(groups: &mut BTreeMap<String, Group>, key: Option<&str>, resolved: bool) {
    let g = groups.entry(key.unwrap_or("(none)").to_string()).or_default();
    g.trials += 1;
    g.resolved += resolved as usize;
    g.accuracy = g.resolved as f64 / g.trials as f64;
}

/// Summarises the trials of a run.
pub fn summarise(trials: &[TrialRecord]) -> Summary {
    let mut s = Summary { n_trials: trials.len(), ..Default::default() };
    let mut per_task: BTreeMap<&str, (u32, u32)> = BTreeMap::new();
    for t in trials {
        let e = per_task.entry(&t.task).or_default();
        e.0 += 1;
        e.1 += t.resolved as u32;
        s.n_resolved += t.resolved as usize;
        group(&mut s.by_category, t.category.as_deref(), t.resolved);
        group(&mut s.by_difficulty, t.difficulty.as_deref(), t.resolved);
        *s.failure_modes.entry(t.failure_mode.as_str().to_string()).or_default() += 1;
        let v = match t.verified_by {
            Some(v) => serde_json::to_value(v).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default(),
            None => "(not verified)".to_string(),
        };
        *s.verified_by.entry(v).or_default() += 1;
        s.tokens.add(t.usage);
        s.trial_secs_total += t.timings.total_secs;
        s.turns += u64::from(t.turns);
        s.parse_error_turns += u64::from(t.parse_error_turns);
        s.repeated_calls += u64::from(t.repeated_calls);
        s.trials_with_repeated_calls += usize::from(t.repeated_calls > 0);
        s.foreign_letter_turns += u64::from(t.foreign_letter_turns);
    }
    if s.turns > 0 {
        s.parse_error_rate = s.parse_error_turns as f64 / s.turns as f64;
    }
    s.n_tasks = per_task.len();
    if s.n_trials > 0 {
        s.accuracy = s.n_resolved as f64 / s.n_trials as f64;
        s.trial_secs_mean = s.trial_secs_total / s.n_trials as f64;
    }
    s.stderr = standard_error(trials);
    let max_k = per_task.values().map(|(n, _)| *n).min().unwrap_or(0);
    for k in 1..=max_k {
        let vals: Vec<f64> = per_task.values().map(|(n, c)| pass_at_k(*n, *c, k)).collect();
        s.pass_at_k.insert(k, vals.iter().sum::<f64>() / vals.len() as f64);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::super::results::{FailureMode, Timings};
    use super::*;

    fn trial(task: &str, attempt: u32, resolved: bool) -> TrialRecord {
        TrialRecord {
            task: task.into(),
            attempt,
            resolved,
            failure_mode: if resolved { FailureMode::Unset } else { FailureMode::AgentTimeout },
            reason: String::new(),
            verified_by: None,
            verify_note: None,
            tests: vec![],
            score: 0.0,
            difficulty: Some("easy".into()),
            category: Some(if task == "a" { "x" } else { "y" }.into()),
            usage: TokenUsage { prompt_tokens: 10, completion_tokens: 1 },
            turns: 1,
            parse_error_turns: 0,
            repeated_calls: 0,
            foreign_letter_turns: 0,
            tool_format: None,
            agent_ended: String::new(),
            agent_end_reason: None,
            timings: Timings { total_secs: 2.0, ..Default::default() },
            started_at_unix_ms: 0,
            standins: Default::default(),
            notices: Vec::new(),
            engine: None,
            lost_on: Vec::new(),
            steps: None,
        }
    }

    #[test]
    fn pass_at_k_matches_the_closed_form() {
        // n=5, c=2, k=2: 1 - C(3,2)/C(5,2) = 1 - 3/10.
        assert!((pass_at_k(5, 2, 2) - 0.7).abs() < 1e-12);
        assert_eq!(pass_at_k(3, 0, 1), 0.0);
        assert_eq!(pass_at_k(3, 3, 2), 1.0);
        assert!((pass_at_k(4, 1, 1) - 0.25).abs() < 1e-12);
        assert!(pass_at_k(2, 1, 3).is_nan());
    }

    #[test]
    fn summary_of_two_tasks_two_attempts() {
        let t = vec![trial("a", 0, true), trial("a", 1, false), trial("b", 0, false), trial("b", 1, false)];
        let s = summarise(&t);
        assert_eq!((s.n_tasks, s.n_trials, s.n_resolved), (2, 4, 1));
        assert!((s.accuracy - 0.25).abs() < 1e-12);
        assert!((s.pass_at_k[&1] - 0.25).abs() < 1e-12);
        assert!((s.pass_at_k[&2] - 0.5).abs() < 1e-12);
        // Runs: attempt 0 = 0.5, attempt 1 = 0.0; sd = 0.3536, se = sd/√2 = 0.25.
        assert!((s.stderr - 0.25).abs() < 1e-9, "{}", s.stderr);
        assert_eq!(s.by_category["x"].accuracy, 0.5);
        assert_eq!(s.failure_modes["agent_timeout"], 3);
        assert_eq!(s.tokens.prompt_tokens, 40);
        assert_eq!((s.repeated_calls, s.trials_with_repeated_calls), (0, 0));
        let mut looping = t.clone();
        looping[1].repeated_calls = 2;
        looping[3].repeated_calls = 5;
        let s = summarise(&looping);
        assert_eq!((s.repeated_calls, s.trials_with_repeated_calls), (7, 2));
        let mut damaged = t.clone();
        damaged[0].foreign_letter_turns = 3;
        assert_eq!(summarise(&damaged).foreign_letter_turns, 3);
        // One attempt: the binomial error.
        let s = summarise(&t[..1]);
        assert_eq!(s.stderr, 0.0);
    }
}
