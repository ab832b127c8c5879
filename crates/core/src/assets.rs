//! Files the binary carries for its built-in presets and suites (the toy training
//! tasks and their demonstrations, the judge's evaluation cases), so that an installed
//! binary works from any directory: they are unpacked into the cache on first use,
//! never looked up in the source tree.

use std::path::{Path, PathBuf};

use include_dir::{include_dir, Dir, DirEntry};
use sha2::{Digest, Sha256};

static ASSETS: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/../../assets");

/// Why the built-in files could not be unpacked.
#[derive(Debug, thiserror::Error)]
pub enum AssetError {
    #[error("no cache directory (set AGENT_CACHE_DIR or HOME)")]
    NoCacheDir,
    #[error("cannot unpack the built-in files into {path}: {reason}")]
    Unpack { path: String, reason: String },
}

/// The folder holding the built-in files (`assets/` of the source tree), unpacked
/// into `<cache root>/assets/<content hash>` the first time it is asked for.
pub fn assets_root() -> Result<PathBuf, AssetError> {
    let root = agent_llm::models::cache_root().map_err(|_| AssetError::NoCacheDir)?.join("assets");
    unpack_into(&root)
}

/// A built-in file or folder, e.g. `judge-eval` or `train/toy-files`.
pub fn asset_path(relative: &str) -> Result<PathBuf, AssetError> {
    Ok(assets_root()?.join(relative))
}

/// Unpacks the files under `root/<hash>` (a folder of that name is complete: it is
/// written beside it and renamed into place) and returns that folder.
fn unpack_into(root: &Path) -> Result<PathBuf, AssetError> {
    let dest = root.join(content_hash());
    if dest.is_dir() {
        return Ok(dest);
    }
    let err =
        |path: &Path, e: std::io::Error| AssetError::Unpack { path: path.display().to_string(), reason: e.to_string() };
    std::fs::create_dir_all(root).map_err(|e| err(root, e))?;
    let tmp = tempfile::Builder::new().prefix(".unpack-").tempdir_in(root).map_err(|e| err(root, e))?;
    write_dir(&ASSETS, tmp.path()).map_err(|e| err(tmp.path(), e))?;
    let staged = tmp.keep();
    match std::fs::rename(&staged, &dest) {
        Ok(()) => Ok(dest),
        // Another process unpacked the same files first: theirs are as good.
        Err(_) if dest.is_dir() => {
            let _ = std::fs::remove_dir_all(&staged);
            Ok(dest)
        }
        Err(e) => {
            let _ = std::fs::remove_dir_all(&staged);
            Err(err(&dest, e))
        }
    }
}

fn write_dir(dir: &Dir<'_>, base: &Path) -> std::io::Result<()> {
    for entry in dir.entries() {
        match entry {
            DirEntry::Dir(d) => {
                std::fs::create_dir_all(base.join(d.path()))?;
                write_dir(d, base)?;
            }
            DirEntry::File(f) => {
                let path = base.join(f.path());
                if let Some(parent) = path.parent() {
                    std::fs::create_dir_all(parent)?;
                }
                std::fs::write(&path, f.contents())?;
                if is_script(&path) {
                    use std::os::unix::fs::PermissionsExt;
                    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
                }
            }
        }
    }
    Ok(())
}

/// Shell scripts keep their executable bit (include_dir does not record modes).
fn is_script(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "sh")
}

/// A short hash of every path and content, so that a binary with other files never
/// reads a folder unpacked by an older one.
fn content_hash() -> String {
    let mut files = Vec::new();
    collect(&ASSETS, &mut files);
    files.sort_by(|a, b| a.0.cmp(&b.0));
    let mut hasher = Sha256::new();
    for (path, contents) in files {
        hasher.update(path.as_bytes());
        hasher.update([0]);
        hasher.update((contents.len() as u64).to_le_bytes());
        hasher.update(contents);
    }
    agent_llm::models::hex(&hasher.finalize())[..16].to_string()
}

fn collect<'a>(dir: &'a Dir<'a>, out: &mut Vec<(String, &'a [u8])>) {
    for entry in dir.entries() {
        match entry {
            DirEntry::Dir(d) => collect(d, out),
            DirEntry::File(f) => out.push((f.path().to_string_lossy().to_string(), f.contents())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unpacks_every_file_once_with_scripts_executable() {
        let dir = tempfile::tempdir().unwrap();
        let first = unpack_into(dir.path()).unwrap();
        assert!(first.starts_with(dir.path()));
        let demos = first.join("train/toy-files/demos.jsonl");
        assert!(demos.is_file(), "{} missing", demos.display());
        assert!(first.join("judge-eval/perfect-agent.yaml").is_file());
        use std::os::unix::fs::PermissionsExt;
        let script = std::fs::read_dir(first.join("train/toy-files"))
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| e.path().join("run-tests.sh"))
            .find(|p| p.is_file())
            .expect("a toy task with run-tests.sh");
        assert_eq!(std::fs::metadata(&script).unwrap().permissions().mode() & 0o111, 0o111);
        // A second call finds the folder and writes nothing.
        std::fs::write(first.join("marker"), "x").unwrap();
        assert_eq!(unpack_into(dir.path()).unwrap(), first);
        assert!(first.join("marker").is_file());
        let leftovers: Vec<_> = std::fs::read_dir(dir.path()).unwrap().filter_map(|e| e.ok()).collect();
        assert_eq!(leftovers.len(), 1, "staging folders left behind");
    }
}
