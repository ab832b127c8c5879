//! One GRPO step as named phases: collect (rollouts run and scored) → advantages →
//! update → log → checkpoint.

mod plans;
mod samples;
mod save;

#[cfg(test)]
pub use plans::step_plans;
pub use plans::{draw_plans, mix_seed, Draw};
pub use samples::{build_samples, groups_with_signal};
pub(crate) use save::save_checkpoint;

use std::path::Path;
use std::time::Instant;

use indicatif::ProgressBar;

use crate::checkpoint::{CheckpointState, Checkpoints};
use crate::dist::{blocking, share_of, Collective};
use crate::error::TrainError;
use crate::metrics::{MetricsLog, StepMetrics};
use crate::model::{Qwen3, TrainMode};
use crate::optim::AdamW;
use crate::plot::write_reward_svg;
use crate::preset::Preset;
use crate::progress::progress_bar;
use crate::rollout::{run_spread, Rollout, RolloutRunner, RolloutSampler};
use crate::update::{grpo_update, Reference, Sample, UpdateSettings, UpdateStats};

/// What one training step needs, borrowed from the run.
pub(crate) struct StepLoop<'a> {
    pub(crate) preset: &'a Preset,
    pub(crate) out: &'a Path,
    pub(crate) log: &'a (dyn Fn(String) + Sync),
    pub(crate) progress: bool,
    pub(crate) runner: &'a RolloutRunner,
    pub(crate) sampler: &'a dyn RolloutSampler,
    pub(crate) policy: &'a Qwen3,
    pub(crate) reference: Reference<'a>,
    pub(crate) opt: &'a mut AdamW,
    pub(crate) update: &'a UpdateSettings,
    /// Rank 0's metrics log (the other ranks write none).
    pub(crate) metrics: Option<&'a mut MetricsLog>,
    pub(crate) metrics_path: &'a Path,
    pub(crate) history: Vec<StepMetrics>,
    pub(crate) world: &'a dyn Collective,
    pub(crate) checkpoints: &'a Checkpoints,
    pub(crate) mode: &'a TrainMode,
    pub(crate) start_dir: &'a Path,
    pub(crate) bar: &'a ProgressBar,
    pub(crate) steps: u64,
    /// Seconds the last hand-over of weights to the sampler took.
    pub(crate) sync_secs: f64,
}

