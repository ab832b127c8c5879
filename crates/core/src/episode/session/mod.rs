//! The episode loop: model turn → parse actions → run tools → observations → repeat,
//! driven by [`Op`]s and reporting [`Event`]s.

use std::collections::{HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use tokio::task::JoinHandle;

use crate::config::EpisodeLimits;
use crate::hooks::Hooks;
use crate::tools::{reply_grammar, unwrap_observation, Action, ActionParseError, ToolFormat, ToolSpecs};
use agent_llm::{ChatMessage, ChatRequest, FinishReason, LlmError, ModelBackend, Role, SamplingParams, ToolDefinition};
use agent_protocol::{ApprovalMode, EndReason, Event, Op, TokenUsage};

use super::executor::ToolExecutor;
use super::foreign::ShownLetters;
use super::history::adapt_history;

mod action;
mod calls;
mod context;
mod hooks;
mod plan_mode;
mod stream;
use super::repeats::CallRepeats;
use super::stuck::{LoopDetector, LoopVerdict};
use super::trajectory::{EpisodeEndRecord, EpisodeStart, TrajectoryWriter};
use stream::{race, KeptReply};

/// Everything a session needs besides the model and the sandbox.
#[derive(Debug, Clone)]
pub struct SessionConfig {
    pub limits: EpisodeLimits,
    pub approval: ApprovalMode,
    pub system_prompt: String,
    /// Headless runs end the episode when the first user turn's work ends; interactive
    /// sessions wait for the next turn.
    pub end_after_first_task: bool,
    pub run_id: String,
    pub episode_id: String,
    pub model_name: String,
    pub image: String,
    pub container: String,
    /// Where to write the JSONL trajectory.
    pub trajectory: Option<PathBuf>,
    /// The resolved action format: [`ToolFormat::Native`] sends the tools as JSON schemas
    /// and answers each call with a tool message; anything else is the text format.
    pub tool_format: ToolFormat,
    /// A conversation to continue (the UI's model switch, a session after a model
    /// error); rewritten for `tool_format`. Empty for a new conversation.
    pub history: Vec<ChatMessage>,
    /// The user's hooks (none unless configured).
    pub hooks: Hooks,
    /// Ask the engine to hold each reply to the action format's grammar (local engines
    /// enforce it; APIs ignore it): `constrain_calls` in the config, on by default.
    pub constrain_calls: bool,
    /// Tell the model when it repeats a call with nothing changed in between (the
    /// repeats are counted either way): `repeat_notes` in the config, off by default.
    pub repeat_notes: bool,
}

/// How a session ended.
#[derive(Debug, Clone, PartialEq)]
pub struct EpisodeSummary {
    pub reason: EndReason,
    pub turns: u32,
    pub usage: TokenUsage,
    pub finish_message: Option<String>,
    /// The conversation at the end (without the system prompt), for a session that
    /// continues it.
    pub messages: Vec<ChatMessage>,
}

/// The front end's side of a running session.
pub struct SessionHandle {
    /// Send [`Op`]s here.
    pub ops: UnboundedSender<Op>,
    /// Receive [`Event`]s here.
    pub events: UnboundedReceiver<Event>,
    /// Resolves when the session ends; the executor (and its sandbox) is returned so
    /// that the caller removes the container.
    pub join: JoinHandle<(EpisodeSummary, ToolExecutor)>,
}

/// Starts a session on the current Tokio runtime.
pub fn spawn_session(
    cfg: SessionConfig,
    model: Arc<dyn ModelBackend>,
    specs: ToolSpecs,
    executor: ToolExecutor,
) -> SessionHandle {
    let mut cfg = cfg;
    if let Some(window) = model.context_window() {
        // The loop estimates prompt sizes from their bytes, so a tenth of the window is
        // kept as a margin; a reply may take at most a quarter of it.
        cfg.limits.context_tokens = cfg.limits.context_tokens.min(window * 9 / 10);
        cfg.limits.max_reply_tokens = cfg.limits.max_reply_tokens.min(u32::try_from(window / 4).unwrap_or(u32::MAX));
    }
    let (op_tx, op_rx) = unbounded_channel();
    let (ev_tx, ev_rx) = unbounded_channel();
    let session = Session::new(cfg, model, specs, executor, op_rx, ev_tx);
    let join = tokio::spawn(session.run());
    SessionHandle { ops: op_tx, events: ev_rx, join }
}

/// What stopped an in-flight model call or tool run.
#[derive(Debug, Default)]
struct Flags {
    interrupted: bool,
    shutdown: bool,
    wall_clock: bool,
    ops_closed: bool,
}

impl Flags {
    fn any(&self) -> bool {
        self.interrupted || self.shutdown || self.wall_clock
    }
}

/// One action of a reply and, in the native format, the id of the call it answers.
struct PlannedCall {
    call_id: Option<String>,
    action: Result<Action, ActionParseError>,
}

/// How the work on one user turn ended.
enum TaskEnd {
    Finished(String),
    Stopped(EndReason),
    Interrupted,
    /// A `UserPromptSubmit` hook refused the prompt; nothing ran.
    Refused,
}

struct Session {
    cfg: SessionConfig,
    model: Arc<dyn ModelBackend>,
    specs: ToolSpecs,
    /// The tools offered natively (empty in the text format).
    tools: Vec<ToolDefinition>,
    executor: ToolExecutor,
    ops: UnboundedReceiver<Op>,
    events: UnboundedSender<Event>,
    queued: VecDeque<Op>,
    messages: Vec<ChatMessage>,
    turns: u32,
    usage: TokenUsage,
    parse_failures: u32,
    started: Instant,
    deadline: Instant,
    writer: TrajectoryWriter,
    always_approved: HashSet<String>,
    flags: Flags,
    /// Watches for a model that repeats itself.
    loops: LoopDetector,
    /// Watches for the same call made again with nothing changed in between.
    repeats: CallRepeats,
    /// What the current turn sent back to the model (observations and errors), for the
    /// loop detector.
    turn_results: Vec<String>,
    /// Context from `SessionStart` hooks, sent with the next prompt.
    hook_context: Vec<String>,
}

impl Session {
    fn new(
        cfg: SessionConfig,
        model: Arc<dyn ModelBackend>,
        specs: ToolSpecs,
        executor: ToolExecutor,
        ops: UnboundedReceiver<Op>,
        events: UnboundedSender<Event>,
    ) -> Self {
        let writer = match TrajectoryWriter::create(cfg.trajectory.as_deref()) {
            Ok(w) => w,
            Err(e) => {
                let _ = events.send(Event::Error {
                    message: format!("cannot write the trajectory file: {e}; continuing without it"),
                    fatal: false,
                });
                TrajectoryWriter::disabled()
            }
        };
        let started = Instant::now();
        let mut cfg = cfg;
        cfg.hooks.session_id = cfg.episode_id.clone();
        cfg.hooks.transcript_path = cfg.trajectory.clone();
        let tools = if cfg.tool_format == ToolFormat::Native { specs.definitions() } else { Vec::new() };
        let messages = adapt_history(cfg.history.clone(), cfg.tool_format);
        Session {
            deadline: started + Duration::from_secs(cfg.limits.wall_clock_secs.max(1)),
            cfg,
            model,
            specs,
            tools,
            executor,
            ops,
            events,
            queued: VecDeque::new(),
            messages,
            turns: 0,
            usage: TokenUsage::default(),
            parse_failures: 0,
            started,
            writer,
            always_approved: HashSet::new(),
            flags: Flags::default(),
            loops: LoopDetector::default(),
            repeats: CallRepeats::default(),
            turn_results: Vec::new(),
            hook_context: Vec::new(),
        }
    }

    fn emit(&self, event: Event) {
        let _ = self.events.send(event);
    }

    async fn next_op(&mut self) -> Option<Op> {
        if let Some(op) = self.queued.pop_front() {
            return Some(op);
        }
        if self.flags.ops_closed {
            return None;
        }
        self.ops.recv().await
    }

    async fn run(mut self) -> (EpisodeSummary, ToolExecutor) {
        self.writer.start(&EpisodeStart {
            schema: agent_protocol::trajectory::TRAJECTORY_SCHEMA,
            episode_id: self.cfg.episode_id.clone(),
            run_id: self.cfg.run_id.clone(),
            model: self.cfg.model_name.clone(),
            image: self.cfg.image.clone(),
            started_at_unix_ms: SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0),
            system_prompt: self.cfg.system_prompt.clone(),
        });
        self.emit(Event::SessionConfigured {
            run_id: self.cfg.run_id.clone(),
            model: self.cfg.model_name.clone(),
            image: self.cfg.image.clone(),
            container: self.cfg.container.clone(),
        });
        self.session_start_hooks().await;
        let mut finish_message = None;
        let reason = loop {
            let Some(op) = self.next_op().await else { break EndReason::Shutdown };
            match op {
                Op::UserTurn { text } => {
                    let end = self.run_task(text).await;
                    match end {
                        TaskEnd::Finished(msg) => {
                            finish_message = Some(msg);
                            if self.cfg.end_after_first_task {
                                break EndReason::Finished;
                            }
                            // A shutdown that arrived while the last action ran.
                            if self.flags.shutdown {
                                break EndReason::Shutdown;
                            }
                        }
                        TaskEnd::Interrupted => {
                            self.emit(Event::Interrupted);
                            if self.cfg.end_after_first_task {
                                break EndReason::Interrupted;
                            }
                        }
                        TaskEnd::Refused if self.cfg.end_after_first_task => break EndReason::Interrupted,
                        TaskEnd::Refused => {}
                        TaskEnd::Stopped(reason) => {
                            if self.cfg.end_after_first_task
                                || matches!(reason, EndReason::Shutdown | EndReason::Error | EndReason::WallClock)
                            {
                                break reason;
                            }
                            self.emit(Event::Notice { message: format!("stopped: {}", reason.describe()) });
                        }
                    }
                    self.emit(Event::TaskComplete);
                }
                Op::Compact => self.compact().await,
                Op::SetApprovalMode { mode } => self.set_mode(mode),
                Op::Shutdown => break EndReason::Shutdown,
                Op::Interrupt | Op::Approval { .. } => {}
            }
        };
        let summary = EpisodeSummary {
            reason,
            turns: self.turns,
            usage: self.usage,
            finish_message,
            messages: std::mem::take(&mut self.messages),
        };
        self.writer.end(&EpisodeEndRecord {
            reason,
            turns: self.turns,
            usage: self.usage,
            finish_message: summary.finish_message.clone(),
            duration_ms: self.started.elapsed().as_millis() as u64,
            repeated_calls: self.repeats.total(),
        });
        self.emit(Event::EpisodeEnd {
            reason,
            turns: self.turns,
            usage: self.usage,
            finish_message: summary.finish_message.clone(),
        });
        (summary, self.executor)
    }

    fn limit_reached(&self) -> Option<EndReason> {
        let l = &self.cfg.limits;
        if self.turns >= l.max_turns {
            Some(EndReason::MaxTurns)
        } else if self.usage.completion_tokens >= l.token_budget {
            Some(EndReason::TokenBudget)
        } else if Instant::now() >= self.deadline {
            Some(EndReason::WallClock)
        } else {
            None
        }
    }

    fn flags_end(&self) -> Option<TaskEnd> {
        if self.flags.shutdown {
            Some(TaskEnd::Stopped(EndReason::Shutdown))
        } else if self.flags.wall_clock {
            Some(TaskEnd::Stopped(EndReason::WallClock))
        } else if self.flags.interrupted {
            Some(TaskEnd::Interrupted)
        } else {
            None
        }
    }

    /// The work on one user message: the prompt hooks, the turns, and the stop hooks
    /// that may send the agent back to work.
    async fn run_task(&mut self, text: String) -> TaskEnd {
        // What stopped the last task is no reason to stop this one.
        self.flags = Flags { ops_closed: self.flags.ops_closed, ..Flags::default() };
        self.emit(Event::TaskStarted { history_len: self.messages.len() as u64 });
        self.apply_queued_modes();
        let text = match self.prompt_hooks(text).await {
            Ok(text) => text,
            Err(reason) => {
                self.emit(Event::Notice { message: format!("a UserPromptSubmit hook blocked the prompt: {reason}") });
                return TaskEnd::Refused;
            }
        };
        if self.flags.interrupted {
            return TaskEnd::Interrupted;
        }
        let text = self.with_plan_reminder(text);
        self.messages.push(ChatMessage::new(Role::User, text));
        let mut stop_hook_active = false;
        loop {
            let end = self.work().await;
            let TaskEnd::Finished(message) = end else { return end };
            match self.stop_hooks(stop_hook_active).await {
                Some(reason) if self.limit_reached().is_none() => {
                    stop_hook_active = true;
                    self.emit(Event::Notice { message: format!("a Stop hook sent the agent back to work: {reason}") });
                    self.messages.push(ChatMessage::new(Role::User, format!("<stop_hook>\n{reason}\n</stop_hook>")));
                }
                _ if self.flags.interrupted => return TaskEnd::Interrupted,
                _ => {
                    self.propose_plan(&message);
                    return TaskEnd::Finished(message);
                }
            }
        }
    }

    /// Model turns and tool calls until the agent answers, finishes or is stopped.
    async fn work(&mut self) -> TaskEnd {
        self.parse_failures = 0;
        self.loops = LoopDetector::default();
        self.repeats.forget();
        // Model calls refused for a prompt too long for the context, in a row.
        let mut overflows = 0u32;
        loop {
            self.turn_results.clear();
            if let Some(reason) = self.limit_reached() {
                return TaskEnd::Stopped(reason);
            }
            if !self.fit_context() {
                self.emit(Event::Error {
                    message: "the conversation no longer fits the model's context window, even with old observations elided and long messages shortened".into(),
                    fatal: false,
                });
                return TaskEnd::Stopped(EndReason::ContextExhausted);
            }
            self.turns += 1;
            let turn = self.turns;
            self.emit(Event::TurnStarted { turn });
            self.report_mcp().await;
            self.flags = Flags { ops_closed: self.flags.ops_closed, ..Flags::default() };
            let (result, model_ms) = self.stream_reply(turn).await;
            let user = self.messages.last().cloned().unwrap_or_else(|| ChatMessage::new(Role::User, ""));
            let kept = match result {
                Ok(r) => r,
                Err(LlmError::ContextOverflow { prompt_tokens, context }) if overflows < 3 => {
                    // The byte estimate undercounted this model's tokens: shrink the
                    // budget by the measured ratio and fit the conversation again.
                    overflows += 1;
                    self.turns -= 1;
                    let scale = context as f64 / prompt_tokens.max(1) as f64 * 0.9;
                    let limit = (self.cfg.limits.context_tokens as f64 * scale) as u64;
                    self.cfg.limits.context_tokens = limit.min(self.cfg.limits.context_tokens.saturating_sub(1));
                    self.emit(Event::Notice {
                        message: format!(
                            "the prompt had {prompt_tokens} tokens for a context of {context}; fitting the conversation into {} estimated tokens",
                            self.cfg.limits.context_tokens
                        ),
                    });
                    continue;
                }
                Err(LlmError::ContextOverflow { .. }) => {
                    self.emit(Event::Error {
                        message: "the conversation no longer fits the model's context window".into(),
                        fatal: false,
                    });
                    return TaskEnd::Stopped(EndReason::ContextExhausted);
                }
                Err(e) => {
                    if let Some(end) = self.flags_end() {
                        return end;
                    }
                    self.emit(Event::Error { message: format!("the model call failed: {e}"), fatal: true });
                    return TaskEnd::Stopped(EndReason::Error);
                }
            };
            let mut record = kept.record(turn, user, model_ms);
            kept.announce(turn, &self.events);
            let KeptReply { response, .. } = kept;
            record.foreign_letters = self.foreign_letters(&response);
            self.usage.add(response.usage);
            self.emit(Event::TokenUsage {
                turn,
                last: response.usage,
                total: self.usage,
                decode_tokens_per_sec: response.decode_tokens_per_sec,
            });
            self.messages.push(ChatMessage {
                tool_calls: response.tool_calls.clone(),
                ..ChatMessage::new(Role::Assistant, response.text.clone())
            });
            if response.finish_reason == FinishReason::Cancelled || self.flags.any() {
                self.writer.turn(&record);
                self.answer_unrun_calls(&response, "the call did not run: the reply was interrupted");
                return self.flags_end().unwrap_or(TaskEnd::Interrupted);
            }
            let (planned, loose_errors, prose_only) = self.plan_calls(&response, turn);
            // In an interactive session a reply that calls no tool is the assistant's
            // answer, as in Claude Code and Codex; headless runs keep asking for an action.
            if prose_only && !self.cfg.end_after_first_task {
                self.writer.turn(&record);
                return TaskEnd::Finished(response.text.clone());
            }
            record.actions = planned.iter().filter_map(|p| p.action.as_ref().ok().cloned()).collect();
            record.parse_errors = planned.iter().filter_map(|p| p.action.as_ref().err().cloned()).collect();
            record.parse_errors.extend(loose_errors.iter().cloned());
            // A reply the loop detector cut before any call read failed by looping, not by
            // its form (under the grammar its call was never sampled): the model is told
            // that, and no parse error is reported; the trajectory keeps the cut.
            let cut_before_call = if record.actions.is_empty() { record.cut.clone() } else { None };
            if cut_before_call.is_some() {
                record.parse_errors.clear();
            }
            for err in &record.parse_errors {
                self.emit(Event::ParseError { turn, message: err.message.clone() });
            }
            if record.actions.is_empty() {
                self.parse_failures += 1;
                let mut observations = Vec::new();
                if let Some(why) = &cut_before_call {
                    observations.push(format!(
                        "<reply_cut>\n{why}, before it called a tool; nothing ran. Reply with one \
                         tool call and few words.\n</reply_cut>"
                    ));
                } else {
                    for call in &planned {
                        if let Err(e) = &call.action {
                            self.push_observation(call.call_id.as_deref(), e.to_observation(), &mut observations);
                        }
                    }
                    observations.extend(loose_errors.iter().map(ActionParseError::to_observation));
                }
                self.turn_results.extend(observations.iter().cloned());
                let verdict = self.loops.observe(&response.text, &self.turn_results);
                if verdict == LoopVerdict::Warn {
                    observations.push(self.loop_warning());
                }
                if !observations.is_empty() {
                    self.messages.push(ChatMessage::new(Role::User, observations.join("\n\n")));
                }
                self.writer.turn(&record);
                if self.parse_failures >= self.cfg.limits.max_parse_failures {
                    return TaskEnd::Stopped(EndReason::ParseFailures);
                }
                if verdict == LoopVerdict::Stop {
                    return TaskEnd::Stopped(EndReason::Repetition);
                }
                continue;
            }
            self.parse_failures = 0;
            let mut observations: Vec<String> = Vec::new();
            let mut end = None;
            let mut ran = 0;
            let mut action_index = 0;
            for call in &planned {
                ran += 1;
                let action = match &call.action {
                    Ok(action) => action,
                    Err(e) => {
                        self.push_observation(call.call_id.as_deref(), e.to_observation(), &mut observations);
                        continue;
                    }
                };
                action_index += 1;
                let event_id = format!("{turn}.{action_index}");
                match self.run_action(&event_id, action).await {
                    Ok((obs, finish)) => {
                        let text = match call.call_id {
                            Some(_) => unwrap_observation(&obs.tool, &obs.observation).to_string(),
                            None => obs.observation.clone(),
                        };
                        self.push_observation(call.call_id.as_deref(), text, &mut observations);
                        record.observations.push(obs);
                        if let Some(msg) = finish {
                            end = Some(TaskEnd::Finished(msg));
                            break;
                        }
                        if let Some(e) = self.flags_end() {
                            end = Some(e);
                            break;
                        }
                    }
                    Err(message) => {
                        self.emit(Event::Error { message, fatal: true });
                        end = Some(TaskEnd::Stopped(EndReason::Error));
                        break;
                    }
                }
            }
            // Every native call gets an answer, also those an earlier call stopped: APIs
            // refuse a conversation with an unanswered call.
            for call in planned.iter().skip(ran) {
                let note = "<parse_error>\nthe call did not run: an earlier call ended the turn\n</parse_error>";
                self.push_observation(call.call_id.as_deref(), note.to_string(), &mut Vec::new());
            }
            observations.extend(loose_errors.iter().map(ActionParseError::to_observation));
            self.turn_results.extend(observations.iter().cloned());
            let verdict =
                if end.is_none() { self.loops.observe(&response.text, &self.turn_results) } else { LoopVerdict::Fine };
            // After the loop detector: its fingerprint of the turn stays what the calls returned.
            let repeats = self.repeats.observe(turn, &record.observations, self.finish_example().as_deref());
            record.repeated_calls = repeats.repeated;
            if end.is_none() && self.cfg.repeat_notes {
                observations.extend(repeats.notes);
            }
            if verdict == LoopVerdict::Warn {
                observations.push(self.loop_warning());
            }
            if !observations.is_empty() {
                self.messages.push(ChatMessage::new(Role::User, observations.join("\n\n")));
            }
            self.writer.turn(&record);
            if let Some(end) = end {
                return end;
            }
            if verdict == LoopVerdict::Stop {
                return TaskEnd::Stopped(EndReason::Repetition);
            }
        }
    }

    /// Letters of a reply that nothing the model was shown had (the system prompt, the
    /// user's messages, the observations; its own earlier replies do not count as shown).
    fn foreign_letters(&self, response: &agent_llm::ChatResponse) -> Option<String> {
        let mut shown = ShownLetters::default();
        shown.show(&self.cfg.system_prompt);
        for m in self.messages.iter().filter(|m| m.role != Role::Assistant) {
            shown.show(&m.content);
        }
        let mut reply = response.text.clone();
        for call in &response.tool_calls {
            reply.push_str(&call.arguments.to_string());
        }
        Some(shown.foreign_in(&reply)).filter(|s| !s.is_empty())
    }

    fn request(&self) -> ChatRequest {
        let mut messages = Vec::with_capacity(self.messages.len() + 1);
        messages.push(ChatMessage::new(Role::System, self.cfg.system_prompt.clone()));
        messages.extend(self.messages.iter().cloned());
        let tools = if self.cfg.approval == ApprovalMode::Plan {
            plan_mode::plan_tools(&self.tools)
        } else {
            self.tools.clone()
        };
        // A headless run asks again after a reply without a call; the grammar spares it the turn.
        let must_call = self.cfg.end_after_first_task;
        let grammar = if self.cfg.constrain_calls {
            reply_grammar(self.cfg.tool_format, &tools, &self.specs, must_call)
        } else {
            None
        };
        ChatRequest {
            messages,
            sampling: SamplingParams {
                max_tokens: Some(self.cfg.limits.max_reply_tokens),
                temperature: self.cfg.limits.temperature,
                ..Default::default()
            },
            tools,
            grammar,
        }
    }
}
