//! Helpers the integration tests of every crate share: the Docker engine with the base
//! image, sandboxes that clean up after themselves, containers a run left, the shared
//! Terminal-Bench tasks (`$AGENT_SHARED`), fixtures. Tests may panic here.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Command;

use agent_sandbox::{ContainerConfig, Sandbox, Shell, BASE_IMAGE};
use tokio::sync::OnceCell;

static BASE_READY: OnceCell<()> = OnceCell::const_new();

/// The engine's raw API, for tests that inspect what the sandbox module created.
pub fn inspector() -> bollard::Docker {
    bollard::Docker::connect_with_defaults().expect("these tests need a running Docker engine")
}

/// A connected engine, with the base image present (built once if missing).
pub async fn docker() -> agent_sandbox::Engine {
    let docker = agent_sandbox::connect().await.expect("these tests need a running Docker engine");
    BASE_READY
        .get_or_init(|| async {
            let d = agent_sandbox::connect().await.expect("docker");
            let opts = agent_sandbox::BaseImageOptions::default();
            agent_sandbox::build_base_image(&d, &opts, &mut |l| eprintln!("[base image] {l}"))
                .await
                .expect("cannot build the base image (scripts/setup.sh installs debootstrap)");
        })
        .await;
    docker
}

/// A sandbox removed when dropped, even if the test panics.
pub struct TestSandbox(pub Sandbox);

impl Drop for TestSandbox {
    fn drop(&mut self) {
        let _ = Command::new("docker").args(["rm", "-f", "-v", self.0.id()]).output();
    }
}

impl std::ops::Deref for TestSandbox {
    type Target = Sandbox;
    fn deref(&self) -> &Sandbox {
        &self.0
    }
}

/// Starts a base-image sandbox with the given process limit.
pub async fn sandbox_with(pids: i64, network: bool) -> TestSandbox {
    let docker = docker().await;
    let mut cfg = ContainerConfig::new(BASE_IMAGE, format!("it-{}", uuid::Uuid::new_v4().simple()), "it");
    cfg.pids_limit = pids;
    cfg.network = network;
    cfg.name_prefix = "agent-it".into();
    TestSandbox(Sandbox::start(&docker, &cfg).await.expect("start a sandbox"))
}

/// A default sandbox and a shell in it.
pub async fn shell() -> (TestSandbox, Shell) {
    let sb = sandbox_with(256, false).await;
    let shell = Shell::start(&sb, 16 * 1024).await.expect("start the shell");
    (sb, shell)
}

/// The folder with the Terminal-Bench tasks (`tb1-tasks/`, `tb2-tasks/`), named by
/// `$AGENT_SHARED` (`scripts/test.sh` sets it).
pub fn shared_dir() -> PathBuf {
    match std::env::var_os("AGENT_SHARED") {
        Some(dir) if PathBuf::from(&dir).join("tb1-tasks").is_dir() => PathBuf::from(dir),
        _ => panic!(
            "the Terminal-Bench tasks were not found: set AGENT_SHARED to a folder holding tb1-tasks/ and \
             tb2-tasks/, or run the suite through scripts/test.sh (see docs/development.md)"
        ),
    }
}

/// A task of the shared TB1 set.
pub fn tb1_task(name: &str) -> PathBuf {
    shared_dir().join("tb1-tasks").join(name)
}

/// A task of the shared TB2 (Harbor layout) set.
pub fn tb2_task(name: &str) -> PathBuf {
    shared_dir().join("tb2-tasks").join(name)
}

/// Names of containers (all states) whose name contains `name`.
pub fn containers_named(name: &str) -> Vec<String> {
    let out = Command::new("docker")
        .args(["ps", "-a", "--filter", &format!("name={name}"), "--format", "{{.Names}}"])
        .output()
        .expect("docker ps");
    String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).filter(|l| !l.is_empty()).collect()
}

/// Names of containers labelled with this run id.
pub fn containers_of_run(run_id: &str) -> Vec<String> {
    let out = Command::new("docker")
        .args(["ps", "-a", "--filter", &format!("label=agent.run={run_id}"), "--format", "{{.Names}}"])
        .output()
        .expect("docker ps");
    String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).filter(|l| !l.is_empty()).collect()
}

/// Containers (all states) started by the process `pid` (their owner label).
pub fn containers_of_pid(pid: u32) -> Vec<String> {
    let out = Command::new("docker")
        .args(["ps", "-a", "--filter", "label=agent.owner", "--format", "{{.Names}} {{.Label \"agent.owner\"}}"])
        .output()
        .expect("docker ps");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once(' '))
        .filter(|(_, owner)| owner.split(':').nth(1) == Some(pid.to_string().as_str()))
        .map(|(name, _)| name.to_string())
        .collect()
}

