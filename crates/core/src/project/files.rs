//! The project's agent files, read once and checked: every file must stay inside the
//! project (a symlink out of it is refused by name, whatever it points at), be a regular
//! file (a FIFO would hang the read) and be of a sane size. Everything else reads the
//! texts kept here, never the files again, so what was shown is what is used.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::ProjectError;

/// The project's config file.
pub const CONFIG_FILE: &str = ".agent/config.toml";
/// The project's hook settings files, in the order they are merged.
pub const SETTINGS_FILES: [&str; 2] = [".agent/settings.json", ".agent/settings.local.json"];
/// Claude Code's project MCP file.
pub const MCP_FILE: &str = ".mcp.json";
/// The project's custom slash commands (Markdown files).
pub const COMMANDS_DIR: &str = ".agent/commands";

/// The largest agent file read (a config is a few KiB; a huge one is an attack or a mistake).
const MAX_FILE_BYTES: u64 = 1 << 20;
/// The most command files read, and how deep their folders go.
const MAX_COMMAND_FILES: usize = 500;
const MAX_COMMAND_DEPTH: usize = 8;

/// One agent file of the project, as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProjectFile {
    /// Path relative to the project root (`.agent/config.toml`).
    pub rel: String,
    /// Its content.
    pub text: String,
}

/// A file that was not read, and why (it leaves the project, is not a regular file, ...).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedFile {
    /// Path relative to the project root.
    pub rel: String,
    /// Why, in plain words.
    pub reason: String,
}

/// Every agent file of one project folder.
#[derive(Debug, Clone, Default)]
pub struct ProjectFiles {
    /// The project folder, canonical (symlinks resolved).
    pub root: PathBuf,
    /// `.agent/config.toml`.
    pub config: Option<ProjectFile>,
    /// `.agent/settings.json` and `.agent/settings.local.json`.
    pub settings: Vec<ProjectFile>,
    /// `.mcp.json`.
    pub mcp_json: Option<ProjectFile>,
    /// `.agent/commands/**/*.md`, `rel` relative to the project root.
    pub commands: Vec<ProjectFile>,
    /// Files that exist but were not read.
    pub refused: Vec<RefusedFile>,
}

impl ProjectFiles {
    /// Reads the agent files of the project in `dir`.
    pub fn read(dir: &Path) -> Result<ProjectFiles, ProjectError> {
        let root = dir
            .canonicalize()
            .map_err(|e| ProjectError::Folder { path: dir.display().to_string(), reason: e.to_string() })?;
        let mut files = ProjectFiles { root, ..ProjectFiles::default() };
        files.config = files.read_one(CONFIG_FILE);
        for rel in SETTINGS_FILES {
            if let Some(f) = files.read_one(rel) {
                files.settings.push(f);
            }
        }
        files.mcp_json = files.read_one(MCP_FILE);
        files.read_commands();
        Ok(files)
    }

    /// Whether the project has no agent file at all (nothing to decide about).
    pub fn is_empty(&self) -> bool {
        self.config.is_none()
            && self.settings.is_empty()
            && self.mcp_json.is_none()
            && self.commands.is_empty()
            && self.refused.is_empty()
    }

    /// A digest of every agent file (names and contents, refused ones by name and
    /// reason): a trust decision holds while this stays the same.
    pub fn digest(&self) -> String {
        let mut h = Sha256::new();
        let mut feed = |kind: &str, rel: &str, body: &str| {
            for part in [kind, rel, &body.len().to_string(), body] {
                h.update(part.as_bytes());
                h.update([0u8]);
            }
        };
        for f in self.all() {
            feed("file", &f.rel, &f.text);
        }
        for r in &self.refused {
            feed("refused", &r.rel, &r.reason);
        }
        agent_llm::models::hex(&h.finalize())
    }

    /// A digest of each agent file by its path (a refused one by its reason), so that a
    /// change can be named file by file.
    pub fn file_digests(&self) -> std::collections::BTreeMap<String, String> {
        let one = |body: &str| agent_llm::models::hex(&Sha256::digest(body.as_bytes()));
        let mut out: std::collections::BTreeMap<String, String> =
            self.all().map(|f| (f.rel.clone(), one(&f.text))).collect();
        for r in &self.refused {
            out.insert(r.rel.clone(), one(&format!("refused: {}", r.reason)));
        }
        out
    }

