//! Harbor's multi-step tasks: `[[steps]]` in `task.toml`, run in order in one
//! environment. Each step has `steps/NAME/instruction.md`; its tests are the task's
//! `tests/` with the step's own `steps/NAME/tests/` copied over them (the step's
//! `test.sh` runs, else the task's); its reference solution is
//! `steps/NAME/solution/solve.sh` when the step has a `solution/` folder, else the
//! task's; a `steps/NAME/workdir/` is copied into the container's working directory
//! before the step, and its `setup.sh` run there. A step's `[steps.agent]` and
//! `[steps.verifier]` timeouts and verifier variables override the task's; `min_reward`
//! stops the remaining steps when the step scores below it; a step's `healthcheck` runs
//! after its setup and before its agent, and its `artifacts` are copied out after its
//! tests. The task's reward is the
//! mean of the rewards of the steps that ran (`multi_step_reward_strategy = "mean"`,
//! Harbor's default) or the last one's (`"final"`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::super::error::TaskError;
use super::super::solution::Solution;
use super::artifacts::{self, Artifact};
use super::health::Healthcheck;
use super::tb2::{env_table, Tb2Toml};
use super::BenchTask;

/// One `[[steps]]` table as written.
#[derive(Debug, Default, Deserialize)]
pub(super) struct StepToml {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub agent: StepSection,
    #[serde(default)]
    pub verifier: StepSection,
    pub min_reward: Option<toml::Value>,
    /// Run after the step's setup, before its agent (`task/health.rs`).
    pub healthcheck: Option<toml::Value>,
    /// Copied into the trial's `steps/NAME/artifacts/` after the step's tests.
    pub artifacts: Option<toml::Value>,
    /// Keys this harness does not honour, for the notice.
    #[serde(flatten)]
    pub other: BTreeMap<String, toml::Value>,
}

/// `[steps.agent]` and `[steps.verifier]`.
#[derive(Debug, Default, Deserialize)]
pub(super) struct StepSection {
    pub timeout_sec: Option<f64>,
    #[serde(default)]
    pub env: BTreeMap<String, toml::Value>,
    /// Keys this harness does not honour (`user`, `network_mode`, …), for the notice.
    #[serde(flatten)]
    pub other: BTreeMap<String, toml::Value>,
}

/// One step of a multi-step task, as a trial runs it.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskStep {
    /// The step's name (`[[steps]] name`), also its folder under `steps/`.
    pub name: String,
    /// What the agent is asked to do in this step (`steps/NAME/instruction.md`).
    pub instruction: String,
    /// The step's agent timeout (`[steps.agent] timeout_sec`, else the task's).
    pub agent_timeout: Duration,
    /// The step's test timeout (`[steps.verifier] timeout_sec`, else the task's).
    pub test_timeout: Duration,
    /// The step's reference solution, else the task's.
    pub solution: Solution,
    /// The folders copied into `/tests` for this step, in order (the task's `tests/`,
    /// then the step's own), so the step's files win.
    pub tests_dirs: Vec<PathBuf>,
    /// The test script that runs (`/tests/test.sh` in the container either way).
    pub test_script: PathBuf,
    /// The test run's variables: the task's `[verifier.env]`, the step's over them.
    pub verifier_env: BTreeMap<String, String>,
    /// `steps/NAME/workdir/`, copied into the container's working directory before the
    /// step (its `setup.sh`, when there is one, then runs there).
    pub workdir: Option<PathBuf>,
    /// Below this the remaining steps do not run.
    pub min_reward: Option<MinReward>,
    /// The step's healthcheck, run after its setup and before its agent (in addition to
    /// the task's, which ran once when the environment started).
    pub healthcheck: Option<Healthcheck>,
    /// Container paths copied into the trial's `steps/NAME/artifacts/` after the step's
    /// tests.
    pub artifacts: Vec<Artifact>,
}

/// A step's `min_reward`: a number gates the `reward`, a table each named reward.
#[derive(Debug, Clone, PartialEq)]
pub enum MinReward {
    /// The least `reward` that lets the next step run.
    Reward(f64),
    /// The least value of each named reward (`reward.json`'s keys).
    Named(BTreeMap<String, f64>),
}

