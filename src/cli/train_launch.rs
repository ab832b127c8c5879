//! `agent train --nproc-per-node N`: starts one worker process per GPU (or CPU share) on
//! this host with the variables torchrun sets, forwards signals to them, and makes sure
//! that when one fails the others end too (they stop on their own when a rank dies; a
//! worker still running a minute later is killed), then removes what they left.

use std::ffi::OsString;
use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use tokio::process::{Child, Command};

use agent_train::dist::{DistToken, WorldEnv, TOKEN_ENV};

use super::signals::Signals;

/// How long ranks wait for each other at the rendezvous.
pub const RENDEZVOUS_TIMEOUT: Duration = Duration::from_secs(300);
/// How long the other workers get to end on their own after one failed.
const GRACE: Duration = Duration::from_secs(60);

/// Launcher options of `agent train` (torchrun's names).
#[derive(Debug, Clone, Args)]
pub struct LaunchArgs {
    /// Start this many worker processes on this host, one per GPU (CUDA presets) or
    /// sharing the CPU; each gets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT.
    #[arg(long, value_name = "N", value_parser = at_least_one)]
    pub nproc_per_node: Option<usize>,
    /// Hosts taking part (each runs the same command with its own --node-rank).
    #[arg(long, default_value_t = 1, requires = "nproc_per_node", value_parser = at_least_one)]
    pub nnodes: usize,
    /// This host's index among the --nnodes hosts (0 hosts the rendezvous).
    #[arg(long, default_value_t = 0, requires = "nproc_per_node")]
    pub node_rank: usize,
    /// Address of host 0, where the rendezvous listens.
    #[arg(long, default_value = "127.0.0.1", requires = "nproc_per_node")]
    pub master_addr: String,
    /// Port of the rendezvous (default: a free one for a single host, 29500 across hosts).
    #[arg(long, requires = "nproc_per_node")]
    pub master_port: Option<u16>,
    /// The secret every rank proves at the rendezvous (the same on every host; default:
    /// the AGENT_DIST_TOKEN variable, else a fresh one for a one-host run). Needed across
    /// hosts: the rendezvous then listens on every interface.
    #[arg(long, value_name = "SECRET", requires = "nproc_per_node")]
    pub dist_token: Option<String>,
}

/// The flags only the launcher reads, which its workers must not see.
const LAUNCHER_FLAGS: [&str; 6] =
    ["--nproc-per-node", "--nnodes", "--node-rank", "--master-addr", "--master-port", "--dist-token"];

