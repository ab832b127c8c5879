//! `agent train` over several processes: the launcher, workers started by hand with
//! torchrun's variables, the rendezvous's checks, and a worker killed mid-run.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use agent_train::metrics::{MetricsLog, StepMetrics};

use crate::support;
use crate::train::{eval_json, resume_preset, train_cmd, uninterrupted_run};

/// Two runs' metrics agree step for step: counts exactly, measurements within 1e-6
/// (relative above 1); the wall-clock fields are left out.
fn assert_same_metrics(got: &[StepMetrics], want: &[StepMetrics]) {
    assert_close_metrics(got, want, 1e-6)
}

/// [`assert_same_metrics`] within `tol`.
fn assert_close_metrics(got: &[StepMetrics], want: &[StepMetrics], tol: f64) {
    assert_eq!(got.len(), want.len(), "steps: {got:?} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        let g = serde_json::to_value(g.without_clock()).unwrap();
        let w = serde_json::to_value(w.without_clock()).unwrap();
        for (key, wv) in w.as_object().unwrap() {
            let gv = &g[key];
            match (gv.as_f64(), wv.as_f64()) {
                (Some(a), Some(b)) => {
                    let tol = tol * b.abs().max(1.0);
                    assert!((a - b).abs() <= tol, "step {}: {key} {a} vs {b} (one process)", w["step"]);
                }
                _ => assert_eq!(gv, wv, "step {}: {key}", w["step"]),
            }
        }
    }
}

fn metrics(out: &Path) -> Vec<StepMetrics> {
    MetricsLog::read(&out.join("metrics.jsonl")).unwrap()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Worker processes of the launcher `parent`, by rank.
fn workers_of(parent: u32) -> Vec<(usize, u32)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        let ppid =
            stat.rsplit(')').next().and_then(|s| s.split_whitespace().nth(1)).and_then(|p| p.parse::<u32>().ok());
        if ppid != Some(parent) {
            continue;
        }
        let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        let rank = env
            .split(|b| *b == 0)
            .filter_map(|kv| std::str::from_utf8(kv).ok())
            .find_map(|kv| kv.strip_prefix("RANK=").and_then(|r| r.parse::<usize>().ok()));
        if let Some(rank) = rank {
            out.push((rank, pid));
        }
    }
    out.sort();
    out
}

/// Acceptance: two processes on the CPU give the metrics of one process, step for step,
/// and the same evaluation; only rank 0 writes the run's files.
#[tokio::test(flavor = "multi_thread")]
async fn two_processes_give_the_metrics_of_one() {
    support::docker().await;
    let want = uninterrupted_run();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let o = train_cmd(&resume_preset(), &out).args(["--nproc-per-node", "2"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "2-process run failed: {stderr}");
    assert!(stderr.contains("starting 2 worker(s) of 2"), "{stderr}");
    assert_same_metrics(&metrics(&out), &metrics(want));
    assert!(metrics(want).iter().any(|m| m.grad_norm > 0.0), "no update happened");
    assert_eq!(eval_json(&out), eval_json(want));
    assert!(out.join("adapter/adapter_model.safetensors").is_file());
    // Rank 0 reports; the step lines appear once.
    assert_eq!(stderr.matches("step 1/4").count(), 1, "{stderr}");
}

/// Workers started by hand with torchrun's variables (as torchrun, SLURM or a
/// Kubernetes operator start them) form the same world.
#[tokio::test(flavor = "multi_thread")]
async fn workers_started_with_torchrun_variables_train_the_same() {
    support::docker().await;
    let want = uninterrupted_run();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let port = free_port().to_string();
    let spawn = |rank: &str| {
        let mut c = train_cmd(&resume_preset(), &out);
        c.args(["--steps", "2"])
            .envs([("RANK", rank), ("WORLD_SIZE", "2"), ("LOCAL_RANK", rank), ("MASTER_ADDR", "127.0.0.1")])
            .env("MASTER_PORT", &port)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c.spawn().unwrap()
    };
    // Rank 1 first: it waits for rank 0's rendezvous.
    let one = spawn("1");
    std::thread::sleep(Duration::from_secs(1));
    let zero = spawn("0");
    let (o0, o1) = (zero.wait_with_output().unwrap(), one.wait_with_output().unwrap());
    let e0 = String::from_utf8_lossy(&o0.stderr);
    assert!(o0.status.success(), "rank 0 failed: {e0}");
    assert!(o1.status.success(), "rank 1 failed: {}", String::from_utf8_lossy(&o1.stderr));
    assert_same_metrics(&metrics(&out), &metrics(want)[..2]);
}

/// The rendezvous refuses ranks that disagree, on every rank, with one message.
#[test]
fn ranks_with_different_seeds_are_refused_by_the_rendezvous() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port().to_string();
    let spawn = |rank: &str, seed: &str| {
        let mut c = train_cmd(&resume_preset(), &dir.path().join("run"));
        c.args(["--seed", seed])
            .envs([("RANK", rank), ("WORLD_SIZE", "2"), ("MASTER_ADDR", "127.0.0.1")])
            .env("MASTER_PORT", &port)
            .env("AGENT_RENDEZVOUS_TIMEOUT_SECS", "60")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        c.spawn().unwrap()
    };
    let (a, b) = (spawn("0", "3"), spawn("1", "5"));
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    let (ea, eb) = (String::from_utf8_lossy(&a.stderr), String::from_utf8_lossy(&b.stderr));
    assert!(!a.status.success() && !b.status.success());
    assert!(ea.contains("rank 1 has seed 5 (rank 0 has 3)"), "{ea}");
    assert_eq!(ea.trim(), eb.trim(), "the ranks' messages differ");
}

