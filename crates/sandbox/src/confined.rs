//! Reading a host folder someone else wrote (a downloaded task, a draft a model wrote
//! through a bind mount) without ever leaving it. Every file is opened beneath the
//! folder one component at a time with no-follow, so a link swapped in between a check
//! and a read fails the read instead of reaching outside; a link is followed only when
//! its resolved target lies inside the folder; and the walk is bounded in depth, entries
//! and bytes, so links to `.` or a huge tree end with an error rather than never.

use std::ffi::OsStr;
use std::fs::File;
use std::io::Read;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};

/// How far a walk may go before it stops with [`TreeError::Limit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TreeLimits {
    /// Folders below the walked one.
    pub max_depth: usize,
    /// Files, folders and links seen.
    pub max_entries: usize,
    /// Bytes of regular files.
    pub max_bytes: u64,
}

impl TreeLimits {
    /// A task's `tests/` or `solution/` (held in memory while copied into a container).
    pub const TASK: TreeLimits = TreeLimits { max_depth: 64, max_entries: 200_000, max_bytes: 4 << 30 };
    /// A synth draft, which a model wrote.
    pub const DRAFT: TreeLimits = TreeLimits { max_depth: 32, max_entries: 20_000, max_bytes: 512 << 20 };
}

/// What a link that leads outside the folder (or nowhere, or to a folder holding it)
/// does to the walk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutsideLinks {
    /// The walk fails, naming the link and where it points.
    Refuse,
    /// The link is left out.
    Skip,
}

/// How a walk treats links and how far it goes.
#[derive(Debug, Clone, Copy)]
pub struct TreeOptions {
    pub limits: TreeLimits,
    pub outside: OutsideLinks,
    /// What the folder is, in messages ("the task folder", "the draft").
    pub what: &'static str,
}

impl TreeOptions {
    /// A task folder: links out of it refused.
    pub const TASK: TreeOptions =
        TreeOptions { limits: TreeLimits::TASK, outside: OutsideLinks::Refuse, what: "the task folder" };
}

/// The metadata of a file or folder a walk hands on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeMeta {
    /// Permission bits (`0o777` at most: no setuid, setgid or sticky bit).
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub mtime: i64,
    /// Bytes of a regular file (0 for a folder).
    pub size: u64,
}

/// One thing a walk found; `rel` is relative to the walked folder (`""` for itself),
/// with `/` between components.
pub enum TreeNode<'a> {
    Dir {
        rel: &'a str,
        meta: NodeMeta,
    },
    /// A regular file, opened; read at most `meta.size` bytes of it.
    File {
        rel: &'a str,
        meta: NodeMeta,
        file: &'a mut File,
    },
}

