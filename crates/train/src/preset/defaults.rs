//! What a preset field holds when the YAML leaves it out.

use super::schema::{CheckpointSection, RewardSection};
use crate::grpo::AdvantageKind;

impl Default for RewardSection {
    fn default() -> Self {
        Self { judge: None, tests_weight: 0.65, judge_weight: 0.35 }
    }
}

impl Default for CheckpointSection {
    fn default() -> Self {
        Self { every: 1, keep: 2 }
    }
}

pub(super) fn one() -> usize {
    1
}
pub(super) fn one_f() -> f64 {
    1.0
}
pub(super) fn yes() -> bool {
    true
}
pub(super) fn advantage_grpo() -> AdvantageKind {
    AdvantageKind::Grpo
}
pub(super) fn clip_low() -> f64 {
    0.2
}
pub(super) fn clip_high() -> f64 {
    0.28
}
pub(super) fn clip_dual() -> f64 {
    3.0
}
pub(super) fn beta1() -> f64 {
    0.9
}
pub(super) fn beta2() -> f64 {
    0.999
}
pub(super) fn eps() -> f64 {
    1e-8
}