/// Ranks that would each name their own output folder are refused before anything starts:
/// a rank started by torchrun or SLURM, or a launcher for several hosts, needs `--out`.
#[test]
fn ranks_without_a_shared_out_folder_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut as_rank = Command::new(support::agent_bin());
    as_rank
        .args(["train", "--no-progress", "--preset"])
        .arg(resume_preset())
        .envs([("RANK", "1"), ("WORLD_SIZE", "2"), ("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "1")])
        .current_dir(dir.path());
    let mut multi_node = Command::new(support::agent_bin());
    multi_node
        .args(["train", "--no-progress", "--nproc-per-node", "1", "--nnodes", "2", "--node-rank", "1"])
        .args(["--master-addr", "127.0.0.1", "--preset"])
        .arg(resume_preset())
        .current_dir(dir.path());
    for mut cmd in [as_rank, multi_node] {
        let o = cmd.output().unwrap();
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success());
        assert!(stderr.contains("pass --out DIR (the same on every rank)"), "{stderr}");
    }
    assert!(!dir.path().join("runs").exists(), "nothing was written");
}

/// Acceptance: a worker killed with SIGKILL mid-run ends the run on every rank within
/// 60 s with an error naming it, no container is left, and `--resume` continues exactly.
#[tokio::test(flavor = "multi_thread")]
async fn a_killed_worker_ends_the_run_and_resume_continues_exactly() {
    support::docker().await;
    let want = uninterrupted_run();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let launcher =
        train_cmd(&resume_preset(), &out).args(["--nproc-per-node", "2"]).stderr(Stdio::piped()).spawn().unwrap();
    let parent = launcher.id();
    let deadline = Instant::now() + Duration::from_secs(900);
    // Mid-step: after the checkpoint of step 1, once rank 1 runs rollout containers.
    let (victim, other) = loop {
        assert!(Instant::now() < deadline, "the run never reached step 2's rollouts");
        let workers = workers_of(parent);
        if out.join("checkpoints/step-000001/COMPLETE").is_file() && workers.len() == 2 {
            let (v, o) = (workers[1].1, workers[0].1);
            if !support::containers_of_pid(v).is_empty() {
                break (v, o);
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let killed = Instant::now();
    assert!(Command::new("kill").args(["-KILL", &victim.to_string()]).status().unwrap().success());
    let o = launcher.wait_with_output().unwrap();
    let took = killed.elapsed();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "the run went on without rank 1: {stderr}");
    assert!(took < Duration::from_secs(60), "the run took {took:?} to stop");
    assert!(stderr.contains(&format!("rank 1 (pid {victim}) was killed by signal 9")), "{stderr}");
    assert!(stderr.contains("rank 1") && stderr.contains("died"), "rank 0 did not name the dead rank: {stderr}");
    for pid in [victim, other, parent] {
        assert_eq!(support::containers_of_pid(pid), Vec::<String>::new(), "containers of pid {pid} left behind");
    }
    let o = train_cmd(&resume_preset(), &out).args(["--nproc-per-node", "2", "--resume"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "resumed run failed: {stderr}");
    assert!(stderr.contains("resuming after step"), "{stderr}");
    assert_same_metrics(&metrics(&out), &metrics(want));
    assert_eq!(eval_json(&out), eval_json(want));
}

/// Acceptance (parameter sharding): full updates with ZeRO-3 over 2 and 4 processes train
/// as one process with a replicated optimiser does: the same metrics step for step (the
/// sums are taken in another order: within 1e-4), the same evaluations, the same final
/// weights (within 1e-5), a checkpoint after every step.
#[tokio::test(flavor = "multi_thread")]
async fn zero3_over_2_and_4_processes_trains_as_one_replicated_process() {
    support::docker().await;
    let fixture = support::fixture("train/zero3.yaml").display().to_string();
    let dir = tempfile::tempdir().unwrap();
    let one = dir.path().join("one");
    let o = train_cmd(&fixture, &one).args(["--zero", "0"]).output().unwrap();
    assert!(o.status.success(), "1-process run failed: {}", String::from_utf8_lossy(&o.stderr));
    assert!(metrics(&one).iter().any(|m| m.grad_norm > 0.0), "no update happened");
    let weights = |out: &Path| {
        candle_core::safetensors::load(out.join("model/model.safetensors"), &candle_core::Device::Cpu).unwrap()
    };
    let want = weights(&one);
    for n in ["2", "4"] {
        let out = dir.path().join(format!("zero3-{n}"));
        let o = train_cmd(&fixture, &out).args(["--nproc-per-node", n]).output().unwrap();
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{n}-process ZeRO-3 run failed: {stderr}");
        // A sharded run computes no shared prompt once per mini-batch: those counts differ.
        let unshared = |m: Vec<StepMetrics>| -> Vec<StepMetrics> {
            m.into_iter().map(|m| StepMetrics { shared_tokens: 0, ..m }).collect()
        };
        assert_close_metrics(&unshared(metrics(&out)), &unshared(metrics(&one)), 1e-4);
        assert!(metrics(&out).iter().all(|m| m.shared_tokens == 0));
        assert_eq!(eval_json(&out), eval_json(&one), "{n} processes");
        let got = weights(&out);
        assert_eq!(got.len(), want.len());
        for (name, w) in &want {
            let d = (got[name].clone() - w).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
            assert!(d < 1e-5, "{n} processes: {name} differs by {d}");
        }
        let shards = std::fs::read_dir(out.join("checkpoints")).unwrap().flatten().count();
        assert!(shards > 0, "no checkpoint");
    }
}
