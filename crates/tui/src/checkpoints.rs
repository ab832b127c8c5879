//! The workspace's files at each checkpoint, in a shadow git repository outside the
//! workspace (under the user data dir), so that the user's own repository is never
//! touched. Files the workspace's `.gitignore` files exclude are not kept.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A shadow repository whose work tree is the workspace.
#[derive(Debug, Clone)]
pub struct CheckpointStore {
    git_dir: PathBuf,
    work_tree: PathBuf,
}

impl CheckpointStore {
    /// Opens (creating) the store in `dir` for the files of `work_tree`.
    pub fn open(dir: &Path, work_tree: &Path) -> Result<Self, String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let store = Self { git_dir: dir.to_path_buf(), work_tree: work_tree.to_path_buf() };
        if !dir.join("HEAD").exists() {
            store.git(&["init", "-q"])?;
        }
        Ok(store)
    }

    /// Records the workspace as it is now; returns the checkpoint's id.
    pub fn snapshot(&self, message: &str) -> Result<String, String> {
        self.git(&["add", "-A", "--", "."])?;
        self.git(&["commit", "-q", "--allow-empty", "--no-verify", "-m", message])?;
        Ok(self.git(&["rev-parse", "HEAD"])?.trim().to_string())
    }

    /// Puts the workspace's files back as they were at `id`: changed files restored,
    /// deleted ones brought back, files created since removed.
    pub fn restore(&self, id: &str) -> Result<(), String> {
        // The index holds the latest snapshot, so files created since it are in it and
        // `read-tree -u` removes them from the work tree.
        self.git(&["read-tree", "-u", "--reset", id])?;
        Ok(())
    }

    fn git(&self, args: &[&str]) -> Result<String, String> {
        let out = Command::new("git")
            .arg("--git-dir")
            .arg(&self.git_dir)
            .arg("--work-tree")
            .arg(&self.work_tree)
            // The user's git settings must not act here: no hooks, signing or prompts.
            .args(["-c", "core.hooksPath=/dev/null", "-c", "commit.gpgsign=false", "-c", "core.autocrlf=false"])
            .args(["-c", "user.name=agent", "-c", "user.email=agent@localhost", "-c", "gc.auto=0"])
            .args(args)
            .current_dir(&self.work_tree)
            .env("GIT_TERMINAL_PROMPT", "0")
            .output()
            .map_err(|e| format!("cannot run git (checkpoints need it): {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "git {} failed: {}",
                args.first().unwrap_or(&""),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restores_changed_deleted_and_created_files_and_leaves_the_users_repo_alone() {
        let ws = tempfile::tempdir().unwrap();
        let store_dir = tempfile::tempdir().unwrap();
        let w = ws.path();
        std::fs::create_dir_all(w.join(".git")).unwrap();
        std::fs::write(w.join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
        std::fs::write(w.join("a.txt"), "one\n").unwrap();
        std::fs::write(w.join("gone.txt"), "keep me\n").unwrap();
        let store = CheckpointStore::open(&store_dir.path().join("s"), w).unwrap();
        let first = store.snapshot("turn 1").unwrap();
        std::fs::write(w.join("a.txt"), "two\n").unwrap();
        std::fs::remove_file(w.join("gone.txt")).unwrap();
        std::fs::create_dir_all(w.join("new/dir")).unwrap();
        std::fs::write(w.join("new/dir/b.txt"), [0u8, 159, 146, 150]).unwrap();
        let second = store.snapshot("before rewind").unwrap();
        store.restore(&first).unwrap();
        assert_eq!(std::fs::read_to_string(w.join("a.txt")).unwrap(), "one\n");
        assert_eq!(std::fs::read_to_string(w.join("gone.txt")).unwrap(), "keep me\n");
        assert!(!w.join("new/dir/b.txt").exists());
        // The user's repository is untouched.
        assert_eq!(std::fs::read_to_string(w.join(".git/HEAD")).unwrap(), "ref: refs/heads/main\n");
        assert_eq!(std::fs::read_dir(w.join(".git")).unwrap().count(), 1);
        // And the rewind is undone byte for byte.
        store.snapshot("after rewind").unwrap();
        store.restore(&second).unwrap();
        assert_eq!(std::fs::read_to_string(w.join("a.txt")).unwrap(), "two\n");
        assert_eq!(std::fs::read(w.join("new/dir/b.txt")).unwrap(), [0u8, 159, 146, 150]);
        assert!(!w.join("gone.txt").exists());
    }
}
