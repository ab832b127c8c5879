//! A multi-step trial, as Harbor runs one: in the one started environment, each step in
//! order gets its working files (`steps/NAME/workdir/`, then its `setup.sh`), waits for
//! its own healthcheck when it has one, then gets the agent with the step's instruction
//! (a fresh episode each step, as Harbor starts each step's agent anew), then the step's
//! tests alone in `/tests` with an empty `/logs/verifier`; the step's artifacts are
//! copied out after its tests. A step whose tests wrote no reward, or whose reward misses
//! its `min_reward`, is the last to run. The task's reward is formed from the steps'
//! rewards by the task's strategy; resolved means every step ran, every one wrote a
//! reward, and that reward is 1.

use std::path::Path;
use std::time::{Duration, Instant};

use agent_sandbox::{shell_quote, Sandbox};

use super::super::agents::{run_agent, ModelSource};
use super::super::results::{FailureMode, StepRecord, TrialRecord};
use super::super::task::{BenchTask, TaskStep};
use super::super::verify::{clear_for_step, VerifiedBy};
use super::{add_agent_outcome, set_failure, TrialContext};

/// Bytes of a step's `setup.sh` output kept in its log.
const MAX_SETUP_OUTPUT: usize = 256 * 1024;

/// Runs every step of `task` in `sandbox` (logs in `dir/steps/NAME/`) and records the
/// steps, the task's reward and the agents' totals in `rec`.
pub(super) async fn run_steps(
    ctx: &TrialContext,
    model: Option<&ModelSource>,
    task: &BenchTask,
    sandbox: &Sandbox,
    dir: &Path,
    episode: &str,
    rec: &mut TrialRecord,
) {
    let mut steps = Vec::new();
    for step in &task.steps {
        let (record, go_on) = run_step(ctx, model, task, step, sandbox, dir, episode, rec).await;
        steps.push(record);
        if !go_on {
            break;
        }
    }
    finish(rec, task, steps);
}

/// One step; whether the next may run.
#[allow(clippy::too_many_arguments)]
async fn run_step(
    ctx: &TrialContext,
    model: Option<&ModelSource>,
    task: &BenchTask,
    step: &TaskStep,
    sandbox: &Sandbox,
    dir: &Path,
    episode: &str,
    rec: &mut TrialRecord,
) -> (StepRecord, bool) {
    let mut record = StepRecord { name: step.name.clone(), ..Default::default() };
    let step_dir = dir.join("steps").join(&step.name);
    if let Err(e) = std::fs::create_dir_all(&step_dir) {
        let reason = format!("{}: cannot create the step's log folder: {e}", step_dir.display());
        fail_step(&mut record, FailureMode::AgentError, reason);
        return (record, false);
    }
    if let Err(reason) = prepare(sandbox, step, &step_dir).await {
        // Harbor stops at a step whose setup failed: its agent and tests do not run.
        fail_step(&mut record, FailureMode::AgentError, reason);
        return (record, false);
    }
    if let Some(hc) = &step.healthcheck {
        if let Err(reason) = super::health::wait_healthy(sandbox, hc, &step_dir.join("healthcheck.log")).await {
            fail_step(&mut record, FailureMode::EnvUnhealthy, reason);
            return (record, false);
        }
    }

    let view = task.step_view(step);
    let ids = (ctx.env.run_id.as_str(), format!("{episode}-{}", step.name));
    let settings = (&ctx.config, &ctx.hooks);
    let (outcome, _shell) = run_agent(ctx.agent, model, settings, &view, sandbox, &step_dir, (ids.0, &ids.1)).await;
    record.agent_secs = outcome.duration.as_secs_f64();
    record.agent_ended = outcome.ended.clone();
    add_agent_outcome(rec, &outcome);
    if let Some((mode, reason)) = outcome.failure {
        fail_step(&mut record, mode, reason);
    }

    // The tests run after a failed agent too (the work done until then counts), alone:
    // the previous step's tests and reward are gone first.
    let t = Instant::now();
    let run = match clear_for_step(sandbox, &step.name).await {
        Ok(()) => ctx.verifier.run(&view, sandbox, None).await,
        Err(e) => Err(e),
    };
    record.tests_secs = t.elapsed().as_secs_f64();
    rec.timings.tests_secs += record.tests_secs;
    match run {
        Ok(run) => {
            let _ = std::fs::write(step_dir.join("tests.log"), &run.output);
            if run.timed_out {
                let why = format!("the tests ran past the step's test timeout of {} s", step.test_timeout.as_secs());
                fail_step(&mut record, FailureMode::TestTimeout, why);
            } else if run.reward.is_none() {
                fail_step(&mut record, FailureMode::ParseError, super::why::no_reward(&run, "the step's test.sh"));
            } else {
                record.reward = run.reward;
                record.rewards = run.rewards.clone();
                if let Some(r) = run.reward.filter(|r| *r < 1.0 && record.reason.is_empty()) {
                    record.reason = super::why::low_reward(&run, r, "the step's test.sh");
                }
            }
        }
        Err(e) => fail_step(&mut record, FailureMode::AgentError, format!("the tests could not be run: {e}")),
    }
    rec.notices.extend(super::artifacts::collect(sandbox, &step.artifacts, &step_dir.join("artifacts")).await);
    if record.reward.is_none() {
        return (record, false);
    }
    if let Some(missed) = step.min_reward.as_ref().and_then(|m| m.missed(&record.rewards)) {
        let earlier = std::mem::take(&mut record.reason);
        record.reason = format!("the remaining steps did not run: {missed}");
        if !earlier.is_empty() {
            record.reason = format!("{} ({earlier})", record.reason);
        }
        return (record, false);
    }
    (record, true)
}

