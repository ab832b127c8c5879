//! The engine pool with real engines: the local one and a second Docker engine in a
//! privileged container reached over mutual TLS (`dind.rs`). Trials spread over both,
//! a killed engine's trials end `sandbox_lost` and are retried on the other, a restarted
//! engine is swept, and training rollouts spread the same way.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::bench::{bench_command, results, run_id};
use crate::dind::Dind;
use crate::support;

/// The `[[sandbox.engines]]` entry of the local engine, named `local`.
fn local_engine(max_containers: usize) -> String {
    format!("[[sandbox.engines]]\nname = \"local\"\nurl = \"unix:///var/run/docker.sock\"\nmax_containers = {max_containers}\n")
}

/// A config of the local engine and the second one (`dind`), each running at most
/// `max_containers` containers of ours: with 1, a run of several tasks must use both.
fn two_engines(dir: &Path, dind: &Dind, max_containers: usize) -> PathBuf {
    let cfg = dir.join("engines.toml");
    std::fs::write(&cfg, two_engines_toml(dind, max_containers)).unwrap();
    cfg
}

fn two_engines_toml(dind: &Dind, max_containers: usize) -> String {
    format!("{}\n{}", local_engine(max_containers), dind.engine_toml("dind", max_containers))
}

/// Rollouts per engine over a training run's steps.
fn rollouts_per_engine(metrics: &[agent_train::metrics::StepMetrics]) -> std::collections::BTreeMap<String, u64> {
    let mut per_engine = std::collections::BTreeMap::<String, u64>::new();
    for m in metrics {
        for (e, n) in &m.engines {
            *per_engine.entry(e.clone()).or_default() += n;
        }
    }
    per_engine
}

fn tasks() -> Vec<PathBuf> {
    ["alpha", "beta", "gamma", "delta"].iter().map(|t| support::fixture(&format!("engines/{t}"))).collect()
}

fn engines_of(results: &Value) -> BTreeSet<String> {
    results["trials"].as_array().unwrap().iter().filter_map(|t| t["engine"].as_str().map(str::to_string)).collect()
}

fn resolved_tasks(results: &Value) -> BTreeSet<String> {
    let trials = results["trials"].as_array().unwrap();
    trials.iter().filter(|t| t["resolved"] == true).map(|t| t["task"].as_str().unwrap().to_string()).collect()
}

