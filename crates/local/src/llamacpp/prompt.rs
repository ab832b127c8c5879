//! From messages to prompt tokens: the GGUF's chat template (its Jinja source for
//! conversations with tools, llama.cpp's built-in renderer for the others) and
//! tokenization with the model's special tokens. Shared by the chat worker and the
//! serving engine.

use llama_cpp_2::model::{LlamaChatMessage, LlamaChatTemplate, LlamaModel};
use llama_cpp_2::token::LlamaToken;

use super::llama_error;
use agent_llm::{ChatMessage, ChatTemplate, LlmError, Role, ToolDefinition};

/// The model's chat templates, ready to render.
pub(super) struct Prompter {
    template: LlamaChatTemplate,
    /// The same template compiled as Jinja, for conversations with tools.
    jinja: Option<ChatTemplate>,
}

impl Prompter {
    /// The templates of `model`.
    pub(super) fn new(model: &LlamaModel) -> Result<Self, LlmError> {
        Ok(Prompter { template: chat_template(model)?, jinja: jinja_template(model) })
    }

    /// The GGUF's own chat template renders tools (Qwen2.5/Qwen3, Llama 3.x, ...).
    pub(super) fn native_tools(&self) -> bool {
        self.jinja.as_ref().is_some_and(ChatTemplate::supports_tools)
    }

    /// Renders the messages with the chat template, ending with the assistant's opening.
    /// Conversations with tools go through the model's Jinja template, which knows the
    /// model's own tool format; plain ones through llama.cpp's built-in renderer.
    pub(super) fn render(
        &self,
        model: &LlamaModel,
        messages: &[ChatMessage],
        tools: &[ToolDefinition],
    ) -> Result<String, LlmError> {
        let with_tools = !tools.is_empty() || messages.iter().any(|m| m.role == Role::Tool || !m.tool_calls.is_empty());
        if with_tools {
            return match &self.jinja {
                Some(jinja) => jinja.render(messages, tools, true),
                None => Err(LlmError::Other(
                    "this model's GGUF file has no chat template that renders tools; use --tool-format text".into(),
                )),
            };
        }
        let chat = messages
            .iter()
            .map(|m| {
                LlamaChatMessage::new(m.role.as_str().into(), m.content.clone())
                    .map_err(|e| LlmError::Other(format!("a message cannot be sent to llama.cpp: {e}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        match model.apply_chat_template(&self.template, &chat, true) {
            Ok(text) => Ok(text),
            Err(e) => {
                // llama.cpp only knows a fixed set of templates by their markers; for any
                // other, ChatML is a better guess than refusing to run.
                tracing::warn!("llama.cpp cannot apply this model's chat template ({e}); using ChatML");
                model.apply_chat_template(&chatml()?, &chat, true).map_err(|e| llama_error("render the chat", e))
            }
        }
    }
}

/// Tokenizes a rendered prompt. Special tokens in the template (`<|im_start|>`) are
/// parsed as such; a BOS token is added when the model wants one and the template did
/// not already write it.
pub(super) fn tokenize_prompt(model: &LlamaModel, prompt: &str) -> Vec<LlamaToken> {
    let vocab = model.vocab();
    let mut add_bos = vocab.should_add_bos();
    if add_bos {
        let bos = vocab.token_to_piece(vocab.bos(), true, None);
        if !bos.is_empty() && prompt.as_bytes().starts_with(&bos) {
            add_bos = false;
        }
    }
    vocab.tokenize(prompt.as_bytes(), add_bos, true)
}

/// The GGUF's Jinja chat template, compiled for rendering with tools; `None` when the
/// file has none or it does not compile (the built-in renderer still serves plain chats).
fn jinja_template(model: &LlamaModel) -> Option<ChatTemplate> {
    let source = model.chat_template(None).ok()?.to_string().ok()?;
    let vocab = model.vocab();
    let piece = |token| String::from_utf8_lossy(&vocab.token_to_piece(token, true, None)).to_string();
    match ChatTemplate::new(&source, &piece(vocab.bos()), &piece(vocab.eos())) {
        Ok(t) => Some(t),
        Err(e) => {
            tracing::debug!("the GGUF chat template cannot be used for tools: {e}");
            None
        }
    }
}

/// The model's own chat template, or ChatML when the file has none (most small chat
/// models, SmolLM2 included, use ChatML).
fn chat_template(model: &LlamaModel) -> Result<LlamaChatTemplate, LlmError> {
    match model.chat_template(None) {
        Ok(t) => Ok(t),
        Err(e) => {
            tracing::warn!("the GGUF file has no usable chat template ({e}); using ChatML");
            chatml()
        }
    }
}

/// llama.cpp's built-in ChatML template, selected by name.
fn chatml() -> Result<LlamaChatTemplate, LlmError> {
    LlamaChatTemplate::new("chatml").map_err(|e| llama_error("name the ChatML template", e))
}
