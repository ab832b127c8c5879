//! `agent bench` on what Terminal-Bench 2 tasks ask of their environment, with the real
//! binary and a real engine: compose volumes, tmpfs, binds, env files and published
//! ports; `task.toml`'s network and variables; TB1's tests in the agent's own shell;
//! capabilities only when the run grants them.

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::bench::{kill_when_up_then_prune, results, run_id};
use crate::support;
use crate::support::assert_nothing_left;

/// The two tests on the `compose-mounts` fixture build and remove the same image; they
/// take turns so that one never removes it under the other.
static COMPOSE_MOUNTS: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Runs `agent bench --agent AGENT ARGS TASK` into `out`; returns (exit status, output, results.json).
fn bench(out: &Path, run_id: &str, agent: &str, args: &[&str], task: &Path) -> (i32, String, Value) {
    crate::bench::bench(out, run_id, &[&["--agent", agent], args].concat(), &[task])
}

fn command(out: &Path, run_id: &str, agent: &str, args: &[&str], task: &Path) -> Command {
    crate::bench::bench_command(out, run_id, &[&["--agent", agent], args].concat(), &[task])
}

/// The only trial of a one-task run, with its test log for failure messages.
fn only_trial(r: &Value, out: &Path) -> (Value, String) {
    let t = r["trials"][0].clone();
    assert!(t.is_object(), "no trial in {r:#}");
    let log = std::fs::read_to_string(out.join(format!("{}/attempt-0/tests.log", t["task"].as_str().unwrap_or(""))))
        .unwrap_or_default();
    (t, log)
}

/// Lines of `docker ARGS` output.
fn docker_lines(args: &[&str]) -> Vec<String> {
    let out = Command::new("docker").args(args).output().expect("docker");
    String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).filter(|l| !l.is_empty()).collect()
}

/// `GET path` from the host; the body, when the server answered 200.
fn http_get(addr: &str, path: &str) -> Option<String> {
    let mut s =
        std::net::TcpStream::connect_timeout(&addr.parse::<std::net::SocketAddr>().ok()?, Duration::from_secs(2))
            .ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
    let mut reply = String::new();
    s.read_to_string(&mut reply).ok()?;
    let (head, body) = reply.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.0 200").then(|| body.trim().to_string())
}

