//! The evaluations of a training run: before training, after the warm start, after
//! GRPO, each the same rollouts (tasks in turn, fixed seeds), with success rates
//! clustered by task, per family, and paired comparisons between them (`eval.json`).

pub mod families;
pub mod stats;

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::checkpoint::write_atomic;
use crate::dist::{share_of, Collective};
use crate::error::TrainError;
use crate::progress::progress_bar;
use crate::rollout::{run_spread, Rollout, RolloutPlan, RolloutRunner, RolloutStatus};
use crate::step::mix_seed;

pub use stats::{Outcome, Paired, Rate};

/// One evaluation, as written to `OUT/NAME.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Evaluation {
    /// Resolved share of the rollouts that ran (crashed ones left out).
    #[serde(deserialize_with = "stats::nan_if_null")]
    pub success_rate: f64,
    pub rollouts: usize,
    pub crashed: usize,
    #[serde(deserialize_with = "stats::nan_if_null")]
    pub mean_reward: f64,
    pub temperature: f64,
    /// Turns of the counted rollouts, and those whose reply wrote letters nothing in the
    /// episode showed (a damaged model's sign).
    pub turns: usize,
    pub foreign_letter_turns: usize,
    /// The success rate with its error clustered by task.
    pub clustered: Rate,
    pub families: BTreeMap<String, Rate>,
    /// Every counted rollout's result (what the paired comparisons match).
    pub outcomes: Vec<Outcome>,
}

impl Evaluation {
    /// Reads `OUT/NAME.json` written by an earlier evaluation of this run (for a resumed
    /// run); `None` when it is absent or from an older version without outcomes.
    pub fn read(out: &Path, name: &str) -> Option<Evaluation> {
        serde_json::from_slice(&std::fs::read(out.join(format!("{name}.json"))).ok()?).ok()
    }
}

/// Runs `runner`'s evaluation rollouts (`n` of them, tasks in turn, seeds fixed by the
/// run's seed so every evaluation of a run sees the same tasks and seeds) into
/// `OUT/NAME/`, and writes `OUT/NAME.json` on rank 0. `families[i]` is the family of
/// `runner.tasks[i]`.
#[allow(clippy::too_many_arguments)]
pub async fn evaluate(
    runner: &RolloutRunner,
    families: &[String],
    n: usize,
    seed: u64,
    out: &Path,
    name: &str,
    progress: bool,
    world: &dyn Collective,
) -> Result<Evaluation, TrainError> {
    let plans: Vec<RolloutPlan> = (0..n)
        .map(|i| RolloutPlan { task: i % runner.tasks.len(), member: i, seed: mix_seed(&[seed, 0xE7A1, i as u64]) })
        .collect();
    let share = share_of(&plans, world.rank(), world.world_size()).len();
    let bar = progress_bar(progress, share as u64, name);
    let rollouts = run_spread(runner, &plans, &out.join(name), world, &|_| bar.inc(1)).await?;
    bar.finish_and_clear();
    let counted: Vec<&Rollout> = rollouts.iter().filter(|r| r.status != RolloutStatus::Crashed).collect();
    if counted.is_empty() {
        let why = rollouts.first().map(|r| r.reason.clone()).unwrap_or_default();
        return Err(TrainError::Other(format!("every evaluation rollout crashed (first reason: {why})")));
    }
    let outcomes: Vec<Outcome> = counted
        .iter()
        .map(|r| Outcome {
            task: runner.tasks[r.task].name.clone(),
            family: families.get(r.task).cloned().unwrap_or_else(|| runner.tasks[r.task].name.clone()),
            member: r.member,
            resolved: r.resolved,
        })
        .collect();
    let clustered = stats::rate(&outcomes);
    let (turns, foreign) = foreign_letter_turns(runner, &counted, &out.join(name));
    if foreign > 0 {
        tracing::warn!(
            "{name}: {foreign} of {turns} turns wrote letters nothing in the episode showed (see `foreign_letters` in \
             {}/*/trajectory.jsonl): a sign of a damaged model",
            out.join(name).display()
        );
    }
    let evaluation = Evaluation {
        success_rate: clustered.rate,
        rollouts: rollouts.len(),
        crashed: rollouts.len() - counted.len(),
        mean_reward: counted.iter().map(|r| r.reward).sum::<f64>() / counted.len() as f64,
        temperature: runner.sampling.temperature,
        turns,
        foreign_letter_turns: foreign,
        clustered,
        families: stats::by_family(&outcomes),
        outcomes,
    };
    if world.rank() == 0 {
        let json = serde_json::to_vec_pretty(&evaluation).map_err(|e| TrainError::Other(e.to_string()))?;
        write_atomic(&out.join(format!("{name}.json")), &json)?;
    }
    Ok(evaluation)
}

