//! `!cmd`: shell commands the user runs in the sandbox from the composer, their live
//! output, and the note that tells the model about them with the next message.

use serde_json::Value;

use super::app::{App, INTERRUPTING};
use super::cell::{CellKind, ToolStatus};

/// The most bytes of a `!cmd`'s output passed on to the model.
const SHELL_NOTE_BYTES: usize = 4000;
/// How much of a running `!cmd`'s output its cell keeps.
const SHELL_LIVE_BYTES: usize = 64 * 1024;
/// How a `!cmd` note passed on to the model starts and ends.
const SHELL_NOTE_START: &str = "(I ran `";
const SHELL_NOTE_END: &str = "</bash_output>\n\n";

/// A sent message without the `!cmd` notes put before it and the `@path` files after
/// it (for showing it again).
pub fn strip_shell_notes(text: &str) -> &str {
    let mut s = text;
    while s.starts_with(SHELL_NOTE_START) {
        match s.find(SHELL_NOTE_END) {
            Some(i) => s = &s[i + SHELL_NOTE_END.len()..],
            None => break,
        }
    }
    super::attach::without_attachments(s)
}

impl App {
    /// Whether a `!cmd` is running.
    pub fn shell_running(&self) -> bool {
        self.transcript
            .cells()
            .any(|c| matches!(c, CellKind::Tool(t) if t.tool == "!" && t.status == ToolStatus::Running))
    }

    /// Output of a running `!cmd`, as it arrives (the cell keeps the last
    /// [`SHELL_LIVE_BYTES`]; the whole capped output replaces it at the end).
    pub fn shell_output(&mut self, id: &str, chunk: &str) {
        let Some(t) = self.transcript.tool_mut(id) else { return };
        t.output.push_str(chunk);
        if t.output.len() > SHELL_LIVE_BYTES {
            let mut cut = t.output.len() - SHELL_LIVE_BYTES;
            while !t.output.is_char_boundary(cut) {
                cut += 1;
            }
            t.output.drain(..cut);
        }
    }

    /// A `!cmd` ended (by itself, or stopped by Esc when `interrupted`).
    pub fn shell_done(
        &mut self,
        id: &str,
        output: String,
        exit_code: Option<i64>,
        interrupted: bool,
        duration_ms: u64,
    ) {
        if self.hint.as_deref() == Some(INTERRUPTING) && !self.busy {
            self.hint = None;
        }
        let Some(t) = self.transcript.tool_mut(id) else { return };
        let cmd = t.args.get("cmd").and_then(Value::as_str).unwrap_or_default().to_string();
        let mut shown = output.clone();
        if shown.len() > SHELL_NOTE_BYTES {
            let mut end = SHELL_NOTE_BYTES;
            while !shown.is_char_boundary(end) {
                end -= 1;
            }
            shown.truncate(end);
            shown.push_str("\n[… output cut]");
        }
        t.output = output;
        t.status = if interrupted {
            ToolStatus::Interrupted
        } else {
            ToolStatus::Done { exit_code, duration_ms, timed_out: exit_code.is_none() }
        };
        let code = match (interrupted, exit_code) {
            (true, _) => "none (I interrupted it)".to_string(),
            (false, Some(c)) => c.to_string(),
            (false, None) => "none".to_string(),
        };
        self.shell_notes.push(format!(
            "{SHELL_NOTE_START}{cmd}` in the sandbox myself; exit code {code}; its output:)\n<bash_output>\n{}\n{SHELL_NOTE_END}",
            shown.trim_end()
        ));
    }
}
