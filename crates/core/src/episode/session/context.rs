//! Keeping the conversation inside the model's context window: eliding old
//! observations, shortening long messages, compacting on request, and reporting a
//! local engine's progress through a long prompt.

use std::future::Future;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::{race, Session};
use agent_llm::{estimate_tokens, ChatMessage, FinishReason, ModelBackend, Role};
use agent_protocol::Event;

impl Session {
    /// Elides the oldest observations until the prompt fits the context window.
    pub(super) fn fit_context(&mut self) -> bool {
        let budget = self.cfg.limits.context_tokens.saturating_sub(u64::from(self.cfg.limits.max_reply_tokens));
        const ELIDED: &str = "[observation elided to fit the context window]";
        let mut i = 1;
        while self.prompt_estimate() > budget {
            // Never elide the first user message (the task) or the latest observation.
            while i + 1 < self.messages.len()
                && (!matches!(self.messages[i].role, Role::User | Role::Tool) || self.messages[i].content == ELIDED)
            {
                i += 1;
            }
            if i + 1 >= self.messages.len() {
                return self.shorten_messages(budget);
            }
            self.messages[i].content = ELIDED.into();
        }
        true
    }

    /// When eliding observations was not enough: cuts the middle out of long messages,
    /// oldest first (the task and the latest message last), until the conversation fits.
    fn shorten_messages(&mut self, budget: u64) -> bool {
        const KEEP: usize = 2000;
        let n = self.messages.len();
        // Oldest first; the task (0) and the latest message (n - 1) go last.
        let order: Vec<usize> = (1..n.saturating_sub(1)).chain([0, n.saturating_sub(1)]).filter(|&i| i < n).collect();
        for i in order {
            if self.prompt_estimate() <= budget {
                return true;
            }
            let content = &self.messages[i].content;
            if content.len() <= KEEP * 2 {
                continue;
            }
            let mut head = KEEP;
            while !content.is_char_boundary(head) {
                head -= 1;
            }
            let mut tail = content.len() - KEEP / 2;
            while !content.is_char_boundary(tail) {
                tail += 1;
            }
            let cut = tail - head;
            self.messages[i].content =
                format!("{}\n[… {cut} bytes cut to fit the context window …]\n{}", &content[..head], &content[tail..]);
        }
        self.prompt_estimate() <= budget
    }

    /// The estimated tokens of the next prompt: the system prompt and every message,
    /// with a few tokens of chat-template framing each.
    fn prompt_estimate(&self) -> u64 {
        estimate_tokens(&self.cfg.system_prompt)
            + self.messages.iter().map(|m| estimate_tokens(&m.content) + 4).sum::<u64>()
    }

    pub(super) async fn compact(&mut self) {
        // Every outcome is reported: the front end waits for one.
        if self.messages.is_empty() {
            self.emit(Event::Notice { message: "nothing to compact yet: the conversation is empty".into() });
            return;
        }
        let mut request = self.request();
        request.messages.push(ChatMessage::new(
            Role::User,
            "Summarise the work so far for yourself: the task, what was done, what was learned, and what remains. Reply with the summary only, no actions.",
        ));
        let cancel = CancellationToken::new();
        let model = self.model.clone();
        let mut ignore = |_: &str| {};
        let call = model.chat(&request, &mut ignore, &cancel);
        match race(call, &mut self.ops, &cancel, self.deadline, &mut self.flags, &mut self.queued).await {
            Ok(resp) if resp.finish_reason != FinishReason::Cancelled => {
                self.usage.add(resp.usage);
                self.messages = vec![ChatMessage::new(
                    Role::User,
                    format!("Summary of the conversation so far (older messages were compacted):\n{}", resp.text),
                )];
                self.emit(Event::Notice { message: "history compacted".into() });
            }
            Ok(_) => {
                self.emit(Event::Notice { message: "compacting was interrupted; the history is unchanged".into() })
            }
            Err(e) => self.emit(Event::Error { message: format!("compacting failed: {e}"), fatal: false }),
        }
    }
}

/// How often a model call in flight is asked how far its prompt is.
const PROGRESS_POLL: Duration = Duration::from_millis(250);

/// Drives the model call `call`, reporting the backend's prompt progress whenever it
/// changes (the backend cannot call back: its streaming callback carries text only).
pub(super) async fn with_prompt_progress<T>(
    call: impl Future<Output = T>,
    model: &dyn ModelBackend,
    mut report: impl FnMut(agent_llm::PromptProgress),
) -> T {
    tokio::pin!(call);
    let mut tick = tokio::time::interval(PROGRESS_POLL);
    let mut last = None;
    loop {
        tokio::select! {
            out = &mut call => return out,
            _ = tick.tick() => {
                let now = model.prompt_progress();
                if let Some(p) = now.filter(|p| Some(*p) != last) {
                    report(p);
                }
                last = now;
            }
        }
    }
}