impl MinReward {
    /// The first threshold `rewards` misses, in words; `None` when every one is met. A
    /// reward the tests did not write counts as missed (Harbor reads it as −∞).
    pub fn missed(&self, rewards: &BTreeMap<String, f64>) -> Option<String> {
        let thresholds = match self {
            MinReward::Reward(min) => BTreeMap::from([("reward".to_string(), *min)]),
            MinReward::Named(named) => named.clone(),
        };
        thresholds.into_iter().find_map(|(key, min)| match rewards.get(&key) {
            Some(got) if *got >= min => None,
            Some(got) => Some(format!("`{key}` = {got} is below min_reward {min}")),
            None => Some(format!("the tests wrote no `{key}` (min_reward {min})")),
        })
    }
}

/// How a multi-step task's reward is formed from its steps' (Harbor's
/// `multi_step_reward_strategy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StepReward {
    /// The mean over the steps that ran and wrote a reward (Harbor's default).
    #[default]
    Mean,
    /// The reward of the last step that ran.
    Final,
}

impl StepReward {
    /// The task's reward from the rewards of the steps that ran, in order (`None` where a
    /// step's tests wrote none); `None` when there is nothing to form it from.
    pub fn combine(self, rewards: &[Option<f64>]) -> Option<f64> {
        match self {
            StepReward::Final => rewards.last().copied().flatten(),
            StepReward::Mean => {
                let got: Vec<f64> = rewards.iter().flatten().copied().collect();
                (!got.is_empty()).then(|| got.iter().sum::<f64>() / got.len() as f64)
            }
        }
    }
}

/// What a step takes from its task when it does not say otherwise.
pub(super) struct TaskDefaults<'a> {
    pub agent_timeout: Duration,
    pub test_timeout: Duration,
    pub verifier_env: &'a BTreeMap<String, String>,
}

/// The steps of the task in `dir` and how its reward is formed; a notice naming the
/// step keys this harness does not honour goes to `notices`.
pub(super) fn load_steps(
    dir: &Path,
    shown: &str,
    parsed: &Tb2Toml,
    defaults: TaskDefaults,
    notices: &mut Vec<String>,
) -> Result<(Vec<TaskStep>, StepReward), TaskError> {
    let reward = match parsed.multi_step_reward_strategy.as_deref() {
        None | Some("mean") => StepReward::Mean,
        Some("final") => StepReward::Final,
        Some(other) => {
            return Err(TaskError::BadField {
                path: shown.into(),
                field: "multi_step_reward_strategy".into(),
                reason: format!("`{other}` is not `mean` or `final`"),
            })
        }
    };
    let mut steps: Vec<TaskStep> = Vec::new();
    let mut ignored = Vec::new();
    for (i, raw) in parsed.steps.iter().enumerate() {
        let step = load_step(dir, shown, i, raw, &defaults, notices)?;
        if steps.iter().any(|s| s.name == step.name) {
            return Err(TaskError::BadField {
                path: shown.into(),
                field: format!("steps[{i}].name"),
                reason: format!("a second step named `{}`; step names must be unique", step.name),
            });
        }
        ignored.extend(raw.other.keys().map(|k| format!("steps.{}.{k}", step.name)));
        for (section, body) in [("agent", &raw.agent), ("verifier", &raw.verifier)] {
            ignored.extend(body.other.keys().map(|k| format!("steps.{}.{section}.{k}", step.name)));
        }
        if !raw.agent.env.is_empty() {
            ignored.push(format!("steps.{}.agent.env", step.name));
        }
        steps.push(step);
    }
    if !ignored.is_empty() {
        notices.push(format!("multi-step: ignoring {}", ignored.join(", ")));
    }
    Ok((steps, reward))
}

