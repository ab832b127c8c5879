//! Loading Terminal-Bench tasks in both layouts: TB1 (`task.yaml`, `Dockerfile` or
//! `docker-compose.yaml`, `run-tests.sh`, `tests/`, `solution.sh|yaml`) and TB2/Harbor
//! (`task.toml`, `instruction.md`, `environment/`, `tests/test.sh`, `solution/solve.sh`,
//! or Harbor's `[[steps]]` with a `steps/NAME/` folder each: `task/steps.rs`).

mod artifacts;
mod confine;
mod health;
mod keys;
mod steps;
mod tb2;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::compose::{Compose, ComposePaths, Dialect, ImageSource, Service};
use super::error::TaskError;
use super::solution::Solution;
pub use artifacts::{Artifact, MANIFEST as ARTIFACTS_MANIFEST};
pub use health::Healthcheck;
pub use steps::{MinReward, StepReward, TaskStep};
use tb2::Tb2Toml;
pub use tb2::{McpServer, TaskEnv};

/// Which layout a task uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Layout {
    Tb1,
    Tb2,
}

/// A loaded task.
#[derive(Debug, Clone)]
pub struct BenchTask {
    /// Directory name.
    pub name: String,
    pub dir: PathBuf,
    pub layout: Layout,
    /// What the agent is asked to do (a multi-step task's first step's instruction; each
    /// step's is in `steps`).
    pub instruction: String,
    pub difficulty: Option<String>,
    pub category: Option<String>,
    pub agent_timeout: Duration,
    pub test_timeout: Duration,
    /// The containers of the environment (a Dockerfile task is a compose file with
    /// one `client` service).
    pub environment: Compose,
    pub solution: Solution,
    /// The `tests/` directory copied into `/tests` after the agent.
    pub tests_dir: PathBuf,
    /// Folders copied into `/tests` over `tests_dir`, in order (a step's own `tests/`
    /// over the task's, in a [`BenchTask::step_view`]); empty otherwise.
    pub tests_overlays: Vec<PathBuf>,
    /// The script that runs the tests (`run-tests.sh`, or `tests/test.sh` for TB2).
    pub test_script: PathBuf,
    /// Weights of individual tests (`tests/test_weights.json` or `test_weights.json`).
    pub test_weights: Option<BTreeMap<String, f64>>,
    /// Longest an image build of the task may take (TB2 `build_timeout_sec`).
    pub build_timeout: Option<Duration>,
    /// Whether the task's containers may reach beyond their own network (TB2's
    /// `network_mode` or `allow_internet`).
    pub internet: bool,
    /// Variables for the agent's container, the test run and the reference solution.
    pub env: TaskEnv,
    /// MCP servers the task offers (recorded; this agent does not use MCP yet).
    pub mcp_servers: Vec<McpServer>,
    /// TB1's `run_tests_in_same_shell`: the tests run in the agent's own shell session
    /// (its variables, cwd and background jobs), not in a fresh process.
    pub run_tests_in_same_shell: bool,
    /// Where the harness does not do what the task asks, one line each (said once per
    /// task and recorded with every trial).
    pub notices: Vec<String>,
    /// Harbor's `[[steps]]`, in order: each step's instruction is given in turn in the
    /// same environment and scored by its own tests. Empty for a single-step task.
    pub steps: Vec<TaskStep>,
    /// How a multi-step task's reward is formed from its steps'.
    pub step_reward: StepReward,
    /// Harbor's `[environment.healthcheck]`: the agent starts only once it passes.
    pub healthcheck: Option<Healthcheck>,
    /// Harbor's `artifacts`: container paths copied into the trial's `artifacts/`.
    pub artifacts: Vec<Artifact>,
}

/// A task found on disk, loaded or not: a malformed task becomes a failed trial,
/// not a failed run.
#[derive(Debug, Clone)]
pub struct TaskEntry {
    pub name: String,
    pub dir: PathBuf,
    pub task: Result<BenchTask, TaskError>,
}

