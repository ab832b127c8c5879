//! `agent bench` end to end: the real binary, a real engine, real TB1 tasks and
//! fixtures for every failure mode.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support;
use crate::support::assert_nothing_left;

/// The two tests on the `slow-ok` fixture build and remove the same image; they take
/// turns so that one never removes it under the other.
static SLOW_OK: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// `agent bench --quiet --run-id RUN_ID --output OUT ARGS TASKS`, not yet run.
pub(crate) fn bench_command(out: &Path, run_id: &str, args: &[&str], tasks: &[&Path]) -> Command {
    let mut cmd = Command::new(support::agent_bin());
    cmd.args(["bench", "--quiet", "--run-id", run_id, "--output"]).arg(out).args(args);
    for t in tasks {
        cmd.arg(t);
    }
    cmd
}

/// The run's `results.json`, or `Null` when it was not written.
pub(crate) fn results(out: &Path) -> Value {
    std::fs::read_to_string(out.join("results.json"))
        .map(|t| serde_json::from_str(&t).expect("results.json is JSON"))
        .unwrap_or(Value::Null)
}

/// Runs `agent bench ARGS` into `out`; returns (exit status, stdout+stderr, results.json).
pub(crate) fn bench(out: &Path, run_id: &str, args: &[&str], tasks: &[&Path]) -> (i32, String, Value) {
    let o = bench_command(out, run_id, args, tasks).output().expect("run agent bench");
    let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    (o.status.code().unwrap_or(-1), text, results(out))
}

/// Kills `child` with SIGKILL once `up` holds (its resources exist), then runs `agent
/// sandbox prune` and checks that nothing of `run_id` is left. The next process sweeps
/// what the killed one left: this `prune`, or the start-up sweep of an `agent bench`
/// another test starts meanwhile (so the report may not name it).
pub(crate) fn kill_when_up_then_prune(
    mut child: Child,
    run_id: &str,
    up: impl Fn() -> bool,
    what: &str,
    limit: Duration,
) {
    let deadline = Instant::now() + limit;
    while !up() {
        assert!(Instant::now() < deadline, "{what} never came up");
        assert!(child.try_wait().unwrap().is_none(), "the run ended before it could be killed");
        std::thread::sleep(Duration::from_millis(50));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let o = Command::new(support::agent_bin()).args(["sandbox", "prune"]).output().unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{text}");
    support::assert_nothing_left(run_id);
}

pub(crate) fn trial<'a>(results: &'a Value, task: &str, attempt: u64) -> &'a Value {
    results["trials"]
        .as_array()
        .and_then(|t| t.iter().find(|t| t["task"] == task && t["attempt"] == attempt))
        .unwrap_or_else(|| panic!("no trial {task}#{attempt} in {results}"))
}

pub(crate) fn run_id(tag: &str) -> String {
    format!("it-{tag}-{}", &uuid::Uuid::new_v4().simple().to_string()[..6])
}

#[test]
fn oracle_resolves_hello_world_and_the_two_service_scraper_and_nop_resolves_nothing() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(support::docker());
    let dir = tempfile::tempdir().unwrap();
    let hello = support::tb1_task("hello-world");
    let scraper = support::tb1_task("simple-web-scraper");
    let id = run_id("oracle");
    let out = dir.path().join("oracle");
    let (code, text, r) = bench(&out, &id, &["--agent", "oracle", "-n", "2"], &[&hello, &scraper]);
    assert_eq!(code, 0, "{text}");
    assert_eq!((r["n_trials"].as_u64(), r["n_resolved"].as_u64()), (Some(2), Some(2)), "{text}\n{r:#}");
    assert_eq!(r["accuracy"].as_f64(), Some(1.0));
    let h = trial(&r, "hello-world", 0);
    assert_eq!(h["failure_mode"], "unset");
    // hello-world's run-tests.sh needs uv from astral.sh; the scraper's uses pip.
    assert!(["fallback-pytest", "run-tests.sh"].contains(&h["verified_by"].as_str().unwrap()), "{h}");
    assert_eq!(trial(&r, "simple-web-scraper", 0)["verified_by"], "run-tests.sh");
    assert_eq!(h["tests"].as_array().map(Vec::len), Some(2), "{h}");
    let tdir = out.join("hello-world/attempt-0");
    for f in ["result.json", "agent.log", "tests.log"] {
        assert!(tdir.join(f).is_file(), "{f} missing in {}", tdir.display());
    }
    assert!(std::fs::read_to_string(tdir.join("tests.log")).unwrap().contains("short test summary info"));
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(html.contains("<svg") && html.contains("hello-world"));
    assert!(text.contains("accuracy") && text.contains("pass@1"), "{text}");
    assert_nothing_left(&id);

    let id = run_id("nop");
    let (code, text, r) = bench(&dir.path().join("nop"), &id, &["--agent", "nop"], &[&hello]);
    assert_eq!(code, 0, "{text}");
    assert_eq!((r["n_trials"].as_u64(), r["n_resolved"].as_u64()), (Some(1), Some(0)), "{r:#}");
    let t = trial(&r, "hello-world", 0);
    assert_eq!(t["failure_mode"], "unset", "{t}");
    assert!(t["tests"].as_array().unwrap().iter().any(|x| x["status"] == "FAILED"), "{t}");
    assert_nothing_left(&id);
}