/// Why a confined walk or read stopped.
#[derive(Debug, thiserror::Error)]
pub enum TreeError {
    /// A link leaving the folder (refused).
    #[error("{link} is a link to {target}{}, outside {what}: refused", leads(.target, .resolved))]
    Outside { link: String, target: String, resolved: Option<String>, what: &'static str },
    /// A link to a folder that holds it.
    #[error("{link} is a link to {target}, a folder that holds the link (a loop): refused")]
    Loop { link: String, target: String },
    /// A link that leads nowhere.
    #[error("{link} is a link to {target}, which does not exist")]
    Dangling { link: String, target: String },
    /// The walk went past a limit.
    #[error("{root}: stopped reading {what} at a limit: {reason}")]
    Limit { root: String, what: &'static str, reason: String },
    /// A path that is not a plain relative path inside the folder.
    #[error("{path}: not a path inside {what}")]
    NotInside { path: String, what: &'static str },
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

fn leads(target: &str, resolved: &Option<String>) -> String {
    match resolved {
        Some(r) if r != target => format!(" (which leads to {r})"),
        _ => String::new(),
    }
}

/// The canonical path of `root/rel` if it exists; every link on the way must stay
/// inside `root` (else [`TreeError::Outside`], naming the link). `None` when nothing is
/// there.
pub fn confined_path(root: &Path, rel: &Path, what: &'static str) -> Result<Option<PathBuf>, TreeError> {
    let opts = TreeOptions { limits: TreeLimits::TASK, outside: OutsideLinks::Refuse, what };
    let ctx = Root::open(root, &opts)?;
    Ok(ctx.locate(rel)?.map(|(real, _)| ctx.canon.join(real)))
}

/// The bytes of the file `root/rel`, read beneath `root` (links inside it followed, links
/// out of it refused), at most `max` bytes; `None` when nothing is there.
pub fn read_confined(root: &Path, rel: &Path, max: u64, what: &'static str) -> Result<Option<Vec<u8>>, TreeError> {
    let opts = TreeOptions { limits: TreeLimits::TASK, outside: OutsideLinks::Refuse, what };
    let ctx = Root::open(root, &opts)?;
    let Some((real, fd)) = ctx.locate(rel)? else { return Ok(None) };
    let shown = rel.display().to_string();
    let mut file = File::from(fd);
    let meta = file.metadata().map_err(io_at(&shown))?;
    if !meta.is_file() {
        return Err(TreeError::Io {
            path: shown,
            source: std::io::Error::other(format!("not a regular file ({})", real.display())),
        });
    }
    if meta.size() > max {
        return Err(TreeError::Limit {
            root: root.display().to_string(),
            what,
            reason: format!("{shown} has {} bytes, more than the {max}-byte limit", meta.size()),
        });
    }
    let mut bytes = Vec::new();
    (&mut file).take(max).read_to_end(&mut bytes).map_err(io_at(&shown))?;
    Ok(Some(bytes))
}

/// Walks `root/sub` (nothing when it does not exist) and hands every folder and regular
/// file to `visit`, parents first. Links inside `root` are walked as what they point to;
/// the others go as `opts.outside` says. Other kinds of files (pipes, sockets, devices)
/// are left out.
pub fn walk(
    root: &Path,
    sub: &Path,
    opts: &TreeOptions,
    visit: &mut dyn FnMut(TreeNode<'_>) -> std::io::Result<()>,
) -> Result<(), TreeError> {
    let ctx = Root::open(root, opts)?;
    let located = match ctx.locate(sub) {
        Ok(l) => l,
        Err(TreeError::Outside { .. } | TreeError::Dangling { .. } | TreeError::Loop { .. })
            if opts.outside == OutsideLinks::Skip =>
        {
            None
        }
        Err(e) => return Err(e),
    };
    let Some((real, fd)) = located else { return Ok(()) };
    let shown = sub.display().to_string();
    let mut file = File::from(fd);
    let meta = file.metadata().map_err(io_at(&shown))?;
    let mut state = State { entries: 0, bytes: 0, ancestors: Vec::new() };
    if meta.is_dir() {
        let at = At { real: &real, shown: &shown, rel: "" };
        ctx.dir(file.into(), &meta, at, 0, &mut state, visit)
    } else if meta.is_file() {
        ctx.file(&mut file, &meta, &shown, "", &mut state, visit)
    } else {
        Ok(())
    }
}

/// The folder being read: its canonical path and an open handle on it.
struct Root<'o> {
    canon: PathBuf,
    fd: OwnedFd,
    opts: &'o TreeOptions,
}

/// Where a folder of the walk is: its real path below the root (links resolved), the
/// path that names it in messages, and its path for the visitor.
#[derive(Clone, Copy)]
struct At<'a> {
    real: &'a Path,
    shown: &'a str,
    rel: &'a str,
}

struct State {
    entries: usize,
    bytes: u64,
    /// (device, inode) of the folders being walked, to see a link back into one.
    ancestors: Vec<(u64, u64)>,
}

fn io_at(path: &str) -> impl Fn(std::io::Error) -> TreeError + '_ {
    move |source| TreeError::Io { path: path.to_string(), source }
}

fn errno_at(path: &str) -> impl Fn(rustix::io::Errno) -> TreeError + '_ {
    move |e| TreeError::Io { path: path.to_string(), source: e.into() }
}

fn join(a: &str, b: &str) -> String {
    if a.is_empty() {
        b.to_string()
    } else {
        format!("{a}/{b}")
    }
}

/// No-follow, close-on-exec, and never blocking on a pipe swapped in for a file.
fn open_flags(dir: bool) -> OFlags {
    let base = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NOCTTY;
    if dir {
        base | OFlags::DIRECTORY
    } else {
        base | OFlags::NONBLOCK
    }
}

/// What a link resolves to.
enum Resolved {
    /// Its canonical target, relative to the root.
    Inside(PathBuf),
    Refused(TreeError),
}

impl<'o> Root<'o> {
    fn open(root: &Path, opts: &'o TreeOptions) -> Result<Root<'o>, TreeError> {
        let shown = root.display().to_string();
        let canon = root.canonicalize().map_err(io_at(&shown))?;
        let fd = rustix::fs::open(&canon, open_flags(true), Mode::empty()).map_err(errno_at(&shown))?;
        Ok(Root { canon, fd, opts })
    }

    /// Opens `rel` beneath the root with no link on the way; a link at any component is
    /// resolved (inside the root only) and the rest continues from its target. `None`
    /// when nothing is there.
    fn locate(&self, rel: &Path) -> Result<Option<(PathBuf, OwnedFd)>, TreeError> {
        let mut pending: Vec<PathBuf> = Vec::new();
        for c in rel.components() {
            match c {
                Component::Normal(n) => pending.push(PathBuf::from(n)),
                Component::CurDir => {}
                _ => return Err(TreeError::NotInside { path: rel.display().to_string(), what: self.opts.what }),
            }
        }
        pending.reverse();
        let mut real = PathBuf::new();
        let mut fd = rustix::fs::openat(&self.fd, ".", open_flags(true), Mode::empty())
            .map_err(errno_at(&self.canon.display().to_string()))?;
        let mut hops = 0;
        while let Some(name) = pending.pop() {
            let shown_now = real.join(&name).display().to_string();
            let st = match rustix::fs::statat(&fd, &name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => st,
                Err(rustix::io::Errno::NOENT) => return Ok(None),
                Err(e) => return Err(errno_at(&shown_now)(e)),
            };
            if FileType::from_raw_mode(st.st_mode) == FileType::Symlink {
                hops += 1;
                if hops > 40 {
                    return Err(TreeError::Io {
                        path: rel.display().to_string(),
                        source: std::io::Error::other("too many levels of links"),
                    });
                }
                let target = match self.resolve(&fd, &real, &name, &shown_now)? {
                    Resolved::Inside(t) => t,
                    Resolved::Refused(e) => return Err(e),
                };
                // Start again from the root along the link's canonical target.
                let mut rest: Vec<PathBuf> = target.components().map(|c| PathBuf::from(c.as_os_str())).collect();
                rest.reverse();
                pending.extend(rest);
                real = PathBuf::new();
                fd =
                    rustix::fs::openat(&self.fd, ".", open_flags(true), Mode::empty()).map_err(errno_at(&shown_now))?;
                continue;
            }
            let is_dir = FileType::from_raw_mode(st.st_mode) == FileType::Directory;
            if !pending.is_empty() && !is_dir {
                return Ok(None);
            }
            fd = rustix::fs::openat(&fd, &name, open_flags(is_dir), Mode::empty()).map_err(errno_at(&shown_now))?;
            real.push(&name);
        }
        Ok(Some((real, fd)))
    }

    /// Where the link `name` in the folder `dir` (at `real` below the root) leads.
    fn resolve(&self, dir: &OwnedFd, real: &Path, name: &Path, shown: &str) -> Result<Resolved, TreeError> {
        let raw = rustix::fs::readlinkat(dir, name, Vec::new()).map_err(errno_at(shown))?;
        let target = PathBuf::from(OsStr::from_bytes(raw.as_bytes()));
        let shown_target = target.display().to_string();
        let joined = self.canon.join(real).join(&target);
        let what = self.opts.what;
        let outside = |resolved: Option<String>| TreeError::Outside {
            link: shown.to_string(),
            target: shown_target.clone(),
            resolved,
            what,
        };
        match joined.canonicalize() {
            Ok(c) => match c.strip_prefix(&self.canon) {
                Ok(inside) => Ok(Resolved::Inside(inside.to_path_buf())),
                Err(_) => Ok(Resolved::Refused(outside(Some(c.display().to_string())))),
            },
            Err(_) => {
                let lexical = crate::files::resolve_path("/", &joined.to_string_lossy());
                if Path::new(&lexical).starts_with(&self.canon) {
                    Ok(Resolved::Refused(TreeError::Dangling { link: shown.to_string(), target: shown_target }))
                } else {
                    Ok(Resolved::Refused(outside(Some(lexical))))
                }
            }
        }
    }

    fn count(&self, state: &mut State, shown: &str) -> Result<(), TreeError> {
        state.entries += 1;
        if state.entries > self.opts.limits.max_entries {
            return Err(
                self.limit(format!("more than {} files and folders (at {shown})", self.opts.limits.max_entries))
            );
        }
        Ok(())
    }

    fn limit(&self, reason: String) -> TreeError {
        TreeError::Limit { root: self.canon.display().to_string(), what: self.opts.what, reason }
    }

    fn file(
        &self,
        file: &mut File,
        meta: &std::fs::Metadata,
        shown: &str,
        rel: &str,
        state: &mut State,
        visit: &mut dyn FnMut(TreeNode<'_>) -> std::io::Result<()>,
    ) -> Result<(), TreeError> {
        self.count(state, shown)?;
        state.bytes = state.bytes.saturating_add(meta.size());
        if state.bytes > self.opts.limits.max_bytes {
            return Err(self.limit(format!("more than {} bytes of files (at {shown})", self.opts.limits.max_bytes)));
        }
        visit(TreeNode::File { rel, meta: node_meta(meta), file }).map_err(io_at(shown))
    }

    fn dir(
        &self,
        fd: OwnedFd,
        meta: &std::fs::Metadata,
        at: At<'_>,
        depth: usize,
        state: &mut State,
        visit: &mut dyn FnMut(TreeNode<'_>) -> std::io::Result<()>,
    ) -> Result<(), TreeError> {
        if depth > self.opts.limits.max_depth {
            return Err(
                self.limit(format!("more than {} levels of folders (at {})", self.opts.limits.max_depth, at.shown))
            );
        }
        self.count(state, at.shown)?;
        visit(TreeNode::Dir { rel: at.rel, meta: node_meta(meta) }).map_err(io_at(at.shown))?;
        state.ancestors.push((meta.dev(), meta.ino()));
        let mut names: Vec<PathBuf> = Vec::new();
        for entry in rustix::fs::Dir::read_from(&fd).map_err(errno_at(at.shown))? {
            let entry = entry.map_err(errno_at(at.shown))?;
            let name = entry.file_name().to_bytes();
            if name != b"." && name != b".." {
                names.push(PathBuf::from(OsStr::from_bytes(name)));
                // Counted here too: a folder of millions of names stops early.
                if names.len() > self.opts.limits.max_entries {
                    return Err(
                        self.limit(format!("more than {} entries in {}", self.opts.limits.max_entries, at.shown))
                    );
                }
            }
        }
        names.sort();
        for name in names {
            let name_str = name.to_string_lossy();
            let shown = join(at.shown, &name_str);
            let rel = join(at.rel, &name_str);
            let real = at.real.join(&name);
            let st = match rustix::fs::statat(&fd, &name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => st,
                Err(rustix::io::Errno::NOENT) => continue,
                Err(e) => return Err(errno_at(&shown)(e)),
            };
            match FileType::from_raw_mode(st.st_mode) {
                FileType::Symlink => self.link(&fd, at.real, &name, &shown, &rel, depth, state, visit)?,
                FileType::Directory => {
                    let child =
                        rustix::fs::openat(&fd, &name, open_flags(true), Mode::empty()).map_err(errno_at(&shown))?;
                    let child = File::from(child);
                    let meta = child.metadata().map_err(io_at(&shown))?;
                    let at = At { real: &real, shown: &shown, rel: &rel };
                    self.dir(child.into(), &meta, at, depth + 1, state, visit)?;
                }
                FileType::RegularFile => {
                    let fd =
                        rustix::fs::openat(&fd, &name, open_flags(false), Mode::empty()).map_err(errno_at(&shown))?;
                    let mut file = File::from(fd);
                    let meta = file.metadata().map_err(io_at(&shown))?;
                    // Swapped for something else after the listing: left out.
                    if meta.is_file() {
                        self.file(&mut file, &meta, &shown, &rel, state, visit)?;
                    }
                }
                _ => self.count(state, &shown)?,
            }
        }
        state.ancestors.pop();
        Ok(())
    }

    /// A link met in a walk: walked as its target when that lies inside the root.
    #[allow(clippy::too_many_arguments)]
    fn link(
        &self,
        dir: &OwnedFd,
        dir_real: &Path,
        name: &Path,
        shown: &str,
        rel: &str,
        depth: usize,
        state: &mut State,
        visit: &mut dyn FnMut(TreeNode<'_>) -> std::io::Result<()>,
    ) -> Result<(), TreeError> {
        self.count(state, shown)?;
        let refused = |e: TreeError| if self.opts.outside == OutsideLinks::Skip { Ok(()) } else { Err(e) };
        let target = match self.resolve(dir, dir_real, name, shown)? {
            Resolved::Inside(t) => t,
            Resolved::Refused(e) => return refused(e),
        };
        let Some((real, fd)) = self.locate(&target)? else {
            let raw = self.canon.join(&target).display().to_string();
            return refused(TreeError::Dangling { link: shown.to_string(), target: raw });
        };
        let mut file = File::from(fd);
        let meta = file.metadata().map_err(io_at(shown))?;
        if meta.is_dir() {
            if state.ancestors.contains(&(meta.dev(), meta.ino())) {
                let t = rustix::fs::readlinkat(dir, name, Vec::new()).map_err(errno_at(shown))?;
                let target = OsStr::from_bytes(t.as_bytes()).to_string_lossy().to_string();
                return refused(TreeError::Loop { link: shown.to_string(), target });
            }
            let at = At { real: &real, shown, rel };
            // The link itself was counted; its folder is counted by `dir`.
            state.entries -= 1;
            self.dir(file.into(), &meta, at, depth + 1, state, visit)
        } else if meta.is_file() {
            state.entries -= 1;
            self.file(&mut file, &meta, shown, rel, state, visit)
        } else {
            Ok(())
        }
    }
}

fn node_meta(meta: &std::fs::Metadata) -> NodeMeta {
    NodeMeta {
        mode: meta.mode() & 0o777,
        uid: meta.uid(),
        gid: meta.gid(),
        mtime: meta.mtime(),
        size: if meta.is_file() { meta.size() } else { 0 },
    }
}

/// Packs `root/sub` into a tar archive under `name` (a folder, made even when `sub` is
/// missing), confined as [`walk`] is.
pub fn pack_confined(root: &Path, sub: &Path, name: &str, opts: &TreeOptions) -> Result<Vec<u8>, TreeError> {
    let mut builder = tar::Builder::new(Vec::new());
    let mut wrote_top = false;
    walk(root, sub, opts, &mut |node| {
        let mut header = tar::Header::new_gnu();
        let (rel, meta) = match &node {
            TreeNode::Dir { rel, meta } | TreeNode::File { rel, meta, .. } => (*rel, *meta),
        };
        let path = if rel.is_empty() { name.to_string() } else { format!("{name}/{rel}") };
        header.set_mode(meta.mode);
        header.set_uid(u64::from(meta.uid));
        header.set_gid(u64::from(meta.gid));
        header.set_mtime(u64::try_from(meta.mtime).unwrap_or(0));
        match node {
            TreeNode::Dir { .. } => {
                wrote_top |= rel.is_empty();
                header.set_entry_type(tar::EntryType::Directory);
                header.set_size(0);
                builder.append_data(&mut header, &path, std::io::empty())
            }
            // `sub` is a file, not a folder: the folder is made empty, as for a missing one.
            TreeNode::File { .. } if rel.is_empty() => Ok(()),
            TreeNode::File { file, meta, .. } => {
                // Exactly what is read goes in, however the file changes meanwhile.
                let mut bytes = Vec::new();
                file.take(meta.size).read_to_end(&mut bytes)?;
                header.set_entry_type(tar::EntryType::Regular);
                header.set_size(bytes.len() as u64);
                builder.append_data(&mut header, &path, bytes.as_slice())
            }
        }
    })?;
    if !wrote_top {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Directory);
        h.set_mode(0o755);
        h.set_size(0);
        builder.append_data(&mut h, name, std::io::empty()).map_err(io_at(name))?;
    }
    builder.into_inner().map_err(io_at(name))
}

#[cfg(test)]
#[path = "confined_tests.rs"]
mod tests;
