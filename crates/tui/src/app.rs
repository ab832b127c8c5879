//! The UI's state and how keys and core events change it. Everything that leaves the
//! UI is returned as an [`Effect`] for the runner to carry out, so this file has no I/O
//! and every behaviour is testable without a terminal.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use serde_json::Value;

use agent_protocol::{ApprovalDecision, ApprovalMode, Event, Op, TokenUsage};

use super::call_filter::CallFilter;
use super::cell::{CellKind, ToolCell, ToolStatus};
use super::commands::run_slash;
use super::composer::Composer;
use super::custom_commands::CustomCommand;
use super::popup::{file_popup, slash_popup, Popup, PopupKind};
pub use super::shell_cmd::strip_shell_notes;
use super::transcript::Transcript;

/// How often the `@` completion lists the workspace again at most.
const FILES_REFRESH: Duration = Duration::from_secs(2);
/// How long a first Ctrl+C waits for the second.
const QUIT_WINDOW: Duration = Duration::from_secs(2);
/// The hint while an interrupt is on its way (cleared when the turn ends).
pub(crate) const INTERRUPTING: &str = "interrupting…";

/// Something the runner must do on the UI's behalf.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// Send an op to the core.
    Op(Op),
    /// Run `!cmd` in the sandbox; output comes back through [`App::shell_output`], the
    /// end through [`App::shell_done`].
    Shell { id: String, cmd: String },
    /// Stop the running `!cmd`s.
    CancelShells,
    /// End the current session and start a new one on the same sandbox, with another
    /// model when given; the new one continues the conversation if `keep_conversation`.
    Restart { model: Option<String>, keep_conversation: bool },
    /// Show the saved sessions.
    ListSessions,
    /// Show the MCP servers' state and tools.
    ShowMcp,
    /// Show the skills found and where.
    ShowSkills,
    /// Go back to checkpoint `index`.
    Rewind { index: usize, mode: super::rewind::RewindMode },
    /// Load a saved session into a fresh context.
    Resume { id: String },
    /// Leave the UI.
    Quit,
}

/// The sandbox container as the status line shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ContainerState {
    Starting,
    Running(String),
    Restarting,
    Removed,
}

/// Figures for the status line and `/cost`.
#[derive(Debug, Clone)]
pub struct Status {
    pub model: String,
    pub container: ContainerState,
    /// Prompt plus completion tokens of the latest model call.
    pub context_used: u64,
    pub context_max: u64,
    pub total: TokenUsage,
    pub turns: u32,
    /// Decode speed of the reply streaming now, or of the last one.
    pub tokens_per_sec: Option<f64>,
    pub started: Instant,
}

/// A tool call waiting for the user's yes or no.
#[derive(Debug, Clone, PartialEq)]
pub struct PendingApproval {
    pub call_id: String,
    pub tool: String,
    pub args: Value,
    /// Why the core asks whatever the mode says (a hook, plan mode).
    pub reason: Option<String>,
}

/// Static facts the UI starts with.
#[derive(Debug, Clone)]
pub struct AppConfig {
    pub model: String,
    pub workspace: String,
    pub approval: ApprovalMode,
    pub context_tokens: u64,
    /// Workspace files for `@path` completion.
    pub files: Vec<String>,
    /// Custom slash commands (`.agent/commands/`, `~/.config/agent/commands/`).
    pub commands: Vec<CustomCommand>,
    /// Where log records go while the UI owns the terminal (shown by `/help`).
    pub log_file: Option<String>,
}

/// The whole UI state.
pub struct App {
    pub transcript: Transcript,
    pub composer: Composer,
    pub popup: Option<Popup>,
    pub approval: Option<PendingApproval>,
    pub mode: ApprovalMode,
    /// The mode plan mode returns to when its plan is accepted.
    pub plan_return: ApprovalMode,
    /// A plan waiting for the user's yes or no.
    pub pending_plan: Option<String>,
    /// Points `/rewind` can go back to, oldest first.
    pub checkpoints: Vec<super::rewind::Checkpoint>,
    /// When `Esc` was last pressed on an empty composer (for `Esc Esc`).
    pub(super) last_esc: Option<Instant>,
    pub status: Status,
    /// A transient line under the composer ("press Ctrl+C again to quit").
    pub hint: Option<String>,
    /// Whether the agent works on a turn now.
    pub busy: bool,
    always: HashSet<String>,
    quit_armed: Option<Instant>,
    pub(super) files: Vec<String>,
    /// The host folder the workspace is, and when its files were last listed.
    workspace_root: std::path::PathBuf,
    files_listed: Instant,
    pub(super) last_todo: Option<String>,
    /// Custom slash commands, listed after the built-in ones.
    pub(super) commands: Vec<CustomCommand>,
    /// Where log records go while the UI runs.
    pub(super) log_file: Option<String>,
    /// When the streaming reply's first text came, and its bytes since.
    pub(crate) stream: Option<(Instant, usize)>,
    /// When the turn's work began (for the working indicator's elapsed time).
    pub busy_since: Option<Instant>,
    /// The local engine's progress through the prompt: tokens evaluated and total.
    pub prompt_progress: Option<(u64, u64)>,
    /// Frames drawn, for the spinner.
    pub frame: u64,
    shell_seq: u32,
    /// Results of `!cmd`s since the last message, told to the model with the next one.
    pub(crate) shell_notes: Vec<String>,
    pub should_quit: bool,
}