#[test]
fn every_failure_mode_is_recorded_with_a_reason_and_the_run_goes_on() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(support::docker());
    let dir = tempfile::tempdir().unwrap();
    let id = run_id("modes");
    let started = Instant::now();
    let (code, text, r) = bench(
        &dir.path().join("r"),
        &id,
        &["--agent", "oracle", "-n", "2"],
        &[&support::fixture("bench/failure-modes")],
    );
    assert_eq!(code, 0, "{text}");
    assert_eq!(r["n_trials"].as_u64(), Some(4), "{text}");
    assert_eq!(r["n_resolved"].as_u64(), Some(0));
    let expect = [
        ("broken-dockerfile", "env_build_failed", "fails on purpose"),
        ("hanging-test", "test_timeout", "test timeout of 3 s"),
        ("no-summary", "parse_error", "no pytest summary"),
        ("missing-field", "env_build_failed", "`instruction`"),
    ];
    for (task, mode, reason) in expect {
        let t = trial(&r, task, 0);
        assert_eq!(t["failure_mode"], mode, "{t}");
        assert!(t["reason"].as_str().unwrap().contains(reason), "{task}: {}", t["reason"]);
    }
    assert!(trial(&r, "missing-field", 0)["reason"].as_str().unwrap().contains("task.yaml"));
    assert!(trial(&r, "no-summary", 0)["reason"].as_str().unwrap().contains("trust me"));
    // The hanging test is cut at its 3 s timeout, not left to sleep.
    assert!(started.elapsed() < Duration::from_secs(240), "{:?}", started.elapsed());
    assert!(text.contains("env_build_failed 2"), "{text}");
    assert_nothing_left(&id);
    // The broken build's last good layer stays dangling; scripts/test.sh removes such
    // leftovers once every test is done (removing them here would race other builds).
    support::remove_bench_images(&["broken-dockerfile", "hanging-test", "no-summary", "missing-field"]);
}

#[test]
fn a_killed_run_resumes_to_the_same_counts_and_leaves_nothing_behind() {
    let _turn = SLOW_OK.lock().unwrap_or_else(|e| e.into_inner());
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(support::docker());
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r");
    let id = run_id("resume");
    let task = support::fixture("bench/slow-ok");
    let mut child = Command::new(support::agent_bin())
        .args(["bench", "--quiet", "--agent", "oracle", "-k", "3", "--run-id", &id, "--output"])
        .arg(&out)
        .arg(&task)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Kill it while the second trial's container runs (the first trial is recorded).
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        assert!(Instant::now() < deadline, "the first trial never finished");
        if out.join("slow-ok/attempt-0/result.json").is_file() && !support::containers_of_run(&id).is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(!support::containers_of_run(&id).is_empty(), "the killed run should have left its container");
    let first = std::fs::read_to_string(out.join("slow-ok/attempt-0/result.json")).unwrap();

    let mut cmd = Command::new(support::agent_bin());
    let o = cmd.args(["bench", "--quiet", "--resume", "--output"]).arg(&out).output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(o.status.success(), "{text}");
    assert!(text.contains("already finished"), "{text}");
    assert!(text.contains("removed 1 container"), "{text}");
    let r: Value = serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    assert_eq!((r["n_trials"].as_u64(), r["n_resolved"].as_u64()), (Some(3), Some(3)), "{r:#}");
    // The finished trial was not redone.
    assert_eq!(std::fs::read_to_string(out.join("slow-ok/attempt-0/result.json")).unwrap(), first);
    assert_eq!(r["stats"]["pass_at_k"]["3"].as_f64(), Some(1.0));
    assert_nothing_left(&id);
    support::remove_bench_images(&["slow-ok"]);
}