/// Starts the workers and waits for them; returns the run's exit code.
pub async fn launch(
    args: &LaunchArgs,
    nproc: usize,
    out: &Path,
    pool: &agent_sandbox::EnginePool,
) -> anyhow::Result<u8> {
    if args.node_rank >= args.nnodes {
        anyhow::bail!("--node-rank {} is not below --nnodes {}", args.node_rank, args.nnodes);
    }
    let port = match args.master_port {
        Some(p) => p,
        None if args.nnodes == 1 => free_port()?,
        None => agent_train::dist::DEFAULT_MASTER_PORT,
    };
    // The workers read it from the environment, never their command line (which `ps` shows).
    let token = match args.dist_token.clone().or_else(|| std::env::var(TOKEN_ENV).ok()).filter(|t| !t.is_empty()) {
        Some(t) => t,
        None if args.nnodes == 1 => DistToken::generate(),
        None => anyhow::bail!(
            "a run across {} hosts needs a shared secret for its rendezvous, which listens on every interface: \
             pass --dist-token SECRET (or set {TOKEN_ENV}) with the same value on every host",
            args.nnodes
        ),
    };
    let exe = std::env::current_exe().context("finding this program to start the workers")?;
    let mut worker_args = worker_args(std::env::args_os().skip(1).collect());
    // Every worker writes into the same run folder, even when the launcher chose its name.
    if !worker_args.iter().any(|a| a == "--out" || a.to_string_lossy().starts_with("--out=")) {
        worker_args.push("--out".into());
        worker_args.push(out.as_os_str().to_owned());
    }
    let world = nproc * args.nnodes;
    // Workers share this host's cores (as torchrun sets OMP_NUM_THREADS): candle's CPU
    // kernels size their thread pools from RAYON_NUM_THREADS.
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads = (cores / nproc).max(1).to_string();
    let thread_vars: Vec<(&str, &str)> = ["RAYON_NUM_THREADS", "OMP_NUM_THREADS"]
        .into_iter()
        .filter(|v| std::env::var_os(v).is_none())
        .map(|v| (v, threads.as_str()))
        .collect();
    eprintln!("● starting {nproc} worker(s) of {world} (rendezvous on {}:{port})", args.master_addr);
    let mut signals = Signals::install()?;
    let mut workers = Vec::new();
    for local in 0..nproc {
        let place = WorldEnv {
            rank: args.node_rank * nproc + local,
            world_size: world,
            local_rank: Some(local),
            local_world_size: Some(nproc),
            master_addr: args.master_addr.clone(),
            master_port: port,
        };
        let mut cmd = Command::new(&exe);
        cmd.args(&worker_args)
            .envs(place.vars())
            .env(TOKEN_ENV, &token)
            .envs(thread_vars.iter().copied())
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true);
        die_with_parent(&mut cmd);
        let child = cmd.spawn().with_context(|| format!("starting worker {}", place.rank))?;
        workers.push(Worker { rank: place.rank, pid: child.id().unwrap_or(0), child: Some(child), status: None });
    }
    let code = supervise(&mut workers, &mut signals).await;
    // Every worker is gone: whatever containers they owned are orphans now.
    for engine in pool.engines() {
        sweep_until_settled(&engine).await;
    }
    if code != 0 {
        for w in &workers {
            if let Some(why) = w.describe_failure() {
                eprintln!("✗ {why}");
            }
        }
        eprintln!(
            "✗ the run stopped; `agent train --resume --out {}` (same launch flags) continues from the last checkpoint",
            out.display()
        );
    }
    Ok(code)
}

struct Worker {
    rank: usize,
    pid: u32,
    child: Option<Child>,
    status: Option<std::process::ExitStatus>,
}

impl Worker {
    fn describe_failure(&self) -> Option<String> {
        use std::os::unix::process::ExitStatusExt;
        let s = self.status?;
        if s.success() {
            return None;
        }
        Some(match (s.code(), s.signal()) {
            (_, Some(sig)) => format!("worker rank {} (pid {}) was killed by signal {sig}", self.rank, self.pid),
            (Some(c), _) => format!("worker rank {} (pid {}) exited with code {c}", self.rank, self.pid),
            _ => format!("worker rank {} (pid {}) failed", self.rank, self.pid),
        })
    }
}

/// Waits for every worker; after the first failure (or a signal, which is forwarded)
/// the rest get [`GRACE`] to end on their own, then are killed.
async fn supervise(workers: &mut [Worker], signals: &mut Signals) -> u8 {
    enum Event {
        Exited(usize, Option<std::process::ExitStatus>),
        GraceOver,
        Signal(i32),
    }
    let mut code: Option<u8> = None;
    let mut deadline: Option<tokio::time::Instant> = None;
    while workers.iter().any(|w| w.child.is_some()) {
        let event = {
            let waits = futures_util::future::select_all(workers.iter_mut().filter_map(|w| {
                let rank = w.rank;
                w.child.as_mut().map(|c| Box::pin(async move { (rank, c.wait().await.ok()) }))
            }));
            let grace = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                ((rank, status), _, _) = waits => Event::Exited(rank, status),
                () = grace => Event::GraceOver,
                sig = signals.recv() => Event::Signal(sig),
            }
        };
        match event {
            Event::Exited(rank, status) => {
                let Some(w) = workers.iter_mut().find(|w| w.rank == rank) else { continue };
                w.child = None;
                w.status = status;
                if !status.is_some_and(|s| s.success()) && code.is_none() {
                    code = Some(exit_code(status));
                    deadline = Some(tokio::time::Instant::now() + GRACE);
                }
            }
            Event::GraceOver => {
                for w in workers.iter_mut() {
                    if let Some(c) = w.child.as_mut() {
                        eprintln!(
                            "✗ worker rank {} (pid {}) did not stop {} s after the run failed: killing it",
                            w.rank,
                            w.pid,
                            GRACE.as_secs()
                        );
                        let _ = c.start_kill();
                    }
                }
                deadline = None;
            }
            Event::Signal(sig) => {
                for w in workers.iter().filter(|w| w.child.is_some()) {
                    send_signal(w.pid, sig);
                }
                code.get_or_insert(Signals::exit_code(sig));
                deadline.get_or_insert(tokio::time::Instant::now() + GRACE);
            }
        }
    }
    code.unwrap_or(0)
}

