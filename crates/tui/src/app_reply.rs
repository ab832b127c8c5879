//! How a model's reply reaches the transcript: its deltas go through the reply cell's
//! [`CallFilter`], so a call's text is drawn only as its tool cell, unless the core
//! could not read the reply's calls.

use std::time::Instant;

use super::App;
use crate::call_filter::CallFilter;
use crate::cell::CellKind;

impl App {
    /// A piece of the streaming reply.
    pub(super) fn reply_delta(&mut self, text: &str) {
        self.prompt_progress = None;
        let (started, chars) = self.stream.get_or_insert_with(|| (Instant::now(), 0));
        *chars += text.len();
        let secs = started.elapsed().as_secs_f64();
        if secs > 0.2 {
            // Four bytes per token, as the core's own estimate.
            self.status.tokens_per_sec = Some(*chars as f64 / 4.0 / secs);
        }
        if let Some(CellKind::Assistant { reply, streaming: true }) = self.transcript.last_mut() {
            reply.push(text);
        }
    }

    /// The reply as the core keeps it: it replaces the streamed one (a reply cut for
    /// repeating itself is shorter); a resumed session's replies come only this way.
    pub(super) fn reply_message(&mut self, text: &str) {
        self.stream = None;
        let last_streaming =
            matches!(self.transcript.cells().next_back(), Some(CellKind::Assistant { streaming: true, .. }));
        if last_streaming {
            if let Some(CellKind::Assistant { reply, streaming }) = self.transcript.last_mut() {
                *reply = CallFilter::from_text(text);
                *streaming = false;
            }
        } else {
            self.transcript.push(CellKind::assistant(text));
        }
    }

    /// The core could not read the reply's calls: the user sees them as written.
    pub(super) fn parse_error(&mut self, message: &str) {
        self.transcript.last_reply_mut(CallFilter::reveal_calls);
        self.error(format!("the reply had no valid action: {message}"));
    }
}
