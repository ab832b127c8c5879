//! The UI's event loop: terminal input, core events and `!cmd` results in; frames,
//! ops, session restarts and the session file out.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ratatui::crossterm::event::Event as TermEvent;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::mpsc::{unbounded_channel, UnboundedSender};
use tokio_util::sync::CancellationToken;

use agent_core::episode::{spawn_session, swap_tool_section, PromptParts, SessionConfig, SessionHandle, ToolExecutor};
use agent_core::mcp::McpHub;
use agent_core::tools::ToolFormat;
use agent_core::tools::ToolSpecs;
use agent_llm::{resolve_model, ChatMessage, ModelBackend, ModelSpec, ResolveOptions};
use agent_protocol::{Event, Op};
use agent_sandbox::{sanitize, OutputCollector, Sandbox};

use super::app::{App, AppConfig, ContainerState, Effect};
use super::checkpoints::CheckpointStore;
use super::rewind::{clock, Checkpoint, RewindMode, SavedConversation};
use super::store::{self, Record, SessionWriter};
use super::terminal::{Input, TerminalGuard};
use super::view::draw;
use super::TuiError;

/// How long a `!cmd` may run.
const SHELL_TIMEOUT: Duration = Duration::from_secs(300);
/// How long a session gets to end after `Op::Shutdown`.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// Everything the UI needs: the sandbox, the model and a session template.
pub struct TuiContext {
    pub sandbox: Sandbox,
    /// Template for each session (its approval mode is ignored: the UI decides).
    pub session: SessionConfig,
    pub model: Arc<dyn ModelBackend>,
    pub resolve: ResolveOptions,
    pub specs: ToolSpecs,
    pub app: AppConfig,
    /// Where session files go (`None`: not saved).
    pub sessions_dir: Option<PathBuf>,
    /// A saved session to continue: its id and records.
    pub resume: Option<(String, Vec<Record>)>,
    pub max_output: usize,
    /// The action format asked for; each session resolves it against its model (a
    /// `/model` switch may change it).
    pub tool_format: ToolFormat,
    /// What the system prompt is made of; each session renders it for its format.
    pub prompt: PromptParts,
    /// The episode's MCP servers (for `/mcp`).
    pub mcp: Option<Arc<McpHub>>,
    /// What happened while the sandbox started (images mapped, MCP servers that failed),
    /// shown first.
    pub notices: Vec<String>,
}

/// News of a running `!cmd`.
enum ShellMsg {
    /// Output as it arrives.
    Output { id: String, chunk: String },
    /// The command ended.
    Done { id: String, output: String, exit_code: Option<i64>, interrupted: bool, duration_ms: u64 },
}

struct Runner {
    ctx: TuiContext,
    app: App,
    core: Option<SessionHandle>,
    episode: u32,
    writer: Option<SessionWriter>,
    shell_tx: UnboundedSender<ShellMsg>,
    /// The running `!cmd`s, to cancel them.
    shells: HashMap<String, CancellationToken>,
    /// The conversation of the last session, which the next one continues.
    history: Vec<ChatMessage>,
    /// The workspace's files at each checkpoint (`None`: checkpoints are off).
    checkpoints: Option<CheckpointStore>,
}

/// Replays saved records into the UI (the transcript of a resumed session).
pub fn replay(app: &mut App, records: &[Record]) {
    for r in records {
        match r {
            Record::User { text } => {
                let shown = super::app::strip_shell_notes(text).to_string();
                app.transcript.push(super::cell::CellKind::User { text: shown });
            }
            Record::Event { event } => {
                let _ = app.on_core(event.clone());
            }
            Record::Meta { .. } => {}
        }
    }
    app.busy = false;
    app.approval = None;
}