/// Writes a scripted-model file and returns its path (kept alive by the TempDir).
pub fn script(dir: &tempfile::TempDir, name: &str, yaml: &str) -> PathBuf {
    let p = dir.path().join(name);
    std::fs::write(&p, yaml).expect("write script");
    p
}

/// The JSON events among `agent run --json` output lines.
pub fn json_events(stdout: &str) -> Vec<serde_json::Value> {
    stdout.lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
}

/// Sends `request` and cancels it from inside the stream callback once `after` deltas
/// arrived, as an `Op::Interrupt` would; returns the response and how many deltas came.
pub async fn chat_cancelled_after(
    model: &dyn agent_llm::ModelBackend,
    request: &agent_llm::ChatRequest,
    after: usize,
) -> (agent_llm::ChatResponse, usize) {
    let cancel = tokio_util::sync::CancellationToken::new();
    let trigger = cancel.clone();
    let mut seen = 0usize;
    let mut on_delta = |_: &str| {
        seen += 1;
        if seen == after {
            trigger.cancel();
        }
    };
    let response = model.chat(request, &mut on_delta, &cancel).await.unwrap();
    (response, seen)
}

/// Names of networks labelled with this run id.
pub fn networks_of_run(run_id: &str) -> Vec<String> {
    let out = Command::new("docker")
        .args(["network", "ls", "--filter", &format!("label=agent.run={run_id}"), "--format", "{{.Name}}"])
        .output()
        .expect("docker network ls");
    String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).filter(|l| !l.is_empty()).collect()
}

/// Names of the volumes labelled with `run_id`.
pub fn volumes_of_run(run_id: &str) -> Vec<String> {
    let out = Command::new("docker")
        .args(["volume", "ls", "--filter", &format!("label=agent.run={run_id}"), "--format", "{{.Name}}"])
        .output()
        .expect("docker volume ls");
    String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).filter(|l| !l.is_empty()).collect()
}

/// No container, network or volume of `run_id` is left.
pub fn assert_nothing_left(run_id: &str) {
    assert_eq!(containers_of_run(run_id), Vec::<String>::new(), "containers left by {run_id}");
    assert_eq!(networks_of_run(run_id), Vec::<String>::new(), "networks left by {run_id}");
    assert_eq!(volumes_of_run(run_id), Vec::<String>::new(), "volumes left by {run_id}");
}

/// A fixture under `tests/fixtures/`.
pub fn fixture(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures").join(path)
}

/// Removes the images `agent bench` built for these fixture tasks.
pub fn remove_bench_images(tasks: &[&str]) {
    for t in tasks {
        let out = Command::new("docker")
            .args(["images", "--format", "{{.Repository}}:{{.Tag}}", &format!("agent-bench-{t}-*")])
            .output()
            .expect("docker images");
        for image in String::from_utf8_lossy(&out.stdout).lines().filter(|l| !l.is_empty()) {
            let _ = Command::new("docker").args(["rmi", "-f", image]).output();
        }
    }
}

/// Copies a folder tree.
pub fn copy_tree(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// The observations of the tool calls among `events`, in order.
pub fn observations(events: &[agent_protocol::Event]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match e {
            agent_protocol::Event::ToolCallEnd { observation, .. } => Some(observation.clone()),
            _ => None,
        })
        .collect()
}

/// The notices among `events`, in order.
pub fn notices(events: &[agent_protocol::Event]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match e {
            agent_protocol::Event::Notice { message } => Some(message.clone()),
            _ => None,
        })
        .collect()
}

/// Host git in `dir` that runs no hook and no fsmonitor whatever the repository says
/// (the tests read repositories the sandbox wrote); its stdout.
pub fn host_git(dir: &std::path::Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null", "-C"])
        .arg(dir)
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// Whether `text` is a whole reply that the llguidance Lark `grammar` allows, fed one byte
/// per token as a sampler would see it (every byte, then the end); panics when the grammar
/// does not compile.
pub fn grammar_accepts(grammar: &str, text: &str) -> bool {
    use llguidance::api::TopLevelGrammar;
    use llguidance::{Matcher, ParserFactory};
    let env = toktrie::ApproximateTokEnv::single_byte_env();
    let mut factory = ParserFactory::new_simple(&env).unwrap();
    factory.quiet();
    let mut matcher = Matcher::new(factory.create_parser(TopLevelGrammar::from_lark(grammar.to_string())));
    assert!(!matcher.is_error(), "the grammar does not compile: {:?}\n{grammar}", matcher.get_error());
    let tokens: Vec<u32> = text.bytes().map(u32::from).collect();
    if matcher.validate_tokens(&tokens).unwrap() < tokens.len() {
        return false;
    }
    matcher.consume_tokens(&tokens).unwrap();
    matcher.is_accepting().unwrap()
}
