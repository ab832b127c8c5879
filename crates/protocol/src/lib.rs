//! Typed messages between front ends and the core (the SQ/EQ pattern of codex-rs).
//!
//! Front ends (headless `agent run`, the TUI, bench, train) send [`Op`]s into a running
//! session and receive [`Event`]s out of it; none of them touches the loop directly.

pub mod chat;
pub mod task_filter;
pub mod trajectory;

use serde::{Deserialize, Serialize};

/// A request from a front end to the core.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Op {
    /// A user message that starts (or continues) work until the agent finishes or stops.
    UserTurn { text: String },
    /// Stop the running generation or tool call at once; the session stays usable.
    Interrupt,
    /// The user's answer to an [`Event::ApprovalRequest`].
    Approval { call_id: String, decision: ApprovalDecision },
    /// Summarise the history to free context.
    Compact,
    /// End the session: interrupts what runs and emits [`Event::EpisodeEnd`].
    Shutdown,
    /// Change the approval mode from the next action on (Shift+Tab in the UI; entering
    /// or leaving plan mode).
    SetApprovalMode { mode: ApprovalMode },
}

/// How the user answered an approval request.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalDecision {
    /// Run this call.
    Approve,
    /// Run this call and every later call of the same tool without asking.
    ApproveAlways,
    /// Do not run it; the model is told it was denied.
    Deny,
}

/// Which actions need the user's approval before they run.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "kebab-case")]
pub enum ApprovalMode {
    /// Every bash command and file write asks.
    Ask,
    /// File edits run; bash asks.
    AutoEdit,
    /// Everything runs (the sandbox is the safety boundary).
    #[default]
    Auto,
    /// Research and plan only: files are not changed, every bash command asks, and the
    /// turn ends with a plan ([`Event::PlanProposed`]) for the user to accept or reject.
    Plan,
}

impl ApprovalMode {
    /// The mode's name as typed on the command line and shown in the UI.
    pub fn name(self) -> &'static str {
        match self {
            ApprovalMode::Ask => "ask",
            ApprovalMode::AutoEdit => "auto-edit",
            ApprovalMode::Auto => "auto",
            ApprovalMode::Plan => "plan",
        }
    }
}

/// Why an episode ended.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum EndReason {
    /// The model called `finish`.
    Finished,
    /// The turn limit was reached.
    MaxTurns,
    /// The token budget was spent.
    TokenBudget,
    /// The conversation no longer fit the model's context window, even with old
    /// observations elided and long messages shortened.
    ContextExhausted,
    /// The wall-clock limit was reached.
    WallClock,
    /// Too many consecutive replies without a valid action.
    ParseFailures,
    /// The model kept repeating the same replies with the same results after a warning.
    Repetition,
    /// The user interrupted and no further turn followed.
    Interrupted,
    /// The front end asked the session to end.
    Shutdown,
    /// The model or the sandbox failed.
    Error,
}

impl EndReason {
    /// A short human phrase for progress output.
    pub fn describe(self) -> &'static str {
        match self {
            EndReason::Finished => "the agent called finish",
            EndReason::MaxTurns => "the turn limit was reached",
            EndReason::TokenBudget => "the token budget was spent",
            EndReason::ContextExhausted => "the conversation no longer fit the model's context window",
            EndReason::WallClock => "the wall-clock limit was reached",
            EndReason::ParseFailures => "too many consecutive replies without a valid action",
            EndReason::Repetition => "the agent kept repeating the same replies and results after a warning",
            EndReason::Interrupted => "interrupted",
            EndReason::Shutdown => "shut down",
            EndReason::Error => "an error stopped the episode",
        }
    }
}

/// Token counts of one model call or of a whole episode.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct TokenUsage {
    /// Tokens in the prompt sent to the model.
    pub prompt_tokens: u64,
    /// Tokens the model generated.
    pub completion_tokens: u64,
}

impl TokenUsage {
    /// Adds another usage to this one.
    pub fn add(&mut self, other: TokenUsage) {
        self.prompt_tokens += other.prompt_tokens;
        self.completion_tokens += other.completion_tokens;
    }
}

