//! One trial: build/start the environment, wait for its healthcheck (`trial/health.rs`),
//! run the agent under the agent timeout, copy the tests in, run them under the test
//! timeout, parse, copy the artifacts out (`trial/artifacts.rs`), tear down. A
//! multi-step task runs its steps in the one environment instead (`trial/steps.rs`).

mod artifacts;
mod health;
mod steps;
mod why;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use agent_sandbox::{EnginePool, Placement};

use super::agents::{run_agent, AgentKind, AgentOutcome, ModelSource};
use super::env::{EnvSettings, TrialEnv};
use super::images::EngineImages;
use super::pytest::{all_passed, parse_pytest, weighted_score};
use super::results::{trial_dir, FailureMode, Timings, TrialRecord};
use super::task::{Layout, TaskEntry};
use super::verify::{TestRun, Verifier};
use agent_core::config::Config;

/// What every trial of a run shares.
pub struct TrialContext {
    /// The engines trials are placed on (the local one unless the config names others).
    pub pool: EnginePool,
    pub run_dir: PathBuf,
    pub agent: AgentKind,
    pub model: Option<ModelSource>,
    pub config: Config,
    pub images: Arc<EngineImages>,
    pub env: EnvSettings,
    pub verifier: Verifier,
    /// The user's hooks for our agent's episodes (`agent bench --hooks FILE`; none by
    /// default, so that a leaderboard run is the agent alone).
    pub hooks: agent_core::hooks::Hooks,
}

/// Runs one trial to the end; every failure becomes the record's failure mode.
pub async fn run_trial(ctx: &TrialContext, entry: &TaskEntry, attempt: u32) -> TrialRecord {
    let dir = trial_dir(&ctx.run_dir, &entry.name, attempt);
    run_trial_with(ctx, ctx.model.as_ref(), entry, attempt, dir).await
}

/// [`run_trial`] with its own model and log folder (the trainer gives each rollout a
/// model that records its tokens).
pub async fn run_trial_with(
    ctx: &TrialContext,
    model: Option<&ModelSource>,
    entry: &TaskEntry,
    attempt: u32,
    dir: PathBuf,
) -> TrialRecord {
    let started = Instant::now();
    let mut rec = TrialRecord {
        task: entry.name.clone(),
        attempt,
        resolved: false,
        failure_mode: FailureMode::Unset,
        reason: String::new(),
        verified_by: None,
        verify_note: None,
        tests: Vec::new(),
        score: 0.0,
        difficulty: None,
        category: None,
        usage: Default::default(),
        turns: 0,
        parse_error_turns: 0,
        repeated_calls: 0,
        foreign_letter_turns: 0,
        tool_format: None,
        agent_ended: String::new(),
        agent_end_reason: None,
        timings: Timings::default(),
        started_at_unix_ms: SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis()).unwrap_or(0),
        standins: Default::default(),
        notices: Vec::new(),
        engine: None,
        lost_on: Vec::new(),
        steps: None,
    };
    if let Err(e) = std::fs::create_dir_all(&dir) {
        return fail(
            rec,
            FailureMode::AgentError,
            format!("{}: cannot create the trial directory: {e}", dir.display()),
            started,
        );
    }
    let task = match &entry.task {
        Ok(t) => t,
        Err(e) => return fail(rec, FailureMode::EnvBuildFailed, format!("the task cannot be loaded: {e}"), started),
    };
    rec.difficulty = task.difficulty.clone();
    rec.category = task.category.clone();
    rec.notices = task.notices.clone();

    // A task's services stay together on one engine.
    let placement = match ctx.pool.place(task.environment.services.len()).await {
        Ok(p) => p,
        Err(e) => return fail(rec, FailureMode::SandboxLost, e.to_string(), started),
    };
    rec.engine = Some(placement.engine().name().to_string());
    let mut rec = run_placed(ctx, model, entry, task, attempt, &dir, &placement, rec, started).await;
    // A failure on an engine that no longer answers is the engine's, whatever the phase
    // that noticed it said. Tests that ran and scored say the engine was there.
    if !matches!(rec.failure_mode, FailureMode::Unset | FailureMode::SandboxLost) {
        if let Some(reason) = ctx.pool.lost(&placement).await {
            rec.failure_mode = FailureMode::SandboxLost;
            rec.reason = lost_reason(&placement, &reason);
        }
    }
    rec.timings.total_secs = started.elapsed().as_secs_f64();
    rec
}

fn lost_reason(placement: &Placement, why: &str) -> String {
    format!("the Docker engine `{}` stopped answering during the trial: {why}", placement.engine().name())
}

