//! The advantages phase: a step's rollouts into training samples.

use crate::grpo::{group_advantages, is_degenerate};
use crate::metrics::StepMetrics;
use crate::preset::{Preset, TruncPolicy};
use crate::rollout::{Rollout, RolloutStatus};
use crate::update::Sample;

/// A group's rollouts that count (crashed ones say nothing about the policy) and their
/// rewards under the truncation policy.
fn group_rewards<'a>(preset: &Preset, group: &'a [Rollout]) -> (Vec<&'a Rollout>, Vec<f64>) {
    let members: Vec<&Rollout> = group.iter().filter(|r| r.status != RolloutStatus::Crashed).collect();
    let rewards = members
        .iter()
        .map(|r| match (r.status, preset.grpo.truncated) {
            (RolloutStatus::Truncated | RolloutStatus::TimedOut, TruncPolicy::Zero) => 0.0,
            _ => r.reward,
        })
        .collect();
    (members, rewards)
}

fn carries_signal(preset: &Preset, rewards: &[f64]) -> bool {
    rewards.len() >= 2 && !(preset.grpo.dynamic_sampling && is_degenerate(rewards))
}

/// How many of the groups (`group_size` rollouts each, in order) the update will keep.
pub fn groups_with_signal(preset: &Preset, rollouts: &[Rollout]) -> usize {
    rollouts
        .chunks(preset.grpo.group_size.max(1))
        .filter(|g| carries_signal(preset, &group_rewards(preset, g).1))
        .count()
}

/// Turns a step's rollouts into training samples (advantages per group, dynamic
/// sampling, the truncation policy) and the step's rollout metrics; `sampler_logp` keeps
/// the sampler's log-probs for importance weights (another engine sampled them).
pub fn build_samples(preset: &Preset, rollouts: &[Rollout], sampler_logp: bool) -> (Vec<Sample>, StepMetrics) {
    let mut m = StepMetrics::default();
    let g = preset.grpo.group_size.max(1);
    let counted: Vec<&Rollout> = rollouts.iter().filter(|r| r.status != RolloutStatus::Crashed).collect();
    m.rollouts = rollouts.len() as u64;
    m.truncated = rollouts.iter().filter(|r| r.status == RolloutStatus::Truncated).count() as u64;
    m.timed_out = rollouts.iter().filter(|r| r.status == RolloutStatus::TimedOut).count() as u64;
    m.context_exhausted = rollouts
        .iter()
        .filter(|r| {
            r.status == RolloutStatus::Truncated && r.reason == agent_protocol::EndReason::ContextExhausted.describe()
        })
        .count() as u64;
    m.crashed = rollouts.iter().filter(|r| r.status == RolloutStatus::Crashed).count() as u64;
    for e in rollouts.iter().filter_map(|r| r.engine.as_ref()) {
        *m.engines.entry(e.clone()).or_default() += 1;
    }
    if !counted.is_empty() {
        let n = counted.len() as f64;
        // `+ 0.0` turns a -0.0 sum into 0.0 for the log.
        m.reward_mean = counted.iter().map(|r| r.reward).sum::<f64>() / n + 0.0;
        m.reward_std = (counted.iter().map(|r| (r.reward - m.reward_mean).powi(2)).sum::<f64>() / n).sqrt();
        m.pass_rate = counted.iter().filter(|r| r.resolved).count() as f64 / n;
    }
    m.tokens = rollouts.iter().flat_map(|r| &r.recording.segments).map(|s| s.tokens.len() as u64).sum();
    let mut samples = Vec::new();
    for group in rollouts.chunks(g) {
        let (members, rewards) = group_rewards(preset, group);
        if !carries_signal(preset, &rewards) {
            m.groups_dropped += 1;
            continue;
        }
        m.groups_kept += 1;
        let adv = group_advantages(&rewards, preset.grpo.advantage);
        for (r, a) in members.iter().zip(adv) {
            let masked = matches!(r.status, RolloutStatus::Truncated | RolloutStatus::TimedOut)
                && preset.grpo.truncated == TruncPolicy::Mask;
            if masked {
                continue;
            }
            for seg in &r.recording.segments {
                if seg.mask.iter().any(|&x| x != 0) {
                    samples.push(Sample {
                        tokens: seg.tokens.clone(),
                        mask: seg.mask.clone(),
                        advantage: a as f32,
                        sampler_logp: if sampler_logp { seg.scored_sampler_logp() } else { None },
                    });
                }
            }
        }
    }
    (samples, m)
}
