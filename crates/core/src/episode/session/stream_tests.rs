//! The model call with the repetition cut, driven by the scripted backend and by
//! backends that behave like the engines (token ids, one delta for the whole reply, an
//! error on cancellation). A whole session needs a sandbox (its tool executor holds a
//! shell in a container), so these tests stop at the reply the loop keeps and the record
//! it writes.

use async_trait::async_trait;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

use super::*;
use crate::episode::TrajectoryWriter;
use crate::tools::{untagged_json_calls, ToolSpecs};
use agent_llm::{ModelBackend, Role, ScriptedBackend};

const INTRO: &str = "I'll change `mean()` so that it returns 0.0 for an empty list.\n";
const BLOCK: &str = "```json\n{\"name\": \"bash\", \"arguments\": {\"cmd\": \"python3 /workspace/stats.py\"}}\n```\n";
const AGAIN: &str = "Let's run the script one last time to make sure everything works as expected.\n";

/// The reply from the issue: a call as a JSON block, then the same sentence and block
/// again and again.
fn looping_reply() -> String {
    format!("{INTRO}{BLOCK}{}", format!("{AGAIN}{BLOCK}").repeat(40))
}

fn kept_text() -> String {
    format!("{INTRO}{BLOCK}{AGAIN}")
}

fn request() -> ChatRequest {
    ChatRequest {
        messages: vec![ChatMessage::new(Role::User, "make mean() return 0.0 for an empty list")],
        ..Default::default()
    }
}

/// Runs one call of `model` through a watch; returns what the backend answered (its text
/// length, or the error), the reply kept, and the events sent.
async fn call(model: &dyn ModelBackend, stopped: bool) -> (Result<usize, String>, KeptReply, Vec<Event>) {
    let (tx, mut rx) = unbounded_channel();
    let cancel = CancellationToken::new();
    let mut watch = ReplyWatch::new(1, tx, &cancel);
    let generation = watch.token();
    let req = request();
    let result = model.chat(&req, &mut |t: &str| watch.on_delta(t), &generation).await;
    let answered = result.as_ref().map(|r| r.text.len()).map_err(|e| e.to_string());
    let kept = watch.settle(result, stopped, &req).unwrap();
    // A cut cancels the generation only, never the loop's own token.
    assert!(!cancel.is_cancelled());
    (answered, kept, drain(&mut rx))
}

fn drain(rx: &mut UnboundedReceiver<Event>) -> Vec<Event> {
    let mut out = Vec::new();
    while let Ok(e) = rx.try_recv() {
        out.push(e);
    }
    out
}

fn streamed(events: &[Event]) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            Event::AssistantDelta { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_looping_scripted_reply_is_cut_while_it_streams() {
    let model = ScriptedBackend::new(vec![looping_reply()]);
    let (answered, kept, events) = call(&model, false).await;
    // The backend stopped: it did not stream the forty copies.
    let answered = answered.unwrap();
    assert!(answered < INTRO.len() + 15 * (BLOCK.len() + AGAIN.len()), "{answered} of {}", looping_reply().len());
    assert_eq!(kept.response.text, kept_text());
    assert_eq!(kept.response.finish_reason, FinishReason::Stop);
    assert!(kept.cut.as_deref().is_some_and(|c| c.contains("repeated")), "{:?}", kept.cut);
    assert!(!kept.token_ids_dropped, "the scripted backend has no token ids");
    // The front end saw the reply until the piece that completed the third copy (the
    // final message then replaces it with the kept text), nothing after it.
    let shown = streamed(&events);
    assert!(looping_reply().starts_with(&shown) && shown.len() > kept_text().len() && shown.len() < answered);
    // The session shows the kept text in place of the streamed one, and says why.
    let (tx, mut rx) = unbounded_channel();
    kept.announce(1, &tx);
    match drain(&mut rx).as_slice() {
        [Event::AssistantMessage { turn: 1, text }, Event::Notice { message }] => {
            assert_eq!(text, &kept_text());
            assert!(message.contains("repeated the same") && message.contains("before the second copy"), "{message}");
        }
        other => panic!("expected the message and a notice, got {other:?}"),
    }
    // The call written before the loop still runs, once.
    let specs = ToolSpecs::builtin().unwrap();
    let calls = untagged_json_calls(&kept.response.text, &specs);
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0].as_ref().unwrap().tool, "bash");
}

