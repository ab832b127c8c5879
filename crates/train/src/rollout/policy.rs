//! The policy as a [`ModelBackend`]: the agent loop talks to it like to any model,
//! while it records the exact token ids it was prompted with and sampled
//! (token-in/token-out). Each turn's new text is tokenised on its own and appended, so
//! the transcript is never re-tokenised.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use tokenizers::Tokenizer;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::chat::{PromptRenderer, IM_END};
use super::engine::RolloutSampler;
use super::sampler::GenerateRequest;
use agent_llm::{ChatRequest, ChatResponse, FinishReason, LlmError, ModelBackend};
use agent_protocol::TokenUsage;

/// A run of tokens that forms one training sequence.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Segment {
    pub tokens: Vec<u32>,
    /// 1 for sampled tokens, 0 for prompt and tool output.
    pub mask: Vec<u8>,
    /// The sampler's log-probability of each sampled token, in order.
    pub sampler_logp: Vec<f32>,
}

impl Segment {
    /// The sampler's log-probs of the tokens the update scores: the model tokens but a
    /// first one (nothing predicts it); `None` when they were not all recorded.
    pub fn scored_sampler_logp(&self) -> Option<Vec<f32>> {
        let positions: Vec<usize> = self.mask.iter().enumerate().filter(|(_, m)| **m != 0).map(|(i, _)| i).collect();
        if positions.len() != self.sampler_logp.len() {
            return None;
        }
        Some(positions.iter().zip(&self.sampler_logp).filter(|(i, _)| **i != 0).map(|(_, lp)| *lp).collect())
    }
}

/// What a rollout's model calls produced.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Recording {
    /// Usually one; a new one starts when a prompt does not extend the previous text.
    pub segments: Vec<Segment>,
    /// Whether some reply hit the length limit before its end token.
    pub truncated: bool,
    /// Replies cut because they repeated themselves (their repeats are not trained on).
    #[serde(default)]
    pub cut_replies: usize,
    /// The rendered text the last segment's tokens stand for.
    text: String,
}

/// Sampling settings of a policy backend.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PolicySampling {
    pub temperature: f64,
    pub top_p: f64,
    pub max_new_tokens: usize,
    /// Prompt + reply tokens allowed (the model's context).
    pub context: usize,
}

/// One rollout's connection to the sampler.
pub struct PolicyBackend {
    sampler: Arc<dyn RolloutSampler>,
    tokenizer: Arc<Tokenizer>,
    renderer: PromptRenderer,
    stop: Vec<u32>,
    session: u64,
    seed: u64,
    calls: AtomicU64,
    sampling: PolicySampling,
    record: Mutex<Recording>,
}

impl PolicyBackend {
    /// A backend for one rollout; `seed` fixes its samples.
    pub fn new(
        sampler: Arc<dyn RolloutSampler>,
        tokenizer: Arc<Tokenizer>,
        renderer: PromptRenderer,
        stop: Vec<u32>,
        session: u64,
        seed: u64,
        sampling: PolicySampling,
    ) -> Self {
        PolicyBackend {
            sampler,
            tokenizer,
            renderer,
            stop,
            session,
            seed,
            calls: AtomicU64::new(0),
            sampling,
            record: Mutex::new(Recording::default()),
        }
    }

    /// What was recorded so far.
    pub fn recording(&self) -> Recording {
        self.record.lock().map(|r| r.clone()).unwrap_or_default()
    }

    fn decode(&self, ids: &[u32]) -> Result<String, LlmError> {
        self.tokenizer.decode(ids, false).map_err(|e| LlmError::Other(format!("the policy's tokenizer failed: {e}")))
    }

    /// The most tokens of `ids` whose text is at most `bytes` long (the text of a prefix
    /// grows with it, so a binary search finds it).
    fn longest_prefix_within(&self, ids: &[u32], bytes: usize) -> Result<usize, LlmError> {
        let (mut lo, mut hi) = (0usize, ids.len());
        while lo < hi {
            let mid = (lo + hi).div_ceil(2);
            if self.decode(&ids[..mid])?.len() <= bytes {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        Ok(lo)
    }

    fn encode(&self, text: &str) -> Result<Vec<u32>, LlmError> {
        self.tokenizer
            .encode(text, false)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| LlmError::Other(format!("the policy's tokenizer failed: {e}")))
    }
}

impl Drop for PolicyBackend {
    fn drop(&mut self) {
        self.sampler.close(self.session);
    }
}

#[async_trait]
impl ModelBackend for PolicyBackend {
    fn name(&self) -> String {
        "policy".to_string()
    }

    /// As the model the user runs: native calls where its chat template renders tools.
    fn native_tools(&self) -> bool {
        self.renderer.native_tools()
    }

    fn context_window(&self) -> Option<u64> {
        Some(self.sampling.context as u64)
    }