/// Copies the step's `workdir/` into the container's working directory and runs its
/// `setup.sh` there; the reason when either fails (the step's setup log has the output).
async fn prepare(sandbox: &Sandbox, step: &TaskStep, step_dir: &Path) -> Result<(), String> {
    let Some(workdir) = &step.workdir else { return Ok(()) };
    let pwd = sandbox
        .exec(&["pwd"], None, Duration::from_secs(30), 4096)
        .await
        .map_err(|e| format!("cannot read the container's working directory: {e}"))?;
    let cwd = String::from_utf8_lossy(&pwd.stdout).trim().to_string();
    let cwd = if cwd.is_empty() { "/".to_string() } else { cwd };
    sandbox
        .copy_dir_in(workdir, &cwd)
        .await
        .map_err(|e| format!("cannot copy {} into {cwd}: {e}", workdir.display()))?;
    if !workdir.join("setup.sh").is_file() {
        return Ok(());
    }
    let script = format!("{}/setup.sh", cwd.trim_end_matches('/'));
    let cmd = format!("bash {} 2>&1", shell_quote(&script));
    let out = sandbox
        .exec(&["bash", "-c", &cmd], Some(&cwd), step.agent_timeout, MAX_SETUP_OUTPUT)
        .await
        .map_err(|e| format!("the step's setup.sh could not be run: {e}"))?;
    let text = agent_sandbox::sanitize(&out.stdout);
    let _ = std::fs::write(step_dir.join("setup.log"), &text);
    match out.exit_code {
        Some(0) => Ok(()),
        Some(code) => Err(format!("the step's setup.sh exited with {code} (see steps/{}/setup.log)", step.name)),
        None => Err(format!("the step's setup.sh ran past {} s", step.agent_timeout.as_secs())),
    }
}

/// Sets the step's failure unless an earlier phase of it already set one.
fn fail_step(record: &mut StepRecord, mode: FailureMode, reason: String) {
    if record.failure_mode == FailureMode::Unset {
        record.failure_mode = mode;
        record.reason = reason;
    }
}

