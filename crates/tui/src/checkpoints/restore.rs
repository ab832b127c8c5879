//! Puts a checkpoint back: every removal and write beneath the workspace's directory
//! fd, parents opened one component at a time with no link followed (a directory
//! swapped for a link makes that path refused, never written through), files written
//! to a temporary name and renamed into place.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, BorrowedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{fchmod, fstat, mkdirat, openat, renameat, symlinkat, unlinkat, AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

use super::beneath::{fd_or, open_dir, open_parent, open_read, parts, temp_name};
use super::blobs::{sha256_of, Blobs};
use super::manifest::{Kind, Manifest};
use super::walk::{walk, Found};
use super::{file_mode, CheckpointError, FileKey, Limits, State};

/// What is at a path now.
#[derive(Debug, PartialEq)]
enum Now {
    Dir,
    File,
    Link(OsString),
}

/// Restores `manifest` into the workspace open at `root`; returns notes on what was
/// left as it is.
pub(super) fn restore(
    root: BorrowedFd<'_>,
    manifest: &Manifest,
    blobs: &Blobs,
    limits: Limits,
    state: &mut State,
) -> Result<Vec<String>, CheckpointError> {
    let mut notes = Vec::new();
    let mut want: BTreeMap<PathBuf, &Kind> = BTreeMap::new();
    for e in &manifest.entries {
        let path = e.path.path();
        // Only plain relative paths, never into the user's repository.
        match parts(&path) {
            Some(p) if p.first().is_some_and(|f| !super::walk::is_control(f)) => {
                want.insert(path, &e.kind);
            }
            _ => notes.push(format!("the checkpoint names `{}`, which is not restored", path.display())),
        }
    }
    // What the listing of a checkpoint would see now.
    let mut now: BTreeMap<PathBuf, Now> = BTreeMap::new();
    let walked = walk(root, limits, &mut |path, found| {
        let kind = match found {
            Found::Dir => Now::Dir,
            Found::File { .. } => Now::File,
            Found::Link { target } => Now::Link(target),
        };
        now.insert(path.to_path_buf(), kind);
        Ok(())
    })?;
    notes.extend(walked.notes);
    // When either listing stopped at the limit, a file missing from the checkpoint may
    // only be past its end: nothing is removed then, only put back.
    let complete = !walked.cut && !manifest.cut;
    if !complete {
        notes.push("files created since the checkpoint were left: the workspace has too many files to compare".into());
    }
    // Files and links made since (or where the checkpoint had a folder).
    for (path, kind) in now.iter().filter(|_| complete) {
        if *kind != Now::Dir && matches!(want.get(path), None | Some(Kind::Dir)) {
            remove(root, path, false, &mut notes);
        }
    }
    // Folders made since, deepest first; one still holding ignored files stays.
    for (path, kind) in now.iter().rev().filter(|_| complete) {
        if *kind == Now::Dir && !matches!(want.get(path), Some(Kind::Dir) | Some(Kind::Skipped)) {
            remove(root, path, true, &mut notes);
        }
    }
    for (path, kind) in &want {
        match kind {
            Kind::Dir => make_dir(root, path, &mut notes),
            Kind::File { mode, sha256, size } => {
                if now.get(path) == Some(&Now::File) && same_file(root, path, *mode, sha256, *size, state) {
                    continue;
                }
                if let Err(note) = write_file(root, path, *mode, sha256, blobs) {
                    notes.push(note);
                }
            }
            Kind::Link { target } => {
                if now.get(path) == Some(&Now::Link(target.0.clone())) {
                    continue;
                }
                if let Err(note) = write_link(root, path, &target.0) {
                    notes.push(note);
                }
            }
            Kind::Skipped => {}
        }
    }
    Ok(notes)
}

/// Removes a file, link or empty folder (a folder that is not empty is left quietly:
/// it holds ignored files, as a restore always left them).
fn remove(root: BorrowedFd<'_>, path: &Path, dir: bool, notes: &mut Vec<String>) {
    let (parent, name) = match open_parent(root, path, false) {
        Ok(p) => p,
        Err(r) if r.errno == Errno::NOENT => return,
        Err(r) => return notes.push(r.describe(path)),
    };
    let flags = if dir { AtFlags::REMOVEDIR } else { AtFlags::empty() };
    match unlinkat(fd_or(&parent, root), name, flags) {
        Ok(()) | Err(Errno::NOENT) | Err(Errno::NOTEMPTY) | Err(Errno::EXIST) => {}
        Err(e) => notes.push(format!("could not remove `{}`: {e}", path.display())),
    }
}