#[tokio::test]
async fn the_trajectory_records_the_cut() {
    let model = ScriptedBackend::new(vec![looping_reply()]);
    let (_, kept, _) = call(&model, false).await;
    let record = kept.record(1, ChatMessage::new(Role::User, "task"), 5);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.jsonl");
    let mut writer = TrajectoryWriter::create(Some(&path)).unwrap();
    writer.turn(&record);
    drop(writer);
    let line: serde_json::Value = serde_json::from_str(std::fs::read_to_string(&path).unwrap().trim()).unwrap();
    assert_eq!(line["assistant"], kept_text());
    assert_eq!(line["finish_reason"], "repetition");
    assert!(line["cut"].as_str().unwrap().contains("before the second copy"), "{line}");
    // Unset, so absent: readers of older trajectories see nothing new.
    assert!(line.get("token_ids_dropped").is_none() && line.get("completion_token_ids").is_none(), "{line}");
    // A reply kept whole records neither field.
    let model = ScriptedBackend::new(vec!["All done: `mean([])` returns 0.0 now.".into()]);
    let (_, kept, events) = call(&model, false).await;
    assert_eq!(kept.response.text, "All done: `mean([])` returns 0.0 now.");
    assert_eq!(streamed(&events), kept.response.text);
    let line = serde_json::to_value(kept.record(2, ChatMessage::new(Role::User, "obs"), 1)).unwrap();
    assert!(line.get("cut").is_none() && line.get("token_ids_dropped").is_none(), "{line}");
    let (tx, mut rx) = unbounded_channel();
    kept.announce(2, &tx);
    assert_eq!(drain(&mut rx).len(), 1, "no notice for a reply kept whole");
    assert_eq!(line["finish_reason"], "stop");
}

/// A backend like the trainer's policy and llama.cpp: exact token ids, and (as the
/// policy does) the whole reply in one delta after generating it.
struct OneDelta {
    text: String,
}

#[async_trait]
impl ModelBackend for OneDelta {
    fn name(&self) -> String {
        "one-delta".into()
    }

    async fn chat(
        &self,
        _request: &ChatRequest,
        on_delta: &mut (dyn for<'s> FnMut(&'s str) + Send),
        _cancel: &CancellationToken,
    ) -> Result<ChatResponse, LlmError> {
        on_delta(&self.text);
        Ok(ChatResponse {
            text: self.text.clone(),
            finish_reason: FinishReason::Length,
            usage: TokenUsage { prompt_tokens: 10, completion_tokens: 900 },
            completion_token_ids: Some((0..900).collect()),
            prompt_token_ids: Some((0..10).collect()),
            decode_tokens_per_sec: None,
            tool_calls: Vec::new(),
        })
    }
}

#[tokio::test]
async fn a_cut_reply_drops_its_token_ids() {
    let (_, kept, events) = call(&OneDelta { text: looping_reply() }, false).await;
    assert_eq!(kept.response.text, kept_text());
    assert!(kept.token_ids_dropped);
    assert_eq!(kept.response.completion_token_ids, None);
    // The prompt's ids are still exact; the usage still counts what was generated.
    assert_eq!(kept.response.prompt_token_ids.as_ref().map(Vec::len), Some(10));
    assert_eq!(kept.response.usage.completion_tokens, 900);
    assert_eq!(streamed(&events), kept_text());
    let line = serde_json::to_value(kept.record(1, ChatMessage::new(Role::User, "task"), 1)).unwrap();
    assert_eq!(line["token_ids_dropped"], true);
    assert!(line.get("loss_mask").is_none() && line.get("completion_token_ids").is_none(), "{line}");
    assert!(line.get("prompt_token_ids").is_some());
    // A reply without a loop keeps its ids and their mask.
    let (_, kept, _) = call(&OneDelta { text: "Done.".into() }, false).await;
    let line = serde_json::to_value(kept.record(1, ChatMessage::new(Role::User, "task"), 1)).unwrap();
    assert_eq!(line["loss_mask"].as_array().map(Vec::len), Some(900));
}

