//! `agent tasks validate`: the checks a task must pass before it is used for training
//! or bench. Its image builds; its tests are found and fail in the untouched
//! environment (nop); its reference solution passes them in fresh containers every
//! time (oracle, several runs: a flaky task is rejected); its test weights are valid.
//! Reported without failing the task: the instruction and the tests naming different
//! files, a partial score for doing nothing, and a task that needs the network
//! without saying so.
//!
//! Every container is an ordinary bench trial ([`crate::trial`]), so a task that
//! validates runs the same way under `agent bench` and `agent train`.

pub mod checks;
pub mod files;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use futures_util::StreamExt;
use serde::{Deserialize, Serialize};

use crate::agents::{AgentKind, ModelSource};
use crate::env::EnvSettings;
use crate::error::BenchError;
use crate::hostenv::HostEnv;
use crate::images::EngineImages;
use crate::results::{FailureMode, TrialRecord};
use crate::task::{discover, Layout, TaskEntry};
use crate::trial::{run_trial_with, TrialContext};
use crate::verify::{Verifier, VerifyMode};
use agent_core::config::Config;
use agent_sandbox::Engine;

/// The verdict on a task: `valid`, or the first fatal check it failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Valid,
    /// The task's files do not load (no instruction, a malformed task.toml, …).
    Unloadable,
    /// The build or the reference solution failed for want of the internet.
    NeedsInternet,
    BuildFailed,
    /// The tests produced no result (no pytest summary, no reward file).
    TestsNotFound,
    /// The tests pass in the untouched environment: doing nothing resolves the task.
    PassesUntouched,
    /// The reference solution failed every run.
    SolutionFails,
    /// The reference solution passed some runs and failed others.
    Flaky,
    BadWeights,
}

impl Verdict {
    /// The name used in lines and files.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Valid => "valid",
            Verdict::Unloadable => "unloadable",
            Verdict::NeedsInternet => "needs_internet",
            Verdict::BuildFailed => "build_failed",
            Verdict::TestsNotFound => "tests_not_found",
            Verdict::PassesUntouched => "passes_untouched",
            Verdict::SolutionFails => "solution_fails",
            Verdict::Flaky => "flaky",
            Verdict::BadWeights => "bad_weights",
        }
    }
}

/// Seconds per phase.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct PhaseTimes {
    pub build_secs: f64,
    pub nop_secs: f64,
    /// One per oracle run.
    pub oracle_secs: Vec<f64>,
    /// The oracle run without network, when one was made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offline_secs: Option<f64>,
    pub total_secs: f64,
}

/// What validation found for one task.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TaskReport {
    pub task: String,
    pub dir: PathBuf,
    pub verdict: Verdict,
    /// Why, for any verdict but `valid`.
    #[serde(default)]
    pub reason: String,
    /// Problems that do not make the task invalid.
    #[serde(default)]
    pub warnings: Vec<String>,
    /// The nop run's score (0 when the tests fail untouched, as they must).
    pub nop_score: Option<f64>,
    /// Oracle runs that resolved the task, of `oracle_runs`.
    pub oracle_passes: u32,
    pub oracle_runs: u32,
    /// Whether the oracle also resolved the task with the network cut off (`None`: not
    /// checked: the task allows the network, or its tests install their runner).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offline_ok: Option<bool>,
    pub times: PhaseTimes,
    /// Where the runs' logs are.
    pub logs: PathBuf,
}

impl TaskReport {
    /// One line: verdict, task, the failed check or the phase times, and warnings.
    pub fn line(&self) -> String {
        let t = &self.times;
        let oracle: f64 = t.oracle_secs.iter().sum();
        let mut s = if self.verdict == Verdict::Valid {
            format!(
                "valid            {}  (build {:.1} s, nop {:.1} s, oracle {}/{} in {:.1} s{})",
                self.task,
                t.build_secs,
                t.nop_secs,
                self.oracle_passes,
                self.oracle_runs,
                oracle,
                t.offline_secs.map(|o| format!(", offline {o:.1} s")).unwrap_or_default()
            )
        } else {
            format!("{:16} {}  {}", self.verdict.as_str(), self.task, self.reason)
        };
        for w in &self.warnings {
            s.push_str(&format!("\n                 ! {w}"));
        }
        s
    }
}

/// How to validate.
#[derive(Debug, Clone)]
pub struct ValidateOptions {
    /// Fresh-container runs of the reference solution (all must pass).
    pub oracle_runs: u32,
    /// Tasks validated at the same time.
    pub concurrency: usize,
    pub verify: VerifyMode,
    pub host: HostEnv,
    pub allow_cap_add: bool,
}

impl Default for ValidateOptions {
    fn default() -> Self {
        Self {
            oracle_runs: 3,
            concurrency: 1,
            verify: VerifyMode::Auto,
            host: HostEnv::default(),
            allow_cap_add: false,
        }
    }
}