fn load_step(
    dir: &Path,
    shown: &str,
    i: usize,
    raw: &StepToml,
    defaults: &TaskDefaults,
    notices: &mut Vec<String>,
) -> Result<TaskStep, TaskError> {
    let bad = |field: &str, reason: String| TaskError::BadField {
        path: shown.into(),
        field: format!("steps[{i}].{field}"),
        reason,
    };
    let name = raw.name.clone();
    if !is_folder_name(&name) {
        return Err(bad(
            "name",
            format!("`{name}` is not a step folder name (letters, digits, `.`, `-` and `_`; not `.` or `..`)"),
        ));
    }
    let step_dir = dir.join("steps").join(&name);
    let instruction_path = step_dir.join("instruction.md");
    let instruction =
        std::fs::read_to_string(&instruction_path).ok().filter(|s| !s.trim().is_empty()).ok_or_else(|| {
            TaskError::MissingFile {
                path: instruction_path.display().to_string(),
                hint: format!("step `{name}` needs a non-empty instruction.md in its folder"),
            }
        })?;
    let seconds = |field: &str, v: Option<f64>, default: Duration| match v {
        None => Ok(default),
        Some(v) if v.is_finite() && v > 0.0 => Ok(Duration::from_secs_f64(v)),
        Some(_) => Err(bad(field, "must be > 0".into())),
    };
    let agent_timeout = seconds("agent.timeout_sec", raw.agent.timeout_sec, defaults.agent_timeout)?;
    let test_timeout = seconds("verifier.timeout_sec", raw.verifier.timeout_sec, defaults.test_timeout)?;
    let (task_tests, step_tests) = (dir.join("tests"), step_dir.join("tests"));
    let tests_dirs: Vec<PathBuf> = [&task_tests, &step_tests].into_iter().filter(|d| d.is_dir()).cloned().collect();
    let test_script = [step_tests.join("test.sh"), task_tests.join("test.sh")]
        .into_iter()
        .find(|p| p.is_file())
        .ok_or_else(|| TaskError::MissingFile {
            path: step_tests.join("test.sh").display().to_string(),
            hint: format!(
                "step `{name}` needs steps/{name}/tests/test.sh or the task's tests/test.sh \
                 (it writes /logs/verifier/reward.txt)"
            ),
        })?;
    let mut verifier_env = defaults.verifier_env.clone();
    let field = format!("steps.{name}.verifier.env");
    verifier_env.extend(env_table(shown, &field, &raw.verifier.env, notices)?);
    let min_reward = match &raw.min_reward {
        None => None,
        Some(v) => Some(
            min_reward(v)
                .ok_or_else(|| bad("min_reward", "expected a number or a table of reward names and numbers".into()))?,
        ),
    };
    // The step's own solution folder, when it has one, is all the oracle gets (Harbor
    // does not fall back to the task's solution then).
    let own_solution = step_dir.join("solution");
    let solve = if own_solution.is_dir() { own_solution.join("solve.sh") } else { dir.join("solution/solve.sh") };
    let workdir = Some(step_dir.join("workdir")).filter(|w| w.is_dir());
    let healthcheck = match &raw.healthcheck {
        Some(v) => Some(Healthcheck::parse(shown, &format!("steps[{i}].healthcheck"), v)?),
        None => None,
    };
    let artifacts = artifacts::parse(shown, &format!("steps.{name}.artifacts"), raw.artifacts.as_ref(), notices)?;
    Ok(TaskStep {
        name,
        instruction,
        agent_timeout,
        test_timeout,
        solution: if solve.is_file() { Solution::Script(solve) } else { Solution::Missing },
        tests_dirs,
        test_script,
        verifier_env,
        workdir,
        min_reward,
        healthcheck,
        artifacts,
    })
}

fn min_reward(v: &toml::Value) -> Option<MinReward> {
    let number = |v: &toml::Value| match v {
        toml::Value::Float(f) if f.is_finite() => Some(*f),
        toml::Value::Integer(n) => Some(*n as f64),
        _ => None,
    };
    match v {
        toml::Value::Table(t) => {
            t.iter().map(|(k, v)| number(v).map(|n| (k.clone(), n))).collect::<Option<_>>().map(MinReward::Named)
        }
        other => number(other).map(MinReward::Reward),
    }
}

/// A name that is one folder under `steps/` and nothing else (no separators, no `..`).
fn is_folder_name(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
}

impl BenchTask {
    /// The task as one of its steps runs: the step's instruction, timeouts, solution,
    /// tests and verifier variables in place of the task's, and no steps of its own.
    pub fn step_view(&self, step: &TaskStep) -> BenchTask {
        let mut view = self.clone();
        view.instruction = step.instruction.clone();
        view.agent_timeout = step.agent_timeout;
        view.test_timeout = step.test_timeout;
        view.solution = step.solution.clone();
        let mut dirs = step.tests_dirs.iter().cloned();
        view.tests_dir = dirs.next().unwrap_or_else(|| self.dir.join("tests"));
        view.tests_overlays = dirs.collect();
        view.test_script = step.test_script.clone();
        view.env.verifier = step.verifier_env.clone();
        view.steps = Vec::new();
        view
    }
}

#[cfg(test)]
#[path = "steps_tests.rs"]
mod tests;
