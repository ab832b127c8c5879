//! Running rollouts: each one is a bench trial (its own container, the agent loop, the
//! task's tests) whose model is a [`PolicyBackend`] recording the tokens.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use tokenizers::Tokenizer;

use super::chat::PromptRenderer;
use super::engine::RolloutSampler;
use super::policy::{PolicyBackend, PolicySampling, Recording};
use super::scripted::ScriptedSampler;
use agent_bench::judge::{mix_reward, Judge, JudgedEpisode, RewardWeights};
use agent_bench::{run_trial_with, FailureMode, ModelSource, TaskEntry, TrialContext, TrialRecord};
use agent_protocol::EndReason;

/// How a rollout ended, for the truncation policy and the metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RolloutStatus {
    /// The agent finished (or stopped on its own) and the tests ran.
    Complete,
    /// A reply hit the token limit, or the turn or token budget ran out.
    Truncated,
    /// The agent ran past the task's time limit.
    TimedOut,
    /// The environment or the harness failed; the reward says nothing about the policy.
    Crashed,
}

/// One finished rollout (serialisable: ranks exchange them).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Rollout {
    /// Index of the task in the task list.
    pub task: usize,
    /// Index within the task's group.
    pub member: usize,
    /// Weighted fraction of the task's tests that passed.
    pub tests_score: f64,
    /// The judge's score, when a judge is configured and answered.
    pub judge_score: Option<f64>,
    /// Seconds the judge took on this rollout (0 without a judge).
    pub judge_secs: f64,
    /// The reward before the truncation policy.
    pub reward: f64,
    /// Every test passed.
    pub resolved: bool,
    pub status: RolloutStatus,
    /// Why it ended, in words.
    pub reason: String,
    /// The tokens.
    pub recording: Recording,
    /// The Docker engine its sandbox ran on (none when it never got one).
    pub engine: Option<String>,
}

/// What one rollout is: which task, which group member, which seed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RolloutPlan {
    pub task: usize,
    pub member: usize,
    pub seed: u64,
}

/// Everything rollouts share.
pub struct RolloutRunner {
    pub ctx: Arc<TrialContext>,
    pub tasks: Vec<Arc<TaskEntry>>,
    pub sampler: Arc<dyn RolloutSampler>,
    pub tokenizer: Arc<Tokenizer>,
    pub renderer: PromptRenderer,
    pub stop: Vec<u32>,
    pub sampling: PolicySampling,
    pub judge: Option<(Arc<Judge>, RewardWeights)>,
    pub concurrency: usize,
    sessions: AtomicU64,
}

