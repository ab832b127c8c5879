//! File contents by SHA-256 under the store (`blobs/ab/cdef…`), streamed in and out
//! so that no file is held in memory whole.

use std::fs::File;
use std::io::{Read, Write};
use std::path::PathBuf;

use sha2::{Digest, Sha256};

use super::manifest::hex;

/// The blob folder of a store.
#[derive(Debug, Clone)]
pub(super) struct Blobs {
    dir: PathBuf,
}

/// What copying one file in came to.
pub(super) enum Put {
    /// Stored: its SHA-256 and size.
    Stored(String, u64),
    /// It grew past the limit while it was read: not stored.
    TooBig,
}

/// Which side of a copy failed.
pub(super) enum PutError {
    /// Reading the workspace's file.
    Read(std::io::Error),
    /// Writing the store.
    Write(std::io::Error),
}

impl Blobs {
    pub fn new(dir: PathBuf) -> Self {
        Self { dir }
    }

    fn path(&self, sha256: &str) -> Option<PathBuf> {
        let valid = sha256.len() == 64 && sha256.bytes().all(|b| b.is_ascii_hexdigit());
        valid.then(|| self.dir.join(&sha256[..2]).join(&sha256[2..]))
    }

    /// Whether the blob is in the store.
    pub fn has(&self, sha256: &str) -> bool {
        self.path(sha256).is_some_and(|p| p.is_file())
    }

    /// Opens a blob for reading.
    pub fn open(&self, sha256: &str) -> std::io::Result<File> {
        let path = self.path(sha256).ok_or_else(|| std::io::Error::other(format!("`{sha256}` is not a blob id")))?;
        File::open(path)
    }

    /// Copies `src` into the store while hashing it, reading at most `limit` bytes.
    pub fn put(&self, src: &mut impl Read, limit: u64) -> Result<Put, PutError> {
        std::fs::create_dir_all(&self.dir).map_err(PutError::Write)?;
        let mut tmp = tempfile::NamedTempFile::new_in(&self.dir).map_err(PutError::Write)?;
        let Some((sha256, size)) = hash_stream(src, limit, &mut |chunk| tmp.write_all(chunk).map_err(PutError::Write))?
        else {
            return Ok(Put::TooBig);
        };
        let Some(path) = self.path(&sha256) else { return Err(PutError::Write(std::io::Error::other("bad hash"))) };
        if !path.is_file() {
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).map_err(PutError::Write)?;
            }
            tmp.persist(&path).map_err(|e| PutError::Write(e.error))?;
        }
        Ok(Put::Stored(sha256, size))
    }
}

/// The SHA-256 of what `src` holds, reading at most `limit` bytes (`None` past it or
/// on a read error).
pub(super) fn sha256_of(src: &mut impl Read, limit: u64) -> Option<String> {
    hash_stream(src, limit, &mut |_| Ok(())).ok().flatten().map(|(sha256, _)| sha256)
}

/// Reads `src` to its end in chunks, hashing each and handing it to `each`: its SHA-256
/// and size, or `None` once more than `limit` bytes came.
fn hash_stream(
    src: &mut impl Read,
    limit: u64,
    each: &mut dyn FnMut(&[u8]) -> Result<(), PutError>,
) -> Result<Option<(String, u64)>, PutError> {
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut size = 0u64;
    loop {
        let n = match src.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(PutError::Read(e)),
        };
        size += n as u64;
        if size > limit {
            return Ok(None);
        }
        let chunk = buf.get(..n).unwrap_or_default();
        hasher.update(chunk);
        each(chunk)?;
    }
    Ok(Some((hex(&hasher.finalize()), size)))
}
