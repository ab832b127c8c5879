//! The folder a builder starts from: a Harbor task with its settings, an image that has
//! the tests' runner, and a test script that scores `tests/test_outputs.py` by its
//! weights; the builder writes the rest. Also copying and fingerprinting task folders.

use std::path::Path;

use sha2::{Digest, Sha256};

use super::SynthError;

/// The files every draft starts with: path in the task → contents.
const SCAFFOLD: &[(&str, &str)] = &[
    ("task.toml", include_str!("scaffold/task.toml")),
    ("environment/Dockerfile", include_str!("scaffold/Dockerfile")),
    ("tests/test.sh", include_str!("scaffold/test.sh")),
];

/// Files of the working folder that are not part of the task.
const NOT_TASK: &[&str] = &["idea.md"];

/// Writes the scaffold into `dir` (files that exist are kept: a resumed build goes on
/// from its draft) and the idea beside it.
pub fn write_draft(dir: &Path, idea: &str) -> Result<(), SynthError> {
    for (rel, text) in SCAFFOLD {
        let p = dir.join(rel);
        if p.exists() {
            continue;
        }
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).map_err(|e| SynthError::io(parent, e))?;
        }
        std::fs::write(&p, text).map_err(|e| SynthError::io(&p, e))?;
    }
    for d in ["solution", "tests"] {
        let p = dir.join(d);
        std::fs::create_dir_all(&p).map_err(|e| SynthError::io(&p, e))?;
    }
    let p = dir.join("idea.md");
    std::fs::write(&p, idea).map_err(|e| SynthError::io(&p, e))
}

/// A fingerprint of a task folder's files (names and contents), to see whether an
/// episode changed the task.
pub fn fingerprint(dir: &Path) -> String {
    let mut files = task_files(dir);
    files.sort();
    let mut h = Sha256::new();
    for rel in files {
        h.update(rel.as_bytes());
        h.update([0]);
        h.update(std::fs::read(dir.join(&rel)).unwrap_or_default());
        h.update([0]);
    }
    format!("{:x}", h.finalize())
}

/// The task's files, relative to its folder, without the working files.
fn task_files(dir: &Path) -> Vec<String> {
    crate::validate::checks::files_under(dir, &[])
        .iter()
        .filter_map(|p| p.strip_prefix(dir).ok().map(|r| r.to_string_lossy().to_string()))
        .filter(|rel| !NOT_TASK.contains(&rel.as_str()))
        .collect()
}

/// Copies a task folder to `to` (replacing what is there), without the working files.
pub fn copy_task(from: &Path, to: &Path) -> Result<(), SynthError> {
    let tmp = to.with_extension("partial");
    let _ = std::fs::remove_dir_all(&tmp);
    for rel in task_files(from) {
        let (src, dst) = (from.join(&rel), tmp.join(&rel));
        if let Some(parent) = dst.parent() {
            std::fs::create_dir_all(parent).map_err(|e| SynthError::io(parent, e))?;
        }
        std::fs::copy(&src, &dst).map_err(|e| SynthError::io(&src, e))?;
    }
    let _ = std::fs::remove_dir_all(to);
    std::fs::rename(&tmp, to).map_err(|e| SynthError::io(to, e))
}

/// Sets `[metadata]`'s category, tags and difficulty in a task's task.toml.
pub fn set_metadata(dir: &Path, category: &str, tags: &[String], difficulty: &str) -> Result<(), SynthError> {
    let path = dir.join("task.toml");
    let text = std::fs::read_to_string(&path).map_err(|e| SynthError::io(&path, e))?;
    let mut doc: toml::Table =
        text.parse().map_err(|e| SynthError::Other(format!("{}: not TOML: {e}", path.display())))?;
    let meta = doc.entry("metadata").or_insert_with(|| toml::Value::Table(Default::default()));
    if let Some(m) = meta.as_table_mut() {
        m.insert("category".into(), category.into());
        m.insert("difficulty".into(), difficulty.into());
        m.insert("tags".into(), toml::Value::Array(tags.iter().map(|t| t.as_str().into()).collect()));
    }
    let out = toml::to_string(&doc).map_err(|e| SynthError::Other(format!("{}: {e}", path.display())))?;
    std::fs::write(&path, out).map_err(|e| SynthError::io(&path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_draft_keeps_its_work_and_the_copy_leaves_the_idea_behind() {
        let dir = tempfile::tempdir().unwrap();
        let draft = dir.path().join("d");
        write_draft(&draft, "count words").unwrap();
        std::fs::write(draft.join("tests/test.sh"), "changed").unwrap();
        write_draft(&draft, "count words").unwrap();
        assert_eq!(std::fs::read_to_string(draft.join("tests/test.sh")).unwrap(), "changed");
        let before = fingerprint(&draft);
        std::fs::write(draft.join("idea.md"), "another idea").unwrap();
        assert_eq!(fingerprint(&draft), before, "the idea is not part of the task");
        std::fs::write(draft.join("instruction.md"), "Do it.").unwrap();
        assert_ne!(fingerprint(&draft), before);
        let to = dir.path().join("t");
        copy_task(&draft, &to).unwrap();
        assert!(to.join("instruction.md").is_file() && to.join("environment/Dockerfile").is_file());
        assert!(!to.join("idea.md").exists());
        set_metadata(&to, "text-processing", &["wc".into()], "easy").unwrap();
        let toml: toml::Table = std::fs::read_to_string(to.join("task.toml")).unwrap().parse().unwrap();
        assert_eq!(toml["metadata"]["difficulty"].as_str(), Some("easy"));
        assert_eq!(toml["environment"]["allow_internet"].as_bool(), Some(false));
    }
}
