//! Which rollouts a step runs: its tasks drawn from (seed, step), a group of seeded
//! members each.

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
/// with `group_size` members and their own seeds.
pub fn step_plans(preset: &Preset, n_tasks: usize, step: u64) -> Vec<RolloutPlan> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(mix_seed(&[preset.seed, step, 1]));
    let mut order: Vec<usize> = (0..n_tasks).collect();
    let mut chosen = Vec::new();
    while chosen.len() < preset.grpo.tasks_per_step {
        order.shuffle(&mut rng);
        chosen.extend(order.iter().copied().take(preset.grpo.tasks_per_step - chosen.len()));
    }
    let mut plans = Vec::new();
    for (slot, &task) in chosen.iter().enumerate() {
        for member in 0..preset.grpo.group_size {
            plans.push(RolloutPlan { task, member, seed: mix_seed(&[preset.seed, step, slot as u64, member as u64]) });
        }
    }
    // Groups are told apart by slot: the same task may be drawn twice in one step.
    for (i, p) in plans.iter_mut().enumerate() {
        p.member = i;
    }
    plans
}
