//! A model call in flight: its deltas go to the front end and to the repetition detector
//! (`episode::stream_loop`), a reply that starts to loop is cut, and interrupts, shutdown
//! and the wall clock stop the call.

use std::collections::VecDeque;
use std::future::Future;
use std::time::Instant;

use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};
use tokio_util::sync::CancellationToken;

use super::context::with_prompt_progress;
use super::{Flags, Session};
use crate::episode::stream_loop::{LoopCut, StreamLoopDetector};
use crate::episode::trajectory::{TurnFinish, TurnRecord};
use agent_llm::{estimate_tokens, ChatMessage, ChatRequest, ChatResponse, FinishReason, LlmError};
use agent_protocol::{Event, Op, TokenUsage};

/// A reply as the loop keeps it.
#[derive(Debug)]
pub(super) struct KeptReply {
    /// The reply; after a cut, its text is what preceded the loop.
    pub(super) response: ChatResponse,
    /// Why the reply was cut short, for the trajectory; `None` when it is kept whole.
    pub(super) cut: Option<String>,
    /// The cut reply's token ids were dropped (see [`crate::episode::TurnRecord`]).
    pub(super) token_ids_dropped: bool,
}

impl KeptReply {
    /// The finish reason the trajectory records: `repetition` for a reply cut while it
    /// streamed, whatever the backend said about the generation it was asked to stop.
    pub(super) fn recorded_finish_reason(&self) -> TurnFinish {
        if self.cut.is_some() && self.response.finish_reason != FinishReason::Cancelled {
            return TurnFinish::Repetition;
        }
        self.response.finish_reason.into()
    }

    /// Tells the front end the reply as kept (it replaces the streamed text) and, after a
    /// cut, why the reply ends there.
    pub(super) fn announce(&self, turn: u32, events: &UnboundedSender<Event>) {
        let _ = events.send(Event::AssistantMessage { turn, text: self.response.text.clone() });
        if let Some(why) = &self.cut {
            let _ = events.send(Event::Notice { message: why.clone() });
        }
    }

    /// The trajectory's record of this reply, before its calls run.
    pub(super) fn record(&self, turn: u32, user: ChatMessage, model_ms: u64) -> TurnRecord {
        let r = &self.response;
        TurnRecord {
            turn,
            user,
            assistant: r.text.clone(),
            finish_reason: self.recorded_finish_reason(),
            usage: r.usage,
            model_ms,
            actions: Vec::new(),
            parse_errors: Vec::new(),
            observations: Vec::new(),
            loss_mask: r.completion_token_ids.as_ref().map(|ids| vec![1; ids.len()]),
            completion_token_ids: r.completion_token_ids.clone(),
            prompt_token_ids: r.prompt_token_ids.clone(),
            tool_calls: r.tool_calls.clone(),
            cut: self.cut.clone(),
            token_ids_dropped: self.token_ids_dropped,
            repeated_calls: 0,
            foreign_letters: None,
        }
    }
}

/// Watches one reply's stream.
pub(super) struct ReplyWatch {
    turn: u32,
    events: UnboundedSender<Event>,
    detector: StreamLoopDetector,
    /// Cancels this generation only. It is a child of the loop's token, which interrupts,
    /// shutdown and the wall clock cancel, so those still stop the generation, while a cut
    /// leaves the loop's token alone: the loop tells a cut from an interrupt.
    generation: CancellationToken,
}

impl ReplyWatch {
    /// A watch over a generation stopped by `cancel` or by a loop in its text.
    pub(super) fn new(turn: u32, events: UnboundedSender<Event>, cancel: &CancellationToken) -> Self {
        Self { turn, events, detector: StreamLoopDetector::new(), generation: cancel.child_token() }
    }

    /// The token to hand the backend.
    pub(super) fn token(&self) -> CancellationToken {
        self.generation.clone()
    }

    /// Takes a delta: forwards it to the front end and feeds the detector. Once the reply
    /// loops the generation is cancelled and nothing past the cut is forwarded (a backend
    /// may send a few more pieces before it sees the cancellation).
    pub(super) fn on_delta(&mut self, piece: &str) {
        let already = self.detector.cut().is_some();
        let from = self.detector.text().len();
        let keep = self.detector.push(piece).map(|c| c.keep);
        if already {
            return;
        }
        let shown = match keep {
            Some(keep) => {
                self.generation.cancel();
                piece.get(..keep.saturating_sub(from).min(piece.len())).unwrap_or("")
            }
            None => piece,
        };
        if !shown.is_empty() {
            let _ = self.events.send(Event::AssistantDelta { turn: self.turn, text: shown.to_string() });
        }
    }