    async fn chat(
        &self,
        request: &ChatRequest,
        on_delta: &mut (dyn for<'s> FnMut(&'s str) + Send),
        cancel: &CancellationToken,
    ) -> Result<ChatResponse, LlmError> {
        let prompt_text = self.renderer.render(&request.messages, &request.tools)?;
        let prompt = {
            let mut rec = self.record.lock().map_err(|_| LlmError::Other("policy state poisoned".into()))?;
            let extends = !rec.segments.is_empty() && prompt_text.starts_with(&rec.text);
            if extends {
                let delta = self.encode(&prompt_text[rec.text.len()..])?;
                if let Some(seg) = rec.segments.last_mut() {
                    seg.mask.extend(std::iter::repeat_n(0u8, delta.len()));
                    seg.tokens.extend(delta);
                }
            } else {
                let ids = self.encode(&prompt_text)?;
                rec.segments.push(Segment { mask: vec![0; ids.len()], tokens: ids, sampler_logp: Vec::new() });
            }
            rec.text = prompt_text.clone();
            rec.segments.last().map(|s| s.tokens.clone()).unwrap_or_default()
        };
        let room = self.sampling.context.saturating_sub(prompt.len());
        let max_new = self
            .sampling
            .max_new_tokens
            .min(request.sampling.max_tokens.map(|m| m as usize).unwrap_or(usize::MAX))
            .min(room);
        if max_new == 0 {
            return Err(LlmError::Other(format!(
                "the prompt ({} tokens) fills the policy's context of {} tokens",
                prompt.len(),
                self.sampling.context
            )));
        }
        let call = self.calls.fetch_add(1, Ordering::Relaxed);
        let flag = Arc::new(AtomicBool::new(false));
        let (tx, rx) = oneshot::channel();
        self.sampler
            .submit(GenerateRequest {
                session: self.session,
                prompt: prompt.clone(),
                max_new_tokens: max_new,
                temperature: self.sampling.temperature,
                top_p: self.sampling.top_p,
                seed: self.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(call),
                stop: self.stop.clone(),
                cancel: flag.clone(),
                grammar: request.grammar.clone(),
                reply: tx,
            })
            .map_err(|e| LlmError::Other(e.to_string()))?;
        let generated = tokio::select! {
            r = rx => r.map_err(|_| LlmError::Other("the sampling thread dropped a request".into()))?,
            _ = cancel.cancelled() => {
                flag.store(true, Ordering::Relaxed);
                return Err(LlmError::Cancelled);
            }
        }
        .map_err(|e| LlmError::Other(e.to_string()))?;
        let mut generated = generated;
        let content: Vec<u32> = generated.ids.iter().copied().filter(|t| !self.stop.contains(t)).collect();
        let mut text = self.decode(&content)?;
        // A reply that loops is cut here, where the ids are known, so that the record
        // holds exactly the kept tokens (the loop's own cut could only drop them all).
        let mut forced_end: Vec<u32> = Vec::new();
        let mut detector = agent_core::episode::StreamLoopDetector::new();
        detector.push(&text);
        if let Some(cut) = detector.finish().cloned() {
            let keep = self.longest_prefix_within(&content, cut.keep)?;
            text = self.decode(&content[..keep])?;
            generated.ids.truncate(keep);
            generated.logp.truncate(keep);
            generated.stopped = true;
            // The end of the turn was not sampled: it is in the sequence, outside the loss.
            forced_end = self.encode(IM_END)?;
        }
        on_delta(&text);
        {
            let mut rec = self.record.lock().map_err(|_| LlmError::Other("policy state poisoned".into()))?;
            if let Some(seg) = rec.segments.last_mut() {
                seg.tokens.extend(&generated.ids);
                seg.mask.extend(std::iter::repeat_n(1u8, generated.ids.len()));
                seg.sampler_logp.extend(&generated.logp);
                seg.mask.extend(std::iter::repeat_n(0u8, forced_end.len()));
                seg.tokens.extend(&forced_end);
            }
            if !forced_end.is_empty() {
                rec.cut_replies += 1;
            }
            rec.text.push_str(&text);
            if generated.stopped {
                rec.text.push_str(IM_END);
            } else {
                rec.truncated = true;
            }
        }
        Ok(ChatResponse {
            text,
            finish_reason: if generated.stopped { FinishReason::Stop } else { FinishReason::Length },
            usage: TokenUsage { prompt_tokens: prompt.len() as u64, completion_tokens: generated.ids.len() as u64 },
            completion_token_ids: Some(generated.ids),
            prompt_token_ids: Some(prompt),
            decode_tokens_per_sec: None,
            tool_calls: Vec::new(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::Segment;

    #[test]
    fn scored_sampler_log_probs_follow_the_mask() {
        let seg =
            Segment { tokens: vec![1, 2, 3, 4, 5], mask: vec![0, 1, 1, 0, 1], sampler_logp: vec![-1.0, -2.0, -3.0] };
        assert_eq!(seg.scored_sampler_logp(), Some(vec![-1.0, -2.0, -3.0]));
        // Nothing predicts a first token, so the update scores it not.
        let first = Segment { mask: vec![1, 1, 0, 0, 1], ..seg.clone() };
        assert_eq!(first.scored_sampler_logp(), Some(vec![-2.0, -3.0]));
        let short = Segment { sampler_logp: vec![-1.0], ..seg };
        assert_eq!(short.scored_sampler_logp(), None);
    }
}

#[cfg(test)]
mod cut_tests {
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex};

    use agent_llm::{ChatMessage, ChatRequest, ModelBackend, Role};
    use async_trait::async_trait;
    use tokenizers::models::wordlevel::WordLevel;
    use tokenizers::pre_tokenizers::whitespace::WhitespaceSplit;
    use tokenizers::{AddedToken, Tokenizer};
    use tokio_util::sync::CancellationToken;

    use super::{PolicyBackend, PolicySampling};
    use crate::error::TrainError;
    use crate::model::Qwen3;
    use crate::rollout::engine::RolloutSampler;
    use crate::rollout::sampler::{GenerateRequest, Generated};

    /// Answers every request with the same ids.
    struct Fixed(Mutex<Vec<u32>>);

    #[async_trait]
    impl RolloutSampler for Fixed {
        fn submit(&self, request: GenerateRequest) -> Result<(), TrainError> {
            let ids = self.0.lock().unwrap().clone();
            let logp = ids.iter().map(|i| -(*i as f32) / 100.0).collect();
            let _ = request.reply.send(Ok(Generated { ids, logp, stopped: false, computed_prompt_tokens: 0 }));
            Ok(())
        }
        fn close(&self, _session: u64) {}
        async fn load_policy(&self, _policy: &Qwen3) -> Result<(), TrainError> {
            Ok(())
        }
        fn off_policy(&self) -> bool {
            false
        }
    }

    /// A word-level tokenizer over `words` (decoding joins them with spaces).
    fn tokenizer(words: &[String]) -> Tokenizer {
        let mut vocab: HashMap<String, u32> = words.iter().enumerate().map(|(i, w)| (w.clone(), i as u32)).collect();
        vocab.insert("[UNK]".into(), words.len() as u32);
        let model = WordLevel::builder().vocab(vocab.into_iter().collect()).unk_token("[UNK]".into()).build().unwrap();
        let mut t = Tokenizer::new(model);
        t.with_pre_tokenizer(Some(WhitespaceSplit));
        t.add_special_tokens(&[AddedToken::from(super::IM_END, true)]);
        t
    }

    /// A reply that loops is cut where the policy knows its ids: the record keeps the
    /// tokens of the first copy (trained), then the turn's end (not trained), and the
    /// next prompt extends that record instead of starting a new sequence.
    #[tokio::test]
    async fn a_looping_reply_is_recorded_up_to_its_first_copy() {
        let mut words: Vec<String> = vec!["I".into(), "will".into(), "run".into(), "it".into()];
        words.extend((0..20).map(|i| format!("step{i:02}-of-the-loop")));
        let tok = tokenizer(&words);
        // "I will run it" then the 20-word block (about 380 characters) ten times.
        let mut ids: Vec<u32> = vec![0, 1, 2, 3];
        for _ in 0..10 {
            ids.extend(4..24);
        }
        let sampler = Arc::new(Fixed(Mutex::new(ids)));
        let sampling = PolicySampling { temperature: 1.0, top_p: 1.0, max_new_tokens: 1000, context: 100_000 };
        let renderer = crate::rollout::chat::PromptRenderer::default();
        let policy = PolicyBackend::new(sampler, Arc::new(tok), renderer, vec![], 1, 7, sampling);
        let request =
            ChatRequest { messages: vec![ChatMessage::new(Role::User, "go".to_string())], ..Default::default() };
        let reply = policy.chat(&request, &mut |_| {}, &CancellationToken::new()).await.unwrap();
        let kept: Vec<String> = words[..24].to_vec();
        assert_eq!(reply.text, kept.join(" "));
        assert_eq!(reply.completion_token_ids.as_deref(), Some(&(0..24).collect::<Vec<u32>>()[..]));
        let rec = policy.recording();
        assert_eq!(rec.cut_replies, 1);
        let seg = &rec.segments[0];
        let trained: usize = seg.mask.iter().map(|m| usize::from(*m)).sum();
        assert_eq!(trained, 24, "only the first copy is trained on");
        assert_eq!(seg.sampler_logp.len(), 24);
        assert_eq!(seg.mask.last(), Some(&0), "the forced end of the turn is not trained on");
        assert!(!rec.truncated);

        // The next turn's prompt extends the record (no second segment).
        let mut next = request.messages.clone();
        next.push(ChatMessage::new(Role::Assistant, reply.text.clone()));
        next.push(ChatMessage::new(Role::User, "again".to_string()));
        let next = ChatRequest { messages: next, ..Default::default() };
        let _ = policy.chat(&next, &mut |_| {}, &CancellationToken::new()).await.unwrap();
        assert_eq!(policy.recording().segments.len(), 1);
    }
}