/// The task's reward, resolution and failure from the steps that ran.
fn finish(rec: &mut TrialRecord, task: &BenchTask, steps: Vec<StepRecord>) {
    let rewards: Vec<Option<f64>> = steps.iter().map(|s| s.reward).collect();
    rec.verified_by = Some(VerifiedBy::RewardFile);
    rec.score = task.step_reward.combine(&rewards).unwrap_or(0.0);
    let every_step_scored = steps.len() == task.steps.len() && steps.iter().all(|s| s.reward.is_some());
    rec.resolved = every_step_scored && rec.score >= 1.0;
    if let Some(failed) = steps.iter().find(|s| s.failure_mode != FailureMode::Unset) {
        set_failure(rec, failed.failure_mode, format!("step `{}`: {}", failed.name, failed.reason));
    } else if let Some(last) = steps.last().filter(|_| steps.len() < task.steps.len()) {
        // Stopped by a `min_reward`: the tests decided, so no failure mode, but say why.
        if rec.reason.is_empty() {
            rec.reason = format!("step `{}`: {}", last.name, last.reason);
        }
    } else if let Some(low) = steps.iter().find(|s| !rec.resolved && !s.reason.is_empty()) {
        // Every step ran; the first that scored below 1 says why the task did not resolve.
        if rec.reason.is_empty() {
            rec.reason = format!("step `{}`: {}", low.name, low.reason);
        }
    }
    rec.steps = Some(steps);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(name: &str, reward: Option<f64>) -> StepRecord {
        StepRecord { name: name.into(), reward, ..Default::default() }
    }

    fn task_with(n: usize, strategy: &str) -> BenchTask {
        let d = tempfile::tempdir().unwrap();
        let write = |rel: &str, text: &str| {
            let p = d.path().join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        };
        let mut toml = format!("multi_step_reward_strategy = \"{strategy}\"\n");
        for i in 0..n {
            toml.push_str(&format!("[[steps]]\nname = \"s{i}\"\n"));
            write(&format!("steps/s{i}/instruction.md"), "do it\n");
        }
        write("task.toml", &toml);
        write("environment/Dockerfile", "FROM x\n");
        write("tests/test.sh", "true\n");
        BenchTask::load(d.path()).unwrap()
    }

    fn record() -> TrialRecord {
        serde_json::from_value(serde_json::json!({
            "task": "t", "attempt": 0, "resolved": false, "failure_mode": "unset",
            "verified_by": null, "timings": {"env_build_secs": 0.0, "env_start_secs": 0.0, "agent_secs": 0.0,
            "test_setup_secs": 0.0, "tests_secs": 0.0, "teardown_secs": 0.0, "total_secs": 0.0},
            "started_at_unix_ms": 0
        }))
        .unwrap()
    }

    #[test]
    fn every_step_scored_one_resolves_with_the_mean() {
        let task = task_with(3, "mean");
        let mut rec = record();
        finish(&mut rec, &task, vec![step("s0", Some(1.0)), step("s1", Some(1.0)), step("s2", Some(1.0))]);
        assert!(rec.resolved && rec.score == 1.0 && rec.failure_mode == FailureMode::Unset, "{rec:?}");
        assert_eq!(rec.steps.as_ref().map(Vec::len), Some(3));

        let mut rec = record();
        let mut low = step("s1", Some(0.0));
        low.reason = "the step's test.sh wrote reward 0: failed tests: t (1 of 1)".into();
        finish(&mut rec, &task, vec![step("s0", Some(1.0)), low, step("s2", Some(0.5))]);
        assert!(!rec.resolved && rec.score == 0.5, "{rec:?}");
        assert_eq!(rec.reason, "step `s1`: the step's test.sh wrote reward 0: failed tests: t (1 of 1)");
    }

    #[test]
    fn a_step_that_stopped_the_rest_leaves_the_task_unresolved_and_says_why() {
        let task = task_with(3, "mean");
        // Harbor's mean counts only the steps that ran, so the score may be 1 …
        let mut rec = record();
        let mut stopped = step("s1", Some(1.0));
        stopped.reason = "the remaining steps did not run: `score` = 0 is below min_reward 1".into();
        finish(&mut rec, &task, vec![step("s0", Some(1.0)), stopped]);
        assert_eq!(rec.score, 1.0);
        // … but the task is resolved only when every step ran and scored.
        assert!(!rec.resolved && rec.failure_mode == FailureMode::Unset, "{rec:?}");
        assert!(rec.reason.starts_with("step `s1`: the remaining steps did not run"), "{}", rec.reason);

        let mut rec = record();
        let mut broken = step("s1", None);
        broken.failure_mode = FailureMode::ParseError;
        broken.reason = "the step's tests wrote no readable reward".into();
        finish(&mut rec, &task, vec![step("s0", Some(1.0)), broken]);
        assert_eq!((rec.score, rec.resolved, rec.failure_mode), (1.0, false, FailureMode::ParseError));
        assert!(rec.reason.starts_with("step `s1`: the step's tests"), "{}", rec.reason);
    }

    #[test]
    fn the_final_strategy_takes_the_last_step_that_ran() {
        let task = task_with(2, "final");
        let mut rec = record();
        finish(&mut rec, &task, vec![step("s0", Some(0.0)), step("s1", Some(1.0))]);
        assert!(rec.resolved && rec.score == 1.0, "{rec:?}");
        let mut rec = record();
        finish(&mut rec, &task, vec![step("s0", Some(1.0)), step("s1", Some(0.25))]);
        assert!(!rec.resolved && rec.score == 0.25, "{rec:?}");
    }
}
