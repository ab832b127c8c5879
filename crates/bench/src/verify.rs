//! Running a task's tests after the agent: copy `tests/` into `/tests`, run the task's
//! script (or, when that script cannot fetch its test runner, the task's pytest file
//! with a pytest available in the container), under the test timeout, with the task's
//! verifier variables; in a fresh process, or in the agent's own shell session when
//! the task asks for it (TB1's `run_tests_in_same_shell`).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use super::compose::TEST_DIR;
use super::error::VerifyError;
use super::task::{BenchTask, Layout};
use agent_sandbox::{shell_quote, OutputCollector, Sandbox, SandboxError, Shell};

/// Bytes of test output kept (head and tail are what matter; pytest's summary is last).
const MAX_TEST_OUTPUT: usize = 1 << 20;
/// Where TB2 tests write their reward.
pub const REWARD_FILE: &str = "/logs/verifier/reward.txt";
/// Harbor's alternative to [`REWARD_FILE`]: a JSON object of named rewards.
pub const REWARD_JSON: &str = "/logs/verifier/reward.json";

/// Which mode verified a trial.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum VerifiedBy {
    /// The task's own `run-tests.sh`.
    #[serde(rename = "run-tests.sh")]
    RunTests,
    /// The harness ran the task's pytest file with a pytest in the container, because
    /// the script's runner (uv from astral.sh) cannot be fetched.
    #[serde(rename = "fallback-pytest")]
    FallbackPytest,
    /// TB2's `tests/test.sh` and its reward file.
    #[serde(rename = "reward-file")]
    RewardFile,
}

/// How to choose the verification mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum VerifyMode {
    /// The task's script, unless it needs a runner the network cannot deliver.
    #[default]
    Auto,
    /// Always the task's script.
    Script,
    /// Always the harness's pytest run.
    Fallback,
}

/// What the test run produced.
#[derive(Debug, Clone)]
pub struct TestRun {
    pub verified_by: VerifiedBy,
    /// Why this mode was chosen, when it is not the task's own script.
    pub note: Option<String>,
    pub output: String,
    pub exit_code: Option<i64>,
    pub timed_out: bool,
    /// The TB2 reward, when the layout has one.
    pub reward: Option<f64>,
    /// The named rewards behind `reward` (`reward.txt` is `reward`; `reward.json` its
    /// numbers); empty when there is none.
    pub rewards: BTreeMap<String, f64>,
    pub duration: Duration,
    /// Seconds spent installing the fallback's packages (not under the test timeout).
    pub setup_secs: f64,
}

/// The run-wide verification choice.
#[derive(Debug, Clone)]
pub struct Verifier {
    pub mode: VerifyMode,
    /// `None` when uv can be fetched; otherwise why not.
    pub uv_unreachable: Option<String>,
}

impl Verifier {
    /// Probes once whether `uv`'s installer is reachable from here.
    pub async fn probe(mode: VerifyMode) -> Verifier {
        if mode != VerifyMode::Auto {
            return Verifier { mode, uv_unreachable: None };
        }
        let url = "https://astral.sh/uv/install.sh";
        let client = reqwest::Client::builder().timeout(Duration::from_secs(5)).build();
        let uv_unreachable = match client {
            Err(e) => Some(format!("no HTTP client: {e}")),
            Ok(c) => match c.head(url).send().await {
                Ok(r) if r.status().is_success() || r.status().is_redirection() => None,
                Ok(r) => Some(format!("{url} answered {}", r.status())),
                Err(e) => Some(format!("{url} is unreachable: {}", first_line(&e.to_string()))),
            },
        };
        Verifier { mode, uv_unreachable }
    }

