//! Splits the prose of an assistant reply (its calls already held apart by
//! [`super::call_filter`]) into what the transcript shows: the thinking (shown collapsed)
//! and the Markdown.

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
    let thinking = thinking.trim();
    ReplyParts { thinking: (!thinking.is_empty()).then(|| thinking.to_string()), prose: tidy(&rest) }
}

/// Drops code fences left empty by calls held apart and collapses blank runs (outside
/// code blocks, whose lines are kept as written).
fn tidy(text: &str) -> String {
    let mut lines: Vec<&str> = Vec::new();
    let all: Vec<&str> = text.lines().collect();
    let mut in_code = false;
    let mut i = 0;
    while i < all.len() {
        let line = all[i];
        let fence = line.trim_start().starts_with("```");
        // A block opened and closed with only blank lines inside held a call.
        if fence && !in_code {
            let mut j = i + 1;
            while j < all.len() && all[j].trim().is_empty() {
                j += 1;
            }
            if j < all.len() && all[j].trim() == "```" {
                i = j + 1;
                continue;
            }
        }
        if fence {
            in_code = !in_code;
        }
        if !in_code && !fence && line.trim().is_empty() && lines.last().is_none_or(|l| l.trim().is_empty()) {
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
    fn prose_is_kept_with_blank_runs_collapsed() {
        let r = split_reply("Let me look.\n\n\n\nThen more.\n\n");
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
    fn fences_left_empty_by_a_call_are_dropped() {
        assert_eq!(split_reply("Run:\n```\n\n```\n").prose, "Run:");
        assert_eq!(split_reply("Code:\n```\nls\n```").prose, "Code:\n```\nls\n```");
        // Two blocks a blank line apart stay two; blank lines in code stay.
        let two = "```\na\n\n\nb\n```\n\n```\nc\n```";
        assert_eq!(split_reply(two).prose, two);
    }
}