/// Races one phase of a trial against its engine: `Err` when the engine stopped
/// answering first (the phase's future is dropped; its containers stay on that engine
/// until the engine is swept).
async fn guarded<T>(
    pool: &EnginePool,
    placement: &Placement,
    phase: impl std::future::Future<Output = T>,
) -> Result<T, String> {
    tokio::select! {
        biased;
        v = phase => Ok(v),
        why = pool.watch(placement) => Err(why),
    }
}

/// The phases of a trial on the engine it was placed on.
#[allow(clippy::too_many_arguments)]
async fn run_placed(
    ctx: &TrialContext,
    model: Option<&ModelSource>,
    entry: &TaskEntry,
    task: &super::task::BenchTask,
    attempt: u32,
    dir: &std::path::Path,
    placement: &Placement,
    mut rec: TrialRecord,
    started: Instant,
) -> TrialRecord {
    let engine = placement.engine();
    let lost =
        |rec: TrialRecord, why: String| fail(rec, FailureMode::SandboxLost, lost_reason(placement, &why), started);
    let t = Instant::now();
    let built = guarded(&ctx.pool, placement, ctx.images.on(engine).get(task)).await;
    // A failed build's time counts too: it is where the trial's time went.
    rec.timings.env_build_secs = t.elapsed().as_secs_f64();
    let images = match built {
        Ok(Ok(i)) => i,
        Ok(Err(e)) => {
            rec.standins = ctx.images.on(engine).standins_of(task);
            return fail(rec, FailureMode::EnvBuildFailed, e.to_string(), started);
        }
        Err(why) => return lost(rec, why),
    };
    rec.standins = images.standins.clone();
    rec.notices.extend(images.notices.iter().cloned());
    let episode = format!("{}-{attempt}", entry.name);
    let t = Instant::now();
    let started_env = guarded(&ctx.pool, placement, TrialEnv::start(engine, task, &images, &ctx.env, &episode)).await;
    rec.timings.env_start_secs = t.elapsed().as_secs_f64();
    let mut env = match started_env {
        Ok(Ok(e)) => e,
        Ok(Err(e)) => {
            return fail(rec, FailureMode::EnvBuildFailed, format!("the environment did not start: {e}"), started)
        }
        Err(why) => return lost(rec, why),
    };
    rec.notices.extend(env.notices().iter().cloned());
    let Some(sandbox) = env.client().cloned() else {
        env.teardown().await;
        return fail(rec, FailureMode::EnvBuildFailed, "the environment has no agent container".into(), started);
    };
    if let Some(hc) = &task.healthcheck {
        // Harbor's gate: the agent starts only in an environment that is healthy.
        let t = Instant::now();
        let log = dir.join("healthcheck.log");
        let checked = guarded(&ctx.pool, placement, health::wait_healthy(&sandbox, hc, &log)).await;
        rec.timings.env_start_secs += t.elapsed().as_secs_f64();
        match checked {
            Ok(Ok(())) => {}
            Ok(Err(reason)) => {
                env.teardown().await;
                return fail(rec, FailureMode::EnvUnhealthy, reason, started);
            }
            Err(why) => {
                give_up(&mut env).await;
                return lost(rec, why);
            }
        }
    }

    if !task.steps.is_empty() {
        let ran = guarded(&ctx.pool, placement, steps::run_steps(ctx, model, task, &sandbox, dir, &episode, &mut rec));
        if let Err(why) = ran.await {
            give_up(&mut env).await;
            return lost(rec, why);
        }
        match guarded(&ctx.pool, placement, artifacts::collect(&sandbox, &task.artifacts, &dir.join("artifacts"))).await
        {
            Ok(notices) => rec.notices.extend(notices),
            Err(why) => {
                give_up(&mut env).await;
                return lost(rec, why);
            }
        }
        let t = Instant::now();
        env.teardown().await;
        rec.timings.teardown_secs = t.elapsed().as_secs_f64();
        return rec;
    }

    let agent = run_agent(
        ctx.agent,
        model,
        (&ctx.config, &ctx.hooks),
        task,
        &sandbox,
        dir,
        (ctx.env.run_id.as_str(), episode.as_str()),
    );
    let (outcome, mut agent_shell) = match guarded(&ctx.pool, placement, agent).await {
        Ok(v) => v,
        Err(why) => {
            give_up(&mut env).await;
            return lost(rec, why);
        }
    };
    add_agent_outcome(&mut rec, &outcome);
    if let Some((mode, reason)) = outcome.failure {
        rec.failure_mode = mode;
        rec.reason = reason;
    }

    // The tests run after an agent timeout too: the work done until then counts.
    let t = Instant::now();
    match guarded(&ctx.pool, placement, ctx.verifier.run(task, &sandbox, agent_shell.as_mut())).await {
        Ok(Ok(run)) => {
            rec.timings.test_setup_secs = run.setup_secs;
            rec.timings.tests_secs = t.elapsed().as_secs_f64() - run.setup_secs;
            let _ = std::fs::write(dir.join("tests.log"), &run.output);
            score(&mut rec, task.layout, task.test_weights.as_ref(), &run, task.test_timeout.as_secs());
        }
        Ok(Err(e)) => set_failure(&mut rec, FailureMode::AgentError, format!("the tests could not be run: {e}")),
        Err(why) => {
            drop(agent_shell);
            give_up(&mut env).await;
            return lost(rec, why);
        }
    }
    // Closed before the teardown, so nothing reads from a container being removed.
    drop(agent_shell);
    match guarded(&ctx.pool, placement, artifacts::collect(&sandbox, &task.artifacts, &dir.join("artifacts"))).await {
        Ok(notices) => rec.notices.extend(notices),
        Err(why) => {
            give_up(&mut env).await;
            return lost(rec, why);
        }
    }
    let t = Instant::now();
    env.teardown().await;
    rec.timings.teardown_secs = t.elapsed().as_secs_f64();
    rec
}