/// The hardening of a container of ours on `dind`, as its engine reports it.
fn assert_hardened(dind: &Dind, name: &str) {
    let o = dind.docker().args(["inspect", name]).output().unwrap();
    let v: Value = serde_json::from_slice(&o.stdout).unwrap_or(Value::Null);
    let host = &v[0]["HostConfig"];
    let opts: Vec<&str> =
        host["SecurityOpt"].as_array().map(|a| a.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
    assert!(opts.iter().any(|o| o.starts_with("no-new-privileges")), "{name}: {host}");
    assert!(host["CapDrop"].as_array().is_some_and(|c| !c.is_empty()), "{name}: {host}");
    assert!(host["Memory"].as_i64().unwrap_or(0) > 0 && host["PidsLimit"].as_i64().unwrap_or(0) > 0, "{name}: {host}");
    assert!(v[0]["Config"]["Labels"]["agent.run"].is_string(), "{name}: labelled as ours");
}

#[test]
fn oracle_trials_spread_over_two_engines_and_match_a_one_engine_run() {
    let dind = Dind::start("spread");
    let dir = tempfile::tempdir().unwrap();
    let cfg = two_engines(dir.path(), &dind, 1);
    let tasks = tasks();
    let task_refs: Vec<&Path> = tasks.iter().map(PathBuf::as_path).collect();

    let listed =
        Command::new(support::agent_bin()).arg("--config").arg(&cfg).args(["sandbox", "engines"]).output().unwrap();
    let table = String::from_utf8_lossy(&listed.stdout);
    assert!(listed.status.success(), "{table}{}", String::from_utf8_lossy(&listed.stderr));
    assert!(table.lines().filter(|l| l.contains(" up ")).count() == 2, "{table}");

    let two = run_id("engines-two");
    let out_two = dir.path().join("two");
    let o = bench_command(&out_two, &two, &["--agent", "oracle", "-n", "2"], &task_refs)
        .arg("--config")
        .arg(&cfg)
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(o.status.success(), "{text}");
    let r_two = results(&out_two);
    assert_eq!(engines_of(&r_two), BTreeSet::from(["dind".to_string(), "local".to_string()]), "{r_two}");

    let one = run_id("engines-one");
    let out_one = dir.path().join("one");
    let o = bench_command(&out_one, &one, &["--agent", "oracle", "-n", "2"], &task_refs).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r_one = results(&out_one);
    assert_eq!(engines_of(&r_one), BTreeSet::from(["local".to_string()]));
    assert_eq!(resolved_tasks(&r_two), resolved_tasks(&r_one));
    assert_eq!(resolved_tasks(&r_two).len(), 4, "{r_two}");
    assert_eq!(r_two["n_trials"], r_one["n_trials"]);

    support::assert_nothing_left(&two);
    assert!(dind.our_containers().is_empty(), "left on the second engine: {:?}", dind.our_containers());
}

#[test]
fn a_killed_engine_loses_its_trials_to_the_other_and_is_swept_when_it_returns() {
    let dind = Dind::start("kill");
    let dir = tempfile::tempdir().unwrap();
    let cfg = two_engines(dir.path(), &dind, 1);
    let tasks = tasks();
    let task_refs: Vec<&Path> = tasks.iter().map(PathBuf::as_path).collect();
    let id = run_id("engines-kill");
    let out = dir.path().join("run");
    let mut child = bench_command(&out, &id, &["--agent", "oracle", "-n", "2"], &task_refs)
        .arg("--config")
        .arg(&cfg)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A trial runs on the second engine (its solution sleeps 8 s): kill that engine.
    let deadline = Instant::now() + Duration::from_secs(600);
    let victim = loop {
        if let Some(name) = dind.running().into_iter().next() {
            break name;
        }
        assert!(Instant::now() < deadline, "no trial ever ran on the second engine");
        assert!(child.try_wait().unwrap().is_none(), "the run ended before a trial reached the second engine");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_hardened(&dind, &victim);
    dind.kill();
    let o = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    let r = results(&out);
    assert_eq!(resolved_tasks(&r).len(), 4, "every task resolved after the retry: {r}");
    let trials = r["trials"].as_array().unwrap();
    assert_eq!(trials.len(), 4, "each trial recorded once: {r}");
    let retried: Vec<&Value> = trials.iter().filter(|t| t["lost_on"] == serde_json::json!(["dind"])).collect();
    assert!(!retried.is_empty(), "a trial lost on the killed engine: {r}");
    assert!(retried.iter().all(|t| t["engine"] == "local" && t["resolved"] == true), "{r}");
    support::assert_nothing_left(&id);

    // Back up, the engine still holds the killed trial's container until a sweep.
    dind.restart();
    assert!(!dind.our_containers().is_empty(), "the killed engine kept its container");
    let o = Command::new(support::agent_bin()).arg("--config").arg(&cfg).args(["sandbox", "prune"]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(dind.our_containers().is_empty(), "after the sweep: {:?}", dind.our_containers());
}

/// The short training preset with its rollouts over both engines gives step for step the
/// metrics of the same run on the local engine alone (rewards, losses, gradients: the
/// rollouts are the same wherever they run), and leaves nothing on either engine.
#[test]
fn training_rollouts_spread_over_two_engines_train_exactly_as_on_one() {
    let one = crate::train::uninterrupted_run();
    let dind = Dind::start("train-short");
    let dir = tempfile::tempdir().unwrap();
    let cfg = two_engines(dir.path(), &dind, 2);
    let out = dir.path().join("run");
    let o = Command::new(support::agent_bin())
        .arg("--config")
        .arg(&cfg)
        .args(["train", "--preset", &crate::train::resume_preset(), "--no-progress", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "agent train failed: {}", String::from_utf8_lossy(&o.stderr));
    let read = |dir: &Path| agent_train::metrics::MetricsLog::read(&dir.join("metrics.jsonl")).unwrap();
    let (two, alone) = (read(&out), read(one));
    let per_engine = rollouts_per_engine(&two);
    assert!(
        per_engine.get("dind").is_some_and(|n| *n > 0) && per_engine.get("local").is_some_and(|n| *n > 0),
        "{per_engine:?}"
    );
    let comparable = |m: &[agent_train::metrics::StepMetrics]| -> Vec<agent_train::metrics::StepMetrics> {
        m.iter()
            .map(|s| agent_train::metrics::StepMetrics { engines: Default::default(), ..s.without_clock() })
            .collect()
    };
    assert_eq!(comparable(&two), comparable(&alone));
    assert!(dind.our_containers().is_empty(), "left on the second engine: {:?}", dind.our_containers());
}

/// The cpu-tiny demonstration with its rollouts over both engines: it learns as the
/// one-engine run does (`train::cpu_tiny_preset_learns_with_real_containers`). Minutes
/// long: `scripts/engines-train.sh`.
#[test]
#[ignore = "a demonstration of several minutes: scripts/engines-train.sh"]
fn cpu_tiny_training_spreads_its_rollouts_over_two_engines_and_learns() {
    let dind = Dind::start("train");
    let dir = tempfile::tempdir().unwrap();
    let cfg = two_engines(dir.path(), &dind, 4);
    let out = dir.path().join("run");
    let o = support::installed(dir.path())
        .arg("--config")
        .arg(&cfg)
        .args(["train", "--preset", "cpu-tiny", "--no-progress", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "agent train failed: {stderr}");
    let eval = crate::train::eval_json(&out);
    let (before, after) = (eval["before"].as_f64().unwrap(), eval["after"].as_f64().unwrap());
    assert!((0.2..=0.7).contains(&before), "warm start {before}");
    assert!(after >= before + 0.25, "success rate {before} → {after}: less than 25 points of improvement");
    let metrics = agent_train::metrics::MetricsLog::read(&out.join("metrics.jsonl")).unwrap();
    let per_engine = rollouts_per_engine(&metrics);
    assert!(
        per_engine.get("local").is_some_and(|n| *n > 0) && per_engine.get("dind").is_some_and(|n| *n > 0),
        "{per_engine:?}"
    );
    assert!(dind.our_containers().is_empty(), "left on the second engine: {:?}", dind.our_containers());
}

/// Trials per hour with one engine and with two (`scripts/engines-throughput.sh`; not in
/// the suite): the four fixture tasks × `ATTEMPTS` with the oracle; the local engine alone
/// with 2 and with 4 containers at once, and both engines with 2 each.
#[test]
#[ignore = "a measurement: scripts/engines-throughput.sh"]
fn throughput_with_one_and_two_engines() {
    let attempts = std::env::var("ATTEMPTS").unwrap_or_else(|_| "3".into());
    let dind = Dind::start("throughput");
    let dir = tempfile::tempdir().unwrap();
    let configs = [
        ("warm-up", two_engines_toml(&dind, 2), "4", "1"),
        ("local, 2 at once", local_engine(2), "2", attempts.as_str()),
        ("local, 4 at once", local_engine(4), "4", attempts.as_str()),
        ("local + second engine, 2 + 2", two_engines_toml(&dind, 2), "4", attempts.as_str()),
    ];
    let tasks = tasks();
    let task_refs: Vec<&Path> = tasks.iter().map(PathBuf::as_path).collect();
    // The warm-up builds the images on each engine (and copies the base to the second).
    for (i, (name, text, n, k)) in configs.iter().enumerate() {
        let cfg = dir.path().join(format!("{i}.toml"));
        std::fs::write(&cfg, text).unwrap();
        let out = dir.path().join(format!("run-{i}"));
        let started = Instant::now();
        let args = ["--agent", "oracle", "-n", n, "-k", k];
        let o =
            bench_command(&out, &run_id("throughput"), &args, &task_refs).arg("--config").arg(&cfg).output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let secs = started.elapsed().as_secs_f64();
        let r = results(&out);
        let n_trials = r["n_trials"].as_u64().unwrap();
        if i > 0 {
            println!(
                "{name}: {n_trials} trials ({} resolved) in {secs:.1} s = {:.0} trials/hour",
                r["n_resolved"],
                n_trials as f64 * 3600.0 / secs
            );
            for engine in engines_of(&r) {
                let on: Vec<&Value> =
                    r["trials"].as_array().unwrap().iter().filter(|t| t["engine"] == engine.as_str()).collect();
                let mean = |key: &str| {
                    on.iter().map(|t| t["timings"][key].as_f64().unwrap_or(0.0)).sum::<f64>() / on.len() as f64
                };
                println!(
                    "  on {engine}: {} trials, mean trial {:.1} s (environment start {:.1} s, teardown {:.1} s)",
                    on.len(),
                    mean("total_secs"),
                    mean("env_start_secs"),
                    mean("teardown_secs")
                );
            }
        }
    }
}

/// This host's address on the interface that routes off-host (no packet is sent to find
/// it); `None` on a host with loopback only.
fn outbound_address() -> Option<std::net::IpAddr> {
    let s = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    s.connect("10.1.2.3:9").ok()?;
    s.local_addr().ok().map(|a| a.ip()).filter(|ip| !ip.is_loopback() && !ip.is_unspecified())
}

/// `agent sandbox engines` under `DOCKER_HOST=host`, with no engines configured.
fn engines_under(dir: &Path, host: &str) -> (String, std::process::ExitStatus) {
    let cfg = dir.join("none.toml");
    std::fs::write(&cfg, "").unwrap();
    let o = Command::new(support::agent_bin())
        .arg("--config")
        .arg(&cfg)
        .args(["sandbox", "engines"])
        .env("DOCKER_HOST", host)
        .env_remove("DOCKER_TLS_VERIFY")
        .env_remove("DOCKER_CERT_PATH")
        .current_dir(dir)
        .output()
        .unwrap();
    (format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)), o.status)
}

#[test]
fn a_plain_remote_docker_host_is_refused_before_anything_connects_and_loopback_still_connects() {
    let dir = tempfile::tempdir().unwrap();
    // A stand-in for the remote engine on this host's own off-loopback address: if the
    // refusal were missing, the binary would connect to it.
    let listener = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let remote = outbound_address().map_or_else(|| "10.1.2.3".to_string(), |ip| ip.to_string());
    let host = format!("tcp://{remote}:{port}");
    let (out, status) = engines_under(dir.path(), &host);
    assert!(!status.success(), "{out}");
    assert!(
        out.contains(&format!("DOCKER_HOST={host} is refused"))
            && out.contains("root on its host")
            && out.contains("DOCKER_TLS_VERIFY")
            && out.contains("ssh://"),
        "{out}"
    );
    let err = listener.accept().map(|_| ()).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::WouldBlock, "the refused engine was connected to");

    // Loopback is still a plain engine's place: the binary does connect (and, the
    // connection closed at once, finds no engine there).
    let acceptor = std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if listener.accept().is_ok() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    });
    let (out, _) = engines_under(dir.path(), &format!("tcp://127.0.0.1:{port}"));
    assert!(!out.contains("is refused"), "{out}");
    assert!(acceptor.join().unwrap(), "a loopback DOCKER_HOST was not connected to: {out}");
}