fn exit_code(status: Option<std::process::ExitStatus>) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match status {
        Some(s) => match (s.code(), s.signal()) {
            (Some(c), _) => c.clamp(1, 255) as u8,
            (_, Some(sig)) => Signals::exit_code(sig),
            _ => 1,
        },
        None => 1,
    }
}

fn send_signal(pid: u32, sig: i32) {
    let Ok(pid) = libc::pid_t::try_from(pid) else { return };
    // SAFETY: kill(2) takes plain integers and touches no memory of ours; the pid is a
    // child we started and have not reaped yet (its entry exists), so it names that child.
    unsafe {
        libc::kill(pid, sig);
    }
}

/// Workers get SIGTERM when the launcher dies (even by SIGKILL), so none outlives it.
fn die_with_parent(cmd: &mut Command) {
    // SAFETY: the closure runs in the forked child before exec; prctl(2) is
    // async-signal-safe, allocates nothing and only changes the calling process.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            Ok(())
        });
    }
}

/// The command line without the launcher's own flags (both `--flag value` and `--flag=value`).
fn worker_args(args: Vec<OsString>) -> Vec<OsString> {
    let mut out = Vec::new();
    let mut skip_value = false;
    for a in args {
        if skip_value {
            skip_value = false;
            continue;
        }
        let s = a.to_string_lossy();
        if LAUNCHER_FLAGS.contains(&s.as_ref()) {
            skip_value = true;
            continue;
        }
        if LAUNCHER_FLAGS.iter().any(|f| s.starts_with(&format!("{f}="))) {
            continue;
        }
        out.push(a);
    }
    out
}

fn at_least_one(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("`{s}` is not a whole number of at least 1")),
    }
}

fn free_port() -> anyhow::Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").context("finding a free port for the rendezvous")?;
    Ok(l.local_addr()?.port())
}

/// Removes the workers' orphaned containers, networks and volumes. A worker killed while
/// it asked the engine for a container can see that container created after its death,
/// so the sweep goes on until three passes in a row (1.5 s) find nothing.
async fn sweep_until_settled(docker: &agent_sandbox::Engine) {
    let mut removed = 0;
    let mut quiet = 0;
    for _ in 0..20 {
        let found = agent_sandbox::prune(docker, agent_sandbox::PruneScope::Orphaned).await.map_or(0, |r| r.len());
        removed += found;
        quiet = if found == 0 { quiet + 1 } else { 0 };
        if quiet >= 3 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    if removed > 0 {
        eprintln!("● removed {removed} container(s), network(s) and volume(s) the workers left");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workers_do_not_get_the_launcher_flags() {
        let args: Vec<OsString> = [
            "train",
            "--nproc-per-node",
            "2",
            "--preset",
            "cpu-tiny",
            "--master-port=29400",
            "--nnodes",
            "1",
            "--dist-token",
            "s3cret",
            "--out",
            "x",
        ]
        .iter()
        .map(OsString::from)
        .collect();
        let got: Vec<String> = worker_args(args).iter().map(|a| a.to_string_lossy().into_owned()).collect();
        assert_eq!(got, vec!["train", "--preset", "cpu-tiny", "--out", "x"]);
    }
}
