//! Writing generated tasks into a folder, with a `manifest.json` that lists them: a
//! folder is written only when it is new, empty, or was written by this generator (its
//! manifest says so), and only the task folders that manifest lists are replaced.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{GenerateError, GeneratedTask, Split};

/// The manifest's file name in the output folder.
pub const MANIFEST: &str = "manifest.json";
/// The manifest's `generator` field, which marks a folder as ours.
pub const GENERATOR: &str = "agent tasks generate";
/// Bumped whenever the same arguments would generate different tasks.
const VERSION: u32 = 3;

/// `manifest.json`: what was generated, with every task's parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// Always [`GENERATOR`].
    pub generator: String,
    /// The generator's version: the same version and arguments give the same tasks.
    pub version: u32,
    pub split: Split,
    pub seed: u64,
    pub tasks: Vec<ManifestEntry>,
}

/// One task of the manifest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ManifestEntry {
    pub name: String,
    pub family: String,
    pub level: u8,
    pub split: Split,
    pub seed: u64,
    pub index: u32,
    pub params: BTreeMap<String, Vec<String>>,
    pub instruction: String,
}

impl Manifest {
    /// The manifest of `tasks` (drawn with one split and seed).
    pub fn of(tasks: &[GeneratedTask], split: Split, seed: u64) -> Manifest {
        Manifest {
            generator: GENERATOR.to_string(),
            version: VERSION,
            split,
            seed,
            tasks: tasks
                .iter()
                .map(|t| ManifestEntry {
                    name: t.name.clone(),
                    family: t.family.to_string(),
                    level: t.level,
                    split: t.split,
                    seed: t.seed,
                    index: t.index,
                    params: t.params.clone(),
                    instruction: t.instruction.clone(),
                })
                .collect(),
        }
    }

    /// Reads `dir/manifest.json`.
    pub fn load(dir: &Path) -> Result<Manifest, GenerateError> {
        let path = dir.join(MANIFEST);
        let text = std::fs::read_to_string(&path).map_err(|e| io(&path, e))?;
        let m: Manifest = serde_json::from_str(&text)
            .map_err(|e| GenerateError::BadManifest { path: path.display().to_string(), reason: e.to_string() })?;
        if m.generator != GENERATOR {
            return Err(GenerateError::NotOurs { path: dir.display().to_string() });
        }
        if let Some(bad) = m.tasks.iter().find(|t| !is_task_name(&t.name)) {
            return Err(GenerateError::BadManifest {
                path: path.display().to_string(),
                reason: format!("`{}` is not a task name of this generator", bad.name),
            });
        }
        Ok(m)
    }
}

/// The error of an I/O failure on `path`.
pub(super) fn io(path: &Path, source: std::io::Error) -> GenerateError {
    GenerateError::Io { path: path.display().to_string(), source }
}

/// Names this generator writes: they never climb out of the folder.
fn is_task_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with(['.', '-'])
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
}

/// Writes `tasks` into `dir` with their manifest; returns the manifest. Checks first
/// and writes after: a refused folder is left exactly as it was.
pub fn write_tasks(dir: &Path, tasks: &[GeneratedTask], split: Split, seed: u64) -> Result<Manifest, GenerateError> {
    let previous = previous_tasks(dir)?;
    for t in tasks {
        let path = dir.join(&t.name);
        if path.exists() && !previous.contains(&t.name) {
            return Err(GenerateError::Clash { path: path.display().to_string() });
        }
    }
    // The old set goes entirely: a smaller new set must not leave stale tasks behind for
    // `agent bench DIR` to run.
    for name in &previous {
        let path = dir.join(name);
        if path.is_dir() {
            std::fs::remove_dir_all(&path).map_err(|e| io(&path, e))?;
        }
    }
    std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
    for t in tasks {
        write_task(&dir.join(&t.name), t)?;
    }
    let manifest = Manifest::of(tasks, split, seed);
    let mut text = serde_json::to_string_pretty(&manifest).map_err(|e| GenerateError::BadManifest {
        path: dir.join(MANIFEST).display().to_string(),
        reason: e.to_string(),
    })?;
    text.push('\n');
    let path = dir.join(MANIFEST);
    std::fs::write(&path, text).map_err(|e| io(&path, e))?;
    Ok(manifest)
}

/// The task folders of the manifest already in `dir` (none for a new or empty folder);
/// an error for a folder that is not ours.
fn previous_tasks(dir: &Path) -> Result<BTreeSet<String>, GenerateError> {
    if !dir.exists() {
        return Ok(BTreeSet::new());
    }
    if !dir.is_dir() {
        return Err(io(dir, std::io::Error::other("exists and is not a folder")));
    }
    let mut entries = std::fs::read_dir(dir).map_err(|e| io(dir, e))?;
    if entries.next().is_none() {
        return Ok(BTreeSet::new());
    }
    if !dir.join(MANIFEST).is_file() {
        return Err(GenerateError::NotOurs { path: dir.display().to_string() });
    }
    Ok(Manifest::load(dir)?.tasks.into_iter().map(|t| t.name).collect())
}

fn write_task(root: &Path, task: &GeneratedTask) -> Result<(), GenerateError> {
    for (rel, text) in &task.files {
        let path: PathBuf = root.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| io(parent, e))?;
        }
        std::fs::write(&path, text).map_err(|e| io(&path, e))?;
        if rel.ends_with(".sh") {
            make_executable(&path)?;
        }
    }
    Ok(())
}

#[cfg(unix)]
fn make_executable(path: &Path) -> Result<(), GenerateError> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).map_err(|e| io(path, e))
}

#[cfg(not(unix))]
fn make_executable(_path: &Path) -> Result<(), GenerateError> {
    Ok(())
}
