//! Lists the workspace as a checkpoint sees it: every directory opened beneath its
//! parent's fd with no link followed, `.gitignore` patterns honoured (read the same
//! safe way, as git does with no global or repository excludes), the top-level `.git`
//! left out and nested repositories listed as plain files. Nothing here runs a program
//! or reads a file's contents except `.gitignore`s.

use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use ignore::gitignore::{Gitignore, GitignoreBuilder};
use rustix::fs::{fstat, readlinkat, statat, AtFlags, Dir, FileType};

use super::beneath::{open_dir, open_read};
use super::{CheckpointError, Limits};

/// The longest `.gitignore` read (a bigger one is read up to this).
const MAX_GITIGNORE_BYTES: u64 = 1 << 20;

/// One thing the listing found.
pub(super) enum Found<'a> {
    Dir,
    /// A regular file (as `lstat` saw it): the visitor opens it from `parent`.
    File {
        parent: BorrowedFd<'a>,
        name: &'a OsStr,
    },
    /// A symbolic link and its target's text (never followed).
    Link {
        target: OsString,
    },
}

/// What the visitor is given for each entry, shallow before deep, sorted by name.
pub(super) type Visit<'v> = dyn FnMut(&Path, Found<'_>) -> Result<(), CheckpointError> + 'v;

struct Walk<'v, 'f> {
    visit: &'f mut Visit<'v>,
    rules: Vec<(PathBuf, Gitignore)>,
    limits: Limits,
    entries: usize,
    notes: Vec<String>,
    full: bool,
}

/// What a walk left out.
pub(super) struct Walked {
    /// Notes on what a limit left out.
    pub notes: Vec<String>,
    /// Whether the listing stopped at the limit on entries (later names are missing).
    pub cut: bool,
}

/// Walks the workspace open at `root`.
pub(super) fn walk(root: BorrowedFd<'_>, limits: Limits, visit: &mut Visit<'_>) -> Result<Walked, CheckpointError> {
    let mut w = Walk { visit, rules: Vec::new(), limits, entries: 0, notes: Vec::new(), full: false };
    w.dir(root, Path::new(""), 0)?;
    Ok(Walked { notes: w.notes, cut: w.full })
}

impl Walk<'_, '_> {
    fn dir(&mut self, fd: BorrowedFd<'_>, rel: &Path, depth: usize) -> Result<(), CheckpointError> {
        let pushed = match gitignore(fd) {
            Some(g) => {
                self.rules.push((rel.to_path_buf(), g));
                true
            }
            None => false,
        };
        let mut names = names(fd);
        names.sort();
        for name in names {
            if self.full {
                break;
            }
            // The user's own repository is never read or written, nor are the other
            // control files: the sandbox sees them read-only (so a session cannot change
            // them), and replacing one on the host would detach its read-only mount.
            if depth == 0 && is_control(&name) {
                continue;
            }
            let path = rel.join(&name);
            // Gone since the listing: nothing to keep.
            let Ok(st) = statat(fd, &name, AtFlags::SYMLINK_NOFOLLOW) else { continue };
            let kind = FileType::from_raw_mode(st.st_mode);
            if self.ignored(&path, kind == FileType::Directory) {
                continue;
            }
            self.entries += 1;
            if self.entries > self.limits.entries {
                self.notes.push(format!(
                    "the workspace has more than {} files and folders: a checkpoint keeps the first ones only",
                    self.limits.entries
                ));
                self.full = true;
                break;
            }
            match kind {
                FileType::Directory => {
                    if depth + 1 >= self.limits.depth {
                        self.notes.push(format!(
                            "`{}` is more than {} folders deep: checkpoints do not keep it",
                            path.display(),
                            self.limits.depth
                        ));
                        continue;
                    }
                    // Swapped for a link since the `lstat`: not followed, not kept.
                    let Ok(sub) = open_dir(fd, &name) else { continue };
                    (self.visit)(&path, Found::Dir)?;
                    self.dir(sub.as_fd(), &path, depth + 1)?;
                }
                FileType::RegularFile => (self.visit)(&path, Found::File { parent: fd, name: &name })?,
                FileType::Symlink => {
                    let Ok(target) = readlinkat(fd, &name, Vec::new()) else { continue };
                    (self.visit)(&path, Found::Link { target: OsString::from_vec(target.into_bytes()) })?;
                }
                // FIFOs, sockets and devices are neither opened nor kept (nor removed).
                _ => {}
            }
        }
        if pushed {
            self.rules.pop();
        }
        Ok(())
    }

    /// Whether the deepest `.gitignore` with a say about `path` excludes it.
    fn ignored(&self, path: &Path, is_dir: bool) -> bool {
        for (base, rules) in self.rules.iter().rev() {
            let Ok(sub) = path.strip_prefix(base) else { continue };
            let m = rules.matched(sub, is_dir);
            if m.is_ignore() {
                return true;
            }
            if m.is_whitelist() {
                return false;
            }
        }
        false
    }
}

/// The names in a directory (an unreadable one lists as empty).
fn names(fd: BorrowedFd<'_>) -> Vec<OsString> {
    let Ok(mut dir) = Dir::read_from(fd) else { return Vec::new() };
    let mut out = Vec::new();
    while let Some(Ok(e)) = dir.read() {
        let name = e.file_name().to_bytes();
        if name != b"." && name != b".." {
            out.push(OsStr::from_bytes(name).to_os_string());
        }
    }
    out
}

/// The directory's `.gitignore`, if it is a regular file (git reads it with no link
/// followed too); patterns that do not parse are skipped, as git skips them.
fn gitignore(fd: BorrowedFd<'_>) -> Option<Gitignore> {
    let file = open_read(fd, OsStr::new(".gitignore")).ok()?;
    let st = fstat(&file).ok()?;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        return None;
    }
    let mut text = Vec::new();
    std::fs::File::from(file).take(MAX_GITIGNORE_BYTES).read_to_end(&mut text).ok()?;
    // Matched against paths relative to this directory (`.` strips nothing).
    let mut builder = GitignoreBuilder::new(".");
    for line in String::from_utf8_lossy(&text).lines() {
        let _ = builder.add_line(None, line);
    }
    builder.build().ok()
}

/// Whether a top-level name is one of the workspace's control files (`.git`, `.agent`, ...).
pub(super) fn is_control(name: &std::ffi::OsStr) -> bool {
    agent_sandbox::ROOT_CONTROL_PATHS.iter().any(|c| std::ffi::OsStr::new(c) == name)
}
