//! `agent run`: one headless episode.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Args;

use agent::agent::{spawn_session, system_prompt, SessionConfig, ToolExecutor};
use agent::config::Config;
use agent::llm::{resolve_model, ModelSpec, ResolveOptions};
use agent::protocol::{ApprovalMode, EndReason, Op};
use agent::sandbox::{self, ContainerConfig, Sandbox, Shell};
use agent::task::Task;
use agent::tools::{ToolFormat, ToolSpecs};

use super::print::Printer;
use super::signals::Signals;

/// Arguments of `agent run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// A Terminal-Bench task directory (TB1): its Dockerfile is built and its
    /// instruction used unless one is given.
    #[arg(long, conflicts_with = "image")]
    pub task: Option<PathBuf>,
    /// Run in this image instead (default: the config's sandbox image, agent-base:bookworm).
    #[arg(long)]
    pub image: Option<String>,
    /// Model: `scripted:FILE`, `openai:URL#MODEL`, a local path, `hf:ORG/NAME` or `default`.
    #[arg(long)]
    pub model: Option<String>,
    /// Print every event as a JSON line instead of human-readable progress.
    #[arg(long)]
    pub json: bool,
    /// Turn limit (overrides the config).
    #[arg(long)]
    pub max_turns: Option<u32>,
    /// Wall-clock limit in seconds (overrides the config; with --task, the task's agent timeout).
    #[arg(long)]
    pub timeout_secs: Option<u64>,
    /// Write the trajectory here (default: under the user data dir).
    #[arg(long)]
    pub trajectory: Option<PathBuf>,
    /// Run the container without network access.
    #[arg(long)]
    pub no_network: bool,
    /// Action format: `auto` (native tool calls where the model supports them), `native`
    /// or `text` (XML tags with YAML bodies). Default: the config's, else auto.
    #[arg(long, value_name = "FORMAT", value_parser = clap::value_parser!(ToolFormat))]
    pub tool_format: Option<ToolFormat>,
    /// Local model settings.
    #[command(flatten)]
    pub local: super::LocalArgs,
    /// The instruction (required unless --task gives one).
    pub instruction: Vec<String>,
}

