//! Supervised fine-tuning data: chat transcripts (JSONL, one `{"messages": [...]}` per
//! line) turned into token sequences whose assistant replies are the trained tokens,
//! tokenised turn by turn exactly as rollouts are.

use std::path::Path;

use serde::Deserialize;
use tokenizers::Tokenizer;

use super::error::TrainError;
use super::rollout::chat::{PromptRenderer, IM_END};
use super::update::Sample;
use agent_llm::{ChatMessage, Role};

#[derive(Deserialize)]
struct Line {
    messages: Vec<ChatMessage>,
}

/// Reads a JSONL file of transcripts; errors name the file and line.
pub fn read_transcripts(path: &Path) -> Result<Vec<Vec<ChatMessage>>, TrainError> {
    let text = std::fs::read_to_string(path).map_err(|e| TrainError::io("read", path, e))?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let parsed: Line = serde_json::from_str(line)
            .map_err(|e| TrainError::bad_file(path, format!("line {}: not a transcript ({e})", i + 1)))?;
        if !parsed.messages.iter().any(|m| m.role == Role::Assistant) {
            return Err(TrainError::bad_file(path, format!("line {}: no assistant message to learn from", i + 1)));
        }
        out.push(parsed.messages);
    }
    if out.is_empty() {
        return Err(TrainError::bad_file(path, "no transcripts"));
    }
    Ok(out)
}

/// Tokens of a transcript: each prompt delta (mask 0), then each assistant reply and
/// its end token (mask 1).
pub fn transcript_sample(
    messages: &[ChatMessage],
    tokenizer: &Tokenizer,
    renderer: &PromptRenderer,
    im_end: u32,
) -> Result<Sample, TrainError> {
    let encode = |text: &str| -> Result<Vec<u32>, TrainError> {
        tokenizer
            .encode(text, false)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| TrainError::Other(format!("the tokenizer failed: {e}")))
    };
    let mut sample = Sample { tokens: Vec::new(), mask: Vec::new(), advantage: 0.0, sampler_logp: None };
    let mut text = String::new();
    for (i, m) in messages.iter().enumerate() {
        if m.role != Role::Assistant {
            continue;
        }
        // Demonstrations are in the text format: no tools in the prompt.
        let prompt = renderer.render(&messages[..i], &[]).map_err(|e| TrainError::Other(e.to_string()))?;
        let delta = if prompt.starts_with(&text) { &prompt[text.len()..] } else { prompt.as_str() };
        let ids = encode(delta)?;
        sample.mask.extend(std::iter::repeat_n(0u8, ids.len()));
        sample.tokens.extend(ids);
        let reply = encode(&m.content)?;
        sample.mask.extend(std::iter::repeat_n(1u8, reply.len() + 1));
        sample.tokens.extend(reply);
        sample.tokens.push(im_end);
        text = format!("{prompt}{}{IM_END}", m.content);
    }
    Ok(sample)
}
