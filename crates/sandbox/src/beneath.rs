//! File access beneath a folder the sandbox (or a stranger) writes: one path component
//! at a time relative to the folder opened before it, never following a symbolic link
//! (`O_NOFOLLOW` at every step: the guarantee of `openat2`'s `RESOLVE_BENEATH |
//! RESOLVE_NO_SYMLINKS`, on any Unix), so that nothing put there (a link, a directory
//! swapped for a link, a FIFO) can send a read or a write outside it or hang the reader.
//! The one owner of that access on the host: the UI's checkpoints and `@file`
//! attachments use it. (Task folders, whose links inside the folder are followed, are
//! read by [`crate::confined`].)

use std::ffi::OsStr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path};

use rustix::fs::{fstat, mkdirat, openat, FileType, Mode, OFlags, Stat, CWD};
use rustix::io::Errno;

/// Flags of every directory opened in the workspace: a link in its place fails.
fn dir_flags() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

/// Opens the root folder itself (its user named it, so a link to it is followed).
pub fn open_root(path: &Path) -> std::io::Result<OwnedFd> {
    Ok(openat(CWD, path, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())?)
}

/// Opens the directory `name` of `parent`; a symbolic link (or anything else that is
/// not a directory) fails.
pub fn open_dir(parent: BorrowedFd<'_>, name: &OsStr) -> Result<OwnedFd, Errno> {
    openat(parent, name, dir_flags(), Mode::empty())
}

/// Opens the file `name` of `parent` for reading: a link is not followed, and a FIFO
/// opens without waiting for a writer (the caller checks the kind with `fstat`).
pub fn open_read(parent: BorrowedFd<'_>, name: &OsStr) -> Result<OwnedFd, Errno> {
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY;
    openat(parent, name, flags, Mode::empty())
}

/// The components of a stored relative path, or `None` unless every one is a plain
/// name (no `..`, no root, no `.`).
pub fn parts(rel: &Path) -> Option<Vec<&OsStr>> {
    let parts: Option<Vec<&OsStr>> = rel
        .components()
        .map(|c| match c {
            Component::Normal(n) if !n.is_empty() && !n.as_bytes().contains(&b'/') => Some(n),
            _ => None,
        })
        .collect();
    parts.filter(|p| !p.is_empty())
}

/// Why a path could not be reached beneath the root.
#[derive(Debug)]
pub struct Refused {
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
pub fn open_parent<'p>(
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
pub fn fd_or<'a>(parent: &'a Option<OwnedFd>, root: BorrowedFd<'a>) -> BorrowedFd<'a> {
    parent.as_ref().map(|f| f.as_fd()).unwrap_or(root)
}

/// What [`open_regular`] found at a name that is not a readable regular file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotRegular {
    /// Nothing there.
    Missing,
    /// A folder.
    Directory,
    /// A symbolic link (or a path through one).
    Link,
    /// A FIFO, a socket or a device.
    Special,
    /// It changed between the look and the open, or cannot be opened.
    Unreadable,
}

/// Opens `name` of `parent` for reading only if it is a regular file, with its `fstat`.
/// It is first opened as a bare handle (`O_PATH`, which opens nothing: not a FIFO, not a
/// device), and read only once `fstat` on that handle says it is a regular file; the
/// handle's own `/proc/self/fd` entry then names this very file, not a path to resolve
/// again (checked by device and inode).
pub fn open_regular(parent: BorrowedFd<'_>, name: &OsStr) -> Result<(std::fs::File, Stat), NotRegular> {
    let why = |e: Errno| match e {
        Errno::NOENT => NotRegular::Missing,
        Errno::LOOP | Errno::MLINK | Errno::NOTDIR => NotRegular::Link,
        _ => NotRegular::Unreadable,
    };
    #[cfg(any(target_os = "linux", target_os = "android"))]
    let handle = openat(parent, name, OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty()).map_err(why)?;
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    let handle = open_read(parent, name).map_err(why)?;
    let stat = fstat(&handle).map_err(why)?;
    match FileType::from_raw_mode(stat.st_mode) {
        FileType::RegularFile => {}
        FileType::Directory => return Err(NotRegular::Directory),
        FileType::Symlink => return Err(NotRegular::Link),
        _ => return Err(NotRegular::Special),
    }
    #[cfg(any(target_os = "linux", target_os = "android"))]
    let handle = {
        use std::os::fd::AsRawFd;
        let link = format!("/proc/self/fd/{}", handle.as_raw_fd());
        let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
        let file = openat(CWD, link.as_str(), flags, Mode::empty()).map_err(|_| NotRegular::Unreadable)?;
        let again = fstat(&file).map_err(why)?;
        if (again.st_dev, again.st_ino) != (stat.st_dev, stat.st_ino) {
            return Err(NotRegular::Unreadable);
        }
        file
    };
    Ok((std::fs::File::from(handle), stat))
}
