//! Folders that must never be a sandbox's workspace: the sandbox writes everything in its
//! workspace, so a folder that holds the user's home, the whole disk or the agent's own
//! config, trust store, data or cache would let it rewrite what decides what runs next.

use std::path::{Path, PathBuf};

/// A folder the workspace may not hold, with what it is (`the agent's config folder`).
#[derive(Debug, Clone)]
pub struct Protected {
    /// The folder (it need not exist).
    pub path: PathBuf,
    /// What it is, for the message.
    pub what: String,
}

/// A workspace refused before anything started; the message says why and what to do.
#[derive(Debug, thiserror::Error)]
#[error(
    "refusing to open {workspace} as the sandbox's workspace: {reason}. The sandbox can write everything \
     in its workspace, so it could rewrite your own config, hooks and trust decisions. Open a project \
     folder instead: `cd` into the project, or `mkdir ~/work && cd ~/work`, and start agent there"
)]
pub struct WorkspaceRefused {
    /// The folder asked for.
    pub workspace: String,
    /// Why it is refused (`it is your home folder`).
    pub reason: String,
}

/// Refuses `workspace` when it is `/`, the home folder `home`, or holds (is or contains)
/// one of `protected`; all compared after resolving links (a missing protected folder by
/// its nearest existing parent).
pub fn refuse_dangerous_workspace(
    workspace: &Path,
    home: Option<&Path>,
    protected: &[Protected],
) -> Result<(), WorkspaceRefused> {
    let ws = canonical_lenient(workspace);
    let refuse = |reason: String| WorkspaceRefused { workspace: workspace.display().to_string(), reason };
    if ws.parent().is_none() {
        return Err(refuse("it is the root of the file system".into()));
    }
    if let Some(home) = home {
        if canonical_lenient(home) == ws {
            return Err(refuse("it is your home folder".into()));
        }
    }
    for p in protected {
        let dir = canonical_lenient(&p.path);
        if dir.starts_with(&ws) {
            let how = if dir == ws { "it is" } else { "it holds" };
            return Err(refuse(format!("{how} {} ({})", p.what, p.path.display())));
        }
    }
    Ok(())
}

/// `path` with its links resolved; for a path that does not exist (yet), its nearest
/// existing ancestor resolved and the rest appended.
fn canonical_lenient(path: &Path) -> PathBuf {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut rest = Vec::new();
    let mut cur = absolute.as_path();
    loop {
        if let Ok(real) = cur.canonicalize() {
            return rest.iter().rev().fold(real, |acc: PathBuf, part| acc.join(part));
        }
        match (cur.parent(), cur.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_os_string());
                cur = parent;
            }
            _ => return absolute,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn protected(path: &Path) -> Vec<Protected> {
        vec![Protected { path: path.to_path_buf(), what: "the agent's config folder".into() }]
    }

    #[test]
    fn the_root_and_the_home_folder_are_refused_with_the_reason() {
        let d = tempfile::tempdir().unwrap();
        let e = refuse_dangerous_workspace(Path::new("/"), None, &[]).unwrap_err();
        assert!(e.to_string().contains("root of the file system"), "{e}");
        let e = refuse_dangerous_workspace(d.path(), Some(d.path()), &[]).unwrap_err();
        let text = e.to_string();
        assert!(text.contains("your home folder") && text.contains("mkdir ~/work"), "{text}");
        std::fs::create_dir(d.path().join("proj")).unwrap();
        assert!(refuse_dangerous_workspace(&d.path().join("proj"), Some(d.path()), &[]).is_ok());
    }

    #[test]
    fn a_folder_holding_a_protected_one_is_refused_even_when_it_does_not_exist_yet() {
        let d = tempfile::tempdir().unwrap();
        let config = d.path().join("cfg/agent");
        let e = refuse_dangerous_workspace(d.path(), None, &protected(&config)).unwrap_err();
        assert!(e.to_string().contains("it holds the agent's config folder"), "{e}");
        std::fs::create_dir_all(&config).unwrap();
        let e = refuse_dangerous_workspace(&config, None, &protected(&config)).unwrap_err();
        assert!(e.to_string().contains("it is the agent's config folder"), "{e}");
        // Inside the protected folder, or beside it, is fine.
        std::fs::create_dir_all(config.join("x")).unwrap();
        std::fs::create_dir_all(d.path().join("proj")).unwrap();
        assert!(refuse_dangerous_workspace(&config.join("x"), None, &protected(&config)).is_ok());
        assert!(refuse_dangerous_workspace(&d.path().join("proj"), None, &protected(&config)).is_ok());
    }

    #[test]
    fn a_link_to_a_dangerous_folder_is_refused_too() {
        let d = tempfile::tempdir().unwrap();
        let home = d.path().join("home");
        std::fs::create_dir_all(home.join(".config")).unwrap();
        std::os::unix::fs::symlink(&home, d.path().join("link")).unwrap();
        let e = refuse_dangerous_workspace(&d.path().join("link"), Some(&home), &[]).unwrap_err();
        assert!(e.to_string().contains("home folder"), "{e}");
        let e = refuse_dangerous_workspace(&d.path().join("link"), None, &protected(&home.join(".config/agent")))
            .unwrap_err();
        assert!(e.to_string().contains("it holds"), "{e}");
    }
}