/// Runs the episode; returns 0 when it ended by `finish`.
pub async fn run(args: RunArgs, config: Config) -> anyhow::Result<u8> {
    let mut signals = Signals::install().context("cannot install signal handlers")?;
    let run_id = uuid::Uuid::new_v4().simple().to_string();
    let episode_id = format!("{}-0", &run_id[..12]);

    // Everything that can fail on bad input is checked before a container exists.
    let spec_text = args.model.clone().or(config.model.clone()).unwrap_or_else(|| "default".into());
    let spec = ModelSpec::parse(&spec_text)?;
    let task = args.task.as_deref().map(Task::load).transpose()?;
    let instruction = if args.instruction.is_empty() {
        task.as_ref()
            .map(|t| t.instruction.clone())
            .ok_or_else(|| anyhow::anyhow!("no instruction given (pass one, or --task DIR)"))?
    } else {
        args.instruction.join(" ")
    };
    let mut printer = Printer::new(args.json);
    let docker = sandbox::connect().await?;
    // The engine is checked first: loading a local model takes a while.
    let resolve =
        ResolveOptions { api_key_env: config.api_key_env.clone(), local: args.local.options(), progress: !args.json };
    let model = resolve_model(&spec, &resolve).await?;
    let tool_format = args
        .tool_format
        .unwrap_or(config.tool_format)
        .resolve(&model.name(), model.native_tools())
        .map_err(|e| anyhow::anyhow!(e))?;
    if let Ok(removed) = sandbox::prune(&docker, sandbox::PruneScope::Orphaned).await {
        if !removed.is_empty() {
            printer.notice(&format!("removed {} container(s) left by crashed runs", removed.len()));
        }
    }

    let prepare = async {
        let mut notices: Vec<String> = Vec::new();
        let image = match &task {
            Some(t) => {
                let tag = format!("agent-task-{}:latest", agent::sandbox::docker_name_part(&t.name));
                let mut on_notice = |n: String| notices.push(n);
                sandbox::build_task_image(
                    &docker,
                    &config.image_map,
                    &t.build_context,
                    &t.dockerfile,
                    &tag,
                    &mut on_notice,
                    &mut |l| tracing::debug!("build: {l}"),
                )
                .await?
            }
            None => {
                let wanted = args.image.clone().unwrap_or_else(|| config.sandbox.image.clone());
                let mut on_notice = |n: String| notices.push(n);
                sandbox::resolve_image(&docker, &config.image_map, &wanted, &mut on_notice).await?
            }
        };
        let mut cfg = ContainerConfig::new(image, run_id.clone(), episode_id.clone());
        cfg.cpus = config.sandbox.cpus;
        cfg.memory_bytes = config.sandbox.memory_mb << 20;
        cfg.pids_limit = config.sandbox.pids_limit;
        cfg.network = config.sandbox.network && !args.no_network;
        let sandbox = Sandbox::start(&docker, &cfg).await?;
        let shell = match Shell::start(&sandbox, config.sandbox.max_output_bytes).await {
            Ok(s) => s,
            Err(e) => {
                sandbox.remove().await;
                return Err(e);
            }
        };
        Ok::<_, sandbox::SandboxError>((sandbox, shell, notices))
    };
    let prepared = tokio::select! {
        r = prepare => r,
        sig = signals.recv() => {
            cleanup(&docker, &run_id).await;
            printer.notice("interrupted before the episode started; nothing is left behind");
            return Ok(Signals::exit_code(sig));
        }
    };
    let (sandbox, shell, notices) = match prepared {
        Ok(p) => p,
        Err(e) => {
            cleanup(&docker, &run_id).await;
            return Err(e.into());
        }
    };
    for n in &notices {
        printer.notice(n);
    }

    let mut limits = config.episode.clone();
    if let Some(t) = args.max_turns {
        limits.max_turns = t;
    }
    if let Some(t) = args.timeout_secs.or(task.as_ref().map(|t| t.agent_timeout_secs.ceil() as u64)) {
        limits.wall_clock_secs = t;
    }
    let trajectory = args
        .trajectory
        .clone()
        .or_else(|| dirs::data_dir().map(|d| d.join("agent").join("trajectories").join(format!("{episode_id}.jsonl"))));
    let specs = ToolSpecs::builtin()?;
    let prompt = system_prompt(&specs, shell.cwd(), None, tool_format);
    let executor = ToolExecutor::new(
        shell,
        Duration::from_secs(config.sandbox.command_timeout_secs),
        config.sandbox.max_output_bytes,
    );
    let session_cfg = SessionConfig {
        limits,
        approval: ApprovalMode::Auto,
        system_prompt: prompt,
        end_after_first_task: true,
        run_id: run_id.clone(),
        episode_id,
        model_name: model.name(),
        image: sandbox.image().to_string(),
        container: sandbox.name().to_string(),
        trajectory: trajectory.clone(),
        tool_format,
    };
    let mut handle = spawn_session(session_cfg, model, specs, executor);
    let _ = handle.ops.send(Op::UserTurn { text: instruction });
    let mut signal_seen = None;
    loop {
        tokio::select! {
            ev = handle.events.recv() => match ev {
                Some(ev) => printer.event(&ev),
                None => break,
            },
            sig = signals.recv() => {
                if signal_seen.is_some() {
                    // A second signal: stop waiting for a graceful end.
                    break;
                }
                signal_seen = Some(sig);
                printer.notice("signal received: stopping the episode and removing the container");
                let _ = handle.ops.send(Op::Shutdown);
            }
        }
    }
    let summary = tokio::time::timeout(Duration::from_secs(10), &mut handle.join).await;
    sandbox.remove().await;
    cleanup(&docker, &run_id).await;
    if let Some(sig) = signal_seen {
        return Ok(Signals::exit_code(sig));
    }
    let (summary, _executor) = match summary {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => anyhow::bail!("the episode task failed: {e}"),
        Err(_) => anyhow::bail!("the episode did not end within 10 s of its last event"),
    };
    if let Some(path) = trajectory {
        printer.notice(&format!("trajectory: {}", path.display()));
    }
    Ok(if summary.reason == EndReason::Finished { 0 } else { 1 })
}

/// Removes whatever this run created, registered or not (a create call that was in
/// flight when a signal came may have finished after the registration point).
async fn cleanup(docker: &bollard::Docker, run_id: &str) {
    sandbox::cleanup_registered(docker).await;
    if let Err(e) = sandbox::remove_run(docker, run_id).await {
        tracing::warn!("clean-up of run {run_id}: {e}");
    }
}
