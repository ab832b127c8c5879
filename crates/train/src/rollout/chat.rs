//! Qwen3's chat format (ChatML), rendered in code so that the trainer and its sampler
//! agree on every byte of the prompt.

use agent_core::llm::ChatMessage;

/// Opens a message.
pub const IM_START: &str = "<|im_start|>";
/// Closes a message; the model ends its reply with it.
pub const IM_END: &str = "<|im_end|>";

/// The prompt for the next assistant reply: every message, then the assistant header.
pub fn render_prompt(messages: &[ChatMessage]) -> String {
    let mut out = String::new();
    for m in messages {
        out.push_str(IM_START);
        out.push_str(m.role.as_str());
        out.push('\n');
        out.push_str(&m.content);
        out.push_str(IM_END);
        out.push('\n');
    }
    out.push_str(IM_START);
    out.push_str("assistant\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_core::llm::Role;

    #[test]
    fn renders_chatml_with_the_generation_header() {
        let p = render_prompt(&[ChatMessage::new(Role::System, "S"), ChatMessage::new(Role::User, "U")]);
        assert_eq!(p, "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n");
    }
}
