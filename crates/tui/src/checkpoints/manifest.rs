//! A checkpoint's list of files: path → kind, mode, blob or link target, kept as JSON
//! named by its own SHA-256 and written atomically.

use std::ffi::OsString;
use std::io::Write;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::{Digest, Sha256};

use super::CheckpointError;

/// A checkpoint.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Manifest {
    pub label: String,
    pub entries: Vec<Entry>,
    /// The listing stopped at a limit: a restore removes nothing it does not list.
    #[serde(default)]
    pub cut: bool,
}

/// One path of the workspace (relative, `/`-separated).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct Entry {
    pub path: Name,
    #[serde(flatten)]
    pub kind: Kind,
}

/// What a path was.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub(super) enum Kind {
    Dir,
    /// A regular file: its mode is 0o755 or 0o644 (never setuid), its bytes a blob.
    File {
        mode: u32,
        sha256: String,
        size: u64,
    },
    /// A symbolic link, kept as a link.
    Link {
        target: Name,
    },
    /// Present but not copied (over a size limit): a restore leaves it as it is.
    Skipped,
}

/// Bytes of a file name: a JSON string when UTF-8, else `{"hex": "…"}`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Name(pub OsString);

impl Name {
    /// The name as a relative path.
    pub fn path(&self) -> PathBuf {
        PathBuf::from(&self.0)
    }
}

impl Serialize for Name {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0.to_str() {
            Some(text) => s.serialize_str(text),
            None => NameRepr::Hex { hex: hex(self.0.as_bytes()) }.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for Name {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match NameRepr::deserialize(d)? {
            NameRepr::Text(t) => Ok(Name(OsString::from(t))),
            NameRepr::Hex { hex } => unhex(&hex)
                .map(|b| Name(OsString::from_vec(b)))
                .ok_or_else(|| serde::de::Error::custom("a file name's hex is not valid")),
        }
    }
}

#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum NameRepr {
    Text(String),
    Hex { hex: String },
}

/// Lower-case hex of bytes.
pub(super) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len()).step_by(2).map(|i| s.get(i..i + 2).and_then(|h| u8::from_str_radix(h, 16).ok())).collect()
}

/// Whether `id` could name a manifest (64 lower-case hex digits): nothing else is
/// ever joined to the store's path.
fn valid_id(id: &str) -> bool {
    id.len() == 64 && id.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

impl Manifest {
    /// Writes the manifest under `dir` (atomically: a temporary file renamed); returns
    /// its id.
    pub fn write(&self, dir: &Path) -> Result<String, CheckpointError> {
        let store =
            |e: std::io::Error| CheckpointError::Store { path: dir.display().to_string(), reason: e.to_string() };
        let bytes =
            serde_json::to_vec(self).map_err(|e| store(std::io::Error::new(std::io::ErrorKind::InvalidData, e)))?;
        let id = hex(&Sha256::digest(&bytes));
        let path = dir.join(format!("{id}.json"));
        if path.exists() {
            return Ok(id);
        }
        std::fs::create_dir_all(dir).map_err(store)?;
        let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(store)?;
        tmp.write_all(&bytes).map_err(store)?;
        tmp.as_file().sync_all().map_err(store)?;
        tmp.persist(&path).map_err(|e| store(e.error))?;
        Ok(id)
    }

    /// Reads checkpoint `id` from `dir`.
    pub fn read(dir: &Path, id: &str) -> Result<Manifest, CheckpointError> {
        if !valid_id(id) {
            return Err(CheckpointError::NoSuchCheckpoint(id.to_string()));
        }
        let path = dir.join(format!("{id}.json"));
        let bytes = std::fs::read(&path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => CheckpointError::NoSuchCheckpoint(id.to_string()),
            _ => CheckpointError::Store { path: path.display().to_string(), reason: e.to_string() },
        })?;
        serde_json::from_slice(&bytes)
            .map_err(|e| CheckpointError::Store { path: path.display().to_string(), reason: e.to_string() })
    }
}
