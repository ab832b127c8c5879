//! Generated tasks are real tasks: written by `agent_bench::generate`, run through the
//! bench (the real Docker engine, the Terminal-Bench image's stand-in, the task's own
//! `run-tests.sh`), the reference solution resolves every one and doing nothing
//! resolves none.
//!
//! One task each of the Rust families and of a slice of the family files that covers what
//! they do differently (Debian packages, background services, git histories, SQLite, no
//! input files, fake system tools), the levels spread over them (level 1 + i mod 3). Set
//! `GENERATE_IT_ALL_LEVELS=1` for every family at every level; `scripts/validate-families.sh`
//! validates every family (`agent tasks validate`).

use std::path::{Path, PathBuf};

use agent_bench::generate::{self, GeneratedTask, Split, MAX_LEVEL};
use agent_bench::{AgentKind, BenchOptions, FailureMode, HostEnv, ResultsFile, VerifiedBy, VerifyMode};
use agent_core::config::Config;
use agent_llm::ResolveOptions;

/// The family files this test runs besides the Rust families.
const SLICE: &[&str] = &[
    "c-build",
    "local-service",
    "git-history",
    "sqlite-query",
    "fix-python",
    "bash-script",
    "users-groups",
    "symlinks",
    "jsonl-logs",
];

fn tasks() -> Vec<GeneratedTask> {
    let all = std::env::var("GENERATE_IT_ALL_LEVELS").is_ok_and(|v| v == "1");
    let mut out = Vec::new();
    let families = generate::families();
    let chosen = families.iter().filter(|f| all || f.origin == generate::BUILT_IN || SLICE.contains(&f.name.as_str()));
    for (i, f) in chosen.enumerate() {
        let levels: Vec<u8> = if all { (1..=MAX_LEVEL).collect() } else { vec![1 + (i as u8) % MAX_LEVEL] };
        for level in levels {
            out.push(generate::instance(f, level, Split::Heldout, 11, out.len() as u32).unwrap());
        }
    }
    out
}

fn options(agent: AgentKind, tasks: &Path, out: &Path, run_id: &str) -> BenchOptions {
    BenchOptions {
        tasks: vec![tasks.to_path_buf()],
        concurrency: 4,
        attempts: 1,
        agent,
        model: None,
        run_id: Some(run_id.to_string()),
        output: Some(out.to_path_buf()),
        resume: false,
        verify: VerifyMode::Auto,
        // As `agent bench` does: the host's CA bundle lets pip reach PyPI behind a proxy.
        host: HostEnv::from_host(Path::new("/etc/hosts"), None).unwrap_or_default(),
        resolve: ResolveOptions::default(),
        progress: false,
        timeout_multiplier: 1.0,
        allow_cap_add: false,
        hooks: Default::default(),
        retries: 1,
    }
}

async fn bench(docker: &agent_sandbox::Engine, agent: AgentKind, tasks: &Path, out: &Path) -> ResultsFile {
    let run_id = format!("it-generate-{}-{}", agent_name(agent), std::process::id());
    let opts = options(agent, tasks, out, &run_id);
    let schedule = agent_bench::schedule(&opts).unwrap();
    let notice = |n: String| eprintln!("● {n}");
    let results = agent_bench::run_bench(
        &schedule,
        &opts,
        &Config::default(),
        &agent_sandbox::EnginePool::single(docker.clone()),
        &notice,
    )
    .await;
    agent_sandbox::remove_run_settled(docker, &run_id).await;
    results.unwrap()
}

fn agent_name(agent: AgentKind) -> &'static str {
    match agent {
        AgentKind::Oracle => "oracle",
        AgentKind::Nop => "nop",
        AgentKind::Agent => "agent",
    }
}

/// The trial's story for a failed assertion: reason, tests and the test log's tail.
fn story(out: &Path, t: &agent_bench::TrialRecord) -> String {
    let log: PathBuf = out.join(&t.task).join(format!("attempt-{}", t.attempt)).join("tests.log");
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let tail: String = text.lines().rev().take(40).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n");
    format!("{} [{}] {}\ntests: {:?}\n{tail}", t.task, t.failure_mode.as_str(), t.reason, t.tests)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_oracle_resolves_every_generated_task_and_nop_resolves_none() {
    let docker = agent_sandbox::connect().await.expect("the Docker engine is needed for this test");
    let dir = tempfile::tempdir().unwrap();
    let task_dir = dir.path().join("tasks");
    let tasks = tasks();
    generate::write_tasks(&task_dir, &tasks, Split::Heldout, 11).unwrap();

    let out = dir.path().join("oracle");
    let r = bench(&docker, AgentKind::Oracle, &task_dir, &out).await;
    assert_eq!(r.n_trials, tasks.len());
    for t in &r.trials {
        assert!(t.resolved, "the reference solution does not resolve {}", story(&out, t));
        assert!(t.tests.len() >= 2, "{}", story(&out, t));
        assert_eq!(t.verified_by, Some(VerifiedBy::RunTests), "the task's own run-tests.sh: {}", story(&out, t));
    }

    let out = dir.path().join("nop");
    let r = bench(&docker, AgentKind::Nop, &task_dir, &out).await;
    assert_eq!(r.n_trials, tasks.len());
    for t in &r.trials {
        assert!(!t.resolved, "doing nothing resolves {}", story(&out, t));
        // The tests ran and failed: not a broken environment.
        assert_eq!(t.failure_mode, FailureMode::Unset, "{}", story(&out, t));
        assert!(!t.tests.is_empty(), "{}", story(&out, t));
    }

    // The task images are named after the tasks; a later run rebuilds them from cache.
    for t in &tasks {
        let image = format!("agent-bench-{}-client:latest", t.name);
        let _ = std::process::Command::new("docker").args(["rmi", "-f", &image]).output();
    }
}
