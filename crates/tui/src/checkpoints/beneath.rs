//! File access beneath the workspace's directory fd: one path component at a time,
//! never following a symbolic link, so that nothing the sandbox puts in the workspace
//! (a link, a directory swapped for a link, a FIFO) can send a read or a write
//! outside it or hang the UI.

use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path};

use rustix::fs::{mkdirat, openat, Mode, OFlags, CWD};
use rustix::io::Errno;

/// Flags of every directory opened in the workspace: a link in its place fails.
fn dir_flags() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

/// Opens the workspace itself (the user named it, so a link to it is followed).
pub(super) fn open_root(path: &Path) -> std::io::Result<OwnedFd> {
    Ok(openat(CWD, path, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())?)
}

/// Opens the directory `name` of `parent`; a symbolic link (or anything else that is
/// not a directory) fails.
pub(super) fn open_dir(parent: BorrowedFd<'_>, name: &OsStr) -> Result<OwnedFd, Errno> {
    openat(parent, name, dir_flags(), Mode::empty())
}

/// Opens the file `name` of `parent` for reading: a link is not followed, and a FIFO
/// opens without waiting for a writer (the caller checks the kind with `fstat`).
pub(super) fn open_read(parent: BorrowedFd<'_>, name: &OsStr) -> Result<OwnedFd, Errno> {
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY;
    openat(parent, name, flags, Mode::empty())
}

/// The components of a stored relative path, or `None` unless every one is a plain
/// name (no `..`, no root, no `.`).
pub(super) fn parts(rel: &Path) -> Option<Vec<&OsStr>> {
    let parts: Option<Vec<&OsStr>> = rel
        .components()
        .map(|c| match c {
            Component::Normal(n) if !n.is_empty() && !n.as_bytes().contains(&b'/') => Some(n),
            _ => None,
        })
        .collect();
    parts.filter(|p| !p.is_empty())
}

/// Why a path could not be reached beneath the workspace.
#[derive(Debug)]
pub(super) struct Refused {
    /// The part of the path that is not a plain directory here.
    pub at: String,
    pub errno: Errno,
}

impl Refused {
    /// The sentence a note about `path` uses.
    pub fn describe(&self, path: &Path) -> String {
        let what = match self.errno {
            Errno::LOOP | Errno::NOTDIR => "is a symbolic link or not a directory",
            Errno::NOENT => "does not exist",
            _ => "cannot be opened",
        };
        format!("left `{}` as it is: `{}` {what} ({})", path.display(), self.at, self.errno)
    }
}

/// Opens the directory holding `rel` beneath `root`, one component at a time with no
/// link followed; with `create`, missing directories are made. Returns the parent's
/// fd and the last component.
pub(super) fn open_parent<'p>(
    root: BorrowedFd<'_>,
    rel: &'p Path,
    create: bool,
) -> Result<(Option<OwnedFd>, &'p OsStr), Refused> {
    let refused = |at: &[&OsStr], errno| Refused {
        at: at.iter().map(|p| p.to_string_lossy()).collect::<Vec<_>>().join("/"),
        errno,
    };
    let parts = parts(rel).ok_or(Refused { at: rel.display().to_string(), errno: Errno::INVAL })?;
    let (last, dirs) = parts.split_last().ok_or(Refused { at: String::new(), errno: Errno::INVAL })?;
    let mut cur: Option<OwnedFd> = None;
    for (i, name) in dirs.iter().enumerate() {
        let here = cur.as_ref().map(|f| f.as_fd()).unwrap_or(root);
        let next = match open_dir(here, name) {
            Err(Errno::NOENT) if create => {
                match mkdirat(here, *name, Mode::from_raw_mode(0o755)) {
                    Ok(()) | Err(Errno::EXIST) => {}
                    Err(e) => return Err(refused(&dirs[..=i], e)),
                }
                // Opened again with no link followed: a link raced in fails here.
                open_dir(here, name)
            }
            other => other,
        };
        cur = Some(next.map_err(|e| refused(&dirs[..=i], e))?);
    }
    Ok((cur, *last))
}

/// The fd `open_parent` returned, or the root when the path is at the top.
pub(super) fn fd_or<'a>(parent: &'a Option<OwnedFd>, root: BorrowedFd<'a>) -> BorrowedFd<'a> {
    parent.as_ref().map(|f| f.as_fd()).unwrap_or(root)
}

/// A name for a temporary file beside `name`, unlikely to exist.
pub(super) fn temp_name(name: &OsStr) -> OsString {
    let mut t = OsString::from(".");
    // Kept short: a long name plus the suffix could pass NAME_MAX.
    let bytes = name.as_bytes();
    t.push(OsStr::from_bytes(&bytes[..bytes.len().min(100)]));
    t.push(format!(".agent-rewind-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]));
    t
}