/// Expands the given paths (task directories or directories of tasks) into tasks,
/// sorted by name within each directory.
pub fn discover(paths: &[PathBuf]) -> Result<Vec<TaskEntry>, TaskError> {
    let mut out: Vec<TaskEntry> = Vec::new();
    for path in paths {
        if !path.is_dir() {
            return Err(TaskError::NotADirectory { path: path.display().to_string() });
        }
        if is_task_dir(path) {
            out.push(entry(path));
            continue;
        }
        if crate::synth::index::is_synth_output(path) {
            // An `agent tasks synth` output: the tasks its index accepted.
            let dirs = crate::synth::index::task_dirs(path, None)
                .map_err(|e| TaskError::Invalid { path: path.display().to_string(), reason: e.to_string() })?;
            if dirs.is_empty() {
                return Err(TaskError::NoTasks { path: path.display().to_string() });
            }
            out.extend(dirs.iter().map(|d| entry(d)));
            continue;
        }
        let mut dirs: Vec<PathBuf> = std::fs::read_dir(path)
            .map_err(|e| TaskError::Invalid { path: path.display().to_string(), reason: e.to_string() })?
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.is_dir() && (is_task_dir(p) || p.join("Dockerfile").is_file()))
            .collect();
        if dirs.is_empty() {
            return Err(TaskError::NoTasks { path: path.display().to_string() });
        }
        dirs.sort();
        out.extend(dirs.iter().map(|d| entry(d)));
    }
    let mut seen = std::collections::BTreeSet::new();
    for e in &out {
        if !seen.insert(e.name.clone()) {
            return Err(TaskError::Invalid {
                path: e.dir.display().to_string(),
                reason: format!("a second task named `{}`; task names must be unique in a run", e.name),
            });
        }
    }
    Ok(out)
}

fn is_task_dir(p: &Path) -> bool {
    p.join("task.yaml").is_file() || p.join("task.toml").is_file()
}

fn entry(dir: &Path) -> TaskEntry {
    let name = dir
        .canonicalize()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().to_string()))
        .unwrap_or_else(|| dir.display().to_string());
    TaskEntry { name, dir: dir.to_path_buf(), task: BenchTask::load(dir) }
}

#[derive(Debug, Deserialize)]
struct Tb1Yaml {
    instruction: Option<String>,
    difficulty: Option<String>,
    category: Option<String>,
    max_agent_timeout_sec: Option<serde_yaml::Value>,
    max_test_timeout_sec: Option<serde_yaml::Value>,
    #[serde(default)]
    run_tests_in_same_shell: bool,
}

impl BenchTask {
    /// Loads a task directory of either layout.
    pub fn load(dir: &Path) -> Result<BenchTask, TaskError> {
        if !dir.is_dir() {
            return Err(TaskError::NotADirectory { path: dir.display().to_string() });
        }
        // A link named task.toml counts: the check below refuses it if it leads out.
        let toml = dir.join("task.toml");
        let tb2 = toml.is_file() || toml.is_symlink();
        confine::check(dir, if tb2 { Layout::Tb2 } else { Layout::Tb1 })?;
        if tb2 {
            return Self::load_tb2(dir);
        }
        Self::load_tb1(dir)
    }

    fn name_of(dir: &Path) -> String {
        dir.canonicalize()
            .ok()
            .and_then(|p| p.file_name().map(|n| n.to_string_lossy().to_string()))
            .unwrap_or_else(|| "task".into())
    }

    fn load_tb1(dir: &Path) -> Result<BenchTask, TaskError> {
        let yaml_path = dir.join("task.yaml");
        let shown = yaml_path.display().to_string();
        let text = std::fs::read_to_string(&yaml_path).map_err(|_| TaskError::MissingFile {
            path: shown.clone(),
            hint: "a TB1 task needs task.yaml (a TB2 task needs task.toml)".into(),
        })?;
        let parsed: Tb1Yaml = serde_yaml::from_str(&text).map_err(|e| TaskError::Invalid {
            path: shown.clone(),
            reason: match e.location() {
                Some(l) => format!("line {}: {e}", l.line()),
                None => e.to_string(),
            },
        })?;
        let instruction = parsed
            .instruction
            .filter(|s| !s.trim().is_empty())
            .ok_or_else(|| TaskError::MissingField { path: shown.clone(), field: "instruction".into() })?;
        let agent_timeout = seconds(&shown, "max_agent_timeout_sec", parsed.max_agent_timeout_sec.as_ref(), 360.0)?;
        let test_timeout = seconds(&shown, "max_test_timeout_sec", parsed.max_test_timeout_sec.as_ref(), 60.0)?;
        let compose_path = dir.join("docker-compose.yaml");
        let environment = if compose_path.is_file() {
            Compose::load(&compose_path, ComposePaths { dir, root: dir }, Dialect::Tb1)?
        } else {
            single_service(dir, &dir.join("Dockerfile"), Dialect::Tb1)
        };
        check_builds(&environment, Layout::Tb1)?;
        let solution = if dir.join("solution.sh").is_file() {
            Solution::Script(dir.join("solution.sh"))
        } else if dir.join("solution.yaml").is_file() {
            Solution::load_keystrokes(&dir.join("solution.yaml"))?
        } else {
            Solution::Missing
        };
        let test_script = dir.join("run-tests.sh");
        if !test_script.is_file() {
            return Err(TaskError::MissingFile {
                path: test_script.display().to_string(),
                hint: "a TB1 task needs the script that runs its tests".into(),
            });
        }
        let tests_dir = dir.join("tests");
        Ok(BenchTask {
            name: Self::name_of(dir),
            dir: dir.to_path_buf(),
            layout: Layout::Tb1,
            instruction,
            difficulty: parsed.difficulty,
            category: parsed.category,
            agent_timeout,
            test_timeout,
            notices: environment.notices.clone(),
            environment,
            solution,
            test_weights: load_weights(&[tests_dir.join("test_weights.json"), dir.join("test_weights.json")])?,
            build_timeout: None,
            tests_dir,
            tests_overlays: Vec::new(),
            test_script,
            internet: true,
            env: TaskEnv::default(),
            mcp_servers: Vec::new(),
            run_tests_in_same_shell: parsed.run_tests_in_same_shell,
            steps: Vec::new(),
            step_reward: StepReward::default(),
            healthcheck: None,
            artifacts: Vec::new(),
        })
    }