impl Runner {
    fn start_session(&mut self, executor: ToolExecutor, extra_prompt: &str) {
        self.episode += 1;
        let mut cfg = self.ctx.session.clone();
        // The UI answers approval requests itself according to its mode, so the core
        // asks for everything that any mode may want to confirm.
        cfg.approval = super::app::core_mode(self.app.mode);
        cfg.end_after_first_task = false;
        cfg.episode_id = format!("{}-{}", &cfg.run_id[..cfg.run_id.len().min(12)], self.episode);
        cfg.model_name = self.ctx.model.name();
        // A model that cannot take native tools falls back to the text format here; the
        // front end refused an impossible `--tool-format native` before the UI opened.
        cfg.tool_format =
            self.ctx.tool_format.resolve(&cfg.model_name, self.ctx.model.native_tools()).unwrap_or(ToolFormat::Text);
        cfg.system_prompt = format!("{}{extra_prompt}", self.ctx.prompt.render(&self.ctx.specs, cfg.tool_format));
        cfg.history = std::mem::take(&mut self.history);
        let mut specs = self.ctx.specs.clone();
        // An MCP server's tools may have changed during an earlier session: the new one
        // starts with the tools as they are now, not as they were when the UI opened.
        if let Some(mcp) = &self.ctx.mcp {
            let (now, notices) = mcp.respec(&specs);
            cfg.system_prompt = swap_tool_section(&cfg.system_prompt, &specs, &now, cfg.tool_format);
            specs = now;
            for n in notices {
                self.app.info(n);
            }
        }
        self.core = Some(spawn_session(cfg, self.ctx.model.clone(), specs, executor));
    }

    /// Ends the running session and returns its executor (the shell and sandbox live on);
    /// its conversation is kept for the next session.
    async fn stop_session(&mut self) -> Option<ToolExecutor> {
        let mut core = self.core.take()?;
        let _ = core.ops.send(Op::Shutdown);
        let drain = async {
            while let Some(ev) = core.events.recv().await {
                self.record_event(&ev);
                let _ = self.app.on_core(ev);
            }
        };
        let _ = tokio::time::timeout(SHUTDOWN_GRACE, drain).await;
        match tokio::time::timeout(SHUTDOWN_GRACE, &mut core.join).await {
            Ok(Ok((summary, executor))) => {
                self.history = summary.messages;
                Some(executor)
            }
            _ => {
                core.join.abort();
                None
            }
        }
    }

    fn record(&mut self, record: &Record) {
        if let Some(w) = &mut self.writer {
            if let Err(e) = w.append(record) {
                self.writer = None;
                self.app.error(format!("{e}; this session is no longer saved"));
            }
        }
    }

    fn record_event(&mut self, ev: &Event) {
        if store::keep(ev) {
            self.record(&Record::Event { event: ev.clone() });
        }
    }

    fn redraw(&mut self, guard: &mut TerminalGuard) -> Result<(), TuiError> {
        guard.terminal.draw(|f| draw(f, &mut self.app)).map_err(TuiError::Terminal)?;
        Ok(())
    }

    /// Replaces the session (and the model, when one is named); the new session continues
    /// the conversation unless `keep_conversation` is false.
    async fn restart(
        &mut self,
        model: Option<String>,
        keep_conversation: bool,
        extra_prompt: String,
        guard: &mut TerminalGuard,
    ) -> Result<(), TuiError> {
        self.app.status.container = ContainerState::Restarting;
        self.redraw(guard)?;
        if let Some(spec) = model {
            match ModelSpec::parse(&spec) {
                Ok(parsed) => match resolve_model(&parsed, &self.ctx.resolve).await {
                    Ok(m) => {
                        self.ctx.model = m;
                        self.app.status.model = self.ctx.model.name();
                    }
                    Err(e) => self.app.error(format!("cannot load {spec}: {e}")),
                },
                Err(e) => self.app.error(e.to_string()),
            }
        }
        let stopped = self.stop_session().await;
        if !keep_conversation {
            self.history.clear();
        }
        match stopped {
            Some(executor) => {
                self.start_session(executor, &extra_prompt);
                self.app.status.container = ContainerState::Running(self.ctx.sandbox.name().to_string());
            }
            None => {
                self.app.error("the session did not stop; restart the UI to get a fresh one");
                self.app.status.container = ContainerState::Running(self.ctx.sandbox.name().to_string());
            }
        }
        Ok(())
    }

    fn run_shell(&mut self, id: String, cmd: String) {
        let sandbox = self.ctx.sandbox.clone();
        let tx = self.shell_tx.clone();
        let max = self.ctx.max_output;
        let cancel = CancellationToken::new();
        self.shells.insert(id.clone(), cancel.clone());
        tokio::spawn(async move {
            let started = Instant::now();
            let mut collector = OutputCollector::new(max);
            let mut on_output = |bytes: &[u8]| {
                collector.push(bytes);
                let _ = tx.send(ShellMsg::Output { id: id.clone(), chunk: sanitize(bytes) });
            };
            let res = sandbox.exec_streaming(&cmd, Some("/workspace"), SHELL_TIMEOUT, &cancel, &mut on_output).await;
            sandbox.restore_ownership().await;
            let (output, exit_code, interrupted) = match res {
                Ok(exit) => {
                    let mut text = collector.render();
                    if exit.timed_out {
                        text.push_str(&format!("\n[stopped after {} s]", SHELL_TIMEOUT.as_secs()));
                    }
                    (text, exit.exit_code, exit.interrupted)
                }
                Err(e) => (format!("error: {e}"), None, false),
            };
            let duration_ms = started.elapsed().as_millis() as u64;
            let _ = tx.send(ShellMsg::Done { id, output, exit_code, interrupted, duration_ms });
        });
    }

