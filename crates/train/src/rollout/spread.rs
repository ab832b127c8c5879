//! Rollouts spread over the ranks: each rank runs every `world`-th plan with its own
//! sampler, and every rank gets all results back in plan order, so that what follows
//! (advantages, the update, the metrics) is what one process running them all computes.

use std::path::Path;

use super::collect::{Rollout, RolloutPlan, RolloutRunner};
use crate::dist::{all_gather_json, blocking, share_of, Collective};
use crate::error::TrainError;

/// Runs this rank's share of `plans` and returns every rank's rollouts in plan order.
pub async fn run_spread(
    runner: &RolloutRunner,
    plans: &[RolloutPlan],
    dir: &Path,
    world: &dyn Collective,
    on_done: &(dyn Fn(&Rollout) + Sync),
) -> Result<Vec<Rollout>, TrainError> {
    if world.world_size() == 1 {
        return Ok(runner.run(plans, dir, on_done).await);
    }
    let mine = share_of(plans, world.rank(), world.world_size());
    let my_plans: Vec<RolloutPlan> = mine.iter().map(|(_, p)| *p).collect();
    let done = runner.run(&my_plans, dir, on_done).await;
    let indexed: Vec<(usize, Rollout)> = mine.iter().map(|(i, _)| *i).zip(done).collect();
    // The exchange blocks its thread until every rank arrives: keep it off the runtime's.
    let all = blocking(|| all_gather_json(world, &indexed))?;
    let mut slots: Vec<Option<Rollout>> = vec![None; plans.len()];
    for (i, r) in all.into_iter().flatten() {
        if let Some(slot) = slots.get_mut(i) {
            *slot = Some(r);
        }
    }
    let missing = slots.iter().filter(|s| s.is_none()).count();
    if missing > 0 {
        return Err(TrainError::Distributed(format!("{missing} rollouts of the step came back from no rank")));
    }
    Ok(slots.into_iter().flatten().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_cover_every_plan_once_and_evenly() {
        let plans: Vec<RolloutPlan> = (0..32).map(|i| RolloutPlan { task: i / 8, member: i, seed: i as u64 }).collect();
        let mut seen = vec![0; plans.len()];
        for rank in 0..4 {
            let share = share_of(&plans, rank, 4);
            assert_eq!(share.len(), 8);
            for (i, p) in share {
                assert_eq!(plans[i], p);
                seen[i] += 1;
            }
        }
        assert!(seen.iter().all(|&n| n == 1));
    }
}
