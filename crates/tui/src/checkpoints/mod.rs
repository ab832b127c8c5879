//! The workspace's files at each checkpoint, in a content-addressed store outside the
//! workspace (under the user data dir): blobs by SHA-256 and one manifest per
//! checkpoint. No program runs over the workspace (the sandbox writes it: a git
//! there would obey the config, hooks and filters it finds); every file is read and
//! written beneath the workspace's directory fd with no link followed. The user's own
//! repository (the top-level `.git`) is never touched; files the workspace's
//! `.gitignore`s exclude are not kept; nested repositories are kept as plain files.

mod beneath;
mod blobs;
mod manifest;
mod restore;
mod walk;

#[cfg(test)]
mod tests;

use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use rustix::fs::{fstat, FileType, Stat};

use blobs::{Blobs, Put, PutError};
use manifest::{Entry, Kind, Manifest, Name};
use walk::Found;

/// Errors of the checkpoint store, naming the file or checkpoint.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("cannot write the checkpoint store at {path}: {reason} (is the disk full?)")]
    Store { path: String, reason: String },
    #[error("cannot read the workspace {path}: {reason}")]
    Workspace { path: String, reason: String },
    #[error("checkpoint `{0}` is not in the store (it belongs to another session?)")]
    NoSuchCheckpoint(String),
}

/// How much one checkpoint reads and keeps.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// A file over this is not copied (a note says so; a rewind leaves it as it is).
    pub file_bytes: u64,
    /// New bytes one checkpoint copies at most (files already stored cost nothing).
    pub checkpoint_bytes: u64,
    /// Files and folders listed at most.
    pub entries: usize,
    /// Folders deep at most.
    pub depth: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self { file_bytes: 64 << 20, checkpoint_bytes: 1 << 30, entries: 200_000, depth: 64 }
    }
}

/// A checkpoint taken.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// Its id in the store.
    pub id: String,
    /// What it left out, said once per session.
    pub notes: Vec<String>,
}

/// Identifies a file's version without reading it: an unchanged file is not hashed
/// again (the change time cannot be set from inside the sandbox).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileKey {
    dev: u64,
    ino: u64,
    size: i64,
    mtime: (i64, u64),
    ctime: (i64, u64),
}

impl FileKey {
    #[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
    fn of(st: &Stat) -> Self {
        Self {
            dev: st.st_dev as u64,
            ino: st.st_ino as u64,
            size: st.st_size as i64,
            mtime: (st.st_mtime as i64, st.st_mtime_nsec as u64),
            ctime: (st.st_ctime as i64, st.st_ctime_nsec as u64),
        }
    }
}

/// What the store remembers between checkpoints of one session.
#[derive(Debug, Default)]
struct State {
    /// The blob of each file as last seen.
    known: HashMap<PathBuf, (FileKey, String)>,
    /// Notes already shown.
    told: HashSet<String>,
}

/// The store of one session's checkpoints of one workspace.
#[derive(Debug, Clone)]
pub struct CheckpointStore {
    dir: PathBuf,
    workspace: PathBuf,
    limits: Limits,
    blobs: Blobs,
    state: Arc<Mutex<State>>,
}

/// The mode a file is kept and restored with: executable or not, never setuid.
fn file_mode(st_mode: u32) -> u32 {
    if st_mode & 0o111 != 0 {
        0o755
    } else {
        0o644
    }
}

impl CheckpointStore {
    /// Opens (creating) the store in `dir` for the files of `workspace`.
    pub fn open(dir: &Path, workspace: &Path) -> Result<Self, CheckpointError> {
        Self::with_limits(dir, workspace, Limits::default())
    }

    /// As `open`, with other limits.
    pub(crate) fn with_limits(dir: &Path, workspace: &Path, limits: Limits) -> Result<Self, CheckpointError> {
        std::fs::create_dir_all(dir.join("manifests"))
            .map_err(|e| CheckpointError::Store { path: dir.display().to_string(), reason: e.to_string() })?;
        Ok(Self {
            dir: dir.to_path_buf(),
            workspace: workspace.to_path_buf(),
            limits,
            blobs: Blobs::new(dir.join("blobs")),
            state: Arc::default(),
        })
    }