    /// Copies the tests in and runs them: in the agent's shell session (`agent_shell`,
    /// or a new session when the agent left none) when the task asks for its tests to
    /// run in the same shell, else in a fresh process.
    pub async fn run(
        &self,
        task: &BenchTask,
        sandbox: &Sandbox,
        agent_shell: Option<&mut Shell>,
    ) -> Result<TestRun, VerifyError> {
        copy_dir(sandbox, &task.tests_dir, TEST_DIR).await?;
        // A step's own tests go in last, so its files win (Harbor's layering).
        for overlay in &task.tests_overlays {
            copy_dir(sandbox, overlay, TEST_DIR).await?;
        }
        let mut new_session;
        let (mut runner, how) = match (task.run_tests_in_same_shell, agent_shell) {
            (false, _) => (Runner::Fresh(sandbox), ""),
            (true, Some(shell)) => {
                (Runner::Shell(shell), "the tests ran in the agent's shell session (run_tests_in_same_shell)")
            }
            (true, None) => {
                // The agent kept no session (nop, or a session that failed): TB1 would
                // type the tests into a shell all the same.
                new_session = Shell::start(sandbox, MAX_TEST_OUTPUT).await?;
                let how = "the agent left no shell session; the tests ran in a new one (run_tests_in_same_shell)";
                (Runner::Shell(&mut new_session), how)
            }
        };
        let mut run = self.run_with(task, sandbox, &mut runner).await?;
        if !how.is_empty() {
            run.note = Some(match run.note.take() {
                Some(note) => format!("{note}; {how}"),
                None => how.to_string(),
            });
        }
        Ok(run)
    }

    /// Whether the task's tests fetch uv (a TB1 `run-tests.sh` that runs it): only
    /// those are verified differently when astral.sh is unreachable.
    pub fn needs_uv(task: &BenchTask) -> bool {
        task.layout != Layout::Tb2
            && std::fs::read_to_string(&task.test_script).is_ok_and(|script| script_needs_uv(&script))
    }

    async fn run_with(
        &self,
        task: &BenchTask,
        sandbox: &Sandbox,
        runner: &mut Runner<'_>,
    ) -> Result<TestRun, VerifyError> {
        let env = env_prefix(&task.env.verifier);
        if task.layout == Layout::Tb2 {
            if tb2_by_script(self.mode) {
                return run_tb2(task, sandbox, runner, &env).await;
            }
            return run_tb2_fallback(task, sandbox, runner).await;
        }
        let script = std::fs::read_to_string(&task.test_script)
            .map_err(|e| VerifyError::ReadScript { path: task.test_script.display().to_string(), source: e })?;
        upload(sandbox, &format!("{TEST_DIR}/run-tests.sh"), script.as_bytes()).await?;
        let needs_uv = script_needs_uv(&script);
        let fallback_reason = match self.mode {
            VerifyMode::Script => None,
            VerifyMode::Fallback => Some("--verify fallback".to_string()),
            VerifyMode::Auto => self
                .uv_unreachable
                .as_ref()
                .filter(|_| needs_uv)
                .map(|why| format!("run-tests.sh fetches uv from astral.sh, which is unreachable ({why})")),
        };
        match fallback_reason {
            None => {
                let cmd = format!("{env}bash {TEST_DIR}/run-tests.sh 2>&1");
                let (out, code, timed_out, d) = runner.exec(&cmd, task.test_timeout).await?;
                Ok(TestRun {
                    verified_by: VerifiedBy::RunTests,
                    note: None,
                    output: out,
                    exit_code: code,
                    timed_out,
                    reward: None,
                    rewards: BTreeMap::new(),
                    duration: d,
                    setup_secs: 0.0,
                })
            }
            Some(reason) => run_fallback(task, sandbox, runner, &script, reason).await,
        }
    }
}

fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or_default().chars().take(200).collect()
}

/// `KEY='value' ` assignments for the front of a command: the variables apply to that
/// command only.
pub(crate) fn env_prefix(vars: &BTreeMap<String, String>) -> String {
    vars.iter().map(|(k, v)| format!("{k}={} ", shell_quote(v))).collect()
}

/// Empties `/tests` and `/logs/verifier` before a step's tests, as Harbor does between
/// steps: the previous step's files and reward must not count for this one.
pub async fn clear_for_step(sandbox: &Sandbox, step: &str) -> Result<(), VerifyError> {
    let cmd = format!("rm -rf {TEST_DIR} /logs/verifier && mkdir -p /logs/verifier");
    let (output, code, _, _) = exec(sandbox, &cmd, Duration::from_secs(60)).await?;
    if code != Some(0) {
        return Err(VerifyError::ClearStep { step: step.to_string(), code, output: tail(&output, 300) });
    }
    Ok(())
}