/// Turns of the rollouts' trajectories, and those among them whose reply had letters
/// nothing shown to the model had (`TurnRecord::foreign_letters`).
fn foreign_letter_turns(runner: &RolloutRunner, rollouts: &[&Rollout], dir: &Path) -> (usize, usize) {
    let mut counts = (0, 0);
    for r in rollouts {
        let path = dir.join(format!("{}-{}", runner.tasks[r.task].name, r.member)).join("trajectory.jsonl");
        let Ok(text) = std::fs::read_to_string(&path) else { continue };
        let trajectory = agent_protocol::trajectory::Trajectory::parse_lenient(&text);
        counts.0 += trajectory.turns.len();
        counts.1 += trajectory.foreign_letter_turns();
    }
    counts
}

/// What a finished run reports (also written to `out/eval.json`).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct EvalReport {
    /// Success rate of the evaluation rollouts before training (NaN, `null`, without).
    pub before: f64,
    /// After the warm start, before GRPO (`null` without a warm start).
    pub after_warm_start: Option<f64>,
    /// After training.
    pub after: f64,
    /// Evaluation rollouts on each side.
    pub rollouts: usize,
    /// Standard error of `before`, clustered by task.
    pub before_se: f64,
    /// Standard error of `after_warm_start`, clustered by task.
    pub after_warm_start_se: Option<f64>,
    /// Standard error of `after`, clustered by task.
    pub after_se: f64,
    /// The evaluations' sampling temperature (`eval.temperature`).
    pub temperature: f64,
    /// Families kept out of training and evaluated alone (`--heldout-families`).
    pub heldout_families: Vec<String>,
    /// Each family's rates: `before`, `after_warm_start`, `after`.
    pub families: BTreeMap<String, BTreeMap<String, Rate>>,
    /// Paired comparisons over the same tasks and seeds: `after_vs_before`, and with a
    /// warm start `warm_start_vs_before` and `after_vs_warm_start` (what GRPO added).
    pub paired: BTreeMap<String, Paired>,
}

impl EvalReport {
    /// The report of the evaluations a run made (`None`: that evaluation did not run).
    pub fn new(
        before: Option<&Evaluation>,
        warm: Option<&Evaluation>,
        after: Option<&Evaluation>,
        rollouts: usize,
        temperature: f64,
        heldout_families: Vec<String>,
    ) -> EvalReport {
        let rate = |e: Option<&Evaluation>| e.map_or(f64::NAN, |e| e.clustered.rate);
        let se = |e: Option<&Evaluation>| e.map_or(f64::NAN, |e| e.clustered.se);
        let mut families: BTreeMap<String, BTreeMap<String, Rate>> = BTreeMap::new();
        for (when, e) in [("before", before), ("after_warm_start", warm), ("after", after)] {
            for (family, r) in e.map(|e| e.families.clone()).unwrap_or_default() {
                families.entry(family).or_default().insert(when.to_string(), r);
            }
        }
        let mut paired = BTreeMap::new();
        for (name, a, b) in [
            ("after_vs_before", before, after),
            ("warm_start_vs_before", before, warm),
            ("after_vs_warm_start", warm, after),
        ] {
            if let (Some(a), Some(b)) = (a, b) {
                if let Some(p) = stats::paired(&a.outcomes, &b.outcomes) {
                    paired.insert(name.to_string(), p);
                }
            }
        }
        EvalReport {
            before: rate(before),
            after_warm_start: warm.map(|e| e.clustered.rate),
            after: rate(after),
            rollouts,
            before_se: se(before),
            after_warm_start_se: warm.map(|e| e.clustered.se),
            after_se: se(after),
            temperature,
            heldout_families,
            families,
            paired,
        }
    }

