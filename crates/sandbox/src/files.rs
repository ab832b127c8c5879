//! Byte-exact file operations through the engine's archive API: any content (quotes,
//! NUL bytes, 10 MB files) round-trips without shell quoting.

use std::io::Read;
use std::time::{SystemTime, UNIX_EPOCH};

use bollard::container::{DownloadFromContainerOptions, UploadToContainerOptions};
use futures_util::StreamExt;

use super::confined::TreeOptions;
use super::container::Sandbox;
use super::error::{describe_bollard, is_not_found, SandboxError};

/// Largest file the tools read or write.
pub const MAX_FILE_BYTES: u64 = 64 << 20;

/// What a path is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FileKind {
    File,
    Directory,
    Symlink,
    Other,
}

/// A file's bytes and metadata.
#[derive(Debug, Clone)]
pub struct FileData {
    /// The path that was finally read (after following symlinks).
    pub path: String,
    pub kind: FileKind,
    pub bytes: Vec<u8>,
    pub size: u64,
    pub mode: u32,
    pub uid: u64,
    pub gid: u64,
    pub mtime: u64,
}

fn file_err(path: &str, reason: impl Into<String>) -> SandboxError {
    SandboxError::File { path: path.to_string(), reason: reason.into() }
}

/// Joins a possibly relative path onto a directory and normalises `.` and `..`.
pub fn resolve_path(cwd: &str, path: &str) -> String {
    let joined = if path.starts_with('/') { path.to_string() } else { format!("{cwd}/{path}") };
    let mut parts: Vec<&str> = Vec::new();
    for part in joined.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    format!("/{}", parts.join("/"))
}

impl Sandbox {
    /// Reads a file (following symlinks). Directories are reported without their content.
    pub async fn read_file(&self, path: &str) -> Result<FileData, SandboxError> {
        let mut current = path.to_string();
        for _ in 0..16 {
            let data = self.read_entry(&current).await?;
            if data.kind != FileKind::Symlink {
                return Ok(data);
            }
            let target = String::from_utf8_lossy(&data.bytes).to_string();
            let parent = current.rsplit_once('/').map(|(p, _)| p).unwrap_or("");
            current = resolve_path(if parent.is_empty() { "/" } else { parent }, &target);
        }
        Err(file_err(path, "too many levels of symbolic links"))
    }

    /// Metadata of a path without reading a file's content beyond what is needed.
    pub async fn stat(&self, path: &str) -> Result<FileData, SandboxError> {
        self.read_file(path).await
    }

