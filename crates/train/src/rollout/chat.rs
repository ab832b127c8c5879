//! How the trainer renders a conversation into the text its model reads: the model's own
//! chat template (the one `agent run`, the UI and bench render with, tools included, so
//! that what the model is trained on is what the user runs), or, for a model folder that
//! has none, the Qwen3-style template of `agent-llm` (ChatML without tools).

use std::sync::Arc;

use agent_llm::{ChatMessage, ChatTemplate, LlmError, ToolDefinition};

/// Opens a message.
pub const IM_START: &str = "<|im_start|>";
/// Closes a message; the model ends its reply with it.
pub const IM_END: &str = "<|im_end|>";

/// Renders prompts for the policy, its warm start and its sampler alike.
#[derive(Debug, Clone, Default)]
pub struct PromptRenderer {
    template: Option<Arc<ChatTemplate>>,
    native: bool,
}

impl PromptRenderer {
    /// A renderer with the model's template (`None`: [`ChatTemplate::qwen3`], in the
    /// text format).
    pub fn new(template: Option<ChatTemplate>) -> Self {
        let native = template.as_ref().is_some_and(ChatTemplate::supports_tools);
        PromptRenderer { template: template.map(Arc::new), native }
    }

    /// Whether the model takes tools natively (its template renders them).
    pub fn native_tools(&self) -> bool {
        self.native
    }

    /// The prompt for the next assistant reply, with `tools` (none in the text format).
    pub fn render(&self, messages: &[ChatMessage], tools: &[ToolDefinition]) -> Result<String, LlmError> {
        match &self.template {
            Some(t) => t.render(messages, tools, true),
            None => ChatTemplate::qwen3()?.render(messages, tools, true),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_llm::{Role, ToolCall};

    /// ChatML as the reference: every message, then the assistant header.
    fn chatml(messages: &[ChatMessage]) -> String {
        let mut out = String::new();
        for m in messages {
            out.push_str(&format!("{IM_START}{}\n{}{IM_END}\n", m.role.as_str(), m.content));
        }
        out + IM_START + "assistant\n"
    }

    /// The tiny model's template (Qwen3's shape) renders a conversation without tools
    /// byte for byte as ChatML: switching the text-format presets to it changes nothing.
    #[test]
    fn the_tiny_models_template_is_chatml_without_tools_and_renders_tools_natively() {
        let dir = tempfile::tempdir().unwrap();
        agent_local::tiny_qwen3::write_tiny_qwen3(dir.path(), &agent_local::tiny_qwen3::TinyQwen3Config::default())
            .unwrap();
        let renderer = PromptRenderer::new(ChatTemplate::from_model_dir(dir.path()).unwrap());
        assert!(renderer.native_tools());
        let messages = [
            ChatMessage::new(Role::System, "S"),
            ChatMessage::new(Role::User, "U"),
            ChatMessage::new(Role::Assistant, "<bash>\ncmd: ls\n</bash>"),
            ChatMessage::new(Role::User, "<bash_output>x</bash_output>"),
        ];
        assert_eq!(renderer.render(&messages, &[]).unwrap(), chatml(&messages));
        let tool = ToolDefinition {
            name: "bash".into(),
            description: "Run a command.".into(),
            parameters: serde_json::json!({"type": "object", "properties": {"cmd": {"type": "string"}}}),
        };
        let native = renderer.render(&messages[..2], &[tool]).unwrap();
        assert!(native.contains("<tools>") && native.contains("\"name\": \"bash\""), "{native}");
    }

    #[test]
    fn without_a_template_renders_chatml_with_the_generation_header_and_keeps_tool_calls() {
        let renderer = PromptRenderer::default();
        let p =
            renderer.render(&[ChatMessage::new(Role::System, "S"), ChatMessage::new(Role::User, "U")], &[]).unwrap();
        assert_eq!(p, "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n");
        let mut call = ChatMessage::new(Role::Assistant, "");
        call.tool_calls =
            vec![ToolCall { id: "c1".into(), name: "bash".into(), arguments: serde_json::json!({"cmd": "ls"}) }];
        let p = renderer.render(&[ChatMessage::new(Role::User, "U"), call], &[]).unwrap();
        assert!(p.contains("<tool_call>\n{\"name\": \"bash\", \"arguments\": {\"cmd\": \"ls\"}}\n</tool_call>"), "{p}");
    }
}
