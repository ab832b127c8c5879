//! `agent run`: one headless episode.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Args;

use agent_bench::env::TrialEnv;
use agent_bench::{BenchTask, EnvSettings, ImageCache};
use agent_core::config::Config;
use agent_core::episode::{build_episode, ContainerSource, EpisodeOutcome, EpisodeRequest, ImageContainer};
use agent_core::tools::ToolFormat;
use agent_llm::{resolve_model, ModelSpec};
use agent_protocol::Op;
use agent_sandbox::Engine;

use super::print::Printer;
use super::project::Headless;
use super::signals::Signals;

/// Arguments of `agent run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// A Terminal-Bench task directory (TB1 or TB2): its images are built and its
    /// services started as in `agent bench`, and its instruction used unless one is given.
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
    /// Also run the hooks of this settings file (Claude Code's format), besides those
    /// of ~/.config/agent/settings.json and .agent/settings.json.
    #[arg(long, value_name = "FILE")]
    pub hooks: Option<PathBuf>,
    /// Run no hooks at all.
    #[arg(long, conflicts_with = "hooks")]
    pub no_hooks: bool,
    /// Local model settings.
    #[command(flatten)]
    pub local: super::LocalArgs,
    /// The instruction (required unless --task gives one).
    pub instruction: Vec<String>,
}

/// The environment of a `--task` run: the task's images, services and agent container.
struct TaskRun {
    task: BenchTask,
    env: TrialEnv,
}

/// The exit code of an episode that ended by `finish` while settings of the untrusted
/// project were left out (documented under "Trust" in docs/config.md).
pub const EXIT_FINISHED_WITHOUT_PROJECT_SETTINGS: u8 = 3;