/// Where the test commands run.
enum Runner<'a> {
    /// A fresh process in the container's working directory.
    Fresh(&'a Sandbox),
    /// A shell session: its variables, cwd and background jobs as the agent left them.
    Shell(&'a mut Shell),
}

impl Runner<'_> {
    /// Runs a shell command: (output, exit code, timed out, duration).
    async fn exec(
        &mut self,
        cmd: &str,
        timeout: Duration,
    ) -> Result<(String, Option<i64>, bool, Duration), SandboxError> {
        match self {
            Runner::Fresh(sandbox) => exec(sandbox, cmd, timeout).await,
            Runner::Shell(shell) => {
                // The session caps output for a model; the tests keep as much as a fresh
                // run does (pytest's summary comes last).
                let mut out = OutputCollector::new(MAX_TEST_OUTPUT);
                let r = shell.run(cmd, timeout, &CancellationToken::new(), &mut |b| out.push(b)).await?;
                Ok((out.render(), r.exit_code, r.timed_out, r.duration))
            }
        }
    }
}

/// The reward `tests/test.sh` left (`reward.txt`, else `reward.json`) and the named
/// rewards behind it.
async fn read_reward(sandbox: &Sandbox) -> (Option<f64>, BTreeMap<String, f64>) {
    if let Ok(f) = sandbox.read_file(REWARD_FILE).await {
        if let Some(r) = super::pytest::parse_reward(&String::from_utf8_lossy(&f.bytes)) {
            return (Some(r), BTreeMap::from([("reward".to_string(), r)]));
        }
    }
    let Ok(f) = sandbox.read_file(REWARD_JSON).await else { return (None, BTreeMap::new()) };
    let text = String::from_utf8_lossy(&f.bytes);
    (super::pytest::parse_reward_json(&text), named_rewards(&text))
}

/// `reward.json`'s numbers by name (a bare number is `reward`).
fn named_rewards(text: &str) -> BTreeMap<String, f64> {
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(serde_json::Value::Object(named)) => {
            named.into_iter().filter_map(|(k, v)| v.as_f64().filter(|r| r.is_finite()).map(|r| (k, r))).collect()
        }
        Ok(v) => {
            v.as_f64().filter(|r| r.is_finite()).map(|r| BTreeMap::from([("reward".into(), r)])).unwrap_or_default()
        }
        Err(_) => BTreeMap::new(),
    }
}

async fn run_tb2(
    task: &BenchTask,
    sandbox: &Sandbox,
    runner: &mut Runner<'_>,
    env: &str,
) -> Result<TestRun, VerifyError> {
    let cmd = format!("mkdir -p /logs/verifier && {env}bash {TEST_DIR}/test.sh 2>&1");
    let (out, code, timed_out, d) = runner.exec(&cmd, task.test_timeout).await?;
    let (reward, rewards) = read_reward(sandbox).await;
    Ok(TestRun {
        verified_by: VerifiedBy::RewardFile,
        note: None,
        output: out,
        exit_code: code,
        timed_out,
        reward,
        rewards,
        duration: d,
        setup_secs: 0.0,
    })
}

/// Whether a TB2 task's own `tests/test.sh` verifies it: under `auto` too, since its
/// reward file is the task's verdict and the stand-ins carry the uv its scripts expect;
/// only `--verify fallback` runs its pytest files instead.
fn tb2_by_script(mode: VerifyMode) -> bool {
    mode != VerifyMode::Fallback
}

/// `--verify fallback` on a TB2 task: the pytest files `tests/test.sh` names, run with a
/// pytest in the container; the reward is 1 when every test passed, else 0 (what
/// Terminal-Bench 2's scripts write).
async fn run_tb2_fallback(
    task: &BenchTask,
    sandbox: &Sandbox,
    runner: &mut Runner<'_>,
) -> Result<TestRun, VerifyError> {
    let script = std::fs::read_to_string(&task.test_script)
        .map_err(|e| VerifyError::ReadScript { path: task.test_script.display().to_string(), source: e })?;
    let mut run = run_fallback(task, sandbox, runner, &script, "--verify fallback".into()).await?;
    if let Ok(tests) = super::pytest::parse_pytest(&run.output) {
        let reward = if super::pytest::all_passed(&tests) { 1.0 } else { 0.0 };
        run.reward = Some(reward);
        run.rewards = BTreeMap::from([("reward".to_string(), reward)]);
    }
    Ok(run)
}