/// Validates tasks; containers are labelled with `run_id` and logs go under `logs_dir`.
pub struct Validator {
    docker: Engine,
    config: Config,
    run_id: String,
    logs_dir: PathBuf,
    opts: ValidateOptions,
    verifier: Verifier,
}

impl Validator {
    /// Probes the verifier once (whether uv can be fetched) for every task it validates.
    pub async fn new(docker: Engine, config: Config, run_id: &str, logs_dir: &Path, opts: ValidateOptions) -> Self {
        let verifier = Verifier::probe(opts.verify).await;
        Self { docker, config, run_id: run_id.to_string(), logs_dir: logs_dir.to_path_buf(), opts, verifier }
    }

    /// Validates the tasks in `paths` (task folders or folders of tasks), `concurrency`
    /// at a time; `on_report` sees each report as it is made. Reports come back in task order.
    pub async fn validate_all(
        &self,
        paths: &[PathBuf],
        on_report: &(dyn Fn(&TaskReport) + Sync),
    ) -> Result<Vec<TaskReport>, BenchError> {
        let entries = discover(paths)?;
        let mut reports: Vec<(usize, TaskReport)> = futures_util::stream::iter(entries.iter().enumerate())
            .map(|(i, e)| async move {
                let r = self.validate(e).await;
                on_report(&r);
                (i, r)
            })
            .buffer_unordered(self.opts.concurrency.max(1))
            .collect()
            .await;
        reports.sort_by_key(|(i, _)| *i);
        Ok(reports.into_iter().map(|(_, r)| r).collect())
    }

    /// Validates one task folder, with the runs' logs in `logs`.
    pub async fn validate_dir(&self, dir: &Path, logs: &Path) -> TaskReport {
        let name = dir.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_else(|| "task".into());
        let entry = TaskEntry { name, dir: dir.to_path_buf(), task: crate::task::BenchTask::load(dir) };
        self.validate_at(&entry, logs).await
    }

    /// A trial context like validation's, for other agents (calibration runs a solver
    /// model on validated tasks), with its own image cache.
    pub fn trial_context(&self, agent: AgentKind, model: Option<ModelSource>, run_dir: &Path) -> TrialContext {
        let images = Arc::new(EngineImages::new(&self.config.image_map, self.opts.host.build_env()));
        TrialContext { model, run_dir: run_dir.to_path_buf(), ..self.context(agent, &images, true) }
    }

    fn context(&self, agent: AgentKind, images: &Arc<EngineImages>, network: bool) -> TrialContext {
        TrialContext {
            pool: agent_sandbox::EnginePool::single(self.docker.clone()),
            run_dir: self.logs_dir.clone(),
            agent,
            model: None,
            config: self.config.clone(),
            images: images.clone(),
            env: EnvSettings {
                allow_cap_add: self.opts.allow_cap_add,
                network,
                ..EnvSettings::from_config(&self.config, &self.run_id, self.opts.host.extra_hosts.clone())
            },
            verifier: self.verifier.clone(),
            hooks: Default::default(),
        }
    }

    /// Validates one task: build, nop, the oracle runs, the offline run, the static checks.
    pub async fn validate(&self, entry: &TaskEntry) -> TaskReport {
        self.validate_at(entry, &self.logs_dir.join(&entry.name)).await
    }

    async fn validate_at(&self, entry: &TaskEntry, logs: &Path) -> TaskReport {
        let started = Instant::now();
        let logs = logs.to_path_buf();
        let mut report = TaskReport {
            task: entry.name.clone(),
            dir: entry.dir.clone(),
            verdict: Verdict::Valid,
            reason: String::new(),
            warnings: Vec::new(),
            nop_score: None,
            oracle_passes: 0,
            oracle_runs: 0,
            offline_ok: None,
            times: PhaseTimes::default(),
            logs: logs.clone(),
        };
        self.run_checks(entry, &logs, &mut report).await;
        report.times.total_secs = started.elapsed().as_secs_f64();
        report
    }

