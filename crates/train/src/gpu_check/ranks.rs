//! The data-parallel check: one GRPO step taken by two ranks, as two processes on the
//! device under test, leaves the same adapters as the step taken by one rank.
//!
//! The check's program starts itself twice as workers ([`WORKER_FLAG`]) with the
//! variables torchrun sets (`RANK`, `WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT` on a free
//! loopback port). The workers meet through the trainer's rendezvous, run the step with
//! [`grpo_update`] — which gives each rank half of the mini-batch and sums the gradients
//! across ranks — and write their adapters to a file the parent reads. On CUDA the
//! gradients go through [`crate::dist::NcclWorld`] (feature `nccl-collective`), on the CPU
//! through [`TcpWorld`]. Both ranks share one GPU: NCCL refuses two ranks on one device
//! unless each believes it is on its own host, so each gets its own `NCCL_HOSTID` and
//! NCCL carries the data over its socket transport on loopback.
//!
//! Nothing may hang the parent: the rendezvous, the control plane and NCCL have their own
//! limits, and the parent kills workers that outlive the check's.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use candle_core::{DType, Device, Tensor};
use serde::{Deserialize, Serialize};

use super::{flat_adapters, lora_model, parity_adam, parity_config, parity_samples, parity_settings, rel_err};
use super::{PARITY_SEED, TOLERANCE};
use crate::dist::{rendezvous, Collective, Identity, SingleRank, TcpWorld, WorldEnv};
use crate::error::{TensorContext, TrainError};
use crate::optim::AdamW;
use crate::throughput;
use crate::update::{grpo_update, Reference};

/// The hidden flag that makes the check's program a rank worker: `--rank-worker FILE`
/// (where its adapters go) with `--rank-backend tcp|nccl` and `--device`.
pub const WORKER_FLAG: &str = "--rank-worker";
/// The flag naming the worker's collective backend.
pub const BACKEND_FLAG: &str = "--rank-backend";
/// The tolerance of the comparison on the CPU in f32 (relative); on CUDA [`TOLERANCE`].
pub const CPU_TOLERANCE: f64 = 1e-5;
/// Ranks of the check.
const RANKS: usize = 2;
/// How long the workers may take together, start-up included.
const WORKERS_LIMIT: Duration = Duration::from_secs(180);
/// How long a worker waits for the other at the rendezvous.
const RENDEZVOUS_LIMIT: Duration = Duration::from_secs(60);

/// How the ranks exchange gradients.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// [`TcpWorld`]: through host memory, on any device.
    Tcp,
    /// [`crate::dist::NcclWorld`]: NCCL on the GPU.
    Nccl,
}

impl Backend {
    /// The backends to check on `device`: TCP everywhere (the multi-process step on the
    /// device, NCCL aside), then NCCL on CUDA when the program has it.
    pub fn for_device(device: &Device) -> Vec<Backend> {
        let mut out = vec![Backend::Tcp];
        if device.is_cuda() && cfg!(feature = "nccl-collective") {
            out.push(Backend::Nccl);
        }
        out
    }

    /// The backend `name` (`tcp` or `nccl`) names.
    pub fn parse(name: &str) -> Result<Backend, TrainError> {
        match name {
            "tcp" => Ok(Backend::Tcp),
            "nccl" => Ok(Backend::Nccl),
            other => Err(TrainError::Config(format!("unknown rank backend `{other}`: use `tcp` or `nccl`"))),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Backend::Tcp => "tcp",
            Backend::Nccl => "nccl",
        }
    }
}

/// Two ranks' step against one rank's.
#[derive(Debug, Clone, Serialize)]
pub struct RankParity {
    pub device: String,
    pub backend: Backend,
    pub ranks: usize,
    /// The limit on every relative error below.
    pub tolerance: f64,
    /// Adapter values compared.
    pub adapter_values: usize,
    /// Per rank: ‖adapters(2 ranks) − adapters(1 rank)‖ / ‖adapters(1 rank)‖ after the step.
    pub adapter_rel_err: Vec<f64>,
    /// The largest |difference| of one adapter value between any rank and the single rank.
    pub max_abs_diff: f64,
    /// The largest |difference| of one adapter value between the ranks (they must agree).
    pub ranks_max_abs_diff: f64,
    /// Per rank: the step's change of the adapters against the single rank's, relative
    /// to its norm (reported, not checked: see [`super::StepParity::update_rel_err`]).
    pub update_rel_err: Vec<f64>,
    /// The step's GRPO loss with one rank, and as each rank saw it (summed over ranks).
    pub loss_single: f64,
    pub loss_ranks: Vec<f64>,
    /// Per collective and dtype, the largest error of its result over the ranks, in the
    /// workers' self-test of every tensor operation on exact small integers (must be 0).
    pub collectives_max_err: BTreeMap<String, f64>,
    /// Wall time of the two workers, start-up and rendezvous included.
    pub worker_seconds: f64,
}