async fn run_fallback(
    task: &BenchTask,
    sandbox: &Sandbox,
    runner: &mut Runner<'_>,
    script: &str,
    reason: String,
) -> Result<TestRun, VerifyError> {
    let (pytest_pin, extras) = packages_of(script);
    let files = test_files(script);
    let setup = format!(
        "export PIP_BREAK_SYSTEM_PACKAGES=1 PIP_DISABLE_PIP_VERSION_CHECK=1\n\
         PY=$(command -v python3 || command -v python) || {{ echo 'no python in the container'; exit 127; }}\n\
         V=$(\"$PY\" -m pytest --version 2>&1) || {{ \"$PY\" -m pip install -q {pytest_pin} || exit 3; V=$(\"$PY\" -m pytest --version 2>&1); }}\n\
         {}\necho \"$V\"",
        if extras.is_empty() {
            String::new()
        } else {
            format!("\"$PY\" -m pip install -q {} || exit 4", extras.join(" "))
        }
    );
    let started = Instant::now();
    let (setup_out, setup_code, _, _) =
        exec(sandbox, &format!("{{ {setup}\n}} 2>&1"), Duration::from_secs(600)).await?;
    let setup_secs = started.elapsed().as_secs_f64();
    let pytest_version = setup_out.lines().last().unwrap_or("").trim().to_string();
    if setup_code != Some(0) {
        return Ok(TestRun {
            verified_by: VerifiedBy::FallbackPytest,
            note: Some(format!(
                "{reason}; the fallback could not get pytest or the test packages: {}",
                tail(&setup_out, 400)
            )),
            output: setup_out,
            exit_code: setup_code,
            timed_out: false,
            reward: None,
            rewards: BTreeMap::new(),
            duration: started.elapsed(),
            setup_secs,
        });
    }
    let cmd = format!(
        "PY=$(command -v python3 || command -v python); {}\"$PY\" -m pytest {} -rA 2>&1",
        env_prefix(&task.env.verifier),
        files.join(" ")
    );
    let (out, code, timed_out, d) = runner.exec(&cmd, task.test_timeout).await?;
    Ok(TestRun {
        verified_by: VerifiedBy::FallbackPytest,
        note: Some(format!("{reason}; ran {} with {pytest_version}", files.join(" "))),
        output: out,
        exit_code: code,
        timed_out,
        reward: None,
        rewards: BTreeMap::new(),
        duration: d,
        setup_secs,
    })
}

fn tail(s: &str, n: usize) -> String {
    let chars: Vec<char> = s.trim().chars().collect();
    chars[chars.len().saturating_sub(n)..].iter().collect::<String>().replace('\n', " | ")
}

/// The pinned pytest (default `pytest`) and the other packages a run-tests script adds
/// with `uv add` or `pip install`.
pub fn packages_of(script: &str) -> (String, Vec<String>) {
    let mut pytest = "pytest".to_string();
    let mut extras = Vec::new();
    for line in script.lines().map(str::trim).filter(|l| !l.starts_with('#')) {
        let words: Vec<&str> = line.split_whitespace().collect();
        let args = match words.as_slice() {
            ["uv", "add", rest @ ..] | ["pip", "install", rest @ ..] | ["pip3", "install", rest @ ..] => rest,
            ["uv", "pip", "install", rest @ ..] => rest,
            _ => continue,
        };
        for a in args.iter().filter(|a| !a.starts_with('-')) {
            if a.to_lowercase().starts_with("pytest==") || a.eq_ignore_ascii_case("pytest") {
                pytest = a.to_string();
            } else if !extras.iter().any(|e| e == a) {
                extras.push(a.to_string());
            }
        }
    }
    (pytest, extras)
}

/// The test files the script hands pytest (`$TEST_DIR/...`), else `/tests/test_outputs.py`.
pub fn test_files(script: &str) -> Vec<String> {
    let mut files: Vec<String> = script
        .split_whitespace()
        .filter(|w| w.ends_with(".py") && (w.starts_with("$TEST_DIR/") || w.starts_with("${TEST_DIR}/")))
        .map(|w| {
            format!("{TEST_DIR}/{}", w.rsplit_once("}/").or_else(|| w.split_once('/')).map(|(_, f)| f).unwrap_or(w))
        })
        .collect();
    files.dedup();
    if files.is_empty() {
        files.push(format!("{TEST_DIR}/test_outputs.py"));
    }
    files
}