    /// One line for the terminal: the rates and what the paired comparison says.
    pub fn summary(&self) -> String {
        let pct = |r: f64| if r.is_nan() { "–".to_string() } else { format!("{:.1}%", r * 100.0) };
        let mut s = format!("success rate {}", pct(self.before));
        if let Some(w) = self.after_warm_start {
            s.push_str(&format!(" → {} after the warm start", pct(w)));
        }
        s.push_str(&format!(" → {} over {} evaluation rollouts", pct(self.after), self.rollouts));
        if let Some(p) = self.paired.get("after_vs_before") {
            s.push_str(&format!(
                " (paired: {:+.1} points, 95% CI {:+.1} to {:+.1}, p = {:.3}, clustered over {} tasks)",
                p.diff * 100.0,
                p.low * 100.0,
                p.high * 100.0,
                p.p_value,
                p.tasks
            ));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn evaluation(results: &[(&str, &str, bool)]) -> Evaluation {
        let outcomes: Vec<Outcome> = results
            .iter()
            .enumerate()
            .map(|(i, (t, f, ok))| Outcome { task: t.to_string(), family: f.to_string(), member: i, resolved: *ok })
            .collect();
        let clustered = stats::rate(&outcomes);
        Evaluation {
            success_rate: clustered.rate,
            rollouts: outcomes.len(),
            crashed: 0,
            mean_reward: 0.0,
            temperature: 0.7,
            turns: 0,
            foreign_letter_turns: 0,
            clustered,
            families: stats::by_family(&outcomes),
            outcomes,
        }
    }

    /// The report keeps the three evaluations apart, per family, and pairs them.
    #[test]
    fn the_report_separates_warm_start_from_grpo_per_family() {
        let tasks = [("a1", "a"), ("a2", "a"), ("b1", "b"), ("b2", "b")];
        let run = |ok: [bool; 4]| {
            let r: Vec<(&str, &str, bool)> = tasks.iter().zip(ok).map(|((t, f), ok)| (*t, *f, ok)).collect();
            evaluation(&r)
        };
        let before = run([false, false, false, false]);
        let warm = run([true, false, true, false]);
        let after = run([true, true, true, false]);
        let r = EvalReport::new(Some(&before), Some(&warm), Some(&after), 4, 0.7, vec!["b".into()]);
        assert_eq!((r.before, r.after_warm_start, r.after), (0.0, Some(0.5), 0.75));
        assert_eq!(r.families["a"]["after"].rate, 1.0);
        assert_eq!(r.families["b"]["after_warm_start"].rate, 0.5);
        assert!((r.paired["after_vs_warm_start"].diff - 0.25).abs() < 1e-12);
        assert!((r.paired["warm_start_vs_before"].diff - 0.5).abs() < 1e-12);
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["heldout_families"][0], "b");
        assert!(r.summary().contains("→ 50.0% after the warm start → 75.0%"), "{}", r.summary());
        // Without a warm start there is nothing to pair it with.
        let r = EvalReport::new(Some(&before), None, Some(&after), 4, 0.7, Vec::new());
        assert_eq!(r.paired.keys().collect::<Vec<_>>(), ["after_vs_before"]);
        assert_eq!(serde_json::to_value(&r).unwrap()["after_warm_start"], serde_json::Value::Null);
    }

    #[test]
    fn an_evaluation_reads_back_what_it_wrote() {
        // One task: no clustered error, written as null and read back as NaN.
        let dir0 = tempfile::tempdir().unwrap();
        let one = evaluation(&[("a1", "a", true)]);
        std::fs::write(dir0.path().join("e.json"), serde_json::to_vec(&one).unwrap()).unwrap();
        assert!(Evaluation::read(dir0.path(), "e").unwrap().clustered.se.is_nan());
        let dir = tempfile::tempdir().unwrap();
        let e = evaluation(&[("a1", "a", true), ("b1", "b", false)]);
        std::fs::write(dir.path().join("eval-before.json"), serde_json::to_vec(&e).unwrap()).unwrap();
        // Compared as JSON: a family of one task has NaN errors, and NaN ≠ NaN.
        let back = Evaluation::read(dir.path(), "eval-before").unwrap();
        assert_eq!(serde_json::to_value(&back).unwrap(), serde_json::to_value(&e).unwrap());
        assert!(back.families["a"].se.is_nan());
        std::fs::write(dir.path().join("eval-old.json"), br#"{"success_rate": 0.5}"#).unwrap();
        assert_eq!(Evaluation::read(dir.path(), "eval-old"), None);
    }
}