pub use super::plan_mode::{core_mode, next_mode};

impl App {
    /// A fresh UI showing the start screen.
    pub fn new(cfg: AppConfig) -> Self {
        let mut transcript = Transcript::default();
        transcript.push(CellKind::Welcome { model: cfg.model.clone(), workspace: cfg.workspace.clone() });
        App {
            transcript,
            composer: Composer::default(),
            popup: None,
            approval: None,
            mode: cfg.approval,
            plan_return: if cfg.approval == ApprovalMode::Plan { ApprovalMode::Ask } else { cfg.approval },
            pending_plan: None,
            checkpoints: Vec::new(),
            last_esc: None,
            status: Status {
                model: cfg.model,
                container: ContainerState::Starting,
                context_used: 0,
                context_max: cfg.context_tokens,
                total: TokenUsage::default(),
                turns: 0,
                tokens_per_sec: None,
                started: Instant::now(),
            },
            hint: None,
            busy: false,
            always: HashSet::new(),
            quit_armed: None,
            files: cfg.files,
            workspace_root: std::path::PathBuf::from(&cfg.workspace),
            files_listed: Instant::now(),
            last_todo: None,
            commands: cfg.commands,
            log_file: cfg.log_file,
            stream: None,
            busy_since: None,
            prompt_progress: None,
            frame: 0,
            shell_seq: 0,
            shell_notes: Vec::new(),
            should_quit: false,
        }
    }

    /// Adds an informational cell.
    pub fn info(&mut self, text: impl Into<String>) {
        self.transcript.push(CellKind::Info { text: text.into() });
        self.transcript.scroll = 0;
    }

    /// Adds an error cell.
    pub fn error(&mut self, text: impl Into<String>) {
        self.transcript.push(CellKind::Error { text: text.into() });
        self.transcript.scroll = 0;
    }

    /// Whether this call runs without asking in the current mode.
    fn auto_approved(&self, tool: &str) -> bool {
        self.always.contains(tool)
            || match self.mode {
                ApprovalMode::Auto => true,
                ApprovalMode::AutoEdit => tool == "file",
                ApprovalMode::Ask | ApprovalMode::Plan => false,
            }
    }

    fn set_tool_status(&mut self, call_id: &str, status: ToolStatus) {
        if let Some(t) = self.transcript.tool_mut(call_id) {
            t.status = status;
        }
    }

