//! The control files of a workspace, bound read-only over it inside the sandbox: what
//! git, a shell hook (direnv), an editor or the agent itself would act on, on the host,
//! the next time the user runs them there.
//!
//! Each one that exists is bound read-only onto itself. One that does not exist is
//! covered with a read-only empty placeholder (from a private temporary folder), so the
//! sandbox cannot create it either: the engine makes an empty mount point in the user's
//! folder for it, which [`WorkspaceGuard::cleanup`] removes after the container is gone
//! (when it is still empty). `.git` itself is bound read-write onto itself, so that
//! objects, refs and the index stay writable (`git commit` works) while the folder can
//! be neither renamed nor replaced: a mount point cannot be (EBUSY). A link at one of
//! these names is never bound (that would mount whatever it points to, anywhere on the
//! host): it is skipped with a notice.
//!
//! `.git/commondir` (which would point git at a config and hooks elsewhere) cannot have
//! an empty placeholder: git refuses a repository whose `commondir` is empty. A missing
//! one is written as `.` (the repository itself, which git reads as if there were none)
//! before the container starts, bound read-only onto itself, and removed again at the
//! end when it still says `.`.

use std::path::{Path, PathBuf};

use crate::mount::Mount;

/// Entries of the workspace's root kept read-only (`.git` itself stays writable, see
/// [`GIT_CONTROL_PATHS`]).
pub const ROOT_CONTROL_PATHS: [&str; 8] =
    [".git", ".agent", ".mcp.json", ".envrc", ".vscode", ".idea", ".claude", ".codex"];
/// Entries of `.git` kept read-only: its config, hooks and info (exclude, attributes).
pub const GIT_CONTROL_PATHS: [&str; 3] = ["config", "hooks", "info"];
/// Entries of `.git` kept read-only when they exist: `commondir` (which moves the
/// repository's config and hooks elsewhere), and linked worktrees' and submodules' own
/// config and hooks.
const GIT_EXISTING_ONLY: [&str; 3] = ["commondir", "worktrees", "modules"];
/// Entries of `.git` that are written with a harmless value when missing (see above).
const GIT_SEEDED: [(&str, &[u8]); 1] = [("commondir", b".\n")];

/// The read-only binds over one workspace and what they leave in the user's folder.
#[derive(Debug)]
pub(crate) struct WorkspaceGuard {
    /// The binds, to mount after (over) the workspace's own.
    pub(crate) mounts: Vec<Mount>,
    /// Host paths the engine creates as empty mount points for placeholders.
    created: Vec<PathBuf>,
    /// Host files written before the start, with what was written: removed at the end
    /// when they still hold it.
    seeded: Vec<(PathBuf, &'static [u8])>,
    /// What could not be guarded, for the user.
    pub(crate) notices: Vec<String>,
    /// The placeholders' sources; removed with the guard.
    _empty: Option<tempfile::TempDir>,
}

/// Whether a missing entry is covered with an empty file or an empty folder.
#[derive(Clone, Copy)]
enum Shape {
    File,
    Dir,
}

fn shape(name: &str) -> Shape {
    match name {
        ".mcp.json" | ".envrc" | "config" | "commondir" => Shape::File,
        _ => Shape::Dir,
    }
}

impl WorkspaceGuard {
    /// The guard of the host folder `root`, mounted at `target` in the container.
    pub(crate) fn plan(root: &Path, target: &str) -> std::io::Result<WorkspaceGuard> {
        let mut guard = WorkspaceGuard {
            mounts: Vec::new(),
            created: Vec::new(),
            seeded: Vec::new(),
            notices: Vec::new(),
            _empty: None,
        };
        for name in ROOT_CONTROL_PATHS {
            let host = root.join(name);
            let inside = format!("{}/{name}", target.trim_end_matches('/'));
            match std::fs::symlink_metadata(&host) {
                Ok(meta) if name == ".git" && meta.is_dir() => {
                    guard.bind(&host, &inside, false);
                    guard.guard_git_dir(&host, &inside)?;
                }
                Ok(meta) => guard.cover(&host, &inside, name, &meta),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => guard.placeholder(&host, &inside, shape(name))?,
                Err(e) => return Err(with_path(e, &host)),
            }
        }
        Ok(guard)
    }