    /// The reply to keep from the call's `result`. `stopped`: the loop's own token stopped
    /// the call (interrupt, shutdown, wall clock); the reply then still ends as
    /// interrupted, but without a loop at its end, also one too short to have been cut
    /// while streaming.
    pub(super) fn settle(
        mut self,
        result: Result<ChatResponse, LlmError>,
        stopped: bool,
        request: &ChatRequest,
    ) -> Result<KeptReply, LlmError> {
        if stopped {
            let response = result?;
            let cut = self.detector.settled();
            return Ok(self.keep(response, cut));
        }
        if self.detector.cut().is_none() {
            let response = result?;
            let cut = self.detector.finish().cloned();
            return Ok(self.keep(response, cut));
        }
        // The generation was cancelled by the cut. A backend may answer a cancellation with
        // an error (Anthropic's does): what streamed is the reply then.
        let response = result.unwrap_or_else(|_| self.streamed(request));
        let cut = self.detector.cut().cloned();
        let mut kept = self.keep(response, cut);
        kept.response.finish_reason = FinishReason::Stop;
        Ok(kept)
    }

    /// `response` cut at `cut`: the streamed text before the loop, no structured calls (a
    /// cancelled stream's calls may be incomplete; the kept text is parsed for calls as
    /// any reply), and no token ids, which cannot be matched to the kept text exactly:
    /// deltas are not tokens (an engine holds back text that may begin a stop string).
    fn keep(&self, mut response: ChatResponse, cut: Option<LoopCut>) -> KeptReply {
        let Some(cut) = cut else { return KeptReply { response, cut: None, token_ids_dropped: false } };
        response.text = self.detector.text().get(..cut.keep).unwrap_or_default().to_string();
        response.tool_calls.clear();
        let token_ids_dropped = response.completion_token_ids.take().is_some();
        KeptReply { response, cut: Some(cut.describe()), token_ids_dropped }
    }

    /// A response made of what streamed, for a backend that answered the cut with an error.
    fn streamed(&self, request: &ChatRequest) -> ChatResponse {
        let text = self.detector.text().to_string();
        ChatResponse {
            usage: TokenUsage {
                prompt_tokens: request.messages.iter().map(|m| estimate_tokens(&m.content)).sum(),
                completion_tokens: estimate_tokens(&text),
            },
            text,
            finish_reason: FinishReason::Cancelled,
            completion_token_ids: None,
            prompt_token_ids: None,
            decode_tokens_per_sec: None,
            tool_calls: Vec::new(),
        }
    }
}

impl Session {
    /// Streams one model reply for `turn` and returns the reply to keep and the
    /// milliseconds the model took.
    pub(super) async fn stream_reply(&mut self, turn: u32) -> (Result<KeptReply, LlmError>, u64) {
        let request = self.request();
        let cancel = CancellationToken::new();
        let model_started = Instant::now();
        let events = self.events.clone();
        let mut watch = ReplyWatch::new(turn, events.clone(), &cancel);
        let generation = watch.token();
        let mut on_delta = |t: &str| watch.on_delta(t);
        let model = self.model.clone();
        let call = with_prompt_progress(model.chat(&request, &mut on_delta, &generation), &*model, |p| {
            let _ = events.send(Event::PromptProgress { turn, evaluated: p.evaluated, total: p.total });
        });
        let result = race(call, &mut self.ops, &cancel, self.deadline, &mut self.flags, &mut self.queued).await;
        let model_ms = model_started.elapsed().as_millis() as u64;
        (watch.settle(result, self.flags.any(), &request), model_ms)
    }
}

/// Drives `fut` while watching for interrupts, shutdown and the wall clock; each of
/// them cancels `cancel`, and the future is still awaited so it can clean up.
pub(super) async fn race<T>(
    fut: impl Future<Output = T>,
    ops: &mut UnboundedReceiver<Op>,
    cancel: &CancellationToken,
    deadline: Instant,
    flags: &mut Flags,
    queued: &mut VecDeque<Op>,
) -> T {
    tokio::pin!(fut);
    loop {
        tokio::select! {
            out = &mut fut => return out,
            op = ops.recv(), if !flags.ops_closed => match op {
                Some(Op::Interrupt) => {
                    flags.interrupted = true;
                    cancel.cancel();
                }
                Some(Op::Shutdown) => {
                    flags.shutdown = true;
                    cancel.cancel();
                }
                None => {
                    flags.ops_closed = true;
                    flags.shutdown = true;
                    cancel.cancel();
                }
                Some(other) => queued.push_back(other),
            },
            _ = tokio::time::sleep_until(deadline.into()), if !flags.wall_clock => {
                flags.wall_clock = true;
                cancel.cancel();
            }
        }
    }
}

#[cfg(test)]
#[path = "stream_tests.rs"]
mod tests;