impl RankParity {
    /// Whether both ranks match the single rank, and each other, within the tolerance.
    pub fn passed(&self) -> bool {
        self.adapter_rel_err.len() == self.ranks
            && self.adapter_rel_err.iter().all(|e| *e <= self.tolerance)
            && self.ranks_max_abs_diff <= self.tolerance
            && self.loss_ranks.iter().all(|l| (l - self.loss_single).abs() <= self.tolerance)
            && self.collectives_max_err.len() == 8
            && self.collectives_max_err.values().all(|e| *e == 0.0)
    }
}

/// What a worker writes for the parent.
#[derive(Debug, Serialize, Deserialize)]
struct WorkerOutcome {
    rank: usize,
    loss: f64,
    adapters: Vec<f64>,
    /// Per collective and dtype (`all_reduce_sum/bf16`, …): the largest error of its result.
    collectives: BTreeMap<String, f64>,
}

/// The parity step's model, samples and settings, stepped once with `world`: the GRPO
/// loss and the adapters after the step (and before it).
fn step_with(device: &Device, world: &dyn Collective) -> Result<(f64, Vec<f64>, Vec<f64>), TrainError> {
    let cfg = parity_config();
    let weights = throughput::random_weights(&cfg, 7)?;
    let model = lora_model(&cfg, &weights, device, DType::F32)?;
    let samples = parity_samples(cfg.vocab_size);
    let before = flat_adapters(&model)?;
    let mut opt = AdamW::new(model.trainable(), parity_adam())?;
    let stats =
        grpo_update(&model, Reference::AdaptersOff, &mut opt, &samples, world, &parity_settings(), PARITY_SEED)?;
    Ok((stats.loss, before, flat_adapters(&model)?))
}

/// Runs the check with `backend`, with `program` (the check's own binary, which knows
/// [`WORKER_FLAG`]) as the workers.
pub fn rank_parity(device: &Device, backend: Backend, program: &Path) -> Result<RankParity, TrainError> {
    let (loss_single, before, single) = step_with(device, &SingleRank)?;
    let dir = tempfile::tempdir().map_err(|e| TrainError::Other(format!("cannot make a folder for the ranks: {e}")))?;
    let port = free_port()?;
    let started = Instant::now();
    let mut workers = Vec::new();
    for rank in 0..RANKS {
        match spawn_worker(program, device, backend, rank, port, dir.path()) {
            Ok(w) => workers.push(w),
            Err(e) => {
                stop_all(&mut workers);
                return Err(e);
            }
        }
    }
    let failures = wait_all(&mut workers, WORKERS_LIMIT);
    let worker_seconds = started.elapsed().as_secs_f64();
    if !failures.is_empty() {
        return Err(TrainError::Distributed(failures.join("; ")));
    }
    let mut outcomes = Vec::new();
    for w in &workers {
        let text = std::fs::read(&w.out).map_err(|e| TrainError::io("read", &w.out, e))?;
        let o: WorkerOutcome = serde_json::from_slice(&text)
            .map_err(|e| TrainError::Other(format!("rank {} wrote an unreadable outcome: {e}", w.rank)))?;
        if o.rank != w.rank || o.adapters.len() != single.len() {
            return Err(TrainError::Other(format!(
                "rank {} wrote {} adapter values as rank {} (expected {})",
                w.rank,
                o.adapters.len(),
                o.rank,
                single.len()
            )));
        }
        outcomes.push(o);
    }
    let max_diff = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max);
    let delta = |after: &[f64]| -> Vec<f64> { after.iter().zip(&before).map(|(a, b)| a - b).collect() };
    let single_delta = delta(&single);
    let mut collectives_max_err = BTreeMap::new();
    for (k, v) in outcomes.iter().flat_map(|o| &o.collectives) {
        let worst = collectives_max_err.entry(k.clone()).or_insert(0.0f64);
        *worst = worst.max(*v);
    }
    Ok(RankParity {
        device: throughput::device_name(device),
        backend,
        ranks: RANKS,
        tolerance: if device.is_cpu() { CPU_TOLERANCE } else { TOLERANCE },
        adapter_values: single.len(),
        adapter_rel_err: outcomes.iter().map(|o| rel_err(&o.adapters, &single)).collect(),
        max_abs_diff: outcomes.iter().map(|o| max_diff(&o.adapters, &single)).fold(0.0, f64::max),
        ranks_max_abs_diff: outcomes.windows(2).map(|p| max_diff(&p[0].adapters, &p[1].adapters)).fold(0.0, f64::max),
        update_rel_err: outcomes.iter().map(|o| rel_err(&delta(&o.adapters), &single_delta)).collect(),
        loss_single,
        loss_ranks: outcomes.iter().map(|o| o.loss).collect(),
        collectives_max_err,
        worker_seconds,
    })
}

