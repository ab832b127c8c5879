//! Group-relative advantages and dynamic sampling.

use serde::{Deserialize, Serialize};

/// How a rollout's advantage is derived from its group's rewards.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum AdvantageKind {
    /// GRPO: (r − mean) / (std + ε), std with Bessel's correction as in verl.
    #[default]
    Grpo,
    /// Dr.GRPO: r − mean (no division by the std, which favours easy and hard groups).
    Drgrpo,
    /// Leave-one-out (RLOO): r − mean of the other rewards.
    Loo,
}

/// Added to the std so that nearly-equal rewards do not explode.
pub const STD_EPS: f64 = 1e-6;

/// Advantages of one group's rewards (one value per rollout).
pub fn group_advantages(rewards: &[f64], kind: AdvantageKind) -> Vec<f64> {
    let n = rewards.len();
    if n == 0 {
        return Vec::new();
    }
    let mean = rewards.iter().sum::<f64>() / n as f64;
    match kind {
        AdvantageKind::Drgrpo => rewards.iter().map(|r| r - mean).collect(),
        AdvantageKind::Grpo => {
            let std = sample_std(rewards, mean);
            rewards.iter().map(|r| (r - mean) / (std + STD_EPS)).collect()
        }
        AdvantageKind::Loo => {
            if n == 1 {
                return vec![0.0];
            }
            let sum: f64 = rewards.iter().sum();
            rewards.iter().map(|r| r - (sum - r) / (n - 1) as f64).collect()
        }
    }
}

/// Whether a group teaches nothing (every reward equal): dynamic sampling drops it.
pub fn is_degenerate(rewards: &[f64]) -> bool {
    rewards.windows(2).all(|w| (w[0] - w[1]).abs() < 1e-12)
}

fn sample_std(xs: &[f64], mean: f64) -> f64 {
    if xs.len() < 2 {
        return 0.0;
    }
    (xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (xs.len() - 1) as f64).sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: &[f64], b: &[f64]) {
        assert_eq!(a.len(), b.len());
        for (x, y) in a.iter().zip(b) {
            assert!((x - y).abs() < 1e-9, "{a:?} != {b:?}");
        }
    }

    #[test]
    fn advantages_match_hand_computed_values() {
        let r = [1.0, 0.0, 0.0, 1.0, 0.5];
        // mean 0.5; sample std = sqrt((0.25+0.25+0.25+0.25+0)/4) = 0.5
        close(&group_advantages(&r, AdvantageKind::Drgrpo), &[0.5, -0.5, -0.5, 0.5, 0.0]);
        let s = 0.5 + STD_EPS;
        close(&group_advantages(&r, AdvantageKind::Grpo), &[0.5 / s, -0.5 / s, -0.5 / s, 0.5 / s, 0.0]);
        // leave-one-out: r_i − (2.5 − r_i)/4
        close(&group_advantages(&r, AdvantageKind::Loo), &[1.0 - 0.375, -0.625, -0.625, 0.625, 0.5 - 0.5]);
    }

    #[test]
    fn equal_rewards_are_degenerate() {
        assert!(is_degenerate(&[1.0, 1.0, 1.0]));
        assert!(is_degenerate(&[0.0, 0.0]));
        assert!(!is_degenerate(&[0.0, 1.0]));
        close(&group_advantages(&[1.0, 1.0], AdvantageKind::Grpo), &[0.0, 0.0]);
    }
}
