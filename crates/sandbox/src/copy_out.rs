//! Copying a path out of a container onto the host, treating what comes out as hostile:
//! the engine's archive of the path is read up to a byte limit and unpacked under one
//! host folder with only plain files and folders written (no links, devices or modes
//! beyond read/write), no entry placed outside that folder, and nothing existing
//! overwritten.

use std::io::Read;
use std::path::{Component, Path, PathBuf};

use bollard::container::DownloadFromContainerOptions;
use futures_util::StreamExt;

use super::container::Sandbox;
use super::error::{describe_bollard, is_not_found, SandboxError};

/// What a copy out of a container wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CopiedOut {
    /// Plain files written.
    pub files: u64,
    /// Bytes of those files.
    pub bytes: u64,
    /// Entries left out: links, devices, pipes, and names that would leave the folder.
    pub skipped: Vec<String>,
    /// Whether the archive passed the byte limit, so the entries after it are missing.
    pub cut: bool,
}

fn copy_err(path: &str, reason: impl Into<String>) -> SandboxError {
    SandboxError::File { path: path.to_string(), reason: reason.into() }
}

impl Sandbox {
    /// Copies the container's `path` (a file or a folder) to the host folder `dest`
    /// (created; it must not exist yet), reading at most `max_bytes` of the engine's
    /// archive. `dest` is the file itself for a file, and holds a folder's content.
    pub async fn copy_out(&self, path: &str, dest: &Path, max_bytes: u64) -> Result<CopiedOut, SandboxError> {
        let mut stream = self
            .docker()
            .download_from_container(self.id(), Some(DownloadFromContainerOptions { path: path.to_string() }));
        let mut buf: Vec<u8> = Vec::new();
        let mut cut = false;
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| {
                if is_not_found(&e) {
                    copy_err(path, "no such file or directory in the container")
                } else {
                    copy_err(path, format!("cannot read: {}", describe_bollard(&e)))
                }
            })?;
            let room = (max_bytes as usize).saturating_sub(buf.len());
            if chunk.len() > room {
                buf.extend_from_slice(&chunk[..room]);
                cut = true;
                break;
            }
            buf.extend_from_slice(&chunk);
        }
        let mut out = unpack_hostile(&buf, dest).map_err(|e| copy_err(path, e))?;
        out.cut = cut;
        Ok(out)
    }
}

/// Unpacks a tar archive of one path (its entries named `NAME` and `NAME/…`) so that
/// `NAME` becomes `dest`; an archive cut short is unpacked up to its last whole entry.
/// The reason when `dest` cannot be made or written.
pub fn unpack_hostile(archive: &[u8], dest: &Path) -> Result<CopiedOut, String> {
    let mut out = CopiedOut::default();
    let mut tar = tar::Archive::new(archive);
    let entries = tar.entries().map_err(|e| format!("unreadable archive: {e}"))?;
    for entry in entries {
        // A cut archive ends in a broken entry: what came before it stands.
        let Ok(mut entry) = entry else { break };
        let raw = entry.path().map(|p| p.to_path_buf()).unwrap_or_default();
        let shown = raw.display().to_string();
        let Some(target) = place(&raw, dest) else {
            out.skipped.push(format!("{shown} (a name that leaves the folder)"));
            continue;
        };
        let kind = entry.header().entry_type();
        if kind.is_dir() {
            make_dir(&target, dest)?;
        } else if kind.is_file() {
            if let Some(parent) = target.parent() {
                make_dir(parent, dest)?;
            }
            let mut bytes = Vec::new();
            if entry.read_to_end(&mut bytes).is_err() || bytes.len() as u64 != entry.size() {
                // The entry the archive was cut in: its bytes are not all there.
                break;
            }
            write_new(&target, &bytes)?;
            out.files += 1;
            out.bytes += bytes.len() as u64;
        } else {
            let what = if kind.is_symlink() || kind.is_hard_link() { "a link" } else { "not a plain file" };
            out.skipped.push(format!("{shown} ({what})"));
        }
    }
    Ok(out)
}

/// Where an archive entry goes: its first component is the copied path's own name,
/// replaced by `dest`; `None` for a name with `..`, a root or a prefix.
fn place(raw: &Path, dest: &Path) -> Option<PathBuf> {
    let mut parts = raw.components().filter(|c| !matches!(c, Component::CurDir));
    match parts.next() {
        Some(Component::Normal(_)) => {}
        _ => return None,
    }
    let mut target = dest.to_path_buf();
    for part in parts {
        match part {
            Component::Normal(p) => target.push(p),
            _ => return None,
        }
    }
    Some(target)
}

/// Makes `dir` and its missing parents down from `dest`'s parent, refusing anything in
/// the way that is not a real folder (never following a link).
fn make_dir(dir: &Path, dest: &Path) -> Result<(), String> {
    let base = dest.parent().unwrap_or(Path::new("/"));
    let rel = dir.strip_prefix(base).map_err(|_| format!("{} is outside {}", dir.display(), base.display()))?;
    let mut at = base.to_path_buf();
    for part in rel.components() {
        at.push(part);
        match std::fs::symlink_metadata(&at) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => return Err(format!("{}: in the way of a folder", at.display())),
            Err(_) => std::fs::create_dir(&at).map_err(|e| format!("{}: cannot create: {e}", at.display()))?,
        }
    }
    Ok(())
}

/// Writes a new plain file (never through an existing name, link or not).
fn write_new(path: &Path, bytes: &[u8]) -> Result<(), String> {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| format!("{}: cannot create: {e}", path.display()))?;
    f.write_all(bytes).map_err(|e| format!("{}: cannot write: {e}", path.display()))
}

#[cfg(test)]
#[path = "copy_out_tests.rs"]
mod tests;
