//! The optional calibration role: a solver model's pass rate on an accepted task over
//! k attempts, each an ordinary bench trial, kept in the index so that a curriculum can
//! take the tasks that are hard but not impossible.

use super::index::IndexEntry;
use super::queue::Item;
use super::run::{RoleOutput, SynthCtx};
use crate::agents::AgentKind;
use crate::task::TaskEntry;
use crate::trial::run_trial_with;

/// Runs a calibration item.
pub async fn run(ctx: &SynthCtx, item: &Item) -> RoleOutput {
    let mut entry: IndexEntry = match serde_json::from_value(item.payload.clone()) {
        Ok(e) => e,
        Err(e) => return RoleOutput::failed(format!("the item's input is not an index entry: {e}")),
    };
    let dir = ctx.dirs.tasks().join(&entry.name);
    let task = TaskEntry { name: entry.name.clone(), dir: dir.clone(), task: crate::task::BenchTask::load(&dir) };
    if let Err(e) = &task.task {
        return RoleOutput::failed(format!("the accepted task cannot be loaded: {e}"));
    }
    let work = ctx.dirs.work(&item.id);
    let trials = ctx.validator.trial_context(AgentKind::Agent, Some(ctx.models.solver.clone()), &work);
    let attempts = ctx.plan.calibrate.max(1);
    let mut passed = 0;
    let mut tokens = 0;
    for k in 0..attempts {
        let rec =
            run_trial_with(&trials, trials.model.as_ref(), &task, k, work.join(format!("attempt-{}", k + 1))).await;
        passed += u32::from(rec.resolved);
        tokens += rec.usage.prompt_tokens + rec.usage.completion_tokens;
    }
    entry.pass_rate = Some(f64::from(passed) / f64::from(attempts));
    entry.calibration_attempts = Some(attempts);
    entry.solver = Some(ctx.plan.models.solver.clone());
    entry.tokens.calibrate = tokens;
    entry.tokens.total += tokens;
    RoleOutput::indexed(entry, tokens)
}
