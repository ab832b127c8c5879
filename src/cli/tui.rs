//! `agent` with no subcommand: the interactive UI on the current directory, mounted at
//! `/workspace` in a sandbox container that is removed on every exit path.

use std::io::IsTerminal;
use std::path::Path;

use anyhow::Context;
use clap::Args;
use futures_util::FutureExt;

use agent_core::config::UserConfig;
use agent_core::episode::{build_episode, ContainerSource, EpisodeRequest, ImageContainer};
use agent_core::project::{Apply, Project, ProjectSettings, TrustStore};
use agent_core::tools::ToolFormat;
use agent_llm::{resolve_model, ModelSpec};
use agent_protocol::ApprovalMode;
use agent_tui::trust::{TrustChoice, TrustPrompt};
use agent_tui::{popup, store, AppConfig, TuiContext};

use super::signals::Signals;

/// Options of the interactive UI (given without a subcommand).
#[derive(Debug, Clone, Args)]
pub struct TuiArgs {
    /// Model: `default`, `scripted:FILE`, `openai:URL#MODEL`, a local path or `hf:ORG/NAME`.
    #[arg(long)]
    pub model: Option<String>,
    /// Which actions ask first: ask (bash and file writes), auto-edit (bash), auto
    /// (none), plan (no file changes; the agent answers with a plan to accept).
    #[arg(long, value_enum, default_value = "ask")]
    pub approval: ApprovalArg,
    /// Resume a saved session by id (without an id: list the saved sessions).
    #[arg(long, num_args = 0..=1, default_missing_value = "", value_name = "ID")]
    pub resume: Option<String>,
    /// Continue the newest session started in this directory.
    #[arg(long = "continue", conflicts_with = "resume")]
    pub continue_last: bool,
    /// Run the container without network access.
    #[arg(long)]
    pub no_network: bool,
    /// Action format: `auto` (native tool calls where the model supports them), `native`
    /// or `text`. Default: the config's, else auto.
    #[arg(long, value_name = "FORMAT", value_parser = clap::value_parser!(ToolFormat))]
    pub tool_format: Option<ToolFormat>,
    /// Run no hooks (the user's and the project's settings files are ignored).
    #[arg(long)]
    pub no_hooks: bool,
}

/// `--approval` values.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum ApprovalArg {
    Ask,
    AutoEdit,
    Auto,
    Plan,
}

impl From<ApprovalArg> for ApprovalMode {
    fn from(a: ApprovalArg) -> Self {
        match a {
            ApprovalArg::Ask => ApprovalMode::Ask,
            ApprovalArg::AutoEdit => ApprovalMode::AutoEdit,
            ApprovalArg::Auto => ApprovalMode::Auto,
            ApprovalArg::Plan => ApprovalMode::Plan,
        }
    }
}

