//! The training reward with a judge term: `w_tests * tests + w_judge * judge`.

use serde::{Deserialize, Serialize};

/// Weights of the reward's terms (the presets set them; SPEC's default is 0.65 / 0.35).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RewardWeights {
    /// Weight of the tests' weighted pass fraction.
    pub tests: f64,
    /// Weight of the judge's score.
    pub judge: f64,
}

impl Default for RewardWeights {
    fn default() -> Self {
        Self { tests: 0.65, judge: 0.35 }
    }
}

/// Mixes the tests' pass fraction with the judge's score. Policy for a failed judgement
/// (`judge = None`): the judge term is masked and the tests carry the whole reward
/// (`tests` alone, not `w_tests * tests`), so a judge outage neither punishes nor rewards
/// a rollout; the trainer counts such rollouts in its metrics.
pub fn mix_reward(tests: f64, judge: Option<f64>, w: RewardWeights) -> f64 {
    let tests = tests.clamp(0.0, 1.0);
    match judge {
        Some(j) if w.tests + w.judge > 0.0 => (w.tests * tests + w.judge * j.clamp(0.0, 1.0)) / (w.tests + w.judge),
        _ => tests,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mixes_and_masks() {
        let w = RewardWeights::default();
        assert!((mix_reward(1.0, Some(0.5), w) - 0.825).abs() < 1e-12);
        assert_eq!(mix_reward(0.5, None, w), 0.5);
        assert_eq!(mix_reward(1.0, Some(0.0), RewardWeights { tests: 1.0, judge: 0.0 }), 1.0);
        assert_eq!(mix_reward(2.0, Some(-1.0), RewardWeights { tests: 0.0, judge: 1.0 }), 0.0);
    }
}