/// The worker's side (the program run with [`WORKER_FLAG`]): joins the world the
/// environment describes, takes the step with `backend` and writes its adapters to `out`.
pub fn rank_worker(device: &Device, backend: Backend, out: &Path) -> Result<(), TrainError> {
    let env = WorldEnv::from_env()?
        .ok_or_else(|| TrainError::Config("a rank worker needs RANK and WORLD_SIZE in its environment".into()))?;
    // Every worker is the same program with the same step: fixed strings stand for the
    // binary's and preset's hashes.
    let identity = Identity {
        binary: "agent-gpu-check".into(),
        preset: "two-rank GRPO step".into(),
        seed: PARITY_SEED,
        out: String::new(),
    };
    let control = rendezvous(&env, &identity, RENDEZVOUS_LIMIT)?;
    let rank = control.rank();
    let outcome = match backend {
        Backend::Tcp => work(device, &control)?,
        Backend::Nccl => nccl_work(device, control)?,
    };
    if outcome.rank != rank {
        return Err(TrainError::Distributed(format!("rank {rank} came back as rank {}", outcome.rank)));
    }
    let text =
        serde_json::to_vec(&outcome).map_err(|e| TrainError::Other(format!("cannot encode the outcome: {e}")))?;
    // Written whole, then renamed: the parent never reads half a file.
    let partial = out.with_extension("partial");
    std::fs::write(&partial, text).map_err(|e| TrainError::io("write", &partial, e))?;
    std::fs::rename(&partial, out).map_err(|e| TrainError::io("rename", &partial, e))
}

/// The step and the collectives' self-test with `world`, then the world's orderly end; a
/// failure ends the world for the other rank at once (it would otherwise wait in a
/// collective until a time limit).
fn work(device: &Device, world: &dyn Collective) -> Result<WorkerOutcome, TrainError> {
    let run = || -> Result<WorkerOutcome, TrainError> {
        let (loss, _, adapters) = step_with(device, world)?;
        let collectives = collectives_self_test(device, world)?;
        Ok(WorkerOutcome { rank: world.rank(), loss, adapters, collectives })
    };
    let outcome = run().inspect_err(|e| world.fail(&format!("rank {} failed: {e}", world.rank())))?;
    world.finish()?;
    Ok(outcome)
}

#[cfg(feature = "nccl-collective")]
fn nccl_work(device: &Device, control: TcpWorld) -> Result<WorkerOutcome, TrainError> {
    let world = crate::dist::NcclWorld::new(control, device)?;
    work(device, &world)
}

#[cfg(not(feature = "nccl-collective"))]
fn nccl_work(_device: &Device, control: TcpWorld) -> Result<WorkerOutcome, TrainError> {
    let why = "this program was built without NCCL (feature nccl-collective)";
    control.fail(why);
    Err(TrainError::Config(why.into()))
}