/// Opens the UI; returns the exit code.
pub async fn run(
    args: TuiArgs,
    user: UserConfig,
    trust_flag: bool,
    local: agent_llm::LocalModelOptions,
) -> anyhow::Result<u8> {
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    let cwd_text = cwd.display().to_string();
    let sessions_dir = store::sessions_dir().ok();
    let resume = match (&args.resume, args.continue_last, &sessions_dir) {
        (Some(id), _, Some(dir)) if id.is_empty() => {
            print_sessions(dir);
            return Ok(0);
        }
        (Some(id), _, Some(dir)) => {
            let s = store::find(dir, id)?;
            Some((s.id, store::read(&s.path)?))
        }
        (None, true, Some(dir)) => {
            let s = store::latest_in(dir, &cwd_text)
                .ok_or_else(|| anyhow::anyhow!("no saved session was started in {cwd_text}"))?;
            Some((s.id, store::read(&s.path)?))
        }
        (Some(_), _, None) | (None, true, None) => anyhow::bail!("{}", store::StoreError::NoDataDir),
        (None, false, _) => None,
    };
    // Before anything of the session starts: the workspace is where the sandbox writes.
    super::workspace::refuse_dangerous(&cwd, &user)?;
    if !std::io::stdin().is_terminal() || !std::io::stdout().is_terminal() {
        anyhow::bail!("the interactive UI needs a terminal; use `agent run` for headless episodes");
    }
    let mut signals = Signals::install().context("cannot install signal handlers")?;
    // The trust decision comes first: nothing of the project's runs or is sent before it.
    let stop = || signals.received().is_some();
    let decided = tokio::task::block_in_place(|| project_settings(&cwd, &user, trust_flag, &stop))?;
    let Some((settings, project_notices)) = decided else {
        say("● closed without opening the project");
        return Ok(signals.received().map_or(0, Signals::exit_code));
    };
    let mut config = settings.config.clone();
    if let Some(format) = args.tool_format {
        config.tool_format = format;
    }
    let run_id = uuid::Uuid::new_v4().simple().to_string();
    let spec_text = args.model.clone().or(config.model.clone()).unwrap_or_else(|| "default".into());
    let spec = ModelSpec::parse(&spec_text)?;
    // The workspace is bind-mounted: the session runs on an engine of this host.
    let pool = super::engines::pool(&config).await?;
    let placement = pool.place_local(1).await?;
    let engine = placement.engine().clone();
    let resolve = super::resolve::resolve_options(config.api_key_env.clone(), local, false);
    say(&format!("● loading the model {spec_text}"));
    let model = resolve_model(&spec, &resolve).await?;
    let tool_format = config.tool_format;
    let (hooks, hooks_note) = super::hooks::session_hooks(settings.hooks.clone(), &cwd, None, args.no_hooks)?;
    if let Some(note) = &hooks_note {
        say(&format!("● {note}"));
    }
    let _ = agent_sandbox::prune(&engine, agent_sandbox::PruneScope::Orphaned).await;
    let repos_before = super::workspace::repositories(&cwd);

    say("● starting the sandbox");
    let mut limits = config.episode.clone();
    // One interactive session spans many tasks: the per-episode limits of the
    // headless runner would end it after a few of them.
    limits.max_turns = limits.max_turns.max(100_000);
    limits.token_budget = limits.token_budget.max(1 << 40);
    limits.wall_clock_secs = limits.wall_clock_secs.max(30 * 24 * 3600);
    let mut wanted = ImageContainer::new(config.sandbox.image.clone());
    wanted.network = !args.no_network;
    wanted.binds = vec![format!("{}:/workspace", cwd.display())];
    wanted.workdir = Some("/workspace".into());
    wanted.name_prefix = "agent-tui".into();
    let request = EpisodeRequest {
        container: ContainerSource::Image(wanted),
        run_id: run_id.clone(),
        episode_id: String::new(),
        approval: ApprovalMode::Ask,
        end_after_first_task: false,
        limits: limits.clone(),
        trajectory: None,
        hooks: hooks.clone(),
        mcp_servers: settings.mcp_servers.clone(),
        skills: settings.skills.clone(),
    };
    // An impossible `--tool-format native` is refused by the builder, before any
    // container exists; each session then resolves the format against its model (a
    // `/model` switch falls back to text).
    let prepare = async {
        let mut notices = project_notices.clone();
        let mut on_notice = |n: String| notices.push(n);
        let built = build_episode(&engine, &config, model.as_ref(), request, &mut on_notice).await;
        built.map(|episode| (episode, notices))
    };
    let prepared = tokio::select! {
        r = prepare => r,
        sig = signals.recv() => {
            agent_sandbox::cleanup_run(&engine, &run_id).await;
            return Ok(Signals::exit_code(sig));
        }
    };
    let (episode, mut notices) = match prepared {
        Ok(p) => p,
        Err(e) => {
            agent_sandbox::cleanup_run(&engine, &run_id).await;
            return Err(e.into());
        }
    };
    let sandbox = episode.sandbox.clone();
    notices.extend(sandbox.notices());
    // From here on the container exists: every path below ends in the clean-up.
    let result = async {
        let log_file = super::log::to_file(&run_id);
        let ctx = TuiContext {
            sandbox: episode.sandbox.clone(),
            session: episode.session,
            model: model.clone(),
            resolve: resolve.clone(),
            specs: episode.specs,
            app: AppConfig {
                model: model.name(),
                workspace: cwd_text.clone(),
                approval: args.approval.into(),
                context_tokens: limits.context_tokens,
                files: popup::scan_workspace(&cwd),
                commands: agent_tui::custom_commands::load(
                    &settings.commands,
                    agent_tui::custom_commands::user_dir().as_deref(),
                    &popup::SLASH_COMMANDS.iter().map(|c| c.name).collect::<Vec<_>>(),
                ),
                log_file: log_file.map(|p| p.display().to_string()),
            },
            sessions_dir: sessions_dir.clone(),
            resume,
            max_output: config.sandbox.max_output_bytes,
            tool_format,
            prompt: episode.prompt.clone(),
            mcp: episode.mcp.clone(),
            notices,
        };
        // A panic inside the UI must still remove the container (the panic hook has
        // already restored the terminal by the time it is caught here).
        match std::panic::AssertUnwindSafe(agent_tui::run(ctx, episode.executor)).catch_unwind().await {
            Ok(r) => r.map_err(anyhow::Error::from),
            Err(_) => Err(anyhow::anyhow!("the interactive UI crashed (see the message above)")),
        }
    }
    .await;
    agent_tui::terminal::restore();
    super::log::to_stderr();
    say("● removing the sandbox");
    sandbox.remove().await;
    agent_sandbox::cleanup_run(&engine, &run_id).await;
    for line in sandbox.removal_notices() {
        say(&format!("● {line}"));
    }
    let repos_after = super::workspace::repositories(&cwd);
    if let Some(line) = super::workspace::new_repositories_notice(&repos_before, &repos_after) {
        say(&format!("● {line}"));
    }
    result.map(|signal| signal.map_or(0, Signals::exit_code))
}

