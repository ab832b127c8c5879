//! `@path` in a message: the named workspace files travel with it, as Claude Code sends
//! them, bounded so that one large file cannot fill the model's context.

use std::path::{Component, Path};

/// The most bytes of one attached file.
pub const MAX_FILE_BYTES: usize = 32 * 1024;
/// The most bytes of all files attached to one message.
pub const MAX_TOTAL_BYTES: usize = 96 * 1024;

/// How each attached file starts in the text sent (after the user's own words).
pub const ATTACHMENT_START: &str = "\n\n<attached_file path=\"";

/// The user's own words of a sent message, without the files attached after them.
pub fn without_attachments(text: &str) -> &str {
    text.find(ATTACHMENT_START).map_or(text, |i| &text[..i])
}

/// What a message's `@path` mentions add to it.
#[derive(Debug, Default, PartialEq)]
pub struct Attachments {
    /// Text appended to the message the model gets.
    pub appendix: String,
    /// One line per mention for the transcript ("attached src/main.rs (1.2 KB)").
    pub notes: Vec<String>,
}

/// Reads the files that `text` mentions as `@path` (relative to `root`, inside it).
/// Directories, missing paths and paths outside `root` (also through symlinks) are not
/// attached; binary files
/// and what passes the limits are named with a note instead.
pub fn attach_mentions(text: &str, root: &Path) -> Attachments {
    let mut out = Attachments::default();
    let mut seen: Vec<String> = Vec::new();
    let mut budget = MAX_TOTAL_BYTES;
    for word in text.split_whitespace() {
        let Some(raw) = word.strip_prefix('@') else { continue };
        let rel = raw.trim_end_matches([',', '.', ';', ':', ')', '!', '?', '"', '\'']);
        if rel.is_empty() || seen.iter().any(|s| s == rel) || !stays_inside(rel) {
            continue;
        }
        let path = root.join(rel);
        let Ok(meta) = std::fs::metadata(&path) else { continue };
        if !meta.is_file() {
            continue;
        }
        seen.push(rel.to_string());
        // A symlink in a cloned project can name any file of the host (a key, a
        // token): what leaves the workspace once resolved is not sent to the model.
        let inside = match (path.canonicalize(), root.canonicalize()) {
            (Ok(real), Ok(base)) => real.starts_with(base),
            _ => false,
        };
        if !inside {
            out.notes.push(format!("@{rel} leads out of the workspace (a symlink); not attached"));
            continue;
        }
        let Ok(bytes) = std::fs::read(&path) else {
            out.notes.push(format!("cannot read @{rel}; not attached"));
            continue;
        };
        if bytes.contains(&0) {
            out.notes.push(format!("@{rel} is a binary file; not attached"));
            continue;
        }
        if budget == 0 {
            out.notes.push(format!(
                "@{rel} not attached: the message already carries {} KB of files",
                MAX_TOTAL_BYTES / 1024
            ));
            continue;
        }
        let limit = MAX_FILE_BYTES.min(budget);
        let mut end = bytes.len().min(limit);
        while end > 0 && end < bytes.len() && (bytes[end] & 0xC0) == 0x80 {
            end -= 1;
        }
        let content = String::from_utf8_lossy(&bytes[..end]);
        budget -= end;
        let cut = end < bytes.len();
        let note = if cut {
            format!(" (the first {} of {} bytes; read the rest with the file tool)", end, bytes.len())
        } else {
            String::new()
        };
        out.appendix.push_str(&format!(
            "{ATTACHMENT_START}{rel}\"{}>\n{}\n</attached_file>",
            if cut { " truncated=\"true\"" } else { "" },
            content.trim_end()
        ));
        out.notes.push(format!("attached @{rel} ({}){note}", size(bytes.len())));
    }
    out
}

/// A relative path with no `..` and no root: it cannot leave the workspace.
fn stays_inside(rel: &str) -> bool {
    Path::new(rel).components().all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
}

fn size(n: usize) -> String {
    if n < 1024 {
        format!("{n} B")
    } else {
        format!("{:.1} KB", n as f64 / 1024.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mentioned_files_are_attached_within_bounds() {
        let top = tempfile::tempdir().unwrap();
        let root = top.path().join("ws");
        std::fs::create_dir_all(root.join("src")).unwrap();
        std::fs::write(root.join("src/main.rs"), "fn main() {}\n").unwrap();
        std::fs::write(root.join("big.txt"), "x".repeat(MAX_FILE_BYTES + 10)).unwrap();
        std::fs::write(root.join("bin"), [0u8, 1, 2]).unwrap();
        std::fs::write(top.path().join("outside.txt"), "secret").unwrap();
        let a = attach_mentions("look at @src/main.rs, @big.txt and @bin; @../outside.txt @src/ @missing", &root);
        assert!(
            a.appendix.contains("<attached_file path=\"src/main.rs\">\nfn main() {}\n</attached_file>"),
            "{}",
            a.appendix
        );
        assert!(a.appendix.contains("<attached_file path=\"big.txt\" truncated=\"true\">"));
        assert!(!a.appendix.contains("secret"));
        assert_eq!(a.notes.len(), 3, "{:?}", a.notes);
        assert!(a.notes[0].starts_with("attached @src/main.rs (13 B)"));
        assert!(a.notes[1].contains("the first 32768 of 32778 bytes"));
        assert!(a.notes[2].contains("binary"));
        assert_eq!(attach_mentions("no mentions here", &root), Attachments::default());
    }

    #[test]
    fn a_symlink_out_of_the_workspace_is_not_attached() {
        let top = tempfile::tempdir().unwrap();
        let root = top.path().join("ws");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::write(top.path().join("id_rsa"), "PRIVATE KEY").unwrap();
        std::os::unix::fs::symlink(top.path().join("id_rsa"), root.join("notes.txt")).unwrap();
        let a = attach_mentions("read @notes.txt", &root);
        assert!(!a.appendix.contains("PRIVATE KEY"), "{}", a.appendix);
        assert_eq!(a.notes, vec!["@notes.txt leads out of the workspace (a symlink); not attached".to_string()]);
    }
}