    fn load_tb2(dir: &Path) -> Result<BenchTask, TaskError> {
        let toml_path = dir.join("task.toml");
        let shown = toml_path.display().to_string();
        let text = std::fs::read_to_string(&toml_path)
            .map_err(|e| TaskError::Invalid { path: shown.clone(), reason: format!("cannot read: {e}") })?;
        let invalid = |e: toml::de::Error| TaskError::Invalid {
            path: shown.clone(),
            reason: e.to_string().lines().collect::<Vec<_>>().join(" "),
        };
        let parsed: Tb2Toml = toml::from_str(&text).map_err(invalid)?;
        let unhonoured = keys::unhonoured(&toml::from_str(&text).map_err(invalid)?);
        let positive = |field: &str, v: Option<f64>, default: f64| -> Result<Duration, TaskError> {
            let v = v.unwrap_or(default);
            if v.is_finite() && v > 0.0 {
                Ok(Duration::from_secs_f64(v))
            } else {
                Err(TaskError::BadField { path: shown.clone(), field: field.into(), reason: "must be > 0".into() })
            }
        };
        let agent_timeout = positive("agent.timeout_sec", parsed.agent.timeout_sec, 600.0)?;
        let test_timeout = positive("verifier.timeout_sec", parsed.verifier.timeout_sec, 600.0)?;
        let env_dir = dir.join("environment");
        let compose_path = env_dir.join("docker-compose.yaml");
        // `[environment.env]` feeds the compose file's variables, as under Harbor.
        let (env, mut notices) = parsed.env(&shown)?;
        let environment = if compose_path.is_file() {
            // The task's file is an overlay on Harbor's base, which builds `main`.
            Compose::load_harbor(&compose_path, ComposePaths { dir: &env_dir, root: dir }, &env.agent)?
        } else {
            single_service(&env_dir, &env_dir.join("Dockerfile"), Dialect::Harbor)
        };
        check_builds(&environment, Layout::Tb2)?;
        let defaults = steps::TaskDefaults { agent_timeout, test_timeout, verifier_env: &env.verifier };
        let (steps, step_reward) = steps::load_steps(dir, &shown, &parsed, defaults, &mut notices)?;
        // A multi-step task's own instruction.md, when it has one, is never given to the
        // agent (Harbor's rule): each step's is.
        let instruction = match steps.first() {
            Some(first) => first.instruction.clone(),
            None => {
                let instr_path = dir.join("instruction.md");
                std::fs::read_to_string(&instr_path).ok().filter(|s| !s.trim().is_empty()).ok_or_else(|| {
                    TaskError::MissingFile {
                        path: instr_path.display().to_string(),
                        hint: "a TB2 task needs a non-empty instruction.md (or `[[steps]]` with one per step)".into(),
                    }
                })?
            }
        };
        let (internet, network_notice) = parsed.internet(&shown)?;
        let build_timeout = parsed.build_timeout(&shown)?;
        notices.splice(0..0, environment.notices.iter().cloned());
        notices.extend(network_notice);
        notices.extend(parsed.mcp_notice());
        let healthcheck = match &parsed.environment.healthcheck {
            Some(raw) => Some(Healthcheck::parse(&shown, "environment.healthcheck", raw)?),
            None => None,
        };
        let artifacts = artifacts::parse(&shown, "artifacts", parsed.artifacts.as_ref(), &mut notices)?;
        if !unhonoured.is_empty() {
            notices.push(format!("task.toml: ignoring {} (not honoured by this harness)", unhonoured.join(", ")));
        }
        let solve = dir.join("solution").join("solve.sh");
        let tests_dir = dir.join("tests");
        let test_script = tests_dir.join("test.sh");
        // Each step checked its own test script (its folder's or this one).
        if steps.is_empty() && !test_script.is_file() {
            return Err(TaskError::MissingFile {
                path: test_script.display().to_string(),
                hint: "a TB2 task needs tests/test.sh (it writes /logs/verifier/reward.txt)".into(),
            });
        }
        Ok(BenchTask {
            name: Self::name_of(dir),
            dir: dir.to_path_buf(),
            layout: Layout::Tb2,
            instruction,
            difficulty: parsed.metadata.difficulty,
            category: parsed.metadata.category,
            agent_timeout,
            test_timeout,
            environment,
            solution: if solve.is_file() { Solution::Script(solve) } else { Solution::Missing },
            test_weights: load_weights(&[tests_dir.join("test_weights.json")])?,
            build_timeout,
            tests_dir,
            tests_overlays: Vec::new(),
            test_script,
            internet,
            env,
            mcp_servers: parsed.environment.mcp_servers,
            run_tests_in_same_shell: false,
            notices,
            steps,
            step_reward,
            healthcheck,
            artifacts,
        })
    }
}

