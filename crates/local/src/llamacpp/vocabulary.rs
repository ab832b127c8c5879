//! What the serving engine needs of a model's vocabulary away from its worker thread,
//! and what it asks the worker to turn into prompt tokens.

use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::token::LlamaToken;

use agent_llm::{ChatMessage, ToolDefinition};

/// What the engine's `prepare` turns into prompt tokens.
pub enum PromptText {
    /// Messages and tools, rendered by the model's chat template (ending with the
    /// assistant's opening), then `prefill` written after it.
    Chat { messages: Vec<ChatMessage>, tools: Vec<ToolDefinition>, prefill: String },
    /// A raw text (special tokens parsed; BOS added when the model wants one).
    Text(String),
}

/// Every token's bytes and which tokens end generation.
#[derive(Debug, Clone)]
pub struct Vocabulary {
    /// As text is written: control tokens are empty.
    pub text: Vec<Vec<u8>>,
    /// As the vocabulary spells them, control tokens included (`<|im_end|>`).
    pub display: Vec<Vec<u8>>,
    /// End-of-generation ids (EOS, EOT, `<|im_end|>` ...).
    pub end_of_generation: Vec<u32>,
    /// The model's chat template renders tools.
    pub native_tools: bool,
}

impl Vocabulary {
    /// Every token of `model`, spelled both ways.
    pub(super) fn of(model: &LlamaModel, native_tools: bool) -> Self {
        let vocab = model.vocab();
        let n = u32::try_from(model.n_vocab()).unwrap_or(0);
        let mut text = Vec::with_capacity(n as usize);
        let mut display = Vec::with_capacity(n as usize);
        let mut end_of_generation = Vec::new();
        for id in 0..n {
            let token = LlamaToken(id as i32);
            text.push(vocab.token_to_piece(token, false, None));
            display.push(vocab.token_to_piece(token, true, None));
            if vocab.is_eog(token) {
                end_of_generation.push(id);
            }
        }
        Vocabulary { text, display, end_of_generation, native_tools }
    }
}

impl Vocabulary {
    /// The vocabulary as llguidance sees it, for grammar-constrained requests.
    pub fn grammar_env(&self) -> Result<crate::constraint::GrammarEnv, String> {
        crate::constraint::GrammarEnv::new(&self.text, &self.display, &self.end_of_generation)
    }
}