#[test]
fn our_agent_with_a_scripted_model_resolves_hello_world_and_saves_its_trajectory() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(support::docker());
    let dir = tempfile::tempdir().unwrap();
    let script = support::script(
        &dir,
        "hello.yaml",
        "- |\n  <bash>\n  cmd: echo \"Hello, world!\" > hello.txt\n  </bash>\n- |\n  <finish>\n  message: done\n  </finish>\n",
    );
    let id = run_id("agent");
    let out = dir.path().join("r");
    let model = format!("scripted:{}", script.display());
    let (code, text, r) =
        bench(&out, &id, &["--agent", "agent", "--model", &model, "-k", "2"], &[&support::tb1_task("hello-world")]);
    assert_eq!(code, 0, "{text}");
    // Each trial replays the script from its start.
    assert_eq!((r["n_trials"].as_u64(), r["n_resolved"].as_u64()), (Some(2), Some(2)), "{text}\n{r:#}");
    for a in 0..2 {
        let t = trial(&r, "hello-world", a);
        assert_eq!(t["turns"].as_u64(), Some(2), "{t}");
        assert!(t["usage"]["completion_tokens"].as_u64().unwrap() > 0);
        let traj = std::fs::read_to_string(out.join(format!("hello-world/attempt-{a}/trajectory.jsonl"))).unwrap();
        assert!(traj.contains("Hello, world!"), "{traj}");
        assert!(out.join(format!("hello-world/attempt-{a}/events.jsonl")).is_file());
        let atif: Value = serde_json::from_str(
            &std::fs::read_to_string(out.join(format!("hello-world/attempt-{a}/trajectory.atif.json"))).unwrap(),
        )
        .unwrap();
        assert_eq!(atif["steps"][2]["tool_calls"][0]["function_name"], "bash", "{atif}");
    }
    assert_nothing_left(&id);

    // A model that fails mid-episode (its script runs out) is an agent error; the
    // tests still run, and the file it wrote counts.
    let short =
        support::script(&dir, "short.yaml", "- |\n  <bash>\n  cmd: echo \"Hello, world!\" > hello.txt\n  </bash>\n");
    let id = run_id("agenterr");
    let model = format!("scripted:{}", short.display());
    let (code, text, r) = bench(
        &dir.path().join("e"),
        &id,
        &["--agent", "agent", "--model", &model],
        &[&support::tb1_task("hello-world")],
    );
    assert_eq!(code, 0, "{text}");
    let t = trial(&r, "hello-world", 0);
    assert_eq!(t["failure_mode"], "agent_error", "{t}");
    assert!(t["reason"].as_str().unwrap().contains("script"), "{t}");
    assert_eq!(t["resolved"], true, "{t}");
    assert_nothing_left(&id);
}

#[test]
fn bad_arguments_fail_before_anything_starts() {
    let dir = tempfile::tempdir().unwrap();
    let o =
        Command::new(support::agent_bin()).args(["bench", "--resume", "--output"]).arg(dir.path()).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("run.json") && err.contains("--resume"), "{err}");
    let o = Command::new(support::agent_bin()).args(["bench"]).arg(dir.path()).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("neither a task"), "{err}");
}

/// Acceptance: the real default model on hello-world, two attempts, reported as it is.
#[test]
fn default_model_runs_hello_world_twice_and_reports_honestly() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(support::docker());
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("agent.toml");
    // One short turn per trial keeps this to minutes on two CPU cores.
    std::fs::write(&cfg, "[episode]\nmax_turns = 1\nmax_reply_tokens = 48\n").unwrap();
    let id = run_id("default");
    let out = dir.path().join("r");
    let o = Command::new(support::agent_bin())
        .arg("--config")
        .arg(&cfg)
        .args([
            "bench",
            "--quiet",
            "--agent",
            "agent",
            "--model",
            "smollm2-135m",
            "-k",
            "2",
            "--run-id",
            &id,
            "--output",
        ])
        .arg(&out)
        .arg(support::tb1_task("hello-world"))
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    eprintln!("{text}");
    assert!(o.status.success(), "{text}");
    let r: Value = serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    assert_eq!(r["n_trials"].as_u64(), Some(2), "{r:#}");
    for a in 0..2 {
        let t = trial(&r, "hello-world", a);
        // Whatever the model did, the trial was verified and its trajectory kept.
        assert!(t["verified_by"].is_string(), "{t}");
        if t["failure_mode"] == "unset" {
            assert!(t["usage"]["completion_tokens"].as_u64().unwrap() > 0, "{t}");
        } else {
            assert_eq!(t["failure_mode"], "agent_timeout", "{t}");
        }
        assert!(out.join(format!("hello-world/attempt-{a}/trajectory.jsonl")).is_file());
    }
    assert_eq!(
        r["n_resolved"].as_u64().unwrap() as usize,
        r["trials"].as_array().unwrap().iter().filter(|t| t["resolved"] == true).count()
    );
    assert_nothing_left(&id);
}