/// A backend that answers a cancellation with an error, as Anthropic's does.
struct ErrOnCancel;

#[async_trait]
impl ModelBackend for ErrOnCancel {
    fn name(&self) -> String {
        "err-on-cancel".into()
    }

    async fn chat(
        &self,
        _request: &ChatRequest,
        on_delta: &mut (dyn for<'s> FnMut(&'s str) + Send),
        cancel: &CancellationToken,
    ) -> Result<ChatResponse, LlmError> {
        let text = looping_reply();
        for piece in text.as_bytes().chunks(16) {
            if cancel.is_cancelled() {
                return Err(LlmError::Cancelled);
            }
            on_delta(std::str::from_utf8(piece).unwrap_or(""));
        }
        Err(LlmError::Other("the stream ran to its end: the cut did not stop it".into()))
    }
}

#[tokio::test]
async fn a_backend_that_errs_on_the_cut_still_gives_the_kept_text() {
    let (answered, kept, _) = call(&ErrOnCancel, false).await;
    assert_eq!(answered.unwrap_err(), LlmError::Cancelled.to_string());
    assert_eq!(kept.response.text, kept_text());
    assert!(kept.cut.is_some());
    assert!(kept.response.usage.completion_tokens > 0);
}

#[tokio::test]
async fn an_interrupted_reply_goes_back_without_its_repeats() {
    // Twenty copies of a short line: too few to cut while streaming, but the user stopped it.
    let line = "Let me run the tests again to check.\n";
    let (tx, mut rx) = unbounded_channel();
    let cancel = CancellationToken::new();
    let mut watch = ReplyWatch::new(3, tx, &cancel);
    let generation = watch.token();
    let text = format!("Fixed it.\n{}Let me run", line.repeat(20));
    for piece in text.split_inclusive(' ') {
        watch.on_delta(piece);
    }
    assert!(!generation.is_cancelled(), "no cut while streaming");
    // The user's interrupt cancels the loop's token, and so the generation.
    cancel.cancel();
    assert!(generation.is_cancelled());
    let response = ChatResponse {
        text: text.clone(),
        finish_reason: FinishReason::Cancelled,
        usage: TokenUsage::default(),
        completion_token_ids: Some(vec![1, 2, 3]),
        prompt_token_ids: None,
        decode_tokens_per_sec: None,
        tool_calls: Vec::new(),
    };
    let kept = watch.settle(Ok(response), true, &request()).unwrap();
    assert_eq!(kept.response.text, format!("Fixed it.\n{line}"));
    assert_eq!(kept.response.finish_reason, FinishReason::Cancelled, "still an interrupted reply");
    assert_eq!(kept.recorded_finish_reason(), agent_protocol::trajectory::TurnFinish::Cancelled);
    assert!(kept.cut.is_some() && kept.token_ids_dropped);
    assert_eq!(streamed(&drain(&mut rx)), text, "everything streamed was shown");
    // An interrupted reply without repeats is kept as it is.
    let (tx, _rx) = unbounded_channel();
    let mut watch = ReplyWatch::new(4, tx, &cancel);
    watch.on_delta("Let me look at stats.py first and th");
    let response = ChatResponse { text: "Let me look at stats.py first and th".into(), ..kept.response.clone() };
    let kept = watch.settle(Ok(response), true, &request()).unwrap();
    assert_eq!(kept.response.text, "Let me look at stats.py first and th");
    assert!(kept.cut.is_none() && !kept.token_ids_dropped);
    // An interrupted call that failed stays a failure.
    let (tx, _rx) = unbounded_channel();
    let watch = ReplyWatch::new(5, tx, &cancel);
    assert!(watch.settle(Err(LlmError::Cancelled), true, &request()).is_err());
}