/// A setting of the project's files that was not used: the project is not trusted, and
/// the setting would run something on this computer or send something off it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct IgnoredSetting {
    /// What kind of setting (`hook`, `model`, `api_key`, `mcp_server`, `system_prompt`,
    /// `sandbox`, `image_map`, ...).
    pub kind: String,
    /// The file that asked for it, relative to the project.
    pub file: String,
    /// What it is, in plain words.
    pub what: String,
}

/// Something that happened in the core, for front ends to show or record.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// The session is ready: sandbox up, model resolved.
    SessionConfigured { run_id: String, model: String, image: String, container: String },
    /// The work on a user message begins; the conversation held `history_len` messages
    /// before it (a front end's checkpoint can rewind the conversation to there).
    TaskStarted { history_len: u64 },
    /// A model turn begins.
    TurnStarted { turn: u32 },
    /// A piece of streamed assistant text.
    AssistantDelta { turn: u32, text: String },
    /// A local engine's progress through the turn's prompt (before any text streams):
    /// `evaluated` of `total` tokens, a reused cached prefix included.
    PromptProgress { turn: u32, evaluated: u64, total: u64 },
    /// The whole assistant message of a turn.
    AssistantMessage { turn: u32, text: String },
    /// A reply contained no valid action or a malformed one.
    ParseError { turn: u32, message: String },
    /// A tool call is about to run.
    ToolCallBegin { call_id: String, tool: String, args: serde_json::Value },
    /// Live output of a running tool call.
    ToolCallOutput { call_id: String, chunk: String },
    /// A tool call ended.
    ToolCallEnd {
        call_id: String,
        tool: String,
        /// Exit code for bash; 0/1 for other tools.
        exit_code: Option<i64>,
        /// The observation the model will see.
        observation: String,
        duration_ms: u64,
        timed_out: bool,
    },
    /// The core waits for an [`Op::Approval`] before running this call. A `reason`
    /// (from a hook, or plan mode) means the user must be asked whatever the front
    /// end's own mode would do.
    ApprovalRequest {
        call_id: String,
        tool: String,
        args: serde_json::Value,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// Plan mode's work ended with this plan; the front end asks the user to accept it
    /// (and leave plan mode) or to say what to change.
    PlanProposed { plan: String },
    /// Token counts of the latest model call and the running total.
    TokenUsage { turn: u32, last: TokenUsage, total: TokenUsage, decode_tokens_per_sec: Option<f64> },
    /// Work stopped after an interrupt; the session accepts a new turn.
    Interrupted,
    /// The work on the last user turn is over (answered, finished, interrupted or
    /// stopped by a limit) and the session waits for the next turn. Interactive sessions
    /// only: a headless one ends with [`Event::EpisodeEnd`] instead.
    TaskComplete,
    /// A notice for the user (image substitutions, sandbox resets, ...).
    Notice { message: String },
    /// Settings of an untrusted project that the session does not use; `hint` says how
    /// to trust it.
    ProjectSettingsIgnored { project: String, ignored: Vec<IgnoredSetting>, hint: String },
    /// Something failed; `fatal` errors end the episode.
    Error { message: String, fatal: bool },
    /// The episode ended.
    EpisodeEnd { reason: EndReason, turns: u32, usage: TokenUsage, finish_message: Option<String> },
}

#[cfg(test)]
mod tests {
    use super::chat::{ChatMessage, Role};
    use super::*;

    /// `agent run --json` prints events in this shape; scripts read it.
    #[test]
    fn ops_and_events_are_tagged_json_objects() {
        let op = Op::UserTurn { text: "hi".into() };
        let json = serde_json::to_value(&op).unwrap();
        assert_eq!(json, serde_json::json!({"op": "user_turn", "text": "hi"}));
        assert_eq!(serde_json::from_value::<Op>(json).unwrap(), op);
        let event = Event::TurnStarted { turn: 3 };
        let text = serde_json::to_string(&event).unwrap();
        assert!(text.contains("\"turn_started\"") && text.contains("\"turn\":3"), "{text}");
    }

    #[test]
    fn chat_messages_leave_out_empty_tool_fields() {
        let m = ChatMessage::new(Role::User, "hi");
        assert_eq!(serde_json::to_value(&m).unwrap(), serde_json::json!({"role": "user", "content": "hi"}));
        let r = ChatMessage::tool_result("call-1", "ok");
        let back: ChatMessage = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(back, r);
        assert_eq!(back.tool_call_id.as_deref(), Some("call-1"));
    }
}