/// Every tensor operation of [`Collective`] in f32 and bf16 on `device` (the step uses only
/// the all-reduce): rank r holds `(r+1)·(i+1)`, small integers every dtype holds exactly,
/// so each result must be exact. The largest error per operation and dtype.
fn collectives_self_test(device: &Device, world: &dyn Collective) -> Result<BTreeMap<String, f64>, TrainError> {
    const N: usize = 16;
    let (rank, size) = (world.rank(), world.world_size());
    let of_rank = |r: usize| -> Vec<f32> { (0..N).map(|i| ((r + 1) * (i + 1)) as f32).collect() };
    let sum: Vec<f32> = (0..N).map(|i| (0..size).map(|r| of_rank(r)[i]).sum()).collect();
    let chunk = N / size;
    let root = size - 1;
    let expected = [
        ("all_reduce_sum", sum.clone()),
        ("reduce_scatter_sum", sum[rank * chunk..(rank + 1) * chunk].to_vec()),
        ("all_gather", (0..size).flat_map(of_rank).collect()),
        ("broadcast", of_rank(root)),
    ];
    let mut out = BTreeMap::new();
    for dtype in [DType::F32, DType::BF16] {
        let mine =
            Tensor::from_vec(of_rank(rank), N, device).and_then(|t| t.to_dtype(dtype)).ctx("a self-test tensor")?;
        for (op, want) in &expected {
            let got = match *op {
                "all_reduce_sum" => world.all_reduce_sum(&mine)?,
                "reduce_scatter_sum" => world.reduce_scatter_sum(&mine)?,
                "all_gather" => world.all_gather(&mine)?,
                _ => world.broadcast(&mine, root)?,
            };
            let got = got
                .to_dtype(DType::F32)
                .and_then(|t| t.flatten_all())
                .and_then(|t| t.to_vec1::<f32>())
                .ctx("reading a self-test result")?;
            let err = if got.len() == want.len() {
                got.iter().zip(want).map(|(a, b)| f64::from((a - b).abs())).fold(0.0, f64::max)
            } else {
                f64::INFINITY
            };
            out.insert(format!("{op}/{}", format!("{dtype:?}").to_lowercase()), err);
        }
    }
    Ok(out)
}

/// A started worker.
struct Worker {
    rank: usize,
    child: Option<Child>,
    out: PathBuf,
    log: PathBuf,
}

fn spawn_worker(
    program: &Path,
    device: &Device,
    backend: Backend,
    rank: usize,
    port: u16,
    dir: &Path,
) -> Result<Worker, TrainError> {
    let out = dir.join(format!("rank{rank}.json"));
    let log = dir.join(format!("rank{rank}.log"));
    let log_file = std::fs::File::create(&log).map_err(|e| TrainError::io("create", &log, e))?;
    let log_err = log_file.try_clone().map_err(|e| TrainError::io("open", &log, e))?;
    let env = WorldEnv {
        rank,
        world_size: RANKS,
        local_rank: Some(rank),
        local_world_size: Some(RANKS),
        master_addr: "127.0.0.1".into(),
        master_port: port,
    };
    let mut cmd = Command::new(program);
    cmd.arg(WORKER_FLAG)
        .arg(&out)
        .arg(BACKEND_FLAG)
        .arg(backend.name())
        .arg("--device")
        .arg(throughput::device_name(device))
        .envs(env.vars())
        // A dead peer is noticed in seconds, a stuck collective within the check's limit.
        .env("AGENT_DIST_TIMEOUT_SECS", "20")
        .env("AGENT_NCCL_TIMEOUT_SECS", (WORKERS_LIMIT.as_secs() - 30).to_string())
        .stdin(Stdio::null())
        .stdout(log_file)
        .stderr(log_err);
    if backend == Backend::Nccl {
        // Two ranks on one GPU: each claims a host of its own (NCCL refuses duplicate GPUs
        // within a host), which leaves NCCL its socket transport, here on loopback.
        let defaults = [
            ("NCCL_HOSTID", format!("agent-gpu-check-rank{rank}")),
            ("NCCL_SOCKET_IFNAME", "lo".to_string()),
            ("NCCL_IB_DISABLE", "1".to_string()),
            ("NCCL_DEBUG", "WARN".to_string()),
        ];
        for (k, v) in defaults {
            if std::env::var_os(k).is_none() {
                cmd.env(k, v);
            }
        }
    }
    let child =
        cmd.spawn().map_err(|e| TrainError::Other(format!("cannot start rank {rank} ({}): {e}", program.display())))?;
    Ok(Worker { rank, child: Some(child), out, log })
}