/// Runs a shell command in the container's working directory: (output, exit code,
/// timed out, duration).
async fn exec(
    sandbox: &Sandbox,
    cmd: &str,
    timeout: Duration,
) -> Result<(String, Option<i64>, bool, Duration), SandboxError> {
    let started = Instant::now();
    let out = sandbox.exec(&["bash", "-c", cmd], None, timeout, MAX_TEST_OUTPUT).await?;
    let d = started.elapsed();
    let mut text = agent_sandbox::sanitize(&out.stdout);
    if !out.stderr.is_empty() {
        text.push_str(&agent_sandbox::sanitize(&out.stderr));
    }
    let timed_out = out.exit_code.is_none() && d + Duration::from_millis(50) >= timeout;
    Ok((text, out.exit_code, timed_out, d))
}

/// Uploads one file.
async fn upload(sandbox: &Sandbox, path: &str, bytes: &[u8]) -> Result<(), VerifyError> {
    Ok(sandbox.write_file(path, bytes, None).await?)
}

/// Copies a host directory to `dest` (created) in the container.
pub async fn copy_dir(sandbox: &Sandbox, src: &Path, dest: &str) -> Result<(), VerifyError> {
    Ok(sandbox.copy_dir_in(src, dest).await?)
}

fn script_needs_uv(script: &str) -> bool {
    script.contains("uv ") || script.contains("setup-uv-pytest")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packages_and_files_of_real_scripts() {
        let s = "source $TEST_DIR/setup-uv-pytest.sh\n\nuv add pandas==2.3.0 pyarrow==20.0.0\n\nbash $TEST_DIR/run-uv-pytest.sh\n";
        assert_eq!(packages_of(s), ("pytest".to_string(), vec!["pandas==2.3.0".into(), "pyarrow==20.0.0".into()]));
        let s = "python3 -m venv .venv\nsource .venv/bin/activate\npip install pytest==8.4.1\npytest $TEST_DIR/test_outputs.py -rA\n";
        assert_eq!(packages_of(s), ("pytest==8.4.1".to_string(), vec![]));
        assert_eq!(test_files(s), ["/tests/test_outputs.py"]);
        assert_eq!(test_files("pytest ${TEST_DIR}/test_a.py\n"), ["/tests/test_a.py"]);
        assert_eq!(test_files("bash $TEST_DIR/run-uv-pytest.sh"), ["/tests/test_outputs.py"]);
    }

    #[test]
    fn named_rewards_of_reward_json() {
        let named = named_rewards(r#"{"a": 1, "b": 0.5, "note": "x", "c": null}"#);
        assert_eq!(named, BTreeMap::from([("a".to_string(), 1.0), ("b".to_string(), 0.5)]));
        assert_eq!(named_rewards("0.25"), BTreeMap::from([("reward".to_string(), 0.25)]));
        assert!(named_rewards("not json").is_empty());
    }

    #[test]
    fn only_verify_fallback_replaces_a_tb2_tasks_test_sh() {
        assert!(tb2_by_script(VerifyMode::Auto) && tb2_by_script(VerifyMode::Script));
        assert!(!tb2_by_script(VerifyMode::Fallback));
        // The fallback runs the files test.sh names, with the packages it adds.
        let script = "#!/bin/bash\nuv add pandas==2.3.0\nuv run pytest $TEST_DIR/test_outputs.py -rA\n";
        assert_eq!(test_files(script), ["/tests/test_outputs.py"]);
        assert_eq!(packages_of(script).1, ["pandas==2.3.0"]);
    }

    #[test]
    fn verifier_variables_prefix_the_command() {
        let vars = BTreeMap::from([("A".to_string(), "1".to_string()), ("B".to_string(), "it's".to_string())]);
        assert_eq!(env_prefix(&vars), "A='1' B='it'\\''s' ");
        assert_eq!(env_prefix(&BTreeMap::new()), "");
    }
}