    async fn run_checks(&self, entry: &TaskEntry, logs: &Path, report: &mut TaskReport) {
        let task = match &entry.task {
            Ok(t) => t,
            Err(e) => return fail(report, Verdict::Unloadable, e.to_string()),
        };
        let build_text: Vec<String> =
            dockerfiles(task).iter().map(|p| std::fs::read_to_string(p).unwrap_or_default()).collect();
        for (what, text) in
            [("the image build", build_text.join("\n")), ("the reference solution", solution_text(task))]
        {
            let hosts = checks::fetched_hosts(&text);
            if !hosts.is_empty() {
                report.warnings.push(format!("{what} fetches from {} (it needs the internet)", hosts.join(", ")));
            }
        }
        // A fresh cache per validation: a builder edits its task's Dockerfile between
        // validations, and the cache keeps a task's images by name.
        let images = Arc::new(EngineImages::new(&self.config.image_map, self.opts.host.build_env()));
        let t = Instant::now();
        let built = images.on(&self.docker).get(task).await;
        report.times.build_secs = t.elapsed().as_secs_f64();
        if let Err(e) = built {
            let text = e.to_string();
            return match checks::network_failure(&text) {
                Some(line) => {
                    fail(report, Verdict::NeedsInternet, format!("the image build needs the internet: {line}"))
                }
                None => fail(report, Verdict::BuildFailed, first_lines(&text, 6)),
            };
        }

        // Doing nothing must not resolve the task, and must produce a test result.
        let nop_ctx = self.context(AgentKind::Nop, &images, true);
        let nop = run_trial_with(&nop_ctx, None, entry, 0, logs.join("nop")).await;
        report.times.nop_secs = nop.timings.total_secs;
        // An environment whose healthcheck never passes untouched does not come up either.
        if matches!(nop.failure_mode, FailureMode::EnvBuildFailed | FailureMode::EnvUnhealthy) {
            return fail(report, Verdict::BuildFailed, nop.reason.clone());
        }
        // Tests that cannot even run untouched (a task whose environment is broken on
        // purpose) fail untouched as far as scoring goes; whether they exist at all is
        // decided by the oracle's runs below.
        let nop_ran =
            !(matches!(nop.failure_mode, FailureMode::ParseError | FailureMode::TestTimeout | FailureMode::AgentError)
                || (task.layout == Layout::Tb1 && nop.tests.is_empty()));
        if !nop_ran {
            report.warnings.push(format!(
                "the tests produce no result on the untouched environment: {}",
                first_lines(&nop.reason, 2).chars().take(200).collect::<String>()
            ));
        }
        report.nop_score = Some(nop.score);
        if nop.resolved {
            return fail(
                report,
                Verdict::PassesUntouched,
                format!(
                    "the tests pass on the untouched environment (score {:.2}): doing nothing resolves it",
                    nop.score
                ),
            );
        }
        if nop.score > 0.0 {
            let passing: Vec<String> =
                nop.tests.iter().filter(|t| t.status.is_pass()).map(|t| checks::short_name(&t.name)).collect();
            report.warnings.push(format!(
                "doing nothing scores {:.2}{}",
                nop.score,
                if passing.is_empty() { String::new() } else { format!(" ({} pass untouched)", passing.join(", ")) }
            ));
        }

        // The reference solution must pass every run, each in a fresh container.
        let runs = self.opts.oracle_runs.max(1);
        let oracle_ctx = self.context(AgentKind::Oracle, &images, true);
        let mut failures: Vec<TrialRecord> = Vec::new();
        let mut last_pass: Option<TrialRecord> = None;
        for k in 0..runs {
            let rec = run_trial_with(&oracle_ctx, None, entry, k, logs.join(format!("oracle-{}", k + 1))).await;
            report.times.oracle_secs.push(rec.timings.total_secs);
            report.oracle_runs += 1;
            if rec.resolved {
                report.oracle_passes += 1;
                last_pass = Some(rec);
            } else {
                failures.push(rec);
            }
        }
        if let Some(first) = failures.first() {
            let why = oracle_failure(first, &logs.join("oracle-1"));
            if report.oracle_passes > 0 {
                return fail(
                    report,
                    Verdict::Flaky,
                    format!(
                        "the reference solution passed {} of {runs} runs; a failed run: {why}",
                        report.oracle_passes
                    ),
                );
            }
            let dir = logs.join("oracle-1");
            let log_text = ["agent.log", "tests.log"]
                .iter()
                .map(|f| std::fs::read_to_string(dir.join(f)).unwrap_or_default())
                .collect::<Vec<_>>()
                .join("\n");
            if let Some(line) = checks::network_failure(&format!("{}\n{log_text}", first.reason)) {
                return fail(
                    report,
                    Verdict::NeedsInternet,
                    format!("the reference solution needs the internet: {line}"),
                );
            }
            if !nop_ran && failures.iter().all(|r| r.failure_mode == FailureMode::ParseError) {
                return fail(
                    report,
                    Verdict::TestsNotFound,
                    format!("the tests produce no result, untouched or after the reference solution: {why}"),
                );
            }
            return fail(
                report,
                Verdict::SolutionFails,
                format!("the reference solution failed {runs} of {runs} runs: {why}"),
            );
        }

        // Weights: every weight names a test that ran, and they sum to 1.
        if let Some(weights) = &task.test_weights {
            let tests = match (task.layout, &last_pass) {
                (Layout::Tb1, Some(rec)) => checks::test_ids(&rec.tests),
                _ => checks::test_functions(&task.tests_dir),
            };
            let (problems, unweighted) = checks::check_weights(weights, &tests);
            if !problems.is_empty() {
                return fail(report, Verdict::BadWeights, problems.join("; "));
            }
            if !unweighted.is_empty() {
                report.warnings.push(format!("{} carry no weight and count for nothing", unweighted.join(", ")));
            }
        }

        report.warnings.extend(checks::file_mismatches(&task.instruction, &task.tests_dir));

        // The network: a task that runs without it must say so, or be checked without it.
        if task.internet && task.layout == Layout::Tb2 && !declares_network(&task.dir) {
            let offline_ctx = self.context(AgentKind::Oracle, &images, false);
            let rec = run_trial_with(&offline_ctx, None, entry, runs, logs.join("offline")).await;
            report.times.offline_secs = Some(rec.timings.total_secs);
            report.offline_ok = Some(rec.resolved);
            if !rec.resolved {
                report.warnings.push(format!(
                    "the reference solution fails without the network ({}); say what the task needs with \
                     [environment] allow_internet = true in task.toml, or make it work offline",
                    oracle_failure(&rec, &logs.join("offline"))
                ));
            }
        } else if !task.internet {
            report.offline_ok = Some(true);
        }
    }
}

