//! `agent sandbox …`: the base image, clean-up, and the shell benchmark.

use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Subcommand;
use tokio_util::sync::CancellationToken;

use agent_core::config::Config;
use agent_sandbox::{BaseImageOptions, ContainerConfig, PruneScope, Sandbox, Shell};

/// Subcommands of `agent sandbox`.
#[derive(Debug, Subcommand)]
pub enum SandboxCommand {
    /// Build the local Debian base image (debootstrap + import; no registry needed).
    Base {
        /// Rebuild even when the image exists.
        #[arg(long)]
        force: bool,
        /// Image tag (default `agent-base:SUITE`: `agent-base:bookworm` is the sandbox's
        /// default image, `agent-base:trixie` the Python 3.13 stand-ins' base).
        #[arg(long)]
        tag: Option<String>,
        /// Debian mirror.
        #[arg(long, default_value = "http://deb.debian.org/debian")]
        mirror: String,
        /// Debian suite.
        #[arg(long, default_value = "bookworm")]
        suite: String,
    },
    /// Build the local stand-ins for Terminal-Bench's base images (Python 3.13 on
    /// bookworm, Ubuntu 24.04 as trixie) when missing; bench builds them on first use.
    Standins {
        /// Only print which images are stood in for, by what (also behind the mirrors
        /// `docker.io/library/`, `public.ecr.aws/docker/library/`, `mirror.gcr.io/library/`
        /// and with a digest).
        #[arg(long)]
        list: bool,
    },
    /// Remove containers left behind by crashed runs, on every engine of the pool.
    Prune {
        /// Remove every agent container, including those of runs still going.
        #[arg(long)]
        all: bool,
    },
    /// List the Docker engines of `[[sandbox.engines]]` (or the local one): whether each
    /// answers, its version, containers of ours running there and free capacity.
    Engines,
    /// Measure a tool call through the persistent shell against `docker exec`.
    Bench {
        /// Calls per method.
        #[arg(long, default_value_t = 200)]
        calls: u32,
        /// Image to run.
        #[arg(long, default_value = agent_sandbox::BASE_IMAGE)]
        image: String,
    },
}

/// Runs a sandbox subcommand.
pub async fn run(cmd: SandboxCommand, config: Config) -> anyhow::Result<u8> {
    match cmd {
        SandboxCommand::Engines => return super::engines::list(&config).await,
        SandboxCommand::Standins { list: true } => {
            for (pattern, tag, what) in agent_bench::standin_table() {
                println!("{pattern:<48} → {tag:<40} {what}");
            }
            return Ok(0);
        }
        SandboxCommand::Prune { all } => {
            let scope = if all { PruneScope::All } else { PruneScope::Orphaned };
            let pool = super::engines::pool(&config).await?;
            let mut removed = Vec::new();
            for engine in pool.engines() {
                let on = if pool.len() > 1 { format!(" (engine {})", engine.name()) } else { String::new() };
                removed.extend(agent_sandbox::prune(&engine, scope).await?.into_iter().map(|n| format!("{n}{on}")));
            }
            if removed.is_empty() {
                println!("nothing to remove");
            }
            for name in removed {
                println!("removed {name}");
            }
            return Ok(0);
        }
        _ => {}
    }
    let docker = agent_sandbox::connect().await?;
    match cmd {
        SandboxCommand::Engines | SandboxCommand::Prune { .. } => Ok(0),
        SandboxCommand::Base { force, tag, mirror, suite } => {
            let tag = tag.unwrap_or_else(|| format!("agent-base:{suite}"));
            let opts = BaseImageOptions { tag, suite, mirror, force };
            agent_sandbox::build_base_image(&docker, &opts, &mut |line| eprintln!("● {line}")).await?;
            Ok(0)
        }
        SandboxCommand::Standins { .. } => {
            let host = agent_bench::HostEnv::from_host(std::path::Path::new("/etc/hosts"), None)?;
            let built = agent_sandbox::build_standins(&docker, &host.build_env(), &mut |l| eprintln!("● {l}")).await?;
            if !built.is_empty() {
                eprintln!("● built {}", built.join(", "));
            }
            Ok(0)
        }
        SandboxCommand::Bench { calls, image } => {
            let run_id = uuid::Uuid::new_v4().simple().to_string();
            let cfg = ContainerConfig::new(image, run_id.clone(), "bench");
            let sb = Sandbox::start(&docker, &cfg).await?;
            let result = bench(&sb, calls).await;
            sb.remove().await;
            let (shell_ms, exec_ms) = result?;
            println!("persistent shell : {shell_ms:8.3} ms per call ({calls} × `true`)");
            println!("docker exec CLI  : {exec_ms:8.3} ms per call ({calls} × `docker exec CONTAINER true`)");
            println!("speed-up         : {:8.1}×", exec_ms / shell_ms);
            Ok(0)
        }
    }
}

async fn bench(sb: &Sandbox, calls: u32) -> anyhow::Result<(f64, f64)> {
    let mut shell = Shell::start(sb, 16 * 1024).await?;
    let cancel = CancellationToken::new();
    // Warm-up, then measure.
    for _ in 0..5 {
        shell.run("true", Duration::from_secs(10), &cancel, &mut |_| {}).await?;
    }
    let t = Instant::now();
    for _ in 0..calls {
        let r = shell.run("true", Duration::from_secs(10), &cancel, &mut |_| {}).await?;
        anyhow::ensure!(r.exit_code == Some(0), "`true` failed in the shell: {r:?}");
    }
    let shell_ms = t.elapsed().as_secs_f64() * 1000.0 / f64::from(calls);
    let t = Instant::now();
    for _ in 0..calls {
        let status = tokio::process::Command::new("docker")
            .args(["exec", sb.id(), "true"])
            .status()
            .await
            .context("cannot run the docker CLI")?;
        anyhow::ensure!(status.success(), "docker exec failed: {status}");
    }
    let exec_ms = t.elapsed().as_secs_f64() * 1000.0 / f64::from(calls);
    Ok((shell_ms, exec_ms))
}