/// What the engine says about the `web` service's published ports while the trial
/// runs: every binding's host address, and whether the service answered on its
/// ephemeral host port from the host.
fn watch_the_web_service(run_id: &str, child: &mut std::process::Child) -> (Vec<String>, Option<String>) {
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut addresses = Vec::new();
    while Instant::now() < deadline {
        assert!(child.try_wait().unwrap().is_none() || !addresses.is_empty(), "the run ended before `web` was seen");
        let web: Vec<String> = support::containers_of_run(run_id).into_iter().filter(|n| n.contains("-web-")).collect();
        if let Some(name) = web.first() {
            if addresses.is_empty() {
                addresses = docker_lines(&[
                    "inspect",
                    "-f",
                    "{{range $p, $b := .HostConfig.PortBindings}}{{range $b}}{{$p}} {{.HostIp}}\n{{end}}{{end}}",
                    name,
                ]);
            }
            let mapped = docker_lines(&["port", name, "8000/tcp"]);
            if let Some(body) = mapped.first().and_then(|addr| http_get(addr, "/web.txt")) {
                return (addresses, Some(body));
            }
        } else if !addresses.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    (addresses, None)
}

/// (a) A Harbor compose task: a named volume shared by two services, a tmpfs, a bind
/// of the task's own files, an env file and published ports; the oracle passes, every
/// port is bound to 127.0.0.1 and answers there, and nothing is left afterwards.
#[test]
fn a_compose_task_with_a_volume_a_tmpfs_and_ports_resolves_and_leaves_nothing() {
    let _turn = COMPOSE_MOUNTS.lock().unwrap_or_else(|e| e.into_inner());
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(support::docker());
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r");
    let id = run_id("compose");
    let task = support::fixture("bench/compose-mounts");
    let mut child =
        command(&out, &id, "oracle", &[], &task).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let (bindings, answer) = watch_the_web_service(&id, &mut child);
    let o = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(o.status.success(), "{text}");
    let r = results(&out);
    let (t, log) = only_trial(&r, &out);
    assert_eq!(t["resolved"], true, "{t}\n{log}\n{text}");
    assert!(log.contains("PASS /scratch is a tmpfs") && log.contains("PASS environment wins"), "{log}");

    assert_eq!(bindings.len(), 2, "{bindings:?}");
    assert!(bindings.iter().all(|b| b.ends_with(" 127.0.0.1")), "{bindings:?}");
    assert_eq!(answer.as_deref(), Some("from-web"), "the published port did not answer on the host's loopback");

    let notices: Vec<&str> = t["notices"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert!(notices.iter().any(|n| n.contains("ignoring services.web.restart")), "{notices:?}");
    assert!(notices.iter().any(|n| n.contains("127.0.0.1 only, not on 0.0.0.0")), "{notices:?}");
    assert!(text.contains("task compose-mounts: compose: ignoring services.web.restart"), "{text}");
    assert_nothing_left(&id);
    support::remove_bench_images(&["compose-mounts"]);
}

/// `kill -9` leaves the task's volume as it leaves containers and networks; the next
/// process's sweep (here `agent sandbox prune`) removes it by the same owner rule.
#[test]
fn a_killed_runs_volume_is_swept_by_prune() {
    let _turn = COMPOSE_MOUNTS.lock().unwrap_or_else(|e| e.into_inner());
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(support::docker());
    let dir = tempfile::tempdir().unwrap();
    let id = run_id("volkill");
    let task = support::fixture("bench/compose-mounts");
    let child = command(&dir.path().join("r"), &id, "nop", &[], &task)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // SIGKILL leaves the volume; the next process sweeps it.
    let up = || !support::volumes_of_run(&id).is_empty() && !support::containers_of_run(&id).is_empty();
    kill_when_up_then_prune(child, &id, up, "the task's volume and containers", Duration::from_secs(600));
    support::remove_bench_images(&["compose-mounts"]);
}

/// (b) TB1's `run_tests_in_same_shell: true`: the exported variable and directory the
/// oracle's solution, or our agent's `bash` tool, left in the session are what the
/// tests see; with the flag off, the same task fails.
#[test]
fn tests_run_in_the_agents_shell_when_the_task_asks() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(support::docker());
    let dir = tempfile::tempdir().unwrap();
    let task = support::fixture("bench/same-shell");
    let id = run_id("sameshell");
    let out = dir.path().join("same");
    let (code, text, r) = bench(&out, &id, "oracle", &[], &task);
    assert_eq!(code, 0, "{text}");
    let (t, log) = only_trial(&r, &out);
    assert_eq!(t["resolved"], true, "{t}\n{log}");
    assert_eq!(t["verified_by"], "run-tests.sh", "{t}");
    assert!(t["verify_note"].as_str().unwrap_or("").contains("agent's shell session"), "{t}");
    assert_nothing_left(&id);

    // Our agent: the session its `bash` tool used is the one the tests run in.
    let script = support::script(
        &dir,
        "agent.yaml",
        "- |\n  <bash>\n  cmd: export SECRET_WORD=swordfish && mkdir -p /work/inner && cd /work/inner\n  </bash>\n\
         - |\n  <finish>\n  message: done\n  </finish>\n",
    );
    let id = run_id("agentshell");
    let out = dir.path().join("agent");
    let model = format!("scripted:{}", script.display());
    let (code, text, r) = bench(&out, &id, "agent", &["--model", &model], &task);
    assert_eq!(code, 0, "{text}");
    let (t, log) = only_trial(&r, &out);
    assert_eq!(t["resolved"], true, "{t}\n{log}");
    assert_nothing_left(&id);

    let copy = dir.path().join("same-shell");
    support::copy_tree(&task, &copy);
    let yaml = std::fs::read_to_string(copy.join("task.yaml")).unwrap();
    std::fs::write(
        copy.join("task.yaml"),
        yaml.replace("run_tests_in_same_shell: true", "run_tests_in_same_shell: false"),
    )
    .unwrap();
    let id = run_id("freshshell");
    let out = dir.path().join("fresh");
    let (code, text, r) = bench(&out, &id, "oracle", &[], &copy);
    assert_eq!(code, 0, "{text}");
    let (t, log) = only_trial(&r, &out);
    assert_eq!(t["resolved"], false, "{t}\n{log}");
    assert_eq!(t["tests"].as_array().map(|a| a.iter().filter(|x| x["status"] == "FAILED").count()), Some(2), "{t}");
    assert_nothing_left(&id);
    support::remove_bench_images(&["same-shell"]);
}

/// (c) `task.toml`'s `[verifier.env]`, `[solution.env]` and `[environment.env]` reach
/// the test run, the solution and the agent's container only, `network_mode =
/// "no-network"` leaves the container without a network, and `reward.json` scores.
#[test]
fn task_toml_variables_reach_their_runs_and_no_network_means_none() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(support::docker());
    let dir = tempfile::tempdir().unwrap();
    let id = run_id("tb2env");
    let out = dir.path().join("r");
    let (code, text, r) = bench(&out, &id, "oracle", &[], &support::fixture("bench/tb2-env"));
    assert_eq!(code, 0, "{text}");
    let (t, log) = only_trial(&r, &out);
    assert_eq!(t["verified_by"], "reward-file", "{t}");
    assert_eq!(t["score"].as_f64(), Some(1.0), "{t}\n{log}");
    assert_eq!(t["resolved"], true, "{t}\n{log}");
    assert_nothing_left(&id);
    support::remove_bench_images(&["tb2-env"]);
}

