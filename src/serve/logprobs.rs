//! Sampled tokens in OpenAI's two `logprobs` shapes: chat's `{"content": [...]}` and the
//! legacy completions' parallel lists.

use serde_json::{json, Value};

use agent_llm::{SampledToken, TokenCandidate};

/// How a token is named in `logprobs`: its text, or `token_id:ID` (vLLM's
/// `return_tokens_as_token_ids`, for clients that need the exact ids).
#[derive(Debug, Clone, Copy)]
pub struct Naming {
    pub ids: bool,
}

impl Naming {
    fn name(self, t: &TokenCandidate) -> String {
        if self.ids {
            format!("token_id:{}", t.id)
        } else {
            t.text()
        }
    }

    /// One entry of chat's `logprobs.content`.
    pub fn chat_entry(self, t: &SampledToken) -> Value {
        let one = |c: &TokenCandidate| json!({"token": self.name(c), "logprob": c.logprob, "bytes": c.bytes});
        let mut entry = one(&t.token);
        entry["top_logprobs"] = t.top.iter().map(one).collect();
        entry
    }
}

/// The completions endpoint's `logprobs` object, built as tokens arrive.
#[derive(Debug, Default)]
pub struct Legacy {
    tokens: Vec<String>,
    token_logprobs: Vec<f32>,
    top_logprobs: Vec<Value>,
    text_offset: Vec<usize>,
    /// Bytes of text before the next token.
    offset: usize,
}

impl Legacy {
    /// Adds tokens; `offset` counts their bytes as the text's offsets do.
    pub fn push(&mut self, naming: Naming, tokens: &[SampledToken]) {
        for t in tokens {
            self.tokens.push(naming.name(&t.token));
            self.token_logprobs.push(t.token.logprob);
            let top: serde_json::Map<String, Value> =
                t.top.iter().map(|c| (naming.name(c), json!(c.logprob))).collect();
            self.top_logprobs.push(Value::Object(top));
            self.text_offset.push(self.offset);
            self.offset += t.token.bytes.len();
        }
    }

    /// The object so far; the lists are taken, the offset kept (for streamed chunks).
    pub fn take(&mut self) -> Value {
        json!({
            "tokens": std::mem::take(&mut self.tokens),
            "token_logprobs": std::mem::take(&mut self.token_logprobs),
            "top_logprobs": std::mem::take(&mut self.top_logprobs),
            "text_offset": std::mem::take(&mut self.text_offset),
        })
    }
}