/// Runs the episode; returns 0 when it ended by `finish` (3 when it did so without some
/// of the untrusted project's settings), 1 when it ended otherwise.
pub async fn run(args: RunArgs, project: Headless) -> anyhow::Result<u8> {
    let mut config = project.settings.config.clone();
    let mut signals = Signals::install().context("cannot install signal handlers")?;
    let run_id = uuid::Uuid::new_v4().simple().to_string();
    let episode_id = format!("{}-0", &run_id[..12]);
    if let Some(format) = args.tool_format {
        config.tool_format = format;
    }

    // Everything that can fail on bad input is checked before a container exists.
    let spec_text = args.model.clone().or(config.model.clone()).unwrap_or_else(|| "default".into());
    let spec = ModelSpec::parse(&spec_text)?;
    let task = args.task.as_deref().map(BenchTask::load).transpose()?;
    let instruction = if args.instruction.is_empty() {
        task.as_ref()
            .map(|t| t.instruction.clone())
            .ok_or_else(|| anyhow::anyhow!("no instruction given (pass one, or --task DIR)"))?
    } else {
        args.instruction.join(" ")
    };
    let mut printer = Printer::new(args.json);
    for n in project.refused_notices() {
        printer.notice(&n);
    }
    let ignored = project.ignored_event();
    if let Some(ev) = &ignored {
        printer.event(ev);
    }
    let (hooks, hooks_note) = super::hooks::session_hooks(
        project.settings.hooks.clone(),
        &project.dir,
        args.hooks.as_deref(),
        args.no_hooks,
    )?;
    let mcp_servers = project.settings.mcp_servers.clone();
    let skills = project.settings.skills.clone();
    if let Some(note) = hooks_note {
        printer.notice(&note);
    }
    let pool = super::engines::pool(&config).await?;
    let containers = task.as_ref().map_or(1, |t| t.environment.services.len());
    let placement = pool.place(containers).await?;
    let engine = placement.engine().clone();
    // The engine is checked first: loading a local model takes a while.
    let resolve = super::resolve::resolve_options(config.api_key_env.clone(), args.local.options(), args.json);
    let model = resolve_model(&spec, &resolve).await?;
    if let Ok(removed) = agent_sandbox::prune(&engine, agent_sandbox::PruneScope::Orphaned).await {
        if !removed.is_empty() {
            printer.notice(&format!(
                "removed {} container(s), network(s) and volume(s) left by crashed runs",
                removed.len()
            ));
        }
    }

    let mut limits = config.episode.clone();
    if let Some(t) = args.max_turns {
        limits.max_turns = t;
    }
    if let Some(t) = args.timeout_secs.or(task.as_ref().map(|t| t.agent_timeout.as_secs_f64().ceil() as u64)) {
        limits.wall_clock_secs = t;
    }
    let trajectory = args
        .trajectory
        .clone()
        .or_else(|| dirs::data_dir().map(|d| d.join("agent").join("trajectories").join(format!("{episode_id}.jsonl"))));
    let network = config.sandbox.network.enabled() && !args.no_network;
    let prepare = async {
        let mut notices: Vec<String> = Vec::new();
        let (source, task_run) = match task {
            Some(task) => {
                let env = start_task_env(&engine, &config, &task, &run_id, &episode_id, network, &mut notices).await?;
                let client = env
                    .client()
                    .cloned()
                    .ok_or_else(|| anyhow::anyhow!("the task's environment has no agent container"))?;
                (ContainerSource::Started(client), Some(TaskRun { task, env }))
            }
            None => {
                let mut wanted =
                    ImageContainer::new(args.image.clone().unwrap_or_else(|| config.sandbox.image.clone()));
                wanted.network = !args.no_network;
                (ContainerSource::Image(wanted), None)
            }
        };
        let mut request = EpisodeRequest::headless(&config, source, &run_id, &episode_id);
        request.limits = limits;
        request.trajectory = trajectory.clone();
        request.hooks = hooks.clone();
        request.mcp_servers = mcp_servers.clone();
        request.skills = skills.clone();
        let mut on_notice = |n: String| notices.push(n);
        match build_episode(&engine, &config, model.as_ref(), request, &mut on_notice).await {
            Ok(episode) => Ok((episode, task_run, notices)),
            Err(e) => {
                if let Some(mut t) = task_run {
                    t.env.teardown().await;
                }
                Err(anyhow::Error::from(e))
            }
        }
    };
    let prepared = tokio::select! {
        r = prepare => r,
        sig = signals.recv() => {
            agent_sandbox::cleanup_run(&engine, &run_id).await;
            printer.notice("interrupted before the episode started; nothing is left behind");
            return Ok(Signals::exit_code(sig));
        }
    };
    let (episode, task_run, notices) = match prepared {
        Ok(p) => p,
        Err(e) => {
            agent_sandbox::cleanup_run(&engine, &run_id).await;
            return Err(e);
        }
    };
    for n in &notices {
        printer.notice(n);
    }
    if let Some(t) = &task_run {
        printer.notice(&format!("task {}: the agent works in {}", t.task.name, episode.sandbox.name()));
    }

    let mut running = episode.spawn(model);
    let _ = running.handle.ops.send(Op::UserTurn { text: instruction });
    let mut signal_seen = None;
    loop {
        tokio::select! {
            ev = running.handle.events.recv() => match ev {
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
                let _ = running.handle.ops.send(Op::Shutdown);
            }
        }
    }
    let outcome = running.finish(Duration::from_secs(10)).await;
    if let Some(mut t) = task_run {
        t.env.teardown().await;
    }
    agent_sandbox::cleanup_run(&engine, &run_id).await;
    if let Some(sig) = signal_seen {
        return Ok(Signals::exit_code(sig));
    }
    match outcome {
        EpisodeOutcome::Failed(e) => anyhow::bail!("the episode task failed: {e}"),
        EpisodeOutcome::Hung => anyhow::bail!("the episode did not end within 10 s of its last event"),
        EpisodeOutcome::Ended(_) => {}
    }
    if let Some(path) = trajectory {
        printer.notice(&format!("trajectory: {}", path.display()));
    }
    Ok(match (outcome.finished(), ignored.is_some()) {
        (true, false) => 0,
        (true, true) => EXIT_FINISHED_WITHOUT_PROJECT_SETTINGS,
        (false, _) => 1,
    })
}

/// Builds the task's images and starts its services and agent container, as a bench
/// trial does (TB1 and TB2 layouts, one or several services).
async fn start_task_env(
    engine: &Engine,
    config: &Config,
    task: &BenchTask,
    run_id: &str,
    episode_id: &str,
    network: bool,
    notices: &mut Vec<String>,
) -> anyhow::Result<TrialEnv> {
    // The host's name overrides and CA bundle, as `agent bench` hands them to builds and
    // containers: behind a TLS-inspecting proxy no package install works without them.
    let host = agent_bench::HostEnv::from_host(std::path::Path::new("/etc/hosts"), None)?;
    let images = ImageCache::new(engine.clone(), &config.image_map, host.build_env());
    let built =
        images.get(task).await.map_err(|e| anyhow::anyhow!("the task {} could not be built: {e}", task.name))?;
    notices.extend(built.notices.iter().cloned());
    notices.extend(task.notices.iter().cloned());
    let mut settings = EnvSettings::from_config(config, run_id, host.extra_hosts.clone());
    settings.network = network;
    TrialEnv::start(engine, task, &built, &settings, episode_id)
        .await
        .map_err(|e| anyhow::anyhow!("the task {}'s environment did not start: {e}", task.name))
}