#[test]
fn a_tb2_task_is_scored_by_its_reward_file() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(support::docker());
    let dir = tempfile::tempdir().unwrap();
    let task = support::fixture("bench/tb2-hello");
    for (agent, resolved, reward) in [("oracle", true, 1.0), ("nop", false, 0.0)] {
        let id = run_id(&format!("tb2{agent}"));
        let (code, text, r) = bench(&dir.path().join(agent), &id, &["--agent", agent], &[&task]);
        assert_eq!(code, 0, "{text}");
        let t = trial(&r, "tb2-hello", 0);
        assert_eq!(t["resolved"], resolved, "{t}");
        assert_eq!(t["verified_by"], "reward-file", "{t}");
        assert_eq!(t["score"].as_f64(), Some(reward), "{t}");
        assert_eq!(t["failure_mode"], "unset", "{t}");
        assert_nothing_left(&id);
    }
    support::remove_bench_images(&["tb2-hello"]);
}

/// A multi-service task as Harbor writes it (the agent's service is `main`, build
/// contexts use `${CONTEXT_DIR}`): it loads, its services start, the oracle passes.
#[test]
fn a_tb2_multi_service_task_resolves_through_the_oracle() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(support::docker());
    let dir = tempfile::tempdir().unwrap();
    let task = support::tb2_task("simple-web-scraper");
    let id = run_id("tb2scraper");
    let (code, text, r) = bench(&dir.path().join("r"), &id, &["--agent", "oracle"], &[&task]);
    assert_eq!(code, 0, "{text}");
    let t = trial(&r, "simple-web-scraper", 0);
    assert_eq!(t["resolved"], true, "{t}");
    assert_eq!(t["verified_by"], "reward-file", "{t}");
    assert_nothing_left(&id);
}

#[test]
fn sigint_removes_the_runs_containers_at_once_and_keeps_finished_trials() {
    signal_removes_the_runs_containers(libc::SIGINT);
}

/// What a closed SSH session or terminal sends.
#[test]
fn sighup_removes_the_runs_containers_too() {
    signal_removes_the_runs_containers(libc::SIGHUP);
}

fn signal_removes_the_runs_containers(sig: i32) {
    let _turn = SLOW_OK.lock().unwrap_or_else(|e| e.into_inner());
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(support::docker());
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r");
    let id = run_id("sigint");
    let child = Command::new(support::agent_bin())
        .args(["bench", "--quiet", "--agent", "oracle", "-k", "2", "--run-id", &id, "--output"])
        .arg(&out)
        .arg(support::fixture("bench/slow-ok"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(300);
    while support::containers_of_run(&id).is_empty() {
        assert!(Instant::now() < deadline, "no container started");
        std::thread::sleep(Duration::from_millis(100));
    }
    let kill = Command::new("kill").args([&format!("-{sig}"), &child.id().to_string()]).status().unwrap();
    assert!(kill.success());
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(128 + sig), "{err}");
    assert!(err.contains("--resume"), "{err}");
    assert_nothing_left(&id);
    assert!(out.join("run.json").is_file());
    support::remove_bench_images(&["slow-ok"]);
}

/// `kill -9` leaves a multi-service task's containers and network; the next process's
/// sweep (here `agent sandbox prune`) removes both, as it removes containers.
#[test]
fn a_killed_multi_service_run_is_swept_by_the_next_process() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(support::docker());
    let dir = tempfile::tempdir().unwrap();
    let id = run_id("kill9");
    let scraper = support::tb1_task("simple-web-scraper");
    let child = bench_command(&dir.path().join("r"), &id, &["--agent", "nop"], &[&scraper])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let up = || !support::networks_of_run(&id).is_empty() && !support::containers_of_run(&id).is_empty();
    kill_when_up_then_prune(child, &id, up, "the task's network and containers", Duration::from_secs(900));
}

#[test]
fn builds_and_containers_get_the_name_overrides_and_the_ca_bundle() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(support::docker());
    let dir = tempfile::tempdir().unwrap();
    let id = run_id("hostenv");
    let task = support::fixture("bench/host-env");
    let args = ["--agent", "oracle", "--add-host", "bench-probe.internal:10.11.12.13"];
    let (code, text, r) = bench(&dir.path().join("r"), &id, &args, &[&task]);
    assert_eq!(code, 0, "{text}");
    let t = trial(&r, "host-env", 0);
    assert_eq!(
        t["resolved"],
        true,
        "{t}\n{}",
        std::fs::read_to_string(dir.path().join("r/host-env/attempt-0/tests.log")).unwrap_or_default()
    );
    assert_nothing_left(&id);
    support::remove_bench_images(&["host-env"]);
}
