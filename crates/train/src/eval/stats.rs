//! Success rates with standard errors clustered by task, and paired comparisons of two
//! evaluations over the same tasks and seeds.
//!
//! An evaluation runs each task several times, and one task's rollouts succeed or fail
//! together far more than independent draws would: a binomial error over rollouts is
//! too small. The cluster-robust (CR1) variance treats each task as one draw of its
//! rollouts' summed residuals, so a set of 8 tasks run 8 times each is about as certain
//! as 8 tasks, not 64 rollouts.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize};

/// JSON writes NaN (no value: one task, no rollouts) as `null`; read it back as NaN.
pub(crate) fn nan_if_null<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

/// One evaluation rollout's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    /// The task's folder name.
    pub task: String,
    /// Its family (a generated task's) or, for any other task, its own name.
    pub family: String,
    /// The rollout's index in the evaluation (the same index has the same seed in every
    /// evaluation of a run).
    pub member: usize,
    pub resolved: bool,
}

/// A success rate with its clustered standard error and 95% interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Rate {
    #[serde(deserialize_with = "nan_if_null")]
    pub rate: f64,
    /// Standard error clustered by task (`null`, NaN, with fewer than two tasks).
    #[serde(deserialize_with = "nan_if_null")]
    pub se: f64,
    /// rate ± 1.96·se, clipped to [0, 1].
    #[serde(deserialize_with = "nan_if_null")]
    pub low: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub high: f64,
    pub rollouts: usize,
    pub tasks: usize,
}

/// A paired comparison: the second evaluation's success minus the first's over the
/// rollouts both ran (same task, same seed), clustered by task.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Paired {
    /// Mean difference in success (−1 to 1; 0.15 is 15 points).
    #[serde(deserialize_with = "nan_if_null")]
    pub diff: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub se: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub low: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub high: f64,
    /// Two-sided p-value of "no difference" (normal approximation).
    #[serde(deserialize_with = "nan_if_null")]
    pub p_value: f64,
    pub pairs: usize,
    pub tasks: usize,
}

const Z95: f64 = 1.959_963_984_540_054;

/// The cluster-robust standard error of the mean of `values` grouped by `cluster`.
fn clustered_se(values: &[(String, f64)]) -> f64 {
    let n = values.len();
    if n == 0 {
        return f64::NAN;
    }
    let mean = values.iter().map(|v| v.1).sum::<f64>() / n as f64;
    let mut sums: BTreeMap<&str, f64> = BTreeMap::new();
    for (c, v) in values {
        *sums.entry(c.as_str()).or_default() += v - mean;
    }
    let g = sums.len() as f64;
    if g < 2.0 {
        return f64::NAN;
    }
    let sq: f64 = sums.values().map(|s| s * s).sum();
    (g / (g - 1.0) * sq).sqrt() / n as f64
}

/// The success rate of `outcomes`, clustered by task.
pub fn rate<'a>(outcomes: impl IntoIterator<Item = &'a Outcome>) -> Rate {
    let values: Vec<(String, f64)> =
        outcomes.into_iter().map(|o| (o.task.clone(), if o.resolved { 1.0 } else { 0.0 })).collect();
    let n = values.len();
    let rate = if n == 0 { f64::NAN } else { values.iter().map(|v| v.1).sum::<f64>() / n as f64 };
    let se = clustered_se(&values);
    let tasks = values.iter().map(|v| v.0.as_str()).collect::<std::collections::BTreeSet<_>>().len();
    let (low, high) = interval(rate, se, 0.0, 1.0);
    Rate { rate, se, low, high, rollouts: n, tasks }
}

/// The rate of each family.
pub fn by_family(outcomes: &[Outcome]) -> BTreeMap<String, Rate> {
    let mut groups: BTreeMap<&str, Vec<&Outcome>> = BTreeMap::new();
    for o in outcomes {
        groups.entry(o.family.as_str()).or_default().push(o);
    }
    groups.into_iter().map(|(f, os)| (f.to_string(), rate(os))).collect()
}

/// `after` against `before`, rollout by rollout (matched on task and member); `None`
/// when they share no rollout.
pub fn paired(before: &[Outcome], after: &[Outcome]) -> Option<Paired> {
    let first: BTreeMap<(&str, usize), bool> =
        before.iter().map(|o| ((o.task.as_str(), o.member), o.resolved)).collect();
    let diffs: Vec<(String, f64)> = after
        .iter()
        .filter_map(|o| {
            let b = *first.get(&(o.task.as_str(), o.member))?;
            Some((o.task.clone(), f64::from(u8::from(o.resolved)) - f64::from(u8::from(b))))
        })
        .collect();
    if diffs.is_empty() {
        return None;
    }
    let n = diffs.len();
    let diff = diffs.iter().map(|d| d.1).sum::<f64>() / n as f64;
    let se = clustered_se(&diffs);
    let tasks = diffs.iter().map(|d| d.0.as_str()).collect::<std::collections::BTreeSet<_>>().len();
    let p_value = if se.is_nan() {
        f64::NAN
    } else if se == 0.0 {
        // Every task moved by the same amount in every rollout.
        if diff == 0.0 {
            1.0
        } else {
            0.0
        }
    } else {
        2.0 * (1.0 - normal_cdf((diff / se).abs()))
    };
    let (low, high) = interval(diff, se, -1.0, 1.0);
    Some(Paired { diff, se, low, high, p_value, pairs: n, tasks })
}

