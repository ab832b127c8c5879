//! The git repositories below a workspace, found with a bounded walk that follows no
//! link, so that the repositories a session created can be named when it ends (their
//! config and hooks were written by the sandbox).

use std::collections::{BTreeSet, VecDeque};
use std::path::{Path, PathBuf};

/// How deep below the workspace the walk looks.
pub const MAX_REPO_WALK_DEPTH: usize = 8;
/// How many entries the walk reads at most (a tree the sandbox wrote may be huge).
pub const MAX_REPO_WALK_ENTRIES: usize = 200_000;

/// The repositories found below a workspace.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RepoListing {
    /// Folders below the workspace (relative, never the workspace itself) that hold a
    /// `.git` entry: a folder, a `gitdir:` file or a link.
    pub repos: BTreeSet<PathBuf>,
    /// False when the walk stopped at its depth or entry bound.
    pub complete: bool,
}

impl RepoListing {
    /// The repositories here that `before` did not have.
    pub fn added_since(&self, before: &RepoListing) -> Vec<PathBuf> {
        self.repos.difference(&before.repos).cloned().collect()
    }
}

/// The repositories below `root` (see [`RepoListing`]); `.git` folders themselves are
/// not entered, links are never followed and unreadable folders are skipped.
pub fn nested_repositories(root: &Path) -> RepoListing {
    walk(root, MAX_REPO_WALK_DEPTH, MAX_REPO_WALK_ENTRIES)
}

fn walk(root: &Path, max_depth: usize, max_entries: usize) -> RepoListing {
    let mut out = RepoListing { repos: BTreeSet::new(), complete: true };
    let mut queue = VecDeque::from([(PathBuf::new(), 0usize)]);
    let mut seen = 0usize;
    while let Some((rel, depth)) = queue.pop_front() {
        let Ok(entries) = std::fs::read_dir(root.join(&rel)) else { continue };
        for entry in entries.flatten() {
            seen += 1;
            if seen > max_entries {
                out.complete = false;
                return out;
            }
            let name = entry.file_name();
            if name == ".git" {
                if !rel.as_os_str().is_empty() {
                    out.repos.insert(rel.clone());
                }
                continue;
            }
            // `DirEntry::file_type` does not follow links: a link is never entered.
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                if depth + 1 >= max_depth {
                    out.complete = false;
                } else {
                    queue.push_back((rel.join(&name), depth + 1));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_repositories_are_found_without_following_links_and_new_ones_are_named() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path();
        std::fs::create_dir_all(root.join(".git/modules/x/.git")).unwrap();
        std::fs::create_dir_all(root.join("old/.git")).unwrap();
        let before = nested_repositories(root);
        assert_eq!(before.repos, BTreeSet::from([PathBuf::from("old")]), "the root's own .git is not entered");
        assert!(before.complete);
        std::fs::create_dir_all(root.join("sub/.git")).unwrap();
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::fs::write(root.join("a/b/.git"), "gitdir: ../../.git/modules/x\n").unwrap();
        // A link to a repository outside is not followed (nor is a link loop).
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(outside.path().join("r/.git")).unwrap();
        std::os::unix::fs::symlink(outside.path(), root.join("out")).unwrap();
        std::os::unix::fs::symlink(".", root.join("loop")).unwrap();
        let after = nested_repositories(root);
        assert_eq!(after.added_since(&before), vec![PathBuf::from("a/b"), PathBuf::from("sub")]);
    }

    #[test]
    fn the_walk_is_bounded_in_depth_and_entries() {
        let d = tempfile::tempdir().unwrap();
        let deep = d.path().join("1/2/3/4");
        std::fs::create_dir_all(deep.join(".git")).unwrap();
        let shallow = walk(d.path(), 3, 1000);
        assert!(shallow.repos.is_empty() && !shallow.complete);
        assert_eq!(walk(d.path(), 8, 1000).repos, BTreeSet::from([PathBuf::from("1/2/3/4")]));
        for i in 0..20 {
            std::fs::write(d.path().join(format!("f{i}")), "").unwrap();
        }
        assert!(!walk(d.path(), 8, 10).complete);
    }
}