/// The settings of the session and the lines to show about the project, after asking
/// the user when the project asks for something that needs trust and is not trusted as
/// it is now; `None` when the user chose to quit.
fn project_settings(
    cwd: &Path,
    user: &UserConfig,
    trust_flag: bool,
    stop: &dyn Fn() -> bool,
) -> anyhow::Result<Option<(ProjectSettings, Vec<String>)>> {
    let mut store = TrustStore::load()?;
    let project = Project::open(cwd, user, &store)?;
    let apply = if trust_flag || !project.needs_decision() {
        Apply::All
    } else {
        let prompt = TrustPrompt::new(&project, store.path());
        match agent_tui::trust::ask(prompt, stop)? {
            TrustChoice::Trust => {
                store.trust(&project.files, project.lines())?;
                Apply::All
            }
            TrustChoice::Once => Apply::All,
            TrustChoice::Without => Apply::Nothing,
            TrustChoice::Quit => return Ok(None),
        }
    };
    let settings = project.settings(user, apply)?;
    let mut notices: Vec<String> = settings.refused().map(|a| a.text.clone()).collect();
    if apply == Apply::Nothing {
        notices.push(format!(
            "opened without the project's settings: {} item(s) of its agent files are not used this session",
            settings.ignored.len()
        ));
    }
    Ok(Some((settings, notices)))
}

/// Progress on stderr; a terminal that is gone (a closed tmux pane, SIGHUP) must not
/// stop the clean-up that follows, as `eprintln!` would by panicking.
fn say(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{line}");
}

fn print_sessions(dir: &Path) {
    let sessions = store::list(dir);
    if sessions.is_empty() {
        println!("no saved sessions in {}", dir.display());
        return;
    }
    println!("saved sessions, newest first (resume one with `agent --resume ID`):");
    for s in sessions.iter().take(30) {
        println!("  {}  {:>12}  {}  {}", s.id, store::ago(s.modified_unix), s.cwd, s.title);
    }
}