    /// Handles one key press.
    pub fn on_key(&mut self, key: KeyEvent) -> Vec<Effect> {
        if key.kind == KeyEventKind::Release {
            return Vec::new();
        }
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        if ctrl && matches!(key.code, KeyCode::Char('c')) {
            return self.ctrl_c();
        }
        self.quit_armed = None;
        self.hint = None;
        if self.approval.is_some() {
            return self.approval_key(key);
        }
        if self.pending_plan.is_some() && !self.busy {
            return self.plan_key(key);
        }
        let mut effects = Vec::new();
        match key.code {
            KeyCode::Esc => {
                if self.popup.take().is_some() {
                    return effects;
                }
                if !self.busy && !self.shell_running() && self.composer.is_empty() {
                    self.escape_on_empty();
                }
                if self.shell_running() {
                    effects.push(Effect::CancelShells);
                    self.hint = Some(INTERRUPTING.into());
                }
                if self.busy {
                    effects.push(Effect::Op(Op::Interrupt));
                    self.hint = Some(INTERRUPTING.into());
                }
                return effects;
            }
            KeyCode::BackTab => return self.set_mode(next_mode(self.mode)),
            KeyCode::Char('o') if ctrl => {
                self.transcript.opts.expanded = !self.transcript.opts.expanded;
                return effects;
            }
            KeyCode::PageUp => self.transcript.page(true),
            KeyCode::PageDown => self.transcript.page(false),
            // With nothing typed, Home and End move through the transcript.
            KeyCode::Home if self.composer.is_empty() || ctrl => self.transcript.scroll_by(isize::MAX / 2),
            KeyCode::End if self.composer.is_empty() || ctrl => self.transcript.scroll = 0,
            KeyCode::Enter if key.modifiers.intersects(KeyModifiers::SHIFT | KeyModifiers::ALT) => {
                self.composer.insert_char('\n')
            }
            KeyCode::Char('j') if ctrl => self.composer.insert_char('\n'),
            KeyCode::Enter => {
                if let Some(p) = &self.popup {
                    if p.kind == PopupKind::Slash {
                        if let Some(cmd) = p.current() {
                            self.composer.set_text(cmd);
                        }
                    } else {
                        return self.accept_popup();
                    }
                }
                self.popup = None;
                return self.submit();
            }
            KeyCode::Tab if self.popup.is_some() => return self.accept_popup(),
            KeyCode::Up => match &mut self.popup {
                Some(p) => p.step(false),
                None => self.composer.up(),
            },
            KeyCode::Down => match &mut self.popup {
                Some(p) => p.step(true),
                None => self.composer.down(),
            },
            KeyCode::Left => self.composer.left(),
            KeyCode::Right => self.composer.right(),
            KeyCode::Home => self.composer.home(),
            KeyCode::End => self.composer.end(),
            KeyCode::Char('a') if ctrl => self.composer.home(),
            KeyCode::Char('e') if ctrl => self.composer.end(),
            KeyCode::Char('w') if ctrl => self.composer.delete_word(),
            KeyCode::Char('u') if ctrl => self.composer.clear(),
            KeyCode::Backspace => self.composer.backspace(),
            KeyCode::Delete => self.composer.delete(),
            KeyCode::Char(c) if !ctrl => self.composer.insert_char(c),
            _ => {}
        }
        self.refresh_popup();
        effects
    }

    /// Handles a bracketed paste.
    pub fn on_paste(&mut self, text: &str) {
        self.composer.paste(text);
        self.refresh_popup();
    }

    fn ctrl_c(&mut self) -> Vec<Effect> {
        let mut effects = Vec::new();
        if !self.composer.is_empty() {
            self.composer.clear();
            self.popup = None;
            self.hint = Some("input cleared · Ctrl+C again to quit".into());
            self.quit_armed = Some(Instant::now());
            return effects;
        }
        if self.quit_armed.is_some_and(|t| t.elapsed() < QUIT_WINDOW) {
            self.should_quit = true;
            effects.push(Effect::Quit);
            return effects;
        }
        if self.busy {
            effects.push(Effect::Op(Op::Interrupt));
        }
        self.quit_armed = Some(Instant::now());
        self.hint = Some("press Ctrl+C again to quit".into());
        effects
    }

    fn approval_key(&mut self, key: KeyEvent) -> Vec<Effect> {
        let Some(pending) = self.approval.clone() else { return Vec::new() };
        let decision = match key.code {
            KeyCode::Char('y' | 'Y') | KeyCode::Enter => ApprovalDecision::Approve,
            KeyCode::Char('a' | 'A') => {
                // The UI keeps "always" itself so that modes stay under its control.
                self.always.insert(pending.tool.clone());
                ApprovalDecision::Approve
            }
            KeyCode::Char('n' | 'N') => ApprovalDecision::Deny,
            KeyCode::Esc => {
                self.approval = None;
                self.set_tool_status(&pending.call_id, ToolStatus::Denied);
                return vec![Effect::Op(Op::Interrupt)];
            }
            KeyCode::BackTab => return self.set_mode(next_mode(self.mode)),
            _ => return Vec::new(),
        };
        self.approval = None;
        let status = if decision == ApprovalDecision::Deny { ToolStatus::Denied } else { ToolStatus::Running };
        self.set_tool_status(&pending.call_id, status);
        vec![Effect::Op(Op::Approval { call_id: pending.call_id, decision })]
    }

