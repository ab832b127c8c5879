//! The user's trust decisions, one per project folder, kept in the user's config folder
//! (`~/.config/agent/trusted-projects.toml`), never in the project: a project cannot
//! write its own trust. A decision holds for the canonical path and the digest of the
//! agent files it was taken on; when they change, the user is asked again and shown the
//! difference (the items then trusted are kept for that).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::files::ProjectFiles;
use super::ProjectError;

/// The file name of the store inside the user's config folder (`agent/`).
pub const TRUST_FILE: &str = "trusted-projects.toml";

/// One trusted project.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrustEntry {
    /// The project folder, canonical.
    pub path: String,
    /// The digest of its agent files when it was trusted.
    pub digest: String,
    /// What the files asked for then (the dialog's lines), to show what changed.
    #[serde(default)]
    pub asks: Vec<String>,
    /// When (UTC date).
    #[serde(default)]
    pub trusted_on: String,
    /// The digest of each agent file then, by path, to name the files that changed.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub files: BTreeMap<String, String>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct StoreFile {
    #[serde(default, rename = "project")]
    projects: Vec<TrustEntry>,
}

/// Where a project stands.
#[derive(Debug, Clone, PartialEq)]
pub enum TrustState {
    /// Trusted, and its agent files are as they were then.
    Trusted,
    /// Trusted once, but its agent files changed since: the lines then trusted and the
    /// digest of each file then (empty when the decision predates them).
    Changed { before: Vec<String>, files: BTreeMap<String, String> },
    /// Never trusted.
    Unknown,
}

/// The store of decisions.
#[derive(Debug, Clone)]
pub struct TrustStore {
    path: PathBuf,
    entries: Vec<TrustEntry>,
}

impl TrustStore {
    /// The user's store (`~/.config/agent/trusted-projects.toml`).
    pub fn load() -> Result<TrustStore, ProjectError> {
        let dir = dirs::config_dir().ok_or(ProjectError::NoConfigDir)?;
        Self::at(&dir.join("agent").join(TRUST_FILE))
    }

    /// The store in `path` (empty when the file does not exist).
    pub fn at(path: &Path) -> Result<TrustStore, ProjectError> {
        let bad = |reason: String| ProjectError::TrustFile { path: path.display().to_string(), reason };
        let entries = match std::fs::read_to_string(path) {
            Ok(text) => toml::from_str::<StoreFile>(&text).map_err(|e| bad(e.to_string()))?.projects,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(bad(e.to_string())),
        };
        Ok(TrustStore { path: path.to_path_buf(), entries })
    }

    /// The file the decisions are kept in.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Where the project of `files` stands.
    pub fn state(&self, files: &ProjectFiles) -> TrustState {
        let root = files.root.display().to_string();
        match self.entries.iter().find(|e| e.path == root) {
            Some(e) if e.digest == files.digest() => TrustState::Trusted,
            Some(e) => TrustState::Changed { before: e.asks.clone(), files: e.files.clone() },
            None => TrustState::Unknown,
        }
    }

    /// Records that the user trusts the project of `files` as it is now (`asks`: the
    /// lines they were shown), and writes the store atomically.
    pub fn trust(&mut self, files: &ProjectFiles, asks: Vec<String>) -> Result<(), ProjectError> {
        let root = files.root.display().to_string();
        self.entries.retain(|e| e.path != root);
        self.entries.push(TrustEntry {
            path: root,
            digest: files.digest(),
            asks,
            trusted_on: crate::episode::today(),
            files: files.file_digests(),
        });
        self.save()
    }

    /// Forgets the decision about the project of `files` (if any).
    pub fn forget(&mut self, files: &ProjectFiles) -> Result<(), ProjectError> {
        let root = files.root.display().to_string();
        self.entries.retain(|e| e.path != root);
        self.save()
    }

    fn save(&self) -> Result<(), ProjectError> {
        let bad = |reason: String| ProjectError::TrustFile { path: self.path.display().to_string(), reason };
        let text = toml::to_string(&StoreFile { projects: self.entries.clone() }).map_err(|e| bad(e.to_string()))?;
        let dir = self.path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir).map_err(|e| bad(e.to_string()))?;
        let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(|e| bad(e.to_string()))?;
        std::io::Write::write_all(&mut tmp, format!("{HEADER}{text}").as_bytes()).map_err(|e| bad(e.to_string()))?;
        tmp.persist(&self.path).map_err(|e| bad(e.to_string()))?;
        Ok(())
    }
}

const HEADER: &str = "# Projects you trusted in `agent` (their hooks, model endpoints and keys are used).\n\
# Written by agent; remove an entry to be asked again.\n\n";
