//! A conversation carried from one session into the next (the UI's `/model` switch, a
//! new session after a model error), rewritten for the next session's action format.

use std::collections::HashMap;

use crate::tools::{write_call, ToolFormat};
use agent_llm::{ChatMessage, Role};

/// `messages` as a session in `format` can send them. The native format takes them as
/// they are; the text format has no tool role and no structured calls, so each call is
/// written out in the assistant's text and each tool result becomes a user message
/// (consecutive results of one reply in one message, as the text format answers them).
pub fn adapt_history(messages: Vec<ChatMessage>, format: ToolFormat) -> Vec<ChatMessage> {
    if format == ToolFormat::Native {
        return messages;
    }
    let mut names: HashMap<String, String> = HashMap::new();
    let mut out: Vec<ChatMessage> = Vec::with_capacity(messages.len());
    let mut results_open = false;
    for m in messages {
        match m.role {
            Role::Tool => {
                let tool =
                    m.tool_call_id.as_ref().and_then(|id| names.get(id)).cloned().unwrap_or_else(|| "tool".into());
                let part = format!("<{tool}_output>\n{}\n</{tool}_output>", m.content.trim_end());
                match out.last_mut() {
                    Some(last) if results_open => {
                        last.content.push_str("\n\n");
                        last.content.push_str(&part);
                    }
                    _ => out.push(ChatMessage::new(Role::User, part)),
                }
                results_open = true;
            }
            Role::Assistant if !m.tool_calls.is_empty() => {
                let mut text = m.content.clone();
                // Local engines keep the model's own `<tool_call>` text in the content.
                let written = text.contains("<tool_call>");
                for call in &m.tool_calls {
                    names.insert(call.id.clone(), call.name.clone());
                    if !written {
                        if !text.is_empty() {
                            text.push('\n');
                        }
                        text.push_str(&write_call(&call.name, &call.arguments, ToolFormat::Text));
                    }
                }
                out.push(ChatMessage::new(Role::Assistant, text));
                results_open = false;
            }
            _ => {
                out.push(m);
                results_open = false;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_llm::ToolCall;

    fn native_conversation() -> Vec<ChatMessage> {
        vec![
            ChatMessage::new(Role::User, "list the files"),
            ChatMessage {
                tool_calls: vec![
                    ToolCall { id: "c1".into(), name: "bash".into(), arguments: serde_json::json!({"cmd": "ls"}) },
                    ToolCall { id: "c2".into(), name: "bash".into(), arguments: serde_json::json!({"cmd": "pwd"}) },
                ],
                ..ChatMessage::new(Role::Assistant, "Looking.")
            },
            ChatMessage::tool_result("c1", "a.txt"),
            ChatMessage::tool_result("c2", "/workspace"),
            ChatMessage::new(Role::Assistant, "There is a.txt."),
        ]
    }

    #[test]
    fn native_history_is_kept_as_it_is_for_a_native_session() {
        assert_eq!(adapt_history(native_conversation(), ToolFormat::Native), native_conversation());
    }

    #[test]
    fn a_text_session_gets_written_calls_and_results_as_one_user_message() {
        let out = adapt_history(native_conversation(), ToolFormat::Text);
        assert_eq!(out.len(), 4, "{out:#?}");
        assert!(out.iter().all(|m| m.role != Role::Tool && m.tool_calls.is_empty()));
        assert_eq!(out[1].content, "Looking.\n<bash>\ncmd: ls\n</bash>\n<bash>\ncmd: pwd\n</bash>");
        assert_eq!(out[2].role, Role::User);
        assert_eq!(out[2].content, "<bash_output>\na.txt\n</bash_output>\n\n<bash_output>\n/workspace\n</bash_output>");
        assert_eq!(out[3].content, "There is a.txt.");
        // Adapting twice changes nothing.
        assert_eq!(adapt_history(out.clone(), ToolFormat::Text), out);
    }
}
