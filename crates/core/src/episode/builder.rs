//! The one way an episode is built, for every front end (`agent run`, the UI, bench and
//! the trainer's rollouts): the container (an image resolved and started with the
//! config's limits, or one a bench trial started), its shell, the system prompt (the
//! config's template or the built-in one, plus the `AGENTS.md` of the shell's starting
//! directory), the executor and the session settings. Whatever the builder starts it
//! removes again when a later step fails.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::config::{Config, EpisodeLimits, PromptProfile};
use crate::hooks::Hooks;
use crate::mcp::{McpHub, McpServerConfig};
use crate::skills::{place, skills_section, Skills};
use crate::tools::{SpecError, ToolFormat, ToolSpecs};
use agent_llm::ModelBackend;
use agent_protocol::{ApprovalMode, EndReason};
use agent_sandbox::{Engine, Mount, Sandbox, SandboxError, Shell};

use super::executor::ToolExecutor;
use super::prompt::{render_system_prompt, SMALL_SYSTEM_TEMPLATE, SYSTEM_TEMPLATE};
use super::session::{spawn_session, EpisodeSummary, SessionConfig, SessionHandle};

/// Project instructions are read from this file in the shell's starting directory.
const PROJECT_INSTRUCTIONS_FILE: &str = "AGENTS.md";
/// The longest `AGENTS.md` put into the prompt.
const MAX_PROJECT_INSTRUCTIONS: usize = 32 * 1024;

