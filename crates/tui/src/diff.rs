//! File edits as coloured line diffs, derived from the `file` tool's arguments.

use ratatui::style::{Color, Style};
use ratatui::text::{Line, Span};
use serde_json::Value;
use similar::{ChangeTag, TextDiff};

/// Lines of context around each change.
const CONTEXT: usize = 2;

/// The diff lines of an edit from `old` to `new`.
pub fn diff_lines(old: &str, new: &str) -> Vec<Line<'static>> {
    let diff = TextDiff::from_lines(old, new);
    let mut out = Vec::new();
    for (i, group) in diff.grouped_ops(CONTEXT).iter().enumerate() {
        if i > 0 {
            out.push(Line::from(Span::styled("  ⋯", Style::new().fg(Color::DarkGray))));
        }
        for op in group {
            for change in diff.iter_changes(op) {
                let (sign, style) = match change.tag() {
                    ChangeTag::Delete => ("-", Style::new().fg(Color::Red)),
                    ChangeTag::Insert => ("+", Style::new().fg(Color::Green)),
                    ChangeTag::Equal => (" ", Style::new().fg(Color::Gray)),
                };
                let text = change.value().trim_end_matches(['\n', '\r']);
                out.push(Line::from(Span::styled(format!("{sign} {text}"), style)));
            }
        }
    }
    out
}

/// The diff an action of the `file` tool makes, when it writes: `write` shows the new
/// content as added lines, `edit` and `multi_edit` their replacements.
pub fn edit_diff(args: &Value) -> Option<Vec<Line<'static>>> {
    let s = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
    match args.get("action").and_then(Value::as_str)? {
        "write" => Some(diff_lines("", &s(args, "content").unwrap_or_default())),
        "edit" => Some(diff_lines(&s(args, "old_string")?, &s(args, "new_string")?)),
        "multi_edit" => {
            let edits = args.get("edits")?.as_array()?;
            let mut out = Vec::new();
            for e in edits {
                if !out.is_empty() {
                    out.push(Line::from(Span::styled("  ⋯", Style::new().fg(Color::DarkGray))));
                }
                out.extend(diff_lines(&s(e, "old_string")?, &s(e, "new_string")?));
            }
            Some(out)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(lines: &[Line<'_>]) -> Vec<String> {
        lines.iter().map(|l| l.spans.iter().map(|s| s.content.as_ref()).collect()).collect()
    }

    #[test]
    fn edit_shows_removed_and_added_lines() {
        let args = serde_json::json!({"action": "edit", "path": "a.py", "old_string": "x = 1\ny = 2\n", "new_string": "x = 1\ny = 3\n"});
        let lines = edit_diff(&args).unwrap();
        assert_eq!(text(&lines), vec!["  x = 1", "- y = 2", "+ y = 3"]);
        assert_eq!(lines[1].spans[0].style.fg, Some(Color::Red));
        assert_eq!(lines[2].spans[0].style.fg, Some(Color::Green));
        assert!(edit_diff(&serde_json::json!({"action": "read", "path": "a"})).is_none());
    }
}
