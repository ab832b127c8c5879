//! Checkpoints and `/rewind` in the UI: before each message the runner records the
//! workspace's files; `/rewind` (or `Esc Esc` on an empty composer) lists the
//! checkpoints, then asks what to restore: the code, the conversation, or both. Every
//! rewind adds a checkpoint of the state it left, so a rewind is undone the same way.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use agent_llm::ChatMessage;

use super::app::{App, Effect};
use super::cell::CellKind;
use super::popup::{Popup, PopupKind};
use super::wrap::truncate;

/// The longest pause between the two presses of `Esc Esc`.
const DOUBLE_ESC: Duration = Duration::from_millis(800);

/// What a rewind restores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RewindMode {
    /// The files and the conversation.
    Both,
    /// The conversation only; the files stay as they are.
    Conversation,
    /// The files only; the conversation goes on.
    Code,
}

impl RewindMode {
    const ALL: [RewindMode; 3] = [RewindMode::Both, RewindMode::Conversation, RewindMode::Code];

    /// Whether the files are restored.
    pub fn code(self) -> bool {
        matches!(self, RewindMode::Both | RewindMode::Code)
    }

    /// Whether the conversation is restored.
    pub fn conversation(self) -> bool {
        matches!(self, RewindMode::Both | RewindMode::Conversation)
    }

    fn label(self) -> (&'static str, &'static str) {
        match self {
            RewindMode::Both => ("code and conversation", "files and transcript as they were"),
            RewindMode::Conversation => ("conversation only", "the files stay as they are now"),
            RewindMode::Code => ("code only", "the conversation goes on"),
        }
    }
}

/// The conversation at a rewind, kept so that the rewind can be undone.
#[derive(Debug, Clone)]
pub struct SavedConversation {
    pub cells: Vec<CellKind>,
    pub messages: Vec<ChatMessage>,
}

/// A point to go back to.
#[derive(Debug, Clone)]
pub struct Checkpoint {
    /// The message it precedes (or what the rewind undone was).
    pub label: String,
    /// The files' snapshot in the checkpoint store (`None` when it failed).
    pub commit: Option<String>,
    /// Transcript cells before the message.
    pub cells: usize,
    /// Conversation messages before the message (told by the core when the work starts).
    pub history: Option<usize>,
    /// The whole conversation, for the checkpoint a rewind leaves.
    pub saved: Option<SavedConversation>,
    /// `HH:MM` (UTC) when it was taken.
    pub at: String,
}

/// `HH:MM` now, UTC.
pub fn clock() -> String {
    let secs = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    format!("{:02}:{:02}", secs / 3600 % 24, secs / 60 % 60)
}

/// A message's first line, cut to fit a popup line.
fn short(text: &str) -> String {
    truncate(text.lines().next().unwrap_or_default().trim(), 49)
}

impl App {
    /// A checkpoint before the message just shown (the last user cell), its files'
    /// snapshot being `commit`.
    pub fn checkpoint_before_last_message(&mut self, commit: Option<String>) {
        let Some((cells, label)) = self.last_message() else { return };
        self.checkpoints.push(Checkpoint { label, commit, cells, history: None, saved: None, at: clock() });
    }

    /// The label of the message the latest checkpoint precedes.
    pub fn last_message_label(&self) -> String {
        self.last_message().map(|(_, label)| label).unwrap_or_default()
    }

    /// The index of the last user cell and its label.
    fn last_message(&self) -> Option<(usize, String)> {
        let last = self.transcript.len().checked_sub(1)?;
        self.transcript.cells().rev().enumerate().find_map(|(back, c)| match c {
            CellKind::User { text } => Some((last - back, short(text))),
            _ => None,
        })
    }

    /// The core says how long the conversation was when the latest message's work began.
    pub(super) fn task_started(&mut self, history_len: u64) {
        if let Some(c) = self.checkpoints.iter_mut().rev().find(|c| c.saved.is_none()) {
            c.history.get_or_insert(history_len as usize);
        }
    }

    /// `Esc` on an empty composer: the second one within a moment opens `/rewind`.
    pub(super) fn escape_on_empty(&mut self) {
        match self.last_esc.take() {
            Some(t) if t.elapsed() < DOUBLE_ESC => self.open_rewind(),
            _ => self.last_esc = Some(Instant::now()),
        }
    }

    /// Opens the list of checkpoints, newest first.
    pub fn open_rewind(&mut self) {
        if self.busy {
            self.hint = Some("the agent is working: Esc interrupts it, then rewind".into());
            return;
        }
        if self.checkpoints.is_empty() {
            self.info("no checkpoints yet: one is taken before each message you send");
            return;
        }
        let items = self
            .checkpoints
            .iter()
            .rev()
            .map(|c| {
                let what = if c.saved.is_some() { "undoes that rewind" } else { "before this message" };
                (c.label.clone(), format!("{what} · {}", c.at))
            })
            .collect();
        self.popup = Some(Popup { kind: PopupKind::Rewind, items, selected: 0 });
    }

    /// Enter on a rewind popup: pick the checkpoint, then what to restore.
    pub(super) fn accept_rewind(&mut self, popup: Popup) -> Vec<Effect> {
        match popup.kind {
            PopupKind::Rewind => {
                let index = self.checkpoints.len().saturating_sub(1 + popup.selected);
                let items =
                    RewindMode::ALL.iter().map(|m| (m.label().0.to_string(), m.label().1.to_string())).collect();
                self.popup = Some(Popup { kind: PopupKind::RewindMode(index), items, selected: 0 });
                Vec::new()
            }
            PopupKind::RewindMode(index) => {
                let mode = RewindMode::ALL.get(popup.selected).copied().unwrap_or(RewindMode::Both);
                vec![Effect::Rewind { index, mode }]
            }
            _ => Vec::new(),
        }
    }
}