/// Tries to remove a lost trial's environment, briefly: an engine that is gone refuses at
/// once, and one that was only slow gets its containers back.
async fn give_up(env: &mut TrialEnv) {
    let _ = tokio::time::timeout(std::time::Duration::from_secs(30), env.teardown()).await;
}

fn fail(mut rec: TrialRecord, mode: FailureMode, reason: String, started: Instant) -> TrialRecord {
    rec.failure_mode = mode;
    rec.reason = reason;
    rec.timings.total_secs = started.elapsed().as_secs_f64();
    rec
}

/// Adds an agent run's time, tokens, turns and counts to the trial's (a multi-step trial
/// has one run a step) and takes its ending as the trial's.
fn add_agent_outcome(rec: &mut TrialRecord, outcome: &AgentOutcome) {
    rec.timings.agent_secs += outcome.duration.as_secs_f64();
    rec.usage.add(outcome.usage);
    rec.turns += outcome.turns;
    rec.parse_error_turns += outcome.parse_error_turns;
    rec.repeated_calls += outcome.repeated_calls;
    rec.foreign_letter_turns += outcome.foreign_letter_turns;
    rec.tool_format = outcome.tool_format.or(rec.tool_format);
    rec.agent_ended = outcome.ended.clone();
    rec.agent_end_reason = outcome.end_reason;
}

/// Sets the failure mode unless an earlier phase already set one.
fn set_failure(rec: &mut TrialRecord, mode: FailureMode, reason: String) {
    if rec.failure_mode == FailureMode::Unset {
        rec.failure_mode = mode;
        rec.reason = reason;
    }
}

fn score(
    rec: &mut TrialRecord,
    layout: Layout,
    weights: Option<&std::collections::BTreeMap<String, f64>>,
    run: &TestRun,
    timeout_secs: u64,
) {
    rec.verified_by = Some(run.verified_by);
    rec.verify_note = run.note.clone();
    if run.timed_out {
        set_failure(rec, FailureMode::TestTimeout, format!("the tests ran past the test timeout of {timeout_secs} s"));
        return;
    }
    if layout == Layout::Tb2 {
        if run.verified_by == super::verify::VerifiedBy::FallbackPytest {
            rec.tests = parse_pytest(&run.output).unwrap_or_default();
        }
        match run.reward {
            Some(r) => {
                rec.score = r;
                rec.resolved = r >= 1.0;
                // Tests scored it: the reason is theirs unless a phase before said one.
                if !rec.resolved && rec.reason.is_empty() {
                    rec.reason = why::low_reward(run, r, "tests/test.sh");
                }
            }
            None => set_failure(rec, FailureMode::ParseError, why::no_reward(run, "tests/test.sh")),
        }
        return;
    }
    match parse_pytest(&run.output) {
        Ok(tests) => {
            rec.resolved = all_passed(&tests);
            rec.score = weighted_score(&tests, weights);
            if !rec.resolved && rec.reason.is_empty() {
                rec.reason = why::failed(&tests).unwrap_or_default();
            }
            rec.tests = tests;
        }
        Err(e) => {
            let mut reason = e.to_string();
            if let Some(note) = &run.note {
                reason = format!("{reason}; {note}");
            }
            let tail: String = run
                .output
                .trim()
                .lines()
                .rev()
                .take(3)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect::<Vec<_>>()
                .join(" | ");
            if !tail.is_empty() {
                reason = format!("{reason}; the output ends with: {}", tail.chars().take(300).collect::<String>());
            }
            set_failure(rec, FailureMode::ParseError, reason);
        }
    }
}