/// Why an episode could not be built.
#[derive(Debug, thiserror::Error)]
pub enum EpisodeError {
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    #[error("the built-in tool definitions are broken: {0}")]
    Tools(#[from] SpecError),
    #[error("{0}")]
    ToolFormat(String),
    /// A setting of the configuration that cannot be used (the message names it).
    #[error("{0}")]
    Config(String),
}

/// Where the episode's container comes from.
#[derive(Debug, Clone)]
pub enum ContainerSource {
    /// Start one from this image (mapped through the config's image map, a stand-in
    /// built locally when it cannot be pulled), with the config's limits. The episode
    /// owns it and removes it when it ends.
    Image(ImageContainer),
    /// A container the caller started (a bench trial's environment) and removes.
    Started(Sandbox),
}

/// A container to start from an image.
#[derive(Debug, Clone)]
pub struct ImageContainer {
    /// The image as asked for (e.g. `agent-base:bookworm`, `python:3.13`).
    pub image: String,
    /// Network access (further limited by the config's `sandbox.network`).
    pub network: bool,
    /// `host:container` bind mounts.
    pub binds: Vec<String>,
    /// Working directory; the image's when `None`.
    pub workdir: Option<String>,
    /// Container name prefix.
    pub name_prefix: String,
}

impl ImageContainer {
    /// The image with network access, no mounts and the image's working directory.
    pub fn new(image: impl Into<String>) -> Self {
        Self { image: image.into(), network: true, binds: Vec::new(), workdir: None, name_prefix: "agent".into() }
    }
}

/// What differs between the front ends; the rest comes from the config.
#[derive(Debug, Clone)]
pub struct EpisodeRequest {
    pub container: ContainerSource,
    pub run_id: String,
    pub episode_id: String,
    pub approval: ApprovalMode,
    /// Headless runs end with the first task; the UI's sessions wait for the next turn.
    pub end_after_first_task: bool,
    /// The episode's limits (the config's, adjusted by the front end).
    pub limits: EpisodeLimits,
    /// Where to write the trajectory.
    pub trajectory: Option<PathBuf>,
    /// The user's hooks (`agent run` and the UI load the settings files; bench only
    /// with `--hooks`).
    pub hooks: Hooks,
    /// MCP servers to start for the episode (the config's, plus `.mcp.json` where the
    /// front end has a project).
    pub mcp_servers: BTreeMap<String, McpServerConfig>,
    /// The skills to offer (the project's and the user's, where the front end has a
    /// project; none by default).
    pub skills: Skills,
}

impl EpisodeRequest {
    /// A headless request with the config's limits.
    pub fn headless(config: &Config, container: ContainerSource, run_id: &str, episode_id: &str) -> Self {
        Self {
            container,
            run_id: run_id.to_string(),
            episode_id: episode_id.to_string(),
            approval: ApprovalMode::Auto,
            end_after_first_task: true,
            limits: config.episode.clone(),
            trajectory: None,
            hooks: Hooks::default(),
            mcp_servers: config.mcp_servers.clone(),
            skills: Skills::default(),
        }
    }
}

/// The system prompt's parts, so that a front end can render it for either format
/// (the UI switches models, and with them formats, mid-session).
#[derive(Debug, Clone)]
pub struct PromptParts {
    pub template: String,
    pub cwd: String,
    pub project_instructions: Option<String>,
    /// The skills listed in the prompt (and shown by `/skills`).
    pub skills: Arc<Skills>,
    /// The characters the skill list may take.
    pub skills_budget: usize,
}

impl PromptParts {
    /// The system prompt for a resolved format.
    /// The skill list goes where the template says `{{skills}}`, else at the end.
    pub fn render(&self, specs: &ToolSpecs, format: ToolFormat) -> String {
        let section = skills_section(&self.skills, self.skills_budget).unwrap_or_default();
        let template = self.template.replace("{{skills}}", &section);
        let prompt = render_system_prompt(&template, specs, &self.cwd, self.project_instructions.as_deref(), format);
        if section.is_empty() || self.template.contains("{{skills}}") {
            return prompt;
        }
        format!(
            "{prompt}

{section}"
        )
    }
}

/// A built episode, not yet running.
pub struct Episode {
    /// The container the tools run in.
    pub sandbox: Sandbox,
    /// Whether the episode started the container (and so removes it).
    owned: bool,
    /// The session settings, the system prompt rendered for the resolved format.
    pub session: SessionConfig,
    pub executor: ToolExecutor,
    pub specs: ToolSpecs,
    pub prompt: PromptParts,
    /// The MCP servers started for the episode (for `/mcp`); `None` without any.
    pub mcp: Option<Arc<McpHub>>,
}

/// Builds an episode for `model`: the container, its shell, the prompt, the executor and
/// the session settings. `on_notice` hears about images mapped or built on the way.
pub async fn build_episode(
    engine: &Engine,
    config: &Config,
    model: &dyn ModelBackend,
    request: EpisodeRequest,
    on_notice: &mut (dyn FnMut(String) + Send),
) -> Result<Episode, EpisodeError> {
    // What can fail without a container is checked before one exists.
    let mut specs = ToolSpecs::builtin()?;
    if let Some(names) = &config.tools {
        specs = specs.only(names).map_err(|e| EpisodeError::Config(format!("tools: {e}")))?;
    }
    let profile = config.prompt_profile.unwrap_or(PromptProfile::Full);
    if profile == PromptProfile::Compact {
        specs = specs.compact();
    }
    let tool_format =
        config.tool_format.resolve(&model.name(), model.native_tools()).map_err(EpisodeError::ToolFormat)?;
    let mut skills = if config.skills.enabled { request.skills } else { Skills::default() };
    if !skills.is_empty() {
        specs = specs.with_skill_tool()?;
    }
    for notice in &skills.notices {
        on_notice(notice.clone());
    }
    let (sandbox, owned) = match request.container {
        ContainerSource::Started(sandbox) => {
            // A container someone else started cannot get mounts: only skills already
            // in it (none that we know of) have their files there.
            place(&mut skills, &[], false);
            (sandbox, false)
        }
        ContainerSource::Image(wanted) => {
            let mounts = place(&mut skills, &wanted.binds, engine.shares_host_paths());
            let ids = (request.run_id.as_str(), request.episode_id.as_str());
            (start_container(engine, config, &wanted, mounts, ids, on_notice).await?, true)
        }
    };
    let skills = Arc::new(skills);
    let shell = match Shell::start(&sandbox, config.sandbox.max_output_bytes).await {
        Ok(shell) => shell,
        Err(e) => {
            if owned {
                sandbox.remove().await;
            }
            return Err(e.into());
        }
    };
    let mcp = if request.mcp_servers.is_empty() {
        None
    } else {
        let timeout = Duration::from_secs(config.sandbox.command_timeout_secs);
        let hub = McpHub::start(&sandbox, &request.mcp_servers, timeout).await;
        for notice in hub.take_notices() {
            on_notice(notice);
        }
        specs = with_mcp_tools(specs, &hub, on_notice);
        Some(Arc::new(hub))
    };
    let prompt = PromptParts {
        template: config.system_prompt.clone().unwrap_or_else(|| match profile {
            PromptProfile::Full => SYSTEM_TEMPLATE.to_string(),
            PromptProfile::Compact => SMALL_SYSTEM_TEMPLATE.to_string(),
        }),
        cwd: shell.cwd().to_string(),
        project_instructions: read_project_instructions(&sandbox, shell.cwd()).await,
        skills: skills.clone(),
        skills_budget: config.skills.prompt_budget,
    };
    let session = SessionConfig {
        limits: request.limits,
        approval: request.approval,
        system_prompt: prompt.render(&specs, tool_format),
        end_after_first_task: request.end_after_first_task,
        run_id: request.run_id,
        episode_id: request.episode_id,
        model_name: model.name(),
        image: sandbox.image().to_string(),
        container: sandbox.name().to_string(),
        trajectory: request.trajectory,
        tool_format,
        history: Vec::new(),
        hooks: request.hooks,
        constrain_calls: config.constrain_calls.unwrap_or(true),
        repeat_notes: config.repeat_notes.unwrap_or(false),
    };
    let mut executor = ToolExecutor::new(
        shell,
        Duration::from_secs(config.sandbox.command_timeout_secs),
        config.sandbox.max_output_bytes,
    );
    executor.set_mcp(mcp.clone());
    executor.set_skills((!skills.is_empty()).then_some(skills));
    Ok(Episode { sandbox, owned, session, executor, specs, prompt, mcp })
}

/// The built-in tools and the MCP servers' tools; a tool whose name is taken is left
/// out and named.
fn with_mcp_tools(builtin: ToolSpecs, hub: &McpHub, on_notice: &mut (dyn FnMut(String) + Send)) -> ToolSpecs {
    let mut all: Vec<_> = builtin.iter().cloned().collect();
    for spec in hub.specs() {
        if all.iter().any(|s| s.name == spec.name) {
            on_notice(format!("the MCP tool `{}` is left out: another tool has that name", spec.name));
            continue;
        }
        all.push(spec);
    }
    ToolSpecs::from_specs(all).unwrap_or(builtin)
}

/// Starts the container of an [`ImageContainer`] with the config's limits and `mounts`
/// (the skills' read-only folders); `ids` are the run's and the episode's.
async fn start_container(
    engine: &Engine,
    config: &Config,
    wanted: &ImageContainer,
    mounts: Vec<Mount>,
    (run_id, episode_id): (&str, &str),
    on_notice: &mut (dyn FnMut(String) + Send),
) -> Result<Sandbox, SandboxError> {
    let image = agent_sandbox::resolve_image(engine, &config.image_map, &wanted.image, &mut |n| on_notice(n)).await?;
    let mut cfg = config.sandbox.container_config(image, run_id, episode_id);
    cfg.network &= wanted.network;
    cfg.binds = wanted.binds.clone();
    cfg.workdir = wanted.workdir.clone();
    cfg.name_prefix = wanted.name_prefix.clone();
    cfg.mounts.extend(mounts);
    Sandbox::start(engine, &cfg).await
}

/// `AGENTS.md` in `cwd`, when there is one and it is text.
async fn read_project_instructions(sandbox: &Sandbox, cwd: &str) -> Option<String> {
    let path = agent_sandbox::resolve_path(cwd, PROJECT_INSTRUCTIONS_FILE);
    let file = sandbox.read_file(&path).await.ok()?;
    if file.kind != agent_sandbox::FileKind::File {
        return None;
    }
    let mut text = String::from_utf8(file.bytes).ok()?;
    if text.len() > MAX_PROJECT_INSTRUCTIONS {
        let mut cut = MAX_PROJECT_INSTRUCTIONS;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push_str("\n[… AGENTS.md cut here: it is longer than 32 KiB]");
    }
    Some(text)
}

impl Episode {
    /// Starts the session; the returned episode removes its container when it ends.
    pub fn spawn(self, model: Arc<dyn ModelBackend>) -> RunningEpisode {
        let handle = spawn_session(self.session, model, self.specs, self.executor);
        RunningEpisode { handle, sandbox: self.sandbox, owned: self.owned }
    }
}

/// A running episode.
pub struct RunningEpisode {
    /// Ops in, events out.
    pub handle: SessionHandle,
    sandbox: Sandbox,
    owned: bool,
}

/// How a running episode ended, from the front end's side.
#[derive(Debug)]
pub enum EpisodeOutcome {
    /// The session ended and said how.
    Ended(EpisodeSummary),
    /// The session's task failed (a panic in the loop).
    Failed(String),
    /// The session did not end within the grace period after its last event.
    Hung,
}

impl EpisodeOutcome {
    /// Whether the episode ended by `finish`.
    pub fn finished(&self) -> bool {
        matches!(self, EpisodeOutcome::Ended(s) if s.reason == EndReason::Finished)
    }
}

impl RunningEpisode {
    /// Waits up to `grace` for the session to end (call it once the event stream is
    /// closed, or after `Op::Shutdown`), then removes the container if the episode
    /// owns it, whatever happened.
    pub async fn finish(self, grace: Duration) -> EpisodeOutcome {
        self.finish_keeping_shell(grace).await.0
    }

    /// [`RunningEpisode::finish`], handing back the episode's shell as the agent left it
    /// (its cwd, exported variables and background jobs) when the session ended in time
    /// and the container is the caller's; otherwise `None`.
    pub async fn finish_keeping_shell(mut self, grace: Duration) -> (EpisodeOutcome, Option<Shell>) {
        let (outcome, executor) = match tokio::time::timeout(grace, &mut self.handle.join).await {
            Ok(Ok((summary, executor))) => (EpisodeOutcome::Ended(summary), Some(executor)),
            Ok(Err(e)) => (EpisodeOutcome::Failed(e.to_string()), None),
            Err(_) => {
                self.handle.join.abort();
                (EpisodeOutcome::Hung, None)
            }
        };
        if self.owned {
            self.sandbox.remove().await;
            return (outcome, None);
        }
        (outcome, executor.map(ToolExecutor::into_shell))
    }
}
