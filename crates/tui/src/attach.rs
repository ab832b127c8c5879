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
/// Each is opened beneath `root` without following any symlink (see [`open_beneath`]):
/// the sandbox writes the workspace and could swap a checked path for a link between a
/// check and a read. Directories and missing paths are not attached; symlinks, FIFOs,
/// devices, binary files and what passes the limits are named with a note instead.
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
        let (file, total) = match open_beneath(root, rel) {
            Ok(opened) => opened,
            Err(Refused::Missing) => continue,
            Err(Refused::Because(why)) => {
                seen.push(rel.to_string());
                out.notes.push(format!("@{rel} {why}; not attached"));
                continue;
            }
        };
        seen.push(rel.to_string());
        if budget == 0 {
            out.notes.push(format!(
                "@{rel} not attached: the message already carries {} KB of files",
                MAX_TOTAL_BYTES / 1024
            ));
            continue;
        }
        let limit = MAX_FILE_BYTES.min(budget);
        let mut bytes = Vec::new();
        // One byte past the limit tells a cut in the middle of a character from the end.
        if std::io::Read::read_to_end(&mut std::io::Read::take(file, limit as u64 + 1), &mut bytes).is_err() {
            out.notes.push(format!("cannot read @{rel}; not attached"));
            continue;
        }
        if bytes.contains(&0) {
            out.notes.push(format!("@{rel} is a binary file; not attached"));
            continue;
        }
        let total = total.max(bytes.len());
        let mut end = bytes.len().min(limit);
        while end > 0 && end < bytes.len() && (bytes[end] & 0xC0) == 0x80 {
            end -= 1;
        }
        let content = String::from_utf8_lossy(&bytes[..end]);
        budget -= end;
        let cut = end < total;
        let note = if cut {
            format!(" (the first {} of {} bytes; read the rest with the file tool)", end, total)
        } else {
            String::new()
        };
        out.appendix.push_str(&format!(
            "{ATTACHMENT_START}{rel}\"{}>\n{}\n</attached_file>",
            if cut { " truncated=\"true\"" } else { "" },
            content.trim_end()
        ));
        out.notes.push(format!("attached @{rel} ({}){note}", size(total)));
    }
    out
}

/// Why a mention is not attached.
#[derive(Debug, PartialEq)]
enum Refused {
    /// Nothing by that name, or a folder: not a mention of a file.
    Missing,
    /// Something the user should hear about ("is a symlink").
    Because(&'static str),
}

/// `rel` opened for reading beneath `root` with [`agent_sandbox::beneath`] (one component
/// at a time, never through a link; a FIFO or device is never opened), with its size.
fn open_beneath(root: &Path, rel: &str) -> Result<(std::fs::File, usize), Refused> {
    use agent_sandbox::beneath::{open_parent, open_regular, open_root, NotRegular};
    use rustix::io::Errno;
    use std::os::fd::AsFd;

    // The workspace folder itself is the user's choice; only what is inside it is not.
    let root = open_root(root).map_err(|_| Refused::Because("cannot be opened (the workspace cannot)"))?;
    // `./src/x.rs` names `src/x.rs` (the mention was checked to hold no `..`).
    let rel: std::path::PathBuf = Path::new(rel).components().filter(|c| matches!(c, Component::Normal(_))).collect();
    if rel.as_os_str().is_empty() {
        return Err(Refused::Missing);
    }
    let (parent, last) = open_parent(root.as_fd(), &rel, false).map_err(|r| match r.errno {
        Errno::NOENT => Refused::Missing,
        // O_DIRECTORY | O_NOFOLLOW on a link to a folder says ENOTDIR.
        Errno::LOOP | Errno::MLINK | Errno::NOTDIR => {
            Refused::Because("passes through a symlink or something that is not a folder")
        }
        _ => Refused::Because("cannot be opened"),
    })?;
    let dir = parent.as_ref().map(|f| f.as_fd()).unwrap_or(root.as_fd());
    let (file, stat) = open_regular(dir, last).map_err(|e| match e {
        NotRegular::Missing | NotRegular::Directory => Refused::Missing,
        NotRegular::Link => Refused::Because("is a symlink or passes through one"),
        NotRegular::Special => Refused::Because("is not a regular file (a FIFO or a device)"),
        NotRegular::Unreadable => Refused::Because("cannot be opened"),
    })?;
    Ok((file, usize::try_from(stat.st_size).unwrap_or(usize::MAX)))
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
        assert_eq!(a.notes, vec!["@notes.txt is a symlink or passes through one; not attached".to_string()]);
    }

    /// What the sandbox could swap in for a file between a check and a read: a link as
    /// the file itself, a link as a folder on the way, a FIFO that would hang the UI.
    #[test]
    fn links_anywhere_on_the_path_and_fifos_are_refused_without_reading() {
        let top = tempfile::tempdir().unwrap();
        let root = top.path().join("ws");
        std::fs::create_dir_all(root.join("real")).unwrap();
        std::fs::write(root.join("real/ok.txt"), "fine").unwrap();
        std::fs::create_dir_all(top.path().join("home/.ssh")).unwrap();
        std::fs::write(top.path().join("home/.ssh/id_rsa"), "PRIVATE KEY").unwrap();
        // A link that stays inside the workspace is refused too: the check is on the
        // path as opened, never on where a link leads.
        std::os::unix::fs::symlink(root.join("real/ok.txt"), root.join("inside.txt")).unwrap();
        std::os::unix::fs::symlink(top.path().join("home"), root.join("sub")).unwrap();
        std::os::unix::fs::symlink(top.path().join("home/.ssh/id_rsa"), root.join("real/key")).unwrap();
        let fifo = std::ffi::CString::new(root.join("pipe").to_str().unwrap()).unwrap();
        // SAFETY: `fifo` is a valid NUL-terminated path that outlives the call.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);

        let a = attach_mentions("@real/ok.txt @inside.txt @sub/.ssh/id_rsa @real/key @pipe", &root);
        assert!(!a.appendix.contains("PRIVATE KEY"), "{}", a.appendix);
        assert!(a.appendix.contains("<attached_file path=\"real/ok.txt\">\nfine\n"), "{}", a.appendix);
        assert_eq!(
            a.notes,
            vec![
                "attached @real/ok.txt (4 B)".to_string(),
                "@inside.txt is a symlink or passes through one; not attached".into(),
                "@sub/.ssh/id_rsa passes through a symlink or something that is not a folder; not attached".into(),
                "@real/key is a symlink or passes through one; not attached".into(),
                "@pipe is not a regular file (a FIFO or a device); not attached".into(),
            ]
        );
    }
}