impl RolloutRunner {
    /// A runner over `tasks`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        ctx: Arc<TrialContext>,
        tasks: Vec<Arc<TaskEntry>>,
        sampler: Arc<dyn RolloutSampler>,
        tokenizer: Arc<Tokenizer>,
        renderer: PromptRenderer,
        stop: Vec<u32>,
        sampling: PolicySampling,
        judge: Option<(Arc<Judge>, RewardWeights)>,
        concurrency: usize,
    ) -> Self {
        RolloutRunner {
            ctx,
            tasks,
            sampler,
            tokenizer,
            renderer,
            stop,
            sampling,
            judge,
            concurrency: concurrency.max(1),
            sessions: AtomicU64::new(1),
        }
    }

    /// The runner the evaluations use: these tasks (held out, or the training tasks) at
    /// the evaluation's temperature; its rollouts' session ids never meet this runner's,
    /// so an engine keeping cells per session cannot mix them.
    pub fn for_evaluation(
        &self,
        ctx: Arc<TrialContext>,
        tasks: Vec<Arc<TaskEntry>>,
        temperature: f64,
    ) -> RolloutRunner {
        let mut runner = self.sibling(ctx, tasks, self.sampler.clone(), self.judge.clone(), 1 << 40);
        runner.sampling.temperature = temperature;
        runner
    }

    /// A runner like this one with its own session ids from `first_session` on.
    fn sibling(
        &self,
        ctx: Arc<TrialContext>,
        tasks: Vec<Arc<TaskEntry>>,
        sampler: Arc<dyn RolloutSampler>,
        judge: Option<(Arc<Judge>, RewardWeights)>,
        first_session: u64,
    ) -> RolloutRunner {
        RolloutRunner {
            ctx,
            tasks,
            sampler,
            tokenizer: self.tokenizer.clone(),
            renderer: self.renderer.clone(),
            stop: self.stop.clone(),
            sampling: self.sampling,
            judge,
            concurrency: self.concurrency,
            sessions: AtomicU64::new(first_session),
        }
    }

    /// Runs the planned rollouts (up to `concurrency` at once) with trial logs under
    /// `dir`; results come back in plan order whatever order they finish in.
    pub async fn run(&self, plans: &[RolloutPlan], dir: &Path, on_done: &(dyn Fn(&Rollout) + Sync)) -> Vec<Rollout> {
        let mut results: Vec<Option<Rollout>> = vec![None; plans.len()];
        let mut stream = futures_util::stream::iter(plans.iter().enumerate().map(|(i, plan)| async move {
            let rollout = self.one(*plan, dir.join(format!("{}-{}", self.tasks[plan.task].name, plan.member))).await;
            (i, rollout)
        }))
        .buffer_unordered(self.concurrency);
        while let Some((i, rollout)) = stream.next().await {
            on_done(&rollout);
            results[i] = Some(rollout);
        }
        results.into_iter().flatten().collect()
    }

    /// The same runner sampling from `sampler` (the scripted oracle of the warm start),
    /// without a judge.
    pub fn with_sampler(&self, sampler: Arc<dyn RolloutSampler>) -> RolloutRunner {
        self.sibling(self.ctx.clone(), self.tasks.clone(), sampler, None, 1 << 41)
    }

    /// One rollout per `(plan, replies)`, each answered from its replies by `scripted`
    /// (which must be this runner's sampler, see [`Self::with_sampler`]); in plan order.
    pub async fn run_scripted(
        &self,
        scripted: &ScriptedSampler,
        jobs: Vec<(RolloutPlan, Vec<String>)>,
        dir: &Path,
    ) -> Vec<Rollout> {
        let n = jobs.len();
        let mut results: Vec<Option<Rollout>> = vec![None; n];
        let mut stream = futures_util::stream::iter(jobs.into_iter().enumerate().map(|(i, (plan, replies))| {
            let session = self.sessions.fetch_add(1, Ordering::Relaxed);
            scripted.script(session, replies);
            async move {
                let dir = dir.join(format!("{}-{}", self.tasks[plan.task].name, plan.member));
                (i, self.one_in(session, plan, dir).await)
            }
        }))
        .buffer_unordered(self.concurrency);
        while let Some((i, rollout)) = stream.next().await {
            results[i] = Some(rollout);
        }
        results.into_iter().flatten().collect()
    }

    async fn one(&self, plan: RolloutPlan, dir: PathBuf) -> Rollout {
        let name = &self.tasks[plan.task].name;
        once_more_if_crashed(&dir, name, plan.member, || {
            let session = self.sessions.fetch_add(1, Ordering::Relaxed);
            self.one_in(session, plan, dir.clone())
        })
        .await
    }

    async fn one_in(&self, session: u64, plan: RolloutPlan, dir: PathBuf) -> Rollout {
        let backend = Arc::new(PolicyBackend::new(
            self.sampler.clone(),
            self.tokenizer.clone(),
            self.renderer.clone(),
            self.stop.clone(),
            session,
            plan.seed,
            self.sampling,
        ));
        let source = ModelSource::Shared(backend.clone());
        let entry = &self.tasks[plan.task];
        let rec = run_trial_with(&self.ctx, Some(&source), entry, session as u32, dir.clone()).await;
        let recording = backend.recording();
        let (status, reason) = classify(&rec, &recording);
        let judging = std::time::Instant::now();
        let judge_score = match (&self.judge, status) {
            (Some((judge, _)), RolloutStatus::Complete | RolloutStatus::Truncated | RolloutStatus::TimedOut) => {
                match JudgedEpisode::from_trajectory_file(&dir.join("trajectory.jsonl")) {
                    Ok(ep) => judge.judge(&ep, plan.seed).await.ok().map(|v| v.score),
                    Err(_) => None,
                }
            }
            _ => None,
        };
        let judge_secs = judging.elapsed().as_secs_f64();
        let weights = self.judge.as_ref().map(|(_, w)| *w).unwrap_or(RewardWeights { tests: 1.0, judge: 0.0 });
        Rollout {
            task: plan.task,
            member: plan.member,
            tests_score: rec.score,
            judge_score,
            judge_secs,
            reward: mix_reward(rec.score, judge_score, weights),
            resolved: rec.resolved,
            status,
            reason,
            recording,
            engine: rec.engine.clone(),
        }
    }
}

/// Runs a rollout, and once more when it crashed. A crash is the environment's (an engine
/// lost, a build or the test harness failed) and the rollout's seed draws the same tokens
/// again, so a second try, on whichever engine the pool gives, keeps the group whole. The
/// crashed try's logs move to `DIR.crashed`.
async fn once_more_if_crashed<F, Fut>(dir: &Path, task: &str, member: usize, mut run: F) -> Rollout
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Rollout>,
{
    let first = run().await;
    if first.status != RolloutStatus::Crashed {
        return first;
    }
    if dir.exists() {
        let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let aside = dir.with_file_name(format!("{name}.crashed"));
        let _ = std::fs::remove_dir_all(&aside);
        if let Err(e) = std::fs::rename(dir, &aside) {
            tracing::warn!("{}: cannot keep the crashed rollout's logs aside ({e})", dir.display());
        }
    }
    tracing::info!("{task} #{member}: the rollout crashed ({}); trying it once more", first.reason);
    run().await
}

/// Sorts a trial into the rollout statuses (see the truncation policy in docs/train.md).
fn classify(rec: &TrialRecord, recording: &Recording) -> (RolloutStatus, String) {
    let ended = rec.agent_ended.clone();
    match rec.failure_mode {
        // A lost engine says nothing about the policy either: the rollout leaves its group.
        FailureMode::EnvBuildFailed
        | FailureMode::EnvUnhealthy
        | FailureMode::TestTimeout
        | FailureMode::ParseError
        | FailureMode::SandboxLost => return (RolloutStatus::Crashed, rec.reason.clone()),
        FailureMode::AgentTimeout => return (RolloutStatus::TimedOut, rec.reason.clone()),
        // A model call that failed before anything was sampled (no call at all, or a
        // prompt that already fills the context) says nothing about the policy.
        FailureMode::AgentError if recording.segments.iter().all(|s| !s.mask.contains(&1)) => {
            return (RolloutStatus::Crashed, rec.reason.clone())
        }
        _ => {}
    }
    let budget = matches!(
        rec.agent_end_reason,
        Some(EndReason::MaxTurns | EndReason::TokenBudget | EndReason::ContextExhausted)
    );
    if recording.truncated || budget {
        return (RolloutStatus::Truncated, ended);
    }
    (RolloutStatus::Complete, ended)
}

#[cfg(test)]
#[path = "collect_tests.rs"]
mod tests;
