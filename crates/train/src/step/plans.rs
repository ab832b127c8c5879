//! Which rollouts a step runs: its tasks drawn from (seed, step) among the eligible
//! ones, a group of seeded members each.

use rand::seq::SliceRandom;
use rand::SeedableRng;

use crate::preset::Preset;
use crate::rollout::RolloutPlan;

/// Mixes the run seed with other numbers into an independent seed.
pub fn mix_seed(parts: &[u64]) -> u64 {
    let mut h: u64 = 0xCBF2_9CE4_8422_2325;
    for p in parts {
        h ^= *p;
        h = h.wrapping_mul(0x0100_0000_01B3);
        h ^= h >> 29;
    }
    h
}

/// The rollouts of step `step`: `tasks_per_step` tasks drawn from (seed, step), each
/// with `group_size` members and their own seeds (round 0 of [`draw_plans`] over every
/// task; the simulation and the tests draw this way).
#[cfg(test)]
pub fn step_plans(preset: &Preset, n_tasks: usize, step: u64) -> Vec<RolloutPlan> {
    let all: Vec<usize> = (0..n_tasks).collect();
    draw_plans(preset, &all, step, Draw { round: 0, groups: preset.grpo.tasks_per_step, first_slot: 0 })
}

/// Which draw of a step: round 0 is the step's own, later rounds refill groups that
/// carried no signal.
#[derive(Debug, Clone, Copy)]
pub struct Draw {
    pub round: u64,
    /// Groups to draw.
    pub groups: usize,
    /// Groups the step drew before this round (slots and members go on from there).
    pub first_slot: usize,
}

/// `draw.groups` groups over tasks drawn from `eligible` (indices into the task list),
/// without repeating a task while others are left; round 0 draws exactly what
/// [`step_plans`] always drew.
pub fn draw_plans(preset: &Preset, eligible: &[usize], step: u64, draw: Draw) -> Vec<RolloutPlan> {
    let rng_seed = match draw.round {
        0 => mix_seed(&[preset.seed, step, 1]),
        r => mix_seed(&[preset.seed, step, 1, r]),
    };
    let mut rng = rand::rngs::StdRng::seed_from_u64(rng_seed);
    let mut order: Vec<usize> = eligible.to_vec();
    let mut chosen = Vec::new();
    while chosen.len() < draw.groups && !order.is_empty() {
        order.shuffle(&mut rng);
        chosen.extend(order.iter().copied().take(draw.groups - chosen.len()));
    }
    let g = preset.grpo.group_size;
    let mut plans = Vec::new();
    for (i, &task) in chosen.iter().enumerate() {
        let slot = draw.first_slot + i;
        for member in 0..g {
            plans.push(RolloutPlan { task, member, seed: mix_seed(&[preset.seed, step, slot as u64, member as u64]) });
        }
    }
    // Groups are told apart by slot: the same task may be drawn twice in one step.
    for (i, p) in plans.iter_mut().enumerate() {
        p.member = draw.first_slot * g + i;
    }
    plans
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refill_round_draws_other_seeds_and_members_after_the_first() {
        let mut p = crate::preset::Preset::find("cpu-tiny").unwrap();
        p.grpo.tasks_per_step = 3;
        p.grpo.group_size = 2;
        let first = step_plans(&p, 5, 4);
        assert_eq!(first.len(), 6);
        assert_eq!(first, draw_plans(&p, &[0, 1, 2, 3, 4], 4, Draw { round: 0, groups: 3, first_slot: 0 }));
        let more = draw_plans(&p, &[1, 3], 4, Draw { round: 1, groups: 2, first_slot: 3 });
        assert_eq!(more.iter().map(|r| r.member).collect::<Vec<_>>(), [6, 7, 8, 9]);
        assert!(more.iter().all(|r| r.task == 1 || r.task == 3));
        let seeds: std::collections::BTreeSet<u64> = first.iter().chain(&more).map(|r| r.seed).collect();
        assert_eq!(seeds.len(), 10, "every rollout of a step has its own seed");
        assert!(draw_plans(&p, &[], 4, Draw { round: 1, groups: 2, first_slot: 3 }).is_empty());
    }
}