fn single_service(context: &Path, dockerfile: &Path, dialect: Dialect) -> Compose {
    let image = ImageSource::Build { context: context.to_path_buf(), dockerfile: dockerfile.to_path_buf() };
    let mut service = Service::new(dialect.agent_service(), image);
    service.environment = vec![format!("TEST_DIR={}", super::compose::TEST_DIR)];
    Compose {
        path: dockerfile.to_path_buf(),
        agent_service: dialect.agent_service().into(),
        services: vec![service],
        volumes: Vec::new(),
        notices: Vec::new(),
    }
}

fn check_builds(env: &Compose, layout: Layout) -> Result<(), TaskError> {
    for s in &env.services {
        if let ImageSource::Build { dockerfile, .. } = &s.image {
            if !dockerfile.is_file() {
                let hint = match layout {
                    Layout::Tb1 => "a TB1 task needs a Dockerfile or docker-compose.yaml",
                    // Harbor's base compose file builds `main` even when the task's names an image.
                    Layout::Tb2 => {
                        "Harbor builds `main` from environment/Dockerfile, also under a task's docker-compose.yaml"
                    }
                };
                return Err(TaskError::MissingFile {
                    path: dockerfile.display().to_string(),
                    hint: format!("the `{}` service's Dockerfile ({hint})", s.name),
                });
            }
        }
    }
    Ok(())
}

fn seconds(path: &str, field: &str, v: Option<&serde_yaml::Value>, default: f64) -> Result<Duration, TaskError> {
    let bad = |reason: &str| TaskError::BadField { path: path.into(), field: field.into(), reason: reason.into() };
    let secs = match v {
        None | Some(serde_yaml::Value::Null) => default,
        Some(v) => v.as_f64().ok_or_else(|| bad("expected a number of seconds"))?,
    };
    if !(secs.is_finite() && secs > 0.0) {
        return Err(bad("must be a positive number of seconds"));
    }
    Ok(Duration::from_secs_f64(secs))
}

fn load_weights(candidates: &[PathBuf]) -> Result<Option<BTreeMap<String, f64>>, TaskError> {
    let Some(path) = candidates.iter().find(|p| p.is_file()) else { return Ok(None) };
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path)
        .map_err(|e| TaskError::Invalid { path: shown.clone(), reason: format!("cannot read: {e}") })?;
    let weights: BTreeMap<String, f64> = serde_json::from_str(&text).map_err(|e| TaskError::Invalid {
        path: shown.clone(),
        reason: format!("line {}: expected an object of test name → weight: {e}", e.line()),
    })?;
    if let Some((k, _)) = weights.iter().find(|(_, w)| !(w.is_finite() && **w >= 0.0)) {
        return Err(TaskError::BadField { path: shown, field: k.clone(), reason: "a weight must be ≥ 0".into() });
    }
    Ok(Some(weights))
}

#[cfg(test)]
#[path = "task_tests.rs"]
mod tests;