/// A service's `cap_add` is refused unless the run passes `--allow-cap-add`, which
/// grants it.
#[test]
fn cap_add_needs_the_flag() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(support::docker());
    let dir = tempfile::tempdir().unwrap();
    let task = dir.path().join("cap-add");
    let files = [
        ("task.toml", "[verifier]\ntimeout_sec = 30.0\n[agent]\ntimeout_sec = 30.0\n"),
        ("instruction.md", "Nothing to do.\n"),
        ("environment/Dockerfile", "FROM agent-base:bookworm\n"),
        ("environment/docker-compose.yaml", "services:\n  main:\n    build: .\n    cap_add: [NET_ADMIN]\n"),
        // CAP_NET_ADMIN is bit 12 of the effective set.
        (
            "tests/test.sh",
            "caps=$(awk '/^CapEff/ {print $2}' /proc/self/status)\n\
             if (( (16#$caps >> 12) & 1 )); then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi\n",
        ),
    ];
    for (name, text) in files {
        let p = task.join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    let id = run_id("capadd");
    let out = dir.path().join("refused");
    let (code, text, r) = bench(&out, &id, "nop", &[], &task);
    assert_eq!(code, 0, "{text}");
    let (t, _) = only_trial(&r, &out);
    assert_eq!(t["failure_mode"], "env_build_failed", "{t}");
    assert!(t["reason"].as_str().unwrap().contains("--allow-cap-add"), "{t}");
    assert_nothing_left(&id);

    let id = run_id("capadd");
    let out = dir.path().join("granted");
    let (code, text, r) = bench(&out, &id, "nop", &["--allow-cap-add"], &task);
    assert_eq!(code, 0, "{text}");
    let (t, log) = only_trial(&r, &out);
    assert_eq!(t["resolved"], true, "{t}\n{log}");
    assert_nothing_left(&id);
    support::remove_bench_images(&["cap-add"]);
}