impl StepLoop<'_> {
    /// One step, phase by phase: collect (rollouts in containers, each scored by its
    /// task's tests and the judge as it ends) → advantages → update → log → checkpoint.
    pub(crate) async fn step(&mut self, state: &mut CheckpointState) -> Result<(), TrainError> {
        let step = state.step + 1;
        let started = Instant::now();
        let (rollouts, refills) = self.collect(step, state).await?;
        let rollout_secs = started.elapsed().as_secs_f64();
        let judge_secs = rollouts.iter().map(|r| r.judge_secs).sum();
        let weighing = Instant::now();
        let (samples, mut m) = self.advantages(&rollouts);
        m.refill_rounds = refills;
        if let Some(band) = self.preset.grpo.task_band {
            m.tasks_outside_band = state.task_stats.outside(band).1 as u64;
        }
        let advantage_secs = weighing.elapsed().as_secs_f64();
        let updating = Instant::now();
        let stats = self.update(step, &samples).await?;
        m.step = step;
        m.loss = stats.loss;
        m.kl = stats.kl;
        m.entropy = stats.entropy;
        m.clip_frac = stats.clip_frac;
        m.grad_norm = stats.grad_norm;
        m.sampler_logp_diff = stats.sampler_logp_diff;
        m.lr = self.preset.optim.lr;
        m.model_tokens = stats.model_tokens;
        m.rollout_secs = rollout_secs;
        m.judge_secs = judge_secs;
        m.advantage_secs = advantage_secs;
        m.update_secs = updating.elapsed().as_secs_f64();
        m.score_secs = stats.phases.score_secs;
        m.grad_secs = stats.phases.grad_secs;
        m.optim_secs = stats.phases.optim_secs;
        m.update_tokens = stats.phases.tokens;
        m.shared_tokens = stats.phases.shared_tokens;
        m.sync_secs = self.sync_secs;
        self.record(m)?;
        state.step = step;
        state.optimizer_step = self.opt.step;
        state.tasks_drawn += self.preset.grpo.tasks_per_step as u64;
        self.checkpoint(state)
    }

    /// Collect (and score): the step's groups of rollouts, run as bench trials, this
    /// rank's share here and the rest on the other ranks. Tasks come from those whose
    /// running pass rate is in `grpo.task_band`; groups that carry no signal are
    /// replaced by fresh tasks for up to `grpo.refill_rounds` more draws. Returns the
    /// rollouts (whole groups, in order) and the refill draws made.
    async fn collect(&self, step: u64, state: &mut CheckpointState) -> Result<(Vec<Rollout>, u64), TrainError> {
        let grpo = &self.preset.grpo;
        let names: Vec<String> = self.runner.tasks.iter().map(|t| t.name.clone()).collect();
        let dir = self.out.join("rollouts").join(format!("step-{step:06}"));
        let mut eligible = state.task_stats.eligible(&names, grpo.task_band);
        if eligible.is_empty() {
            // Every task is solved or hopeless for now: draw from all rather than stop.
            eligible = (0..names.len()).collect();
        }
        let mut rollouts: Vec<Rollout> = Vec::new();
        let mut drawn = std::collections::BTreeSet::new();
        let mut kept = 0;
        let (mut round, mut refills) = (0u64, 0u64);
        loop {
            let groups = grpo.tasks_per_step - kept;
            let plans = draw_plans(
                self.preset,
                &eligible,
                step,
                Draw { round, groups, first_slot: rollouts.len() / grpo.group_size.max(1) },
            );
            if plans.is_empty() {
                break;
            }
            let share = share_of(&plans, self.world.rank(), self.world.world_size()).len();
            let label =
                if round == 0 { format!("step {step} rollouts") } else { format!("step {step} refill {round}") };
            let rbar = progress_bar(self.progress, share as u64, &label);
            let got = run_spread(self.runner, &plans, &dir, self.world, &|_| rbar.inc(1)).await?;
            rbar.finish_and_clear();
            for group in got.chunks(grpo.group_size.max(1)) {
                let counted: Vec<&Rollout> =
                    group.iter().filter(|r| r.status != crate::rollout::RolloutStatus::Crashed).collect();
                let passes = counted.iter().filter(|r| r.resolved).count();
                state.task_stats.record(&names[group[0].task], counted.len(), passes);
                drawn.insert(group[0].task);
            }
            kept += groups_with_signal(self.preset, &got);
            rollouts.extend(got);
            refills += u64::from(round > 0);
            if kept >= grpo.tasks_per_step || round >= grpo.refill_rounds as u64 {
                break;
            }
            // A refill draws tasks this step has not tried yet.
            eligible.retain(|t| !drawn.contains(t));
            round += 1;
        }
        Ok((rollouts, refills))
    }

    /// Advantages: rewards normalised within each group, into training samples.
    fn advantages(&self, rollouts: &[Rollout]) -> (Vec<Sample>, StepMetrics) {
        build_samples(self.preset, rollouts, self.sampler.off_policy())
    }

    /// Update: the clipped policy-gradient steps, then the sampler takes the new weights.
    async fn update(&mut self, step: u64, samples: &[Sample]) -> Result<UpdateStats, TrainError> {
        if self.policy.zero3.is_some() {
            // The sampler's whole copy goes before the update, and AdamW's state comes back from host memory.
            self.sampler.load_policy(self.policy).await?;
            self.opt.park(false)?;
        }
        let stats = if samples.is_empty() {
            UpdateStats::default()
        } else {
            let world = self.world;
            blocking(|| {
                grpo_update(
                    self.policy,
                    self.reference,
                    self.opt,
                    samples,
                    world,
                    self.update,
                    mix_seed(&[self.preset.seed, step, 7]),
                )
            })?
        };
        let syncing = Instant::now();
        match &self.policy.zero3 {
            Some(z) => {
                self.opt.park(true)?;
                let (world, device) = (self.world, self.policy.device().clone());
                let whole = blocking(|| z.gather_all(self.policy, world, &device))?;
                self.sampler.load_policy(&whole).await?;
            }
            None => self.sampler.load_policy(self.policy).await?,
        }
        self.sync_secs = syncing.elapsed().as_secs_f64();
        Ok(stats)
    }

    /// Log: `metrics.jsonl`, the reward plot, the progress bar or a line per step.
    fn record(&mut self, m: StepMetrics) -> Result<(), TrainError> {
        let Some(metrics) = self.metrics.as_mut() else { return Ok(()) };
        metrics
            .append(&m)
            .map_err(|e| TrainError::Other(format!("cannot write {}: {e}", self.metrics_path.display())))?;
        self.history.push(m.clone());
        let _ = write_reward_svg(&self.out.join("reward.svg"), &self.history, &self.preset.name);
        self.bar.set_message(format!("reward {:.3} pass {:.0}%", m.reward_mean, m.pass_rate * 100.0));
        self.bar.inc(1);
        if !self.progress {
            (self.log)(format!(
                "step {}/{}: reward {:.3} ± {:.3}, pass {:.1}%, loss {:.4}, kl {:.4}, entropy {:.3}, kept {} groups, {:.1} s",
                m.step,
                self.steps,
                m.reward_mean,
                m.reward_std,
                m.pass_rate * 100.0,
                m.loss,
                m.kl,
                m.entropy,
                m.groups_kept,
                m.rollout_secs + m.update_secs
            ) + &m.sampler_logp_diff.map(|d| format!(", sampler logp diff {d:.2e}")).unwrap_or_default()
                + &phases_line(&m));
        }
        Ok(())
    }

    /// Checkpoint: every `checkpoint.every` steps and after the last.
    fn checkpoint(&self, state: &CheckpointState) -> Result<(), TrainError> {
        if state.step.is_multiple_of(self.preset.checkpoint.every.max(1) as u64) || state.step == self.steps {
            save_checkpoint(self.checkpoints, self.policy, self.opt, self.mode, self.start_dir, state, self.world)?;
        }
        Ok(())
    }
}

/// Where a step's seconds went, for the step's log line: rollouts, then the update's
/// phases (forward and backward with the token positions they went through per second).
fn phases_line(m: &StepMetrics) -> String {
    let mut line = format!(" (rollouts {:.1} s", m.rollout_secs);
    if m.judge_secs > 0.0 {
        line += &format!(", judge {:.1} s of it", m.judge_secs);
    }
    line += &format!("; advantages {:.2} s", m.advantage_secs);
    if m.update_tokens > 0 {
        let rate = if m.grad_secs > 0.0 { m.update_tokens as f64 / m.grad_secs } else { 0.0 };
        line += &format!(
            "; scoring {:.1} s; forward+backward {:.1} s, {rate:.0} tok/s, {} of {} positions shared; optimiser {:.2} s",
            m.score_secs, m.grad_secs, m.shared_tokens, m.update_tokens, m.optim_secs
        );
    }
    line + &format!("; weights to the sampler {:.1} s)", m.sync_secs)
}