    fn root(&self) -> Result<std::os::fd::OwnedFd, CheckpointError> {
        beneath::open_root(&self.workspace).map_err(|e| CheckpointError::Workspace {
            path: self.workspace.display().to_string(),
            reason: e.to_string(),
        })
    }

    /// Records the workspace as it is now.
    pub fn snapshot(&self, label: &str) -> Result<Snapshot, CheckpointError> {
        let root = self.root()?;
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let mut entries = Vec::new();
        let mut notes = Vec::new();
        let mut copied = 0u64;
        let walked = walk::walk(root.as_fd(), self.limits, &mut |path, found| {
            let kind = match found {
                Found::Dir => Some(Kind::Dir),
                Found::Link { target } => Some(Kind::Link { target: Name(target) }),
                Found::File { parent, name } => {
                    self.copy_in(parent, name, path, &mut state, &mut copied, &mut notes)?
                }
            };
            if let Some(kind) = kind {
                entries.push(Entry { path: Name(path.as_os_str().to_os_string()), kind });
            }
            Ok(())
        })?;
        notes.extend(walked.notes);
        let id = Manifest { label: label.to_string(), entries, cut: walked.cut }.write(&self.dir.join("manifests"))?;
        let notes = notes.into_iter().filter(|n| state.told.insert(n.clone())).collect();
        Ok(Snapshot { id, notes })
    }

    /// Copies one regular file into the store; `None` when it is not one after all.
    fn copy_in(
        &self,
        parent: BorrowedFd<'_>,
        name: &OsStr,
        path: &Path,
        state: &mut State,
        copied: &mut u64,
        notes: &mut Vec<String>,
    ) -> Result<Option<Kind>, CheckpointError> {
        // Swapped for a link or removed since the listing: not kept.
        let Ok(fd) = beneath::open_read(parent, name) else { return Ok(None) };
        let Ok(st) = fstat(&fd) else { return Ok(None) };
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return Ok(None);
        }
        let mode = file_mode(st.st_mode);
        let key = FileKey::of(&st);
        if let Some((k, sha256)) = state.known.get(path) {
            if *k == key && self.blobs.has(sha256) {
                return Ok(Some(Kind::File { mode, sha256: sha256.clone(), size: key.size.max(0) as u64 }));
            }
        }
        let size = key.size.max(0) as u64;
        let mib = |n: u64| n.div_ceil(1 << 20);
        if size > self.limits.file_bytes {
            notes.push(format!(
                "`{}` ({} MiB) is over the {} MiB a checkpoint copies of one file: /rewind leaves it as it is",
                path.display(),
                mib(size),
                mib(self.limits.file_bytes)
            ));
            return Ok(Some(Kind::Skipped));
        }
        if *copied + size > self.limits.checkpoint_bytes {
            notes.push(format!(
                "`{}` was not copied: this checkpoint already copied {} MiB; /rewind leaves it as it is",
                path.display(),
                mib(*copied)
            ));
            return Ok(Some(Kind::Skipped));
        }
        match self.blobs.put(&mut std::fs::File::from(fd), self.limits.file_bytes) {
            Ok(Put::Stored(sha256, n)) => {
                *copied += n;
                state.known.insert(path.to_path_buf(), (key, sha256.clone()));
                Ok(Some(Kind::File { mode, sha256, size: n }))
            }
            Ok(Put::TooBig) => Ok(Some(Kind::Skipped)),
            Err(PutError::Read(e)) => {
                notes.push(format!("`{}` could not be read ({e}): checkpoints do not keep it", path.display()));
                Ok(Some(Kind::Skipped))
            }
            Err(PutError::Write(e)) => Err(CheckpointError::Store {
                path: self.dir.join("blobs").display().to_string(),
                reason: e.to_string(),
            }),
        }
    }

    /// Puts the workspace's files back as they were at `id`: changed files restored,
    /// deleted ones brought back, files created since removed (ignored files stay).
    /// Returns notes on paths it had to leave as they are.
    pub fn restore(&self, id: &str) -> Result<Vec<String>, CheckpointError> {
        let manifest = Manifest::read(&self.dir.join("manifests"), id)?;
        let root = self.root()?;
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        restore::restore(root.as_fd(), &manifest, &self.blobs, self.limits, &mut state)
    }
}