/// Waits for every worker until `limit`, then kills those left; what went wrong, in words.
fn wait_all(workers: &mut [Worker], limit: Duration) -> Vec<String> {
    let deadline = Instant::now() + limit;
    let mut failures = Vec::new();
    loop {
        let mut running = false;
        for w in workers.iter_mut() {
            let Some(child) = w.child.as_mut() else { continue };
            match child.try_wait() {
                Ok(Some(status)) => {
                    w.child = None;
                    if !status.success() {
                        failures.push(format!("rank {} exited with {status}: {}", w.rank, log_tail(&w.log)));
                    }
                }
                Ok(None) => running = true,
                Err(e) => {
                    failures.push(format!("rank {}: cannot wait for it: {e}", w.rank));
                    stop(w);
                }
            }
        }
        if !running {
            return failures;
        }
        if Instant::now() > deadline {
            for w in workers.iter_mut().filter(|w| w.child.is_some()) {
                stop(w);
                failures.push(format!(
                    "rank {} did not finish within {} s and was killed: {}",
                    w.rank,
                    limit.as_secs(),
                    log_tail(&w.log)
                ));
            }
            return failures;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn stop(w: &mut Worker) {
    if let Some(mut child) = w.child.take() {
        let _ = child.kill();
        let _ = child.wait();
    }
}

fn stop_all(workers: &mut [Worker]) {
    workers.iter_mut().for_each(stop);
}

/// The end of a worker's log, for the report.
fn log_tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let tail = lines[lines.len().saturating_sub(12)..].join(" | ");
    if tail.is_empty() {
        "no output".into()
    } else {
        tail
    }
}

/// A loopback port free now (the rendezvous binds it a moment later; a race with another
/// program is possible but unlikely, and fails the check loudly, not silently).
fn free_port() -> Result<u16, TrainError> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| TrainError::Distributed(format!("no free loopback port for the ranks: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dist::LocalWorld;

    /// The comparison the processes make, with the ranks as threads: two ranks' step is
    /// the single rank's step on the CPU in f32.
    #[test]
    fn two_ranks_in_threads_step_like_one() {
        let (loss, _, single) = step_with(&Device::Cpu, &SingleRank).unwrap();
        let handles: Vec<_> = LocalWorld::new(2)
            .into_iter()
            .map(|w| std::thread::spawn(move || step_with(&Device::Cpu, &w).unwrap()))
            .collect();
        for h in handles {
            let (l, _, adapters) = h.join().unwrap();
            assert!(rel_err(&adapters, &single) <= CPU_TOLERANCE, "{}", rel_err(&adapters, &single));
            assert!((l - loss).abs() <= CPU_TOLERANCE, "{l} vs {loss}");
        }
    }

    #[test]
    fn the_collectives_self_test_is_exact_on_the_host_path() {
        let handles: Vec<_> = LocalWorld::new(2)
            .into_iter()
            .map(|w| std::thread::spawn(move || collectives_self_test(&Device::Cpu, &w).unwrap()))
            .collect();
        for h in handles {
            let errs = h.join().unwrap();
            assert_eq!(errs.len(), 8, "{errs:?}");
            assert!(errs.values().all(|e| *e == 0.0), "{errs:?}");
        }
    }

    #[test]
    fn failed_or_stuck_workers_end_the_check_with_their_reason() {
        let err = rank_parity(&Device::Cpu, Backend::Tcp, Path::new("/bin/false")).unwrap_err().to_string();
        assert!(err.contains("rank 0 exited") && err.contains("rank 1 exited"), "{err}");
        let dir = tempfile::tempdir().unwrap();
        let child = Command::new("sleep").arg("30").spawn().unwrap();
        let log = dir.path().join("stuck.log");
        std::fs::write(&log, "waiting for rank 0\n").unwrap();
        let mut workers = [Worker { rank: 1, child: Some(child), out: dir.path().join("out"), log }];
        let started = Instant::now();
        let failures = wait_all(&mut workers, Duration::from_millis(300));
        assert!(started.elapsed() < Duration::from_secs(5));
        assert_eq!(failures.len(), 1);
        assert!(failures[0].contains("killed") && failures[0].contains("waiting for rank 0"), "{failures:?}");
        assert!(workers[0].child.is_none());
    }

    #[test]
    fn backends_parse_by_name_and_follow_the_device() {
        assert_eq!(Backend::parse("tcp").unwrap(), Backend::Tcp);
        assert_eq!(Backend::parse("nccl").unwrap(), Backend::Nccl);
        assert!(Backend::parse("gloo").is_err());
        assert_eq!(Backend::for_device(&Device::Cpu), vec![Backend::Tcp]);
    }
}