/// Makes a folder (and its parents), none of them through a link.
fn make_dir(root: BorrowedFd<'_>, path: &Path, notes: &mut Vec<String>) {
    let (parent, name) = match open_parent(root, path, true) {
        Ok(p) => p,
        Err(r) => return notes.push(r.describe(path)),
    };
    let here = fd_or(&parent, root);
    match mkdirat(here, name, Mode::from_raw_mode(0o755)) {
        Ok(()) | Err(Errno::EXIST) => {}
        Err(e) => return notes.push(format!("could not make the folder `{}`: {e}", path.display())),
    }
    if let Err(e) = open_dir(here, name) {
        notes.push(format!("left `{}` as it is: it is not a folder ({e})", path.display()));
    }
}

/// Whether the file at `path` already holds the checkpoint's bytes and mode.
fn same_file(root: BorrowedFd<'_>, path: &Path, mode: u32, sha256: &str, size: u64, state: &State) -> bool {
    let Ok((parent, name)) = open_parent(root, path, false) else { return false };
    let Ok(fd) = open_read(fd_or(&parent, root), name) else { return false };
    let Ok(st) = fstat(&fd) else { return false };
    let key = FileKey::of(&st);
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile
        || file_mode(st.st_mode) != mode
        || st.st_mode & 0o7000 != 0
        || key.size.max(0) as u64 != size
    {
        return false;
    }
    if let Some((k, known)) = state.known.get(path) {
        if *k == key {
            return known == sha256;
        }
    }
    sha256_of(&mut std::fs::File::from(fd), size).as_deref() == Some(sha256)
}

/// Writes a blob to `path` through a temporary file beside it, renamed into place.
fn write_file(root: BorrowedFd<'_>, path: &Path, mode: u32, sha256: &str, blobs: &Blobs) -> Result<(), String> {
    let (parent, name) = open_parent(root, path, true).map_err(|r| r.describe(path))?;
    let here = fd_or(&parent, root);
    let mut blob = blobs
        .open(sha256)
        .map_err(|e| format!("could not restore `{}`: its copy in the store is unreadable ({e})", path.display()))?;
    let tmp = temp_name(name);
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = openat(here, &tmp, flags, Mode::from_raw_mode(0o600))
        .map_err(|e| format!("could not restore `{}`: {e}", path.display()))?;
    let mut file = std::fs::File::from(fd);
    let written = std::io::copy(&mut blob, &mut file)
        .map_err(|e| e.to_string())
        .and_then(|_| fchmod(&file, Mode::from_raw_mode(mode)).map_err(|e| e.to_string()));
    drop(file);
    put_in_place(here, &tmp, name, path, written.map_err(|e| format!("could not restore `{}`: {e}", path.display())))
}

/// Makes the link `path` → `target` (the link itself; nothing is followed).
fn write_link(root: BorrowedFd<'_>, path: &Path, target: &OsStr) -> Result<(), String> {
    let (parent, name) = open_parent(root, path, true).map_err(|r| r.describe(path))?;
    let here = fd_or(&parent, root);
    let tmp = temp_name(name);
    symlinkat(target, here, &tmp).map_err(|e| format!("could not restore the link `{}`: {e}", path.display()))?;
    put_in_place(here, &tmp, name, path, Ok(()))
}

/// Renames `tmp` over `name` when `ready`, else (or when that fails) removes it.
fn put_in_place(
    dir: BorrowedFd<'_>,
    tmp: &OsStr,
    name: &OsStr,
    path: &Path,
    ready: Result<(), String>,
) -> Result<(), String> {
    let result = ready.and_then(|()| {
        renameat(dir, tmp, dir, name).map_err(|e| {
            format!("could not put `{}` back: {e} (a folder with ignored files in its place?)", path.display())
        })
    });
    if result.is_err() {
        let _ = unlinkat(dir.as_fd(), tmp, AtFlags::empty());
    }
    result
}