    fn guard_git_dir(&mut self, git: &Path, inside: &str) -> std::io::Result<()> {
        for name in GIT_CONTROL_PATHS.into_iter().chain(GIT_EXISTING_ONLY) {
            let host = git.join(name);
            let target = format!("{inside}/{name}");
            match std::fs::symlink_metadata(&host) {
                Ok(meta) => self.cover(&host, &target, &format!(".git/{name}"), &meta),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    if GIT_CONTROL_PATHS.contains(&name) {
                        self.placeholder(&host, &target, shape(name))?;
                    } else if let Some((_, bytes)) = GIT_SEEDED.iter().find(|(n, _)| *n == name) {
                        self.seed(&host, &target, &format!(".git/{name}"), bytes);
                    }
                }
                Err(e) => return Err(with_path(e, &host)),
            }
        }
        Ok(())
    }

    /// Binds an existing entry read-only onto itself; a link is skipped with a notice.
    fn cover(&mut self, host: &Path, inside: &str, name: &str, meta: &std::fs::Metadata) {
        if meta.file_type().is_symlink() {
            self.notices.push(format!(
                "`{name}` in the workspace is a link ({}): it is not made read-only in the sandbox (binding it would \
                 follow the link), so commands there can replace it; check it after the session",
                host.display()
            ));
            return;
        }
        self.bind(host, inside, true);
    }

    fn bind(&mut self, source: &Path, target: &str, read_only: bool) {
        self.mounts.push(Mount::Bind { source: source.to_path_buf(), target: target.to_string(), read_only });
    }

    /// Writes a missing file with a harmless value and binds it read-only onto itself.
    fn seed(&mut self, host: &Path, inside: &str, name: &str, bytes: &'static [u8]) {
        let created = std::fs::OpenOptions::new().write(true).create_new(true).open(host);
        match created.and_then(|mut f| std::io::Write::write_all(&mut f, bytes)) {
            Ok(()) => {
                self.seeded.push((host.to_path_buf(), bytes));
                self.bind(host, inside, true);
            }
            Err(e) => self.notices.push(format!(
                "cannot write {} ({e}): `{name}` is not made read-only in the sandbox, so commands there could \
                 point git at another config and hooks; check it after the session",
                host.display()
            )),
        }
    }

    /// Covers a missing entry with a read-only empty file or folder.
    fn placeholder(&mut self, host: &Path, inside: &str, shape: Shape) -> std::io::Result<()> {
        let empty = match &self._empty {
            Some(dir) => dir.path().to_path_buf(),
            None => {
                let dir = tempfile::Builder::new().prefix("agent-guard-").tempdir()?;
                let path = dir.path().to_path_buf();
                make_placeholders(&path)?;
                self._empty = Some(dir);
                path
            }
        };
        let source = match shape {
            Shape::File => empty.join("file"),
            Shape::Dir => empty.join("dir"),
        };
        self.bind(&source, inside, true);
        self.created.push(host.to_path_buf());
        Ok(())
    }

    /// Removes the empty mount points the engine made for placeholders and the files
    /// written before the start (call it once the container is gone; anything that
    /// changed is left alone); returns what it left and why.
    pub(crate) fn cleanup(&self) -> Vec<String> {
        let mut kept = Vec::new();
        for (path, bytes) in &self.seeded {
            match std::fs::read(path) {
                Ok(now) if now == *bytes => {
                    if let Err(e) = std::fs::remove_file(path) {
                        tracing::debug!("leaving {}: {e}", path.display());
                    }
                }
                Ok(_) => kept.push(format!(
                    "{} changed during the session although it was read-only in the sandbox: check it",
                    path.display()
                )),
                Err(_) => {}
            }
        }
        for path in &self.created {
            let Ok(meta) = std::fs::symlink_metadata(path) else { continue };
            let res = if meta.is_dir() {
                std::fs::remove_dir(path)
            } else if meta.is_file() && meta.len() == 0 {
                std::fs::remove_file(path)
            } else {
                continue;
            };
            if let Err(e) = res {
                tracing::debug!("leaving the mount point {}: {e}", path.display());
            }
        }
        kept
    }
}