    /// Reads one archive entry; for a symlink, `bytes` holds the link target.
    async fn read_entry(&self, path: &str) -> Result<FileData, SandboxError> {
        let mut stream = self
            .docker()
            .download_from_container(self.id(), Some(DownloadFromContainerOptions { path: path.to_string() }));
        let mut buf: Vec<u8> = Vec::new();
        let mut header_checked = false;
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| {
                if is_not_found(&e) {
                    file_err(path, "no such file or directory")
                } else {
                    file_err(path, format!("cannot read: {}", describe_bollard(&e)))
                }
            })?;
            buf.extend_from_slice(&chunk);
            if !header_checked && buf.len() >= 512 {
                header_checked = true;
                let header = tar::Header::from_byte_slice(&buf[..512]);
                let kind = header.entry_type();
                if kind.is_dir() {
                    // Stop here: the archive of a directory holds everything below it.
                    return Ok(FileData {
                        path: path.to_string(),
                        kind: FileKind::Directory,
                        bytes: Vec::new(),
                        size: 0,
                        mode: header.mode().unwrap_or(0o755),
                        uid: header.uid().unwrap_or(0),
                        gid: header.gid().unwrap_or(0),
                        mtime: header.mtime().unwrap_or(0),
                    });
                }
                let size = header.entry_size().unwrap_or(0);
                if size > MAX_FILE_BYTES {
                    return Err(file_err(
                        path,
                        format!("the file has {size} bytes, more than the {MAX_FILE_BYTES}-byte limit; use bash (head, tail, grep) on it"),
                    ));
                }
            }
        }
        let mut archive = tar::Archive::new(buf.as_slice());
        let mut entries = archive.entries().map_err(|e| file_err(path, format!("unreadable archive: {e}")))?;
        let Some(entry) = entries.next() else {
            return Err(file_err(path, "no such file or directory"));
        };
        let mut entry = entry.map_err(|e| file_err(path, format!("unreadable archive: {e}")))?;
        let header = entry.header().clone();
        let kind = match header.entry_type() {
            t if t.is_file() => FileKind::File,
            t if t.is_dir() => FileKind::Directory,
            t if t.is_symlink() => FileKind::Symlink,
            _ => FileKind::Other,
        };
        let mut bytes = Vec::new();
        if kind == FileKind::Symlink {
            let target = entry.link_name().ok().flatten().map(|p| p.to_string_lossy().to_string()).unwrap_or_default();
            bytes = target.into_bytes();
        } else if kind == FileKind::File {
            entry.read_to_end(&mut bytes).map_err(|e| file_err(path, format!("unreadable archive: {e}")))?;
        }
        Ok(FileData {
            path: path.to_string(),
            kind,
            size: header.entry_size().unwrap_or(bytes.len() as u64),
            bytes,
            mode: header.mode().unwrap_or(0o644),
            uid: header.uid().unwrap_or(0),
            gid: header.gid().unwrap_or(0),
            mtime: header.mtime().unwrap_or(0),
        })
    }

    /// Writes a file, creating missing parent directories. `like` keeps the mode and
    /// owner of the file being replaced.
    pub async fn write_file(&self, path: &str, bytes: &[u8], like: Option<&FileData>) -> Result<(), SandboxError> {
        if bytes.len() as u64 > MAX_FILE_BYTES {
            return Err(file_err(path, format!("refusing to write more than {MAX_FILE_BYTES} bytes in one call")));
        }
        let (parent, name) = match path.rsplit_once('/') {
            Some((p, n)) if !n.is_empty() => (if p.is_empty() { "/" } else { p }, n),
            _ => {
                return Err(file_err(
                    path,
                    "not a file path (use an absolute path or one relative to the working directory)",
                ))
            }
        };
        let mut header = tar::Header::new_gnu();
        header.set_size(bytes.len() as u64);
        header.set_mode(like.map(|l| l.mode & 0o7777).unwrap_or(0o644));
        header.set_uid(like.map(|l| l.uid).unwrap_or(0));
        header.set_gid(like.map(|l| l.gid).unwrap_or(0));
        header.set_mtime(SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0));
        header.set_entry_type(tar::EntryType::Regular);
        let mut builder = tar::Builder::new(Vec::with_capacity(bytes.len() + 1024));
        builder
            .append_data(&mut header, name, bytes)
            .map_err(|e| file_err(path, format!("cannot pack the file: {e}")))?;
        let archive = builder.into_inner().map_err(|e| file_err(path, format!("cannot pack the file: {e}")))?;
        let archive = bytes::Bytes::from(archive);
        let upload = |archive: bytes::Bytes| {
            self.docker().upload_to_container(
                self.id(),
                Some(UploadToContainerOptions { path: parent.to_string(), ..Default::default() }),
                archive,
            )
        };
        match upload(archive.clone()).await {
            Ok(()) => Ok(()),
            Err(e) if is_not_found(&e) => {
                let out =
                    self.exec(&["mkdir", "-p", "--", parent], None, std::time::Duration::from_secs(30), 4096).await?;
                if out.exit_code != Some(0) {
                    return Err(file_err(
                        path,
                        format!("cannot create the parent directory: {}", String::from_utf8_lossy(&out.stderr).trim()),
                    ));
                }
                upload(archive).await.map_err(|e| file_err(path, format!("cannot write: {}", describe_bollard(&e))))
            }
            Err(e) => Err(file_err(path, format!("cannot write: {}", describe_bollard(&e)))),
        }
    }

    /// Copies a host file tree to `dest` (created; an empty directory when `src` is not
    /// a directory). `src` lies in a folder someone else wrote (a task's `tests/` or
    /// `solution/`): links are followed only where they stay inside the folder that holds
    /// `src` (the task's folder); one that leads out of it is refused, naming the link.
    pub async fn copy_dir_in(&self, src: &std::path::Path, dest: &str) -> Result<(), SandboxError> {
        let name = dest.trim_start_matches('/');
        let (Some(root), Some(sub)) = (src.parent(), src.file_name()) else {
            return Err(file_err(dest, format!("{} is not a folder inside a task", src.display())));
        };
        let archive = crate::confined::pack_confined(root, std::path::Path::new(sub), name, &TreeOptions::TASK)
            .map_err(|e| file_err(dest, format!("cannot copy {} in: {e}", src.display())))?;
        self.docker()
            .upload_to_container(
                self.id(),
                Some(UploadToContainerOptions { path: "/".to_string(), ..Default::default() }),
                archive.into(),
            )
            .await
            .map_err(|e| file_err(dest, format!("cannot copy {} in: {}", src.display(), describe_bollard(&e))))
    }
}

#[cfg(test)]
mod tests {
    use super::resolve_path;

    #[test]
    fn resolves_relative_and_dot_paths() {
        assert_eq!(resolve_path("/app", "x.txt"), "/app/x.txt");
        assert_eq!(resolve_path("/app", "/etc/../tmp/./y"), "/tmp/y");
        assert_eq!(resolve_path("/", "a/b/../c"), "/a/c");
        assert_eq!(resolve_path("/app", "../../.."), "/");
    }
}