    fn accept_popup(&mut self) -> Vec<Effect> {
        let Some(p) = self.popup.take() else { return Vec::new() };
        if matches!(p.kind, PopupKind::Rewind | PopupKind::RewindMode(_)) {
            return self.accept_rewind(p);
        }
        let Some(choice) = p.current().map(str::to_string) else { return Vec::new() };
        match p.kind {
            PopupKind::Slash => self.composer.set_text(&format!("{choice} ")),
            PopupKind::Files => {
                // A directory stays open for further completion.
                let tail = if choice.ends_with('/') { "" } else { " " };
                self.composer.replace_at_word(&format!("{choice}{tail}"));
            }
            PopupKind::Rewind | PopupKind::RewindMode(_) => {}
        }
        self.refresh_popup();
        Vec::new()
    }

    fn refresh_popup(&mut self) {
        // The rewind lists do not follow the composer.
        if self.popup.as_ref().is_some_and(|p| matches!(p.kind, PopupKind::Rewind | PopupKind::RewindMode(_))) {
            return;
        }
        if self.composer.at_word().is_some() {
            self.refresh_files();
        }
        let text = self.composer.text();
        let popup = slash_popup(text, &self.commands)
            .or_else(|| self.composer.at_word().and_then(|w| file_popup(w, &self.files)));
        // A command typed out in full needs no popup.
        let popup = popup.filter(|p| !(p.items.len() == 1 && p.items[0].0 == text));
        self.popup = match (self.popup.take(), popup) {
            (Some(old), Some(mut new)) if old.kind == new.kind => {
                new.selected = old.selected.min(new.items.len().saturating_sub(1));
                Some(new)
            }
            (_, new) => new,
        };
    }

    fn submit(&mut self) -> Vec<Effect> {
        if self.composer.text().trim().is_empty() {
            return Vec::new();
        }
        let (shown, text) = self.composer.submit_parts();
        self.transcript.scroll = 0;
        let trimmed = text.trim();
        if trimmed.starts_with('/') {
            return run_slash(self, trimmed);
        }
        if let Some(cmd) = trimmed.strip_prefix('!') {
            self.shell_seq += 1;
            let id = format!("!{}", self.shell_seq);
            self.transcript.push(CellKind::Tool(ToolCell {
                call_id: id.clone(),
                tool: "!".into(),
                args: serde_json::json!({ "cmd": cmd.trim() }),
                output: String::new(),
                status: ToolStatus::Running,
            }));
            return vec![Effect::Shell { id, cmd: cmd.trim().to_string() }];
        }
        self.user_turn_shown(text, shown)
    }

    /// Lists the workspace's files again for `@` completion (files come and go while
    /// the agent works), at most once every two seconds.
    fn refresh_files(&mut self) {
        if self.files_listed.elapsed() < FILES_REFRESH || !self.workspace_root.is_dir() {
            return;
        }
        self.files = super::popup::scan_workspace(&self.workspace_root);
        self.files_listed = Instant::now();
    }

    /// Starts a turn with this message; the files it mentions as `@path` go with it.
    pub fn user_turn(&mut self, text: String) -> Vec<Effect> {
        self.user_turn_shown(text.clone(), text)
    }

    /// Starts a turn with `text`, showing `shown` in the transcript (a large paste stays
    /// a placeholder there, as in the composer).
    pub(super) fn user_turn_shown(&mut self, text: String, shown: String) -> Vec<Effect> {
        self.transcript.push(CellKind::User { text: shown });
        let attached = super::attach::attach_mentions(&text, &self.workspace_root);
        for note in &attached.notes {
            self.info(note.clone());
        }
        self.busy = true;
        self.busy_since = Some(Instant::now());
        let mut sent = String::new();
        for note in self.shell_notes.drain(..) {
            sent.push_str(&note);
        }
        sent.push_str(&text);
        sent.push_str(&attached.appendix);
        vec![Effect::Op(Op::UserTurn { text: sent })]
    }

    /// The turn's work ended (finish, interrupt, a stop, an error).
    fn idle(&mut self) {
        self.busy = false;
        self.busy_since = None;
        self.prompt_progress = None;
        if self.hint.as_deref() == Some(INTERRUPTING) {
            self.hint = None;
        }
        self.stream = None;
        self.approval = None;
        self.transcript.update_all(|c| match c {
            CellKind::Assistant { reply, streaming } if *streaming => {
                // What was held back as a possible call opener is prose after all.
                reply.finish();
                *streaming = false;
                true
            }
            CellKind::Tool(t) if matches!(t.status, ToolStatus::Running | ToolStatus::AwaitingApproval) => {
                t.status = ToolStatus::Interrupted;
                true
            }
            _ => false,
        });
    }