/// The Dockerfiles of a task's services that it builds.
fn dockerfiles(task: &crate::task::BenchTask) -> Vec<PathBuf> {
    task.environment
        .services
        .iter()
        .filter_map(|s| match &s.image {
            crate::compose::ImageSource::Build { dockerfile, .. } => Some(dockerfile.clone()),
            _ => None,
        })
        .collect()
}

/// The reference solution's text: its script, or its keystrokes' commands.
fn solution_text(task: &crate::task::BenchTask) -> String {
    use crate::solution::Solution;
    match &task.solution {
        Solution::Script(p) => std::fs::read_to_string(p).unwrap_or_default(),
        Solution::Keystrokes(steps) => Solution::keystroke_commands(steps).join("\n"),
        Solution::Missing => String::new(),
    }
}

/// Whether a TB2 task's task.toml says what network it needs (`network_mode` or
/// `allow_internet`); without either, Harbor gives it the internet by default.
fn declares_network(dir: &Path) -> bool {
    let Ok(text) = std::fs::read_to_string(dir.join("task.toml")) else { return false };
    let Ok(value) = text.parse::<toml::Table>() else { return false };
    value
        .get("environment")
        .and_then(|e| e.as_table())
        .is_some_and(|e| e.contains_key("network_mode") || e.contains_key("allow_internet"))
}

fn fail(report: &mut TaskReport, verdict: Verdict, reason: String) {
    report.verdict = verdict;
    report.reason = reason;
}

fn first_lines(text: &str, n: usize) -> String {
    text.lines().filter(|l| !l.trim().is_empty()).take(n).collect::<Vec<_>>().join(" | ")
}

/// Why an oracle run failed, in one line: its failure, or the tests that failed.
fn oracle_failure(rec: &TrialRecord, dir: &Path) -> String {
    if rec.failure_mode != FailureMode::Unset {
        return format!("[{}] {}", rec.failure_mode.as_str(), first_lines(&rec.reason, 3));
    }
    let failed: Vec<String> =
        rec.tests.iter().filter(|t| !t.status.is_pass()).map(|t| checks::short_name(&t.name)).collect();
    if !failed.is_empty() {
        return format!("score {:.2}; failing: {} (logs: {})", rec.score, failed.join(", "), dir.display());
    }
    format!("score {:.2} (logs: {})", rec.score, dir.display())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_toml_declares_its_network() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("task.toml"), "[environment]\nbuild_timeout_sec = 60\n").unwrap();
        assert!(!declares_network(dir.path()));
        std::fs::write(dir.path().join("task.toml"), "[environment]\nallow_internet = false\n").unwrap();
        assert!(declares_network(dir.path()));
        std::fs::write(dir.path().join("task.toml"), "[environment]\nnetwork_mode = \"public\"\n").unwrap();
        assert!(declares_network(dir.path()));
    }

    #[test]
    fn a_line_says_the_verdict_and_why() {
        let r = TaskReport {
            task: "t".into(),
            dir: "t".into(),
            verdict: Verdict::Flaky,
            reason: "the reference solution passed 1 of 3 runs".into(),
            warnings: vec!["doing nothing scores 0.50".into()],
            nop_score: Some(0.5),
            oracle_passes: 1,
            oracle_runs: 3,
            offline_ok: None,
            times: PhaseTimes::default(),
            logs: "l".into(),
        };
        assert_eq!(r.line(), "flaky            t  the reference solution passed 1 of 3 runs\n                 ! doing nothing scores 0.50");
    }
}