    fn on_shell(&mut self, msg: ShellMsg) {
        match msg {
            ShellMsg::Output { id, chunk } => self.app.shell_output(&id, &chunk),
            ShellMsg::Done { id, output, exit_code, interrupted, duration_ms } => {
                self.shells.remove(&id);
                self.app.shell_done(&id, output, exit_code, interrupted, duration_ms);
            }
        }
    }

    /// Carries out effects; returns whether the UI should quit.
    async fn apply(&mut self, effects: Vec<Effect>, guard: &mut TerminalGuard) -> Result<bool, TuiError> {
        for effect in effects {
            match effect {
                Effect::Op(op) => {
                    if let Op::UserTurn { text } = &op {
                        // The end-to-end tests prove that a panic still restores the
                        // terminal and removes the container; this is how they cause one.
                        if std::env::var_os("AGENT_TUI_TEST_PANIC")
                            .is_some_and(|v| v == super::app::strip_shell_notes(text))
                        {
                            panic!("panic requested through AGENT_TUI_TEST_PANIC");
                        }
                        self.record(&Record::User { text: text.clone() });
                        let label = self.app.last_message_label();
                        let commit = self.snapshot(label).await;
                        self.app.checkpoint_before_last_message(commit);
                        if self.core.is_none() {
                            // The last session ended (an error or a limit): a new one
                            // continues the conversation.
                            self.restart(None, true, String::new(), guard).await?;
                        }
                    }
                    let sent = self.core.as_ref().map(|c| c.ops.send(op.clone()).is_ok()).unwrap_or(false);
                    if !sent && matches!(op, Op::UserTurn { .. }) {
                        self.app.error("the session is not running; the message was not sent");
                        self.app.busy = false;
                    }
                }
                Effect::Shell { id, cmd } => self.run_shell(id, cmd),
                Effect::CancelShells => {
                    for cancel in self.shells.values() {
                        cancel.cancel();
                    }
                }
                Effect::Restart { model, keep_conversation } => {
                    self.restart(model, keep_conversation, String::new(), guard).await?
                }
                Effect::ListSessions => self.list_sessions(),
                Effect::ShowSkills => self.app.info(self.ctx.prompt.skills.describe()),
                Effect::ShowMcp => {
                    let status = self.ctx.mcp.as_ref().map(|m| m.status()).unwrap_or_default();
                    self.app.info(super::mcp_view::describe(&status));
                }
                Effect::Resume { id } => self.resume(&id, guard).await?,
                Effect::Rewind { index, mode } => self.rewind(index, mode, guard).await?,
                Effect::Quit => return Ok(true),
            }
        }
        Ok(false)
    }

    /// Records the workspace's files; `None` (and a note) when that failed.
    async fn snapshot(&mut self, label: String) -> Option<String> {
        let store = self.checkpoints.clone()?;
        match tokio::task::spawn_blocking(move || store.snapshot(&label)).await {
            Ok(Ok(snapshot)) => {
                for note in snapshot.notes {
                    self.app.info(note);
                }
                Some(snapshot.id)
            }
            Ok(Err(e)) => {
                self.app.error(format!("the files could not be checkpointed: {e}"));
                None
            }
            Err(e) => {
                self.app.error(format!("the files could not be checkpointed: {e}"));
                None
            }
        }
    }