    /// Handles one event from the core.
    pub fn on_core(&mut self, ev: Event) -> Vec<Effect> {
        let mut effects = Vec::new();
        match ev {
            Event::SessionConfigured { model, container, .. } => {
                self.status.model = model;
                self.status.container = ContainerState::Running(container);
            }
            Event::TaskStarted { history_len } => self.task_started(history_len),
            Event::TurnStarted { turn } => {
                self.transcript.last_reply_mut(CallFilter::reveal_unread);
                self.busy = true;
                self.busy_since.get_or_insert_with(Instant::now);
                self.status.turns = self.status.turns.max(turn);
                // Decode speed counts from the first text, not from the prompt's start.
                self.stream = None;
                self.prompt_progress = None;
                self.transcript.push(CellKind::Assistant { reply: CallFilter::new(), streaming: true });
                self.transcript.scroll = 0;
            }
            Event::PromptProgress { evaluated, total, .. } => {
                self.prompt_progress = Some((evaluated, total));
                self.status.context_used = total;
            }
            Event::AssistantDelta { text, .. } => self.reply_delta(&text),
            Event::AssistantMessage { text, .. } => self.reply_message(&text),
            Event::ParseError { message, .. } => self.parse_error(&message),
            Event::ToolCallBegin { call_id, tool, args } => {
                // A call the core did read is drawn as its cell only.
                self.transcript.last_reply_mut(|r| r.hide_call_of(&tool));
                self.transcript.push(CellKind::Tool(ToolCell {
                    call_id,
                    tool,
                    args,
                    output: String::new(),
                    status: ToolStatus::Running,
                }));
                self.transcript.scroll = 0;
            }
            Event::ToolCallOutput { call_id, chunk } => {
                if let Some(t) = self.transcript.tool_mut(&call_id) {
                    t.output.push_str(&chunk);
                }
            }
            Event::ToolCallEnd { call_id, tool, exit_code, observation, duration_ms, timed_out } => {
                // The core words these outcomes only in the observation.
                let denied = observation.contains("the user denied this action");
                let interrupted = observation.contains("[interrupted by the user");
                if let Some(t) = self.transcript.tool_mut(&call_id) {
                    t.output = observation.clone();
                    t.status = if denied {
                        ToolStatus::Denied
                    } else if interrupted {
                        ToolStatus::Interrupted
                    } else {
                        ToolStatus::Done { exit_code, duration_ms, timed_out }
                    };
                }
                if tool == "todo" {
                    self.last_todo = Some(observation);
                }
            }
            Event::ApprovalRequest { call_id, tool, args, reason } => {
                if reason.is_none() && self.auto_approved(&tool) {
                    effects.push(Effect::Op(Op::Approval { call_id, decision: ApprovalDecision::Approve }));
                } else {
                    self.set_tool_status(&call_id, ToolStatus::AwaitingApproval);
                    self.approval = Some(PendingApproval { call_id, tool, args, reason });
                }
            }
            Event::PlanProposed { plan } => self.plan_proposed(plan),
            Event::TokenUsage { last, total, decode_tokens_per_sec, turn } => {
                self.status.context_used = last.prompt_tokens + last.completion_tokens;
                self.status.total = total;
                self.status.turns = self.status.turns.max(turn);
                if decode_tokens_per_sec.is_some() {
                    self.status.tokens_per_sec = decode_tokens_per_sec;
                }
            }
            Event::Interrupted => {
                self.idle();
                self.info("interrupted");
            }
            Event::Notice { message } => self.info(message),
            Event::ProjectSettingsIgnored { ignored, hint, .. } => {
                let lines: Vec<String> = ignored.iter().map(|i| format!("  · {}", i.what)).collect();
                self.info(format!("not used (the project is not trusted):\n{}\n{hint}", lines.join("\n")));
            }
            Event::TaskComplete => {
                self.transcript.last_reply_mut(CallFilter::reveal_unread);
                self.idle();
            }
            Event::Error { message, fatal } => {
                if fatal {
                    self.idle();
                }
                self.error(message);
            }
            Event::EpisodeEnd { reason, .. } => {
                self.idle();
                if reason != agent_protocol::EndReason::Shutdown {
                    self.info(format!(
                        "the session ended ({}); the next message continues the conversation in a new one",
                        reason.describe()
                    ));
                }
            }
        }
        effects
    }
}

#[path = "app_reply.rs"]
mod reply_events;

#[cfg(test)]
#[path = "app_tests.rs"]
mod tests;
