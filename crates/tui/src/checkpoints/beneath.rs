//! The checkpoint store's access to the workspace: the shared no-follow primitives
//! ([`agent_sandbox::beneath`]) and the temporary names a restore writes through.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;

pub(super) use agent_sandbox::beneath::{fd_or, open_dir, open_parent, open_read, open_root, parts};

/// A name for a temporary file beside `name`, unlikely to exist.
pub(super) fn temp_name(name: &OsStr) -> OsString {
    let mut t = OsString::from(".");
    // Kept short: a long name plus the suffix could pass NAME_MAX.
    let bytes = name.as_bytes();
    t.push(OsStr::from_bytes(&bytes[..bytes.len().min(100)]));
    t.push(format!(".agent-rewind-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]));
    t
}
