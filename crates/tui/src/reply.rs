//! Splits an assistant reply into what the transcript shows: the thinking (shown
//! collapsed) and the prose, without the action tags (each action gets its own cell).

/// Tags whose blocks are actions or tool calls, not prose.
const ACTION_TAGS: &[&str] = &["bash", "file", "search", "todo", "scratchpad", "finish", "tool_call"];

/// The parts of a reply.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReplyParts {
    /// Text inside `<think>…</think>` (also an unclosed one while it streams).
    pub thinking: Option<String>,
    /// The prose, Markdown.
    pub prose: String,
}

/// Splits `text` into thinking and prose.
pub fn split_reply(text: &str) -> ReplyParts {
    let mut thinking = String::new();
    let mut rest = String::new();
    let mut s = text;
    loop {
        match s.find("<think>") {
            Some(i) => {
                rest.push_str(&s[..i]);
                let after = &s[i + "<think>".len()..];
                match after.find("</think>") {
                    Some(j) => {
                        thinking.push_str(&after[..j]);
                        s = &after[j + "</think>".len()..];
                    }
                    None => {
                        thinking.push_str(after);
                        s = "";
                    }
                }
            }
            None => {
                rest.push_str(s);
                break;
            }
        }
    }
    let prose = strip_actions(&rest);
    let thinking = thinking.trim();
    ReplyParts { thinking: (!thinking.is_empty()).then(|| thinking.to_string()), prose: tidy(&prose) }
}

/// Removes action blocks; an unclosed one (still streaming) is cut to the end.
fn strip_actions(text: &str) -> String {
    let mut out = String::new();
    let mut s = text;
    while let Some((start, tag)) = first_open_tag(s) {
        out.push_str(&s[..start]);
        let close = format!("</{tag}>");
        let body = &s[start..];
        match body.find(&close) {
            Some(end) => s = &body[end + close.len()..],
            None => {
                s = "";
                break;
            }
        }
    }
    out.push_str(s);
    out
}

fn first_open_tag(s: &str) -> Option<(usize, &'static str)> {
    ACTION_TAGS.iter().filter_map(|tag| s.find(&format!("<{tag}>")).map(|i| (i, *tag))).min_by_key(|(i, _)| *i)
}

/// Drops code fences left empty by removed actions and collapses blank runs.
fn tidy(text: &str) -> String {
    let mut lines: Vec<&str> = Vec::new();
    let all: Vec<&str> = text.lines().collect();
    let mut i = 0;
    while i < all.len() {
        let line = all[i];
        // A fence opened and closed with only blank lines inside held an action.
        if line.trim_start().starts_with("```") {
            let mut j = i + 1;
            while j < all.len() && all[j].trim().is_empty() {
                j += 1;
            }
            if j < all.len() && all[j].trim() == "```" {
                i = j + 1;
                continue;
            }
        }
        if line.trim().is_empty() && lines.last().is_none_or(|l| l.trim().is_empty()) {
            i += 1;
            continue;
        }
        lines.push(line);
        i += 1;
    }
    while lines.last().is_some_and(|l| l.trim().is_empty()) {
        lines.pop();
    }
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_actions_and_keeps_prose() {
        let r = split_reply("Let me look.\n<bash>\ncmd: ls\n</bash>\nThen more.\n<finish>\nmessage: x\n</finish>");
        assert_eq!(r.prose, "Let me look.\n\nThen more.");
        assert_eq!(r.thinking, None);
    }

    #[test]
    fn thinking_is_separated_even_unclosed() {
        let r = split_reply("<think>plan it</think>Answer");
        assert_eq!(r.thinking.as_deref(), Some("plan it"));
        assert_eq!(r.prose, "Answer");
        let r = split_reply("<think>still thinking");
        assert_eq!(r.thinking.as_deref(), Some("still thinking"));
        assert_eq!(r.prose, "");
    }

    #[test]
    fn streaming_action_is_hidden_and_empty_fences_dropped() {
        assert_eq!(split_reply("Ok.\n<bash>\ncmd: sle").prose, "Ok.");
        assert_eq!(split_reply("Run:\n```\n<bash>\ncmd: ls\n</bash>\n```\n").prose, "Run:");
    }
}