fn interval(mid: f64, se: f64, lo: f64, hi: f64) -> (f64, f64) {
    if mid.is_nan() || se.is_nan() {
        return (f64::NAN, f64::NAN);
    }
    ((mid - Z95 * se).max(lo), (mid + Z95 * se).min(hi))
}

/// Φ(x), the standard normal distribution function (erfc by Numerical Recipes'
/// Chebyshev fit, relative error below 1.2e-7).
pub fn normal_cdf(x: f64) -> f64 {
    0.5 * erfc(-x / std::f64::consts::SQRT_2)
}

fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -z * z - 1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98 + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let r = t * poly.exp();
    if x >= 0.0 {
        r
    } else {
        2.0 - r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn o(task: &str, member: usize, resolved: bool) -> Outcome {
        Outcome { task: task.into(), family: task.split('-').next().unwrap_or("").into(), member, resolved }
    }

    #[test]
    fn the_normal_distribution_function_has_its_known_values() {
        assert!((normal_cdf(0.0) - 0.5).abs() < 1e-7);
        assert!((normal_cdf(1.959_963_984_540_054) - 0.975).abs() < 1e-6);
        assert!((normal_cdf(-1.0) - 0.158_655_253_9).abs() < 1e-6);
    }

    /// Two tasks, one always solved and one never: 50% with a wide interval (two
    /// clusters), where a binomial error over 16 rollouts would claim ±12.5 points.
    #[test]
    fn rollouts_of_one_task_count_as_one_cluster() {
        let outs: Vec<Outcome> = (0..8).map(|m| o("a-1", m, true)).chain((8..16).map(|m| o("b-1", m, false))).collect();
        let r = rate(&outs);
        assert_eq!((r.rate, r.rollouts, r.tasks), (0.5, 16, 2));
        // CR1 by hand: residual sums ±4, variance 2/1·(16+16)/16² = 0.25, se 0.5.
        assert!((r.se - 0.5).abs() < 1e-12, "{r:?}");
        let binomial = (0.25f64 / 16.0).sqrt();
        assert!(r.se > 3.0 * binomial);
        assert_eq!((r.low, r.high), (0.0, 1.0));
        // One rollout per task: CR1 is the usual error with a G/(G−1) factor.
        let outs: Vec<Outcome> = (0..10).map(|m| o(&format!("t{m}-x"), m, m < 3)).collect();
        let r = rate(&outs);
        let plain = (0.3f64 * 0.7 / 10.0).sqrt() * (10.0f64 / 9.0).sqrt();
        assert!((r.se - plain).abs() < 1e-12, "{} vs {plain}", r.se);
        assert!(rate(&outs[..1]).se.is_nan(), "one task has no clustered error");
    }

    #[test]
    fn families_are_rated_apart() {
        let outs = vec![o("a-1", 0, true), o("a-2", 1, false), o("b-1", 2, true), o("b-2", 3, true)];
        let f = by_family(&outs);
        assert_eq!(f.keys().collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!((f["a"].rate, f["a"].tasks), (0.5, 2));
        assert_eq!(f["b"].rate, 1.0);
    }

    /// Pairs are matched on task and seed; what only one side ran is left out.
    #[test]
    fn a_paired_comparison_matches_rollouts_and_clusters_by_task() {
        let before: Vec<Outcome> = (0..4).map(|t| o(&format!("t{t}-x"), t, false)).collect();
        let mut after: Vec<Outcome> = (0..4).map(|t| o(&format!("t{t}-x"), t, t < 3)).collect();
        after.push(o("t9-x", 9, true));
        let p = paired(&before, &after).unwrap();
        assert_eq!((p.pairs, p.tasks), (4, 4));
        assert!((p.diff - 0.75).abs() < 1e-12);
        let sd_mean = (4.0f64 / 3.0 * (3.0 * 0.0625 + 0.5625)).sqrt() / 4.0;
        assert!((p.se - sd_mean).abs() < 1e-12, "{p:?}");
        assert!(p.p_value < 0.01 && p.low > 0.0, "{p:?}");
        // The same results twice: no difference, p = 1.
        let same = paired(&before, &before).unwrap();
        assert_eq!((same.diff, same.p_value), (0.0, 1.0));
        assert!(paired(&before, &[o("z-1", 0, true)]).is_none());
    }
}