fn make_placeholders(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let file = dir.join("file");
    std::fs::write(&file, b"")?;
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o444))?;
    let sub = dir.join("dir");
    std::fs::create_dir(&sub)?;
    std::fs::set_permissions(&sub, std::fs::Permissions::from_mode(0o555))
}

fn with_path(e: std::io::Error, path: &Path) -> std::io::Error {
    std::io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn binds(g: &WorkspaceGuard) -> Vec<(String, bool, bool)> {
        g.mounts
            .iter()
            .map(|m| match m {
                Mount::Bind { source, target, read_only } => {
                    (target.clone(), *read_only, source.to_string_lossy().contains("agent-guard-"))
                }
                other => panic!("{other:?}"),
            })
            .collect()
    }

    #[test]
    fn existing_control_files_are_bound_read_only_and_missing_ones_get_placeholders() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path();
        std::fs::create_dir_all(root.join(".git/hooks")).unwrap();
        std::fs::write(root.join(".git/config"), "[core]\n").unwrap();
        std::fs::write(root.join(".envrc"), "export A=1\n").unwrap();
        let g = WorkspaceGuard::plan(root, "/workspace/").unwrap();
        let b = binds(&g);
        let has = |t: &str, ro: bool, placeholder: bool| b.contains(&(t.to_string(), ro, placeholder));
        assert!(has("/workspace/.git", false, false), "{b:?}");
        assert!(has("/workspace/.git/config", true, false) && has("/workspace/.git/hooks", true, false), "{b:?}");
        assert!(has("/workspace/.git/info", true, true), "{b:?}");
        assert!(has("/workspace/.git/commondir", true, false), "{b:?}");
        assert_eq!(std::fs::read(root.join(".git/commondir")).unwrap(), b".\n", "git reads `.` as no commondir");
        assert!(has("/workspace/.envrc", true, false) && has("/workspace/.mcp.json", true, true), "{b:?}");
        assert!(has("/workspace/.vscode", true, true) && has("/workspace/.agent", true, true), "{b:?}");
        assert!(!b.iter().any(|(t, ..)| t.ends_with("modules")), "modules only when it exists: {b:?}");
        assert!(g.notices.is_empty());
        // What the engine would make for the placeholders goes again; the rest stays.
        std::fs::create_dir(root.join(".vscode")).unwrap();
        std::fs::write(root.join(".mcp.json"), "").unwrap();
        std::fs::create_dir(root.join(".agent")).unwrap();
        std::fs::write(root.join(".agent/x"), "kept").unwrap();
        assert!(g.cleanup().is_empty());
        assert!(!root.join(".vscode").exists() && !root.join(".mcp.json").exists());
        assert!(!root.join(".git/commondir").exists());
        assert!(root.join(".agent/x").exists() && root.join(".envrc").exists() && root.join(".git/config").exists());
    }

    #[test]
    fn a_missing_git_folder_is_one_read_only_placeholder() {
        let d = tempfile::tempdir().unwrap();
        let g = WorkspaceGuard::plan(d.path(), "/workspace").unwrap();
        let b = binds(&g);
        assert!(b.contains(&("/workspace/.git".into(), true, true)), "{b:?}");
        assert!(!b.iter().any(|(t, ..)| t.starts_with("/workspace/.git/")), "{b:?}");
    }

    #[test]
    fn a_link_at_a_control_name_is_never_bound() {
        let d = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join(".git")).unwrap();
        std::os::unix::fs::symlink(outside.path(), d.path().join(".vscode")).unwrap();
        std::os::unix::fs::symlink(outside.path(), d.path().join(".git/hooks")).unwrap();
        let g = WorkspaceGuard::plan(d.path(), "/workspace").unwrap();
        for m in &g.mounts {
            let Mount::Bind { source, .. } = m else { panic!() };
            assert!(!source.starts_with(outside.path()), "{source:?} is outside the workspace");
        }
        let b = binds(&g);
        assert!(!b.iter().any(|(t, ..)| t == "/workspace/.vscode" || t == "/workspace/.git/hooks"), "{b:?}");
        assert_eq!(g.notices.len(), 2, "{:?}", g.notices);
        for name in ["`.vscode`", "`.git/hooks`"] {
            assert!(g.notices.iter().any(|n| n.contains(name)), "{name}: {:?}", g.notices);
        }
    }
}