    /// Goes back to checkpoint `index`, first checkpointing what is here now so that
    /// the rewind can be undone.
    async fn rewind(&mut self, index: usize, mode: RewindMode, guard: &mut TerminalGuard) -> Result<(), TuiError> {
        let Some(target) = self.app.checkpoints.get(index).cloned() else { return Ok(()) };
        if self.app.busy {
            self.app.error("the agent is working: interrupt it (Esc) before rewinding");
            return Ok(());
        }
        self.app.status.container = ContainerState::Restarting;
        self.redraw(guard)?;
        let executor = self.stop_session().await;
        let now = SavedConversation { cells: self.app.transcript.snapshot(), messages: self.history.clone() };
        let undo_files = self.snapshot(format!("before the rewind to {}", target.label)).await;
        let mut done = Vec::new();
        if mode.code() {
            match (&self.checkpoints, &target.commit) {
                (Some(store), Some(id)) => {
                    let (store, id) = (store.clone(), id.clone());
                    match tokio::task::spawn_blocking(move || store.restore(&id)).await {
                        Ok(Ok(notes)) => {
                            for note in notes {
                                self.app.info(note);
                            }
                            done.push("the files")
                        }
                        Ok(Err(e)) => self.app.error(format!("the files could not be restored: {e}")),
                        Err(e) => self.app.error(format!("the files could not be restored: {e}")),
                    }
                }
                _ => self.app.error("this checkpoint has no copy of the files"),
            }
        }
        if mode.conversation() {
            match &target.saved {
                Some(saved) => {
                    self.app.transcript.replace(saved.cells.clone());
                    self.history = saved.messages.clone();
                }
                None => {
                    self.app.transcript.truncate(target.cells);
                    if let Some(n) = target.history {
                        self.history.truncate(n);
                    }
                }
            }
            done.push("the conversation");
        }
        self.app.checkpoints.push(Checkpoint {
            label: format!("undo the rewind to “{}”", target.label),
            commit: undo_files,
            cells: now.cells.len(),
            history: Some(now.messages.len()),
            saved: Some(now),
            at: clock(),
        });
        match executor {
            Some(executor) => self.start_session(executor, ""),
            None => self.app.error("the session did not stop; restart the UI to get a fresh one"),
        }
        self.app.status.container = ContainerState::Running(self.ctx.sandbox.name().to_string());
        if !done.is_empty() {
            self.app.info(format!(
                "rewound {} to before “{}”; /rewind (or Esc Esc) can undo it",
                done.join(" and "),
                target.label
            ));
        }
        Ok(())
    }

    fn list_sessions(&mut self) {
        let Some(dir) = &self.ctx.sessions_dir else {
            self.app.error("sessions are not saved (no user data directory)");
            return;
        };
        let sessions = store::list(dir);
        if sessions.is_empty() {
            self.app.info("no saved sessions");
            return;
        }
        let mut text = String::from("saved sessions (newest first; /resume ID):");
        for s in sessions.iter().take(15) {
            text.push_str(&format!("\n  {}  {:>9}  {}  {}", s.id, store::ago(s.modified_unix), s.cwd, s.title));
        }
        self.app.info(text);
    }

    async fn resume(&mut self, id: &str, guard: &mut TerminalGuard) -> Result<(), TuiError> {
        let Some(dir) = self.ctx.sessions_dir.clone() else {
            self.app.error("sessions are not saved (no user data directory)");
            return Ok(());
        };
        let loaded = store::find(&dir, id).and_then(|s| store::read(&s.path).map(|r| (s.id, r)));
        match loaded {
            Ok((sid, records)) => {
                self.app.transcript.clear();
                replay(&mut self.app, &records);
                for r in records.iter().filter(|r| !matches!(r, Record::Meta { .. })) {
                    self.record(r);
                }
                self.app.info(format!(
                    "resumed session {sid}; the sandbox keeps running, the model was given the earlier conversation"
                ));
                let extra = store::resume_context(&sid, &records);
                self.restart(None, false, extra, guard).await?;
            }
            Err(e) => self.app.error(e.to_string()),
        }
        Ok(())
    }

    fn handle_term(&mut self, ev: TermEvent) -> Vec<Effect> {
        match ev {
            TermEvent::Key(k) => self.app.on_key(k),
            TermEvent::Paste(text) => {
                self.app.on_paste(&text);
                Vec::new()
            }
            _ => Vec::new(),
        }
    }
}

