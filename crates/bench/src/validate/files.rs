//! Reading the files of a task folder someone else wrote — a synth draft the model
//! wrote through a bind mount, a downloaded task — on the host: opened beneath the
//! folder with no-follow, links followed only while they stay inside it, and the walk
//! bounded in depth, entries and bytes (two links to `.` end instead of looping).

use std::path::Path;

use agent_sandbox::{walk_confined, OutsideLinks, TreeError, TreeLimits, TreeNode, TreeOptions};

/// One regular file of a folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskFile {
    /// Its path in the folder, `/` between components.
    pub rel: String,
    /// Its permission bits (no setuid, setgid or sticky bit).
    pub mode: u32,
    pub bytes: Vec<u8>,
}

/// The regular files under `dir` (only those ending in one of `exts` unless it is
/// empty), sorted by path. A link out of `dir`, to nowhere or into a loop fails the
/// read (`OutsideLinks::Refuse`) or is left out (`Skip`); so is a walk past
/// [`TreeLimits::DRAFT`].
pub fn read_files(dir: &Path, exts: &[&str], outside: OutsideLinks) -> Result<Vec<TaskFile>, TreeError> {
    let opts = TreeOptions { limits: TreeLimits::DRAFT, outside, what: "the task folder" };
    let mut out = Vec::new();
    walk_confined(dir, Path::new(""), &opts, &mut |node| {
        if let TreeNode::File { rel, meta, file } = node {
            let wanted = exts.is_empty()
                || Path::new(rel).extension().is_some_and(|x| exts.iter().any(|e| x == std::ffi::OsStr::new(e)));
            if wanted && !rel.is_empty() {
                let mut bytes = Vec::new();
                std::io::Read::read_to_end(&mut std::io::Read::take(file, meta.size), &mut bytes)?;
                out.push(TaskFile { rel: rel.to_string(), mode: meta.mode, bytes });
            }
        }
        Ok(())
    })?;
    out.sort_by(|a, b| a.rel.cmp(&b.rel));
    Ok(out)
}

/// The texts of the UTF-8 files under `dir` ending in one of `exts` (any when empty),
/// sorted by path; links out of `dir` are left out and an unreadable folder gives what
/// was read before the error (these feed warnings and similarity, never a verdict).
pub fn texts_under(dir: &Path, exts: &[&str]) -> Vec<String> {
    read_files(dir, exts, OutsideLinks::Skip)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|f| String::from_utf8(f.bytes).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;

    #[test]
    fn two_links_to_dot_end_and_a_link_out_is_not_read() {
        let d = tempfile::tempdir().unwrap();
        let (draft, home) = (d.path().join("draft"), d.path().join("home"));
        std::fs::create_dir_all(draft.join("tests")).unwrap();
        std::fs::create_dir_all(&home).unwrap();
        std::fs::write(home.join("secret"), "MARKER-synth").unwrap();
        std::fs::write(draft.join("tests/test_a.py"), "def test_a(): pass\n").unwrap();
        symlink(".", draft.join("tests/a")).unwrap();
        symlink(".", draft.join("tests/b")).unwrap();
        symlink(home.join("secret"), draft.join("tests/leak.py")).unwrap();
        let skipped = read_files(&draft, &[], OutsideLinks::Skip).unwrap();
        assert_eq!(skipped.iter().map(|f| f.rel.as_str()).collect::<Vec<_>>(), ["tests/test_a.py"]);
        assert_eq!(texts_under(&draft.join("tests"), &["py"]), ["def test_a(): pass\n"]);
        let e = read_files(&draft, &[], OutsideLinks::Refuse).unwrap_err().to_string();
        assert!(e.contains("tests/a is a link to ., a folder that holds the link (a loop)"), "{e}");
        std::fs::remove_file(draft.join("tests/a")).unwrap();
        std::fs::remove_file(draft.join("tests/b")).unwrap();
        let e = read_files(&draft, &[], OutsideLinks::Refuse).unwrap_err().to_string();
        assert!(e.contains("tests/leak.py is a link to") && !e.contains("MARKER"), "{e}");
    }

    #[test]
    fn a_draft_too_deep_or_too_big_stops_with_an_error() {
        let d = tempfile::tempdir().unwrap();
        let mut p = d.path().to_path_buf();
        for _ in 0..=TreeLimits::DRAFT.max_depth + 1 {
            p.push("d");
        }
        std::fs::create_dir_all(&p).unwrap();
        let e = read_files(d.path(), &[], OutsideLinks::Skip).unwrap_err().to_string();
        assert!(e.contains("more than 32 levels of folders"), "{e}");
    }
}
