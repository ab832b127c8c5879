//! Loading Terminal-Bench tasks in both layouts: TB1 (`task.yaml`, `Dockerfile` or
//! `docker-compose.yaml`, `run-tests.sh`, `tests/`, `solution.sh|yaml`) and TB2/Harbor
//! (`task.toml`, `instruction.md`, `environment/`, `tests/test.sh`, `solution/solve.sh`,
//! or Harbor's `[[steps]]` with a `steps/NAME/` folder each: `task/steps.rs`).

mod confine;
mod steps;
mod tb2;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::compose::{Compose, ComposePaths, Dialect, ImageSource, Service};
use super::error::TaskError;
use super::solution::Solution;
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
        })
    }

    fn load_tb2(dir: &Path) -> Result<BenchTask, TaskError> {
        let toml_path = dir.join("task.toml");
        let shown = toml_path.display().to_string();
        let text = std::fs::read_to_string(&toml_path)
            .map_err(|e| TaskError::Invalid { path: shown.clone(), reason: format!("cannot read: {e}") })?;
        let parsed: Tb2Toml = toml::from_str(&text).map_err(|e| TaskError::Invalid {
            path: shown.clone(),
            reason: e.to_string().lines().collect::<Vec<_>>().join(" "),
        })?;
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
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) {
        let p = dir.join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    #[test]
    fn tb1_errors_name_the_file_and_field() {
        let d = tempfile::tempdir().unwrap();
        let e = BenchTask::load(d.path()).unwrap_err().to_string();
        assert!(e.contains("task.yaml") && e.contains("missing"), "{e}");
        write(d.path(), "task.yaml", "difficulty: easy\n");
        let e = BenchTask::load(d.path()).unwrap_err().to_string();
        assert!(e.contains("task.yaml") && e.contains("`instruction`"), "{e}");
        write(d.path(), "task.yaml", "instruction: do it\nmax_agent_timeout_sec: soon\n");
        let e = BenchTask::load(d.path()).unwrap_err().to_string();
        assert!(e.contains("`max_agent_timeout_sec`"), "{e}");
        write(d.path(), "task.yaml", "instruction: do it\n");
        let e = BenchTask::load(d.path()).unwrap_err().to_string();
        assert!(e.contains("Dockerfile"), "{e}");
        write(d.path(), "Dockerfile", "FROM x\n");
        let e = BenchTask::load(d.path()).unwrap_err().to_string();
        assert!(e.contains("run-tests.sh"), "{e}");
        write(d.path(), "run-tests.sh", "pytest\n");
        write(d.path(), "tests/test_weights.json", "{\"test_a\": 2, \"test_b\": 1}");
        write(d.path(), "solution.yaml", "- command: echo hi\n");
        let t = BenchTask::load(d.path()).unwrap();
        assert_eq!(t.instruction, "do it");
        assert_eq!(t.agent_timeout, Duration::from_secs(360));
        assert_eq!(t.test_weights.unwrap()["test_a"], 2.0);
        assert!(matches!(t.solution, Solution::Keystrokes(ref k) if k.len() == 1));
    }

    #[test]
    fn tb2_layout_loads() {
        let d = tempfile::tempdir().unwrap();
        write(d.path(), "task.toml", "[metadata]\ndifficulty = \"hard\"\n[verifier]\ntimeout_sec = 30.0\n");
        write(d.path(), "instruction.md", "Make it so.\n");
        write(d.path(), "environment/Dockerfile", "FROM x\n");
        write(d.path(), "tests/test.sh", "echo 1 > /logs/verifier/reward.txt\n");
        write(d.path(), "solution/solve.sh", "true\n");
        let t = BenchTask::load(d.path()).unwrap();
        assert_eq!(t.layout, Layout::Tb2);
        assert_eq!(t.difficulty.as_deref(), Some("hard"));
        assert_eq!(t.test_timeout, Duration::from_secs(30));
        assert!(matches!(t.solution, Solution::Script(_)));
        write(d.path(), "task.toml", "[verifier]\ntimeout_sec = -1\n");
        let e = BenchTask::load(d.path()).unwrap_err().to_string();
        assert!(e.contains("verifier.timeout_sec"), "{e}");
    }

    #[test]
    fn tb2_environment_verifier_and_solution_settings() {
        let d = tempfile::tempdir().unwrap();
        write(
            d.path(),
            "task.toml",
            "[environment]\nnetwork_mode = \"no-network\"\nbuild_timeout_sec = 120.0\n\
             [environment.env]\nGREETING = \"hi\"\n[[environment.mcp_servers]]\nname = \"docs\"\n\
             transport = \"sse\"\nurl = \"http://docs:8000/sse\"\n\
             [verifier.env]\nCHECK = \"1\"\n[solution.env]\nHINT = \"x\"\n",
        );
        write(d.path(), "instruction.md", "Do it.\n");
        write(d.path(), "environment/Dockerfile", "FROM x\n");
        write(d.path(), "environment/docker-compose.yaml", "services:\n  main:\n    build: .\n    restart: always\n");
        write(d.path(), "tests/test.sh", "true\n");
        let t = BenchTask::load(d.path()).unwrap();
        assert!(!t.internet);
        assert_eq!(t.build_timeout, Some(Duration::from_secs(120)));
        assert_eq!(t.env.agent["GREETING"], "hi");
        assert_eq!(t.env.verifier["CHECK"], "1");
        assert_eq!(t.env.solution["HINT"], "x");
        assert_eq!(t.mcp_servers[0].url.as_deref(), Some("http://docs:8000/sse"));
        assert_eq!(t.notices.len(), 2, "{:?}", t.notices);
        assert_eq!(t.notices[0], "compose: ignoring services.main.restart");
        assert!(t.notices[1].contains("does not support MCP"), "{:?}", t.notices);
        assert!(!t.run_tests_in_same_shell);
    }

    #[test]
    fn a_tb2_compose_file_that_only_adds_a_sidecar_loads() {
        let d = tempfile::tempdir().unwrap();
        write(d.path(), "task.toml", "[environment.env]\nGREETING = \"hello\"\n");
        write(d.path(), "instruction.md", "Do it.\n");
        write(d.path(), "environment/Dockerfile", "FROM x\n");
        write(
            d.path(),
            "environment/docker-compose.yaml",
            "services:\n  main:\n    depends_on: [web]\n    environment:\n      - MSG=${GREETING:-bye}\n  web:\n    image: y\n",
        );
        write(d.path(), "tests/test.sh", "true\n");
        let t = BenchTask::load(d.path()).unwrap();
        let main = t.environment.client().unwrap();
        assert!(matches!(&main.image, ImageSource::Build { dockerfile, .. } if dockerfile.ends_with("Dockerfile")));
        assert_eq!(main.environment, ["MSG=hello"]);
        assert_eq!(t.environment.services.len(), 2);
        // Harbor builds `main` from environment/Dockerfile, also when the file names an image.
        std::fs::remove_file(d.path().join("environment/Dockerfile")).unwrap();
        let e = BenchTask::load(d.path()).unwrap_err().to_string();
        assert!(e.contains("environment/./Dockerfile: missing") && e.contains("Harbor builds `main`"), "{e}");
    }

    #[test]
    fn tb1_tests_may_run_in_the_agents_shell() {
        let d = tempfile::tempdir().unwrap();
        write(d.path(), "task.yaml", "instruction: do it\nrun_tests_in_same_shell: true\n");
        write(d.path(), "Dockerfile", "FROM x\n");
        write(d.path(), "run-tests.sh", "pytest\n");
        let t = BenchTask::load(d.path()).unwrap();
        assert!(t.run_tests_in_same_shell && t.internet && t.notices.is_empty());
        write(d.path(), "task.yaml", "instruction: do it\n");
        assert!(!BenchTask::load(d.path()).unwrap().run_tests_in_same_shell);
    }

    /// A set of the shared tasks under `$AGENT_SHARED`; `None` (the test is skipped, with
    /// a line saying so) when the variable is unset, as in a plain `cargo test`.
    fn shared_tasks(set: &str) -> Option<PathBuf> {
        let dir = std::env::var_os("AGENT_SHARED").map(|d| PathBuf::from(d).join(set)).filter(|d| d.is_dir());
        if dir.is_none() {
            eprintln!("skipped: AGENT_SHARED does not name a folder with {set}/ (scripts/test.sh sets it)");
        }
        dir
    }

    #[test]
    fn every_shared_tb1_task_loads() {
        let Some(root) = shared_tasks("tb1-tasks") else { return };
        let entries = discover(&[root]).unwrap();
        assert_eq!(entries.len(), 15);
        for e in &entries {
            let t = e.task.as_ref().unwrap_or_else(|err| panic!("{}: {err}", e.name));
            assert!(t.environment.client().is_some());
            assert!(t.notices.is_empty(), "{}: {:?}", e.name, t.notices);
        }
        let scraper = entries.iter().find(|e| e.name == "simple-web-scraper").unwrap();
        assert_eq!(scraper.task.as_ref().unwrap().environment.services.len(), 2);
    }

    /// The same tasks as Harbor's `harbor task migrate` writes them: the agent's service
    /// is `main` and the build contexts use Harbor's variables.
    #[test]
    fn every_shared_tb2_task_loads() {
        let Some(root) = shared_tasks("tb2-tasks") else { return };
        let entries = discover(std::slice::from_ref(&root)).unwrap();
        assert_eq!(entries.len(), 15);
        for e in &entries {
            let t = e.task.as_ref().unwrap_or_else(|err| panic!("{}: {err}", e.name));
            assert_eq!(t.environment.client().map(|s| s.name.as_str()), Some("main"), "{}", e.name);
            // Everything Terminal-Bench 2's files ask for is honoured or the harness's business.
            assert!(t.notices.is_empty(), "{}: {:?}", e.name, t.notices);
            assert!(t.internet && t.build_timeout == Some(Duration::from_secs(600)), "{}", e.name);
        }
        let extract = entries.iter().find(|e| e.name == "extract-safely").unwrap().task.as_ref().unwrap();
        let tmpfs = agent_sandbox::Mount::Tmpfs { target: "/root".into(), options: "size=100M,mode=755".into() };
        assert_eq!(extract.environment.client().unwrap().mounts, [tmpfs]);
        let scraper = entries.iter().find(|e| e.name == "simple-web-scraper").unwrap().task.as_ref().unwrap();
        let names: Vec<&str> = scraper.environment.services.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["server", "main"]);
        let main = scraper.environment.client().unwrap();
        assert_eq!(main.environment, ["TEST_DIR=/tests"]);
        assert_eq!(
            main.image,
            ImageSource::Build {
                context: root.join("simple-web-scraper/environment/."),
                dockerfile: root.join("simple-web-scraper/environment/./Dockerfile")
            }
        );
    }
}