/// Runs the UI until the user quits or a signal comes (its number is returned); the
/// caller removes the sandbox afterwards.
pub async fn run(mut ctx: TuiContext, executor: ToolExecutor) -> Result<Option<i32>, TuiError> {
    let mut sigterm = signal(SignalKind::terminate()).map_err(TuiError::Terminal)?;
    let mut sighup = signal(SignalKind::hangup()).map_err(TuiError::Terminal)?;
    let mut sigquit = signal(SignalKind::quit()).map_err(TuiError::Terminal)?;
    let mut sigint = signal(SignalKind::interrupt()).map_err(TuiError::Terminal)?;
    let resume = ctx.resume.take();
    let (shell_tx, mut shell_rx) = unbounded_channel();
    let session_id = uuid::Uuid::new_v4().simple().to_string()[..12].to_string();
    let mut app = App::new(ctx.app.clone());
    for notice in std::mem::take(&mut ctx.notices) {
        app.info(notice);
    }
    let mut writer = None;
    if let Some(dir) = &ctx.sessions_dir {
        match SessionWriter::create(dir, &session_id, &ctx.app.workspace, &ctx.model.name()) {
            Ok(w) => writer = Some(w),
            Err(e) => app.error(format!("{e}; this session is not saved")),
        }
    }
    let mut runner = Runner {
        ctx,
        app,
        core: None,
        episode: 0,
        writer,
        shell_tx,
        shells: HashMap::new(),
        history: Vec::new(),
        checkpoints: None,
    };
    match store::checkpoints_dir(&session_id) {
        Some(dir) => match CheckpointStore::open(&dir, std::path::Path::new(&runner.ctx.app.workspace)) {
            Ok(s) => runner.checkpoints = Some(s),
            Err(e) => runner.app.info(format!("checkpoints are off: {e}")),
        },
        None => runner.app.info("checkpoints are off: there is no user data directory"),
    }
    let mut extra = String::new();
    if let Some((id, records)) = &resume {
        replay(&mut runner.app, records);
        for r in records.iter().filter(|r| !matches!(r, Record::Meta { .. })) {
            runner.record(r);
        }
        runner.app.info(format!("resumed session {id} in a new sandbox; the model was told what was lost"));
        let started_in = records.iter().find_map(|r| match r {
            Record::Meta { cwd, .. } => Some(cwd.clone()),
            _ => None,
        });
        if let Some(cwd) = started_in.filter(|c| *c != runner.ctx.app.workspace) {
            runner.app.error(format!(
                "this session was started in {cwd}; this sandbox mounts {} instead, so paths and files may differ",
                runner.ctx.app.workspace
            ));
        }
        extra = store::resume_context(id, records);
    }
    runner.start_session(executor, &extra);
    let mut guard = TerminalGuard::enter().map_err(TuiError::Terminal)?;
    let mut input = Input::start();
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    let mut signalled = None;
    loop {
        runner.redraw(&mut guard)?;
        let mut effects = Vec::new();
        tokio::select! {
            ev = input.events.recv() => match ev {
                Some(ev) => effects.extend(runner.handle_term(ev)),
                None => break,
            },
            ev = async { match &mut runner.core { Some(c) => c.events.recv().await, None => std::future::pending().await } } => match ev {
                Some(ev) => {
                    runner.record_event(&ev);
                    effects.extend(runner.app.on_core(ev));
                }
                None => {
                    // The session ended by itself; a later message starts a new one.
                    if let Some(executor) = runner.stop_session().await {
                        runner.start_session(executor, "");
                    }
                }
            },
            Some(msg) = shell_rx.recv() => runner.on_shell(msg),
            _ = sigterm.recv() => {
                signalled = Some(libc::SIGTERM);
                break;
            }
            _ = sighup.recv() => {
                signalled = Some(libc::SIGHUP);
                break;
            }
            _ = sigquit.recv() => {
                signalled = Some(libc::SIGQUIT);
                break;
            }
            _ = sigint.recv() => {
                signalled = Some(libc::SIGINT);
                break;
            }
            _ = tick.tick() => {}
        }
        // Take everything already waiting before drawing again, so that a fast stream
        // costs one frame per batch, not one per delta.
        while let Ok(ev) = input.events.try_recv() {
            effects.extend(runner.handle_term(ev));
        }
        if let Some(core) = &mut runner.core {
            let mut batch = Vec::new();
            while let Ok(ev) = core.events.try_recv() {
                batch.push(ev);
            }
            for ev in batch {
                runner.record_event(&ev);
                effects.extend(runner.app.on_core(ev));
            }
        }
        if runner.apply(effects, &mut guard).await? || runner.app.should_quit {
            break;
        }
    }
    runner.app.status.container = ContainerState::Removed;
    drop(input);
    drop(guard);
    let _ = runner.stop_session().await;
    Ok(signalled)
}