    /// Every file read, in a fixed order.
    pub fn all(&self) -> impl Iterator<Item = &ProjectFile> {
        self.config.iter().chain(self.settings.iter()).chain(self.mcp_json.iter()).chain(self.commands.iter())
    }

    /// Reads `rel` if it exists; a file that may not be read lands in `refused`.
    fn read_one(&mut self, rel: &str) -> Option<ProjectFile> {
        let path = self.root.join(rel);
        // A dangling symlink has no metadata through it but is still a file of the project.
        std::fs::symlink_metadata(&path).ok()?;
        match self.check(&path, rel) {
            Ok(()) => match std::fs::read(&path) {
                Ok(bytes) => match String::from_utf8(bytes) {
                    Ok(text) => Some(ProjectFile { rel: rel.to_string(), text }),
                    Err(_) => self.refuse(rel, "it is not UTF-8 text".into()),
                },
                Err(e) => self.refuse(rel, format!("it cannot be read: {e}")),
            },
            Err(reason) => self.refuse(rel, reason),
        }
    }

    fn refuse(&mut self, rel: &str, reason: String) -> Option<ProjectFile> {
        self.refused.push(RefusedFile { rel: rel.to_string(), reason });
        None
    }

    /// Why `path` (named `rel`) may not be read, if it may not.
    fn check(&self, path: &Path, rel: &str) -> Result<(), String> {
        let real = match path.canonicalize() {
            Ok(p) => p,
            Err(e) => {
                let target = std::fs::read_link(path).map(|t| t.display().to_string()).unwrap_or_default();
                return Err(if target.is_empty() {
                    format!("it cannot be resolved: {e}")
                } else {
                    format!("it is a symlink to {target}, which does not exist")
                });
            }
        };
        if !real.starts_with(&self.root) {
            return Err(format!(
                "it leads out of the project (to {}): {rel} must be a file inside the project",
                real.display()
            ));
        }
        let meta = std::fs::metadata(&real).map_err(|e| format!("it cannot be read: {e}"))?;
        if !meta.is_file() {
            return Err("it is not a regular file".into());
        }
        if meta.len() > MAX_FILE_BYTES {
            return Err(format!("it is {} bytes, more than the {MAX_FILE_BYTES} an agent file may have", meta.len()));
        }
        Ok(())
    }

    fn read_commands(&mut self) {
        let dir = self.root.join(COMMANDS_DIR);
        if std::fs::symlink_metadata(&dir).is_err() {
            return;
        }
        match dir.canonicalize() {
            Ok(real) if real.starts_with(&self.root) && real.is_dir() => {}
            Ok(real) if real.is_dir() => {
                self.refuse(COMMANDS_DIR, format!("it leads out of the project (to {})", real.display()));
                return;
            }
            _ => return,
        }
        let mut found = Vec::new();
        self.walk(&dir, COMMANDS_DIR, 0, &mut found);
        found.sort();
        for rel in found {
            if self.commands.len() >= MAX_COMMAND_FILES {
                break;
            }
            if let Some(f) = self.read_one(&rel) {
                self.commands.push(f);
            }
        }
    }

    /// Collects the `.md` files under `dir` (named `rel`), refusing folders that leave
    /// the project.
    fn walk(&mut self, dir: &Path, rel: &str, depth: usize, out: &mut Vec<String>) {
        if depth > MAX_COMMAND_DEPTH {
            return;
        }
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        let mut entries: Vec<_> = entries.filter_map(Result::ok).collect();
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            let Some(name) = entry.file_name().to_str().map(str::to_string) else { continue };
            let child_rel = format!("{rel}/{name}");
            let path = entry.path();
            let Ok(real) = path.canonicalize() else {
                if name.ends_with(".md") {
                    out.push(child_rel);
                }
                continue;
            };
            if real.is_dir() {
                if !real.starts_with(&self.root) {
                    self.refuse(&child_rel, format!("it leads out of the project (to {})", real.display()));
                } else if !entry.file_type().is_ok_and(|t| t.is_symlink()) {
                    self.walk(&path, &child_rel, depth + 1, out);
                }
            } else if name.ends_with(".md") {
                out.push(child_rel);
            }
        }
    }
}
