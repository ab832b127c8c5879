//! The folder a builder starts from: a Harbor task with its settings, an image that has
//! the tests' runner, and a test script that scores `tests/test_outputs.py` by its
//! weights; the builder writes the rest. Also copying and fingerprinting task folders.

use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use agent_sandbox::OutsideLinks;

use sha2::{Digest, Sha256};

use super::SynthError;
use crate::validate::files::{read_files, TaskFile};

/// The files every draft starts with: path in the task → contents.
const SCAFFOLD: &[(&str, &str)] = &[
    ("task.toml", include_str!("scaffold/task.toml")),
    ("environment/Dockerfile", include_str!("scaffold/Dockerfile")),
    ("tests/test.sh", include_str!("scaffold/test.sh")),
];

/// Files of the working folder that are not part of the task.
const NOT_TASK: &[&str] = &["idea.md"];

/// Writes the scaffold into `dir` (files that exist are kept: a resumed build goes on
/// from its draft) and the idea beside it. A resumed draft was written by a model: a
/// link where a file or folder goes is removed, never written through.
pub fn write_draft(dir: &Path, idea: &str) -> Result<(), SynthError> {
    std::fs::create_dir_all(dir).map_err(|e| SynthError::io(dir, e))?;
    for (rel, text) in SCAFFOLD {
        write_in_draft(dir, rel, text.as_bytes(), true)?;
    }
    for d in ["solution", "tests"] {
        make_dirs(dir, Path::new(d))?;
    }
    write_in_draft(dir, "idea.md", idea.as_bytes(), false)
}

/// Makes the folders of `rel` inside `dir`, replacing any link on the way by a folder.
fn make_dirs(dir: &Path, rel: &Path) -> Result<(), SynthError> {
    let mut at = dir.to_path_buf();
    for c in rel.components() {
        at.push(c);
        match std::fs::symlink_metadata(&at) {
            Ok(m) if m.is_dir() => continue,
            Ok(_) => std::fs::remove_file(&at).map_err(|e| SynthError::io(&at, e))?,
            Err(_) => {}
        }
        std::fs::create_dir(&at).map_err(|e| SynthError::io(&at, e))?;
    }
    Ok(())
}

/// Writes `bytes` to `dir/rel` (kept when `keep` and a regular file is there), never
/// through a link: one in its place is removed first and the file is opened no-follow.
fn write_in_draft(dir: &Path, rel: &str, bytes: &[u8], keep: bool) -> Result<(), SynthError> {
    let rel = Path::new(rel);
    if let Some(parent) = rel.parent() {
        make_dirs(dir, parent)?;
    }
    let p = dir.join(rel);
    match std::fs::symlink_metadata(&p) {
        Ok(m) if m.is_file() && keep => return Ok(()),
        Ok(m) if m.is_dir() => return Err(SynthError::Other(format!("{}: a folder where a file goes", p.display()))),
        Ok(m) if !m.is_file() => std::fs::remove_file(&p).map_err(|e| SynthError::io(&p, e))?,
        _ => {}
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(&p)
        .map_err(|e| SynthError::io(&p, e))?;
    std::io::Write::write_all(&mut f, bytes).map_err(|e| SynthError::io(&p, e))
}

/// A fingerprint of a task folder's files (names and contents), to see whether an
/// episode changed the task. A draft that cannot be read confined (a link out of it, a
/// loop, past the walk's limits) fingerprints as that error, so that such a change
/// shows and the draft is validated again (which refuses it).
pub fn fingerprint(dir: &Path) -> String {
    let mut h = Sha256::new();
    match task_files(dir) {
        Ok(files) => {
            for f in files {
                h.update(f.rel.as_bytes());
                h.update([0]);
                h.update(&f.bytes);
                h.update([0]);
            }
        }
        Err(e) => h.update(format!("unreadable: {e}").as_bytes()),
    }
    format!("{:x}", h.finalize())
}

/// The task's files without the working files, read confined to the draft (the model
/// wrote it through a bind mount): no link out of it is followed.
fn task_files(dir: &Path) -> Result<Vec<TaskFile>, SynthError> {
    let files = read_files(dir, &[], OutsideLinks::Refuse).map_err(|e| SynthError::Other(e.to_string()))?;
    Ok(files.into_iter().filter(|f| !NOT_TASK.contains(&f.rel.as_str())).collect())
}

/// Copies a task folder to `to` (replacing what is there), without the working files;
/// links inside the draft arrive as the files they point to.
pub fn copy_task(from: &Path, to: &Path) -> Result<(), SynthError> {
    let tmp = to.with_extension("partial");
    let _ = std::fs::remove_dir_all(&tmp);
    for f in task_files(from)? {
        let dst = tmp.join(&f.rel);
        if let Some(parent) = dst.parent() {
            std::fs::create_dir_all(parent).map_err(|e| SynthError::io(parent, e))?;
        }
        std::fs::write(&dst, &f.bytes).map_err(|e| SynthError::io(&dst, e))?;
        std::fs::set_permissions(&dst, std::fs::Permissions::from_mode(f.mode)).map_err(|e| SynthError::io(&dst, e))?;
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

    #[test]
    fn a_resumed_draft_is_never_written_through_a_link() {
        let dir = tempfile::tempdir().unwrap();
        let (draft, home) = (dir.path().join("d"), dir.path().join("home"));
        std::fs::create_dir_all(&home).unwrap();
        std::fs::write(home.join(".bashrc"), "MARKER-rc").unwrap();
        write_draft(&draft, "count words").unwrap();
        // What a model could leave behind for the next (resumed) build.
        std::fs::remove_file(draft.join("idea.md")).unwrap();
        std::os::unix::fs::symlink(home.join(".bashrc"), draft.join("idea.md")).unwrap();
        std::fs::remove_file(draft.join("task.toml")).unwrap();
        std::os::unix::fs::symlink(home.join("created-by-host"), draft.join("task.toml")).unwrap();
        std::fs::remove_dir_all(draft.join("environment")).unwrap();
        std::os::unix::fs::symlink(&home, draft.join("environment")).unwrap();
        write_draft(&draft, "count words").unwrap();
        assert_eq!(std::fs::read_to_string(home.join(".bashrc")).unwrap(), "MARKER-rc");
        assert_eq!(std::fs::read_dir(&home).unwrap().count(), 1, "nothing new in the home folder");
        assert_eq!(std::fs::read_to_string(draft.join("idea.md")).unwrap(), "count words");
        assert!(draft.join("environment/Dockerfile").is_file() && !draft.join("environment").is_symlink());
        assert!(draft.join("task.toml").is_file() && !draft.join("task.toml").is_symlink());
    }

    #[test]
    fn a_draft_linking_out_is_not_copied_and_its_fingerprint_changes() {
        let dir = tempfile::tempdir().unwrap();
        let (draft, home) = (dir.path().join("d"), dir.path().join("home"));
        std::fs::create_dir_all(&home).unwrap();
        std::fs::write(home.join("id_rsa"), "MARKER-key").unwrap();
        write_draft(&draft, "count words").unwrap();
        let before = fingerprint(&draft);
        std::os::unix::fs::symlink(home.join("id_rsa"), draft.join("tests/data.txt")).unwrap();
        assert_ne!(fingerprint(&draft), before);
        let to = dir.path().join("t");
        let e = copy_task(&draft, &to).unwrap_err().to_string();
        assert!(e.contains("tests/data.txt is a link to") && e.contains("outside"), "{e}");
        assert!(!to.exists() && !dir.path().join("t.partial/tests/data.txt").exists());
        // Two links to `.` end (refused), and a link inside the draft copies as its file.
        std::fs::remove_file(draft.join("tests/data.txt")).unwrap();
        std::os::unix::fs::symlink(".", draft.join("tests/a")).unwrap();
        std::os::unix::fs::symlink(".", draft.join("tests/b")).unwrap();
        assert!(copy_task(&draft, &to).unwrap_err().to_string().contains("a loop"));
        std::fs::remove_file(draft.join("tests/a")).unwrap();
        std::fs::remove_file(draft.join("tests/b")).unwrap();
        std::os::unix::fs::symlink("test.sh", draft.join("tests/run.sh")).unwrap();
        copy_task(&draft, &to).unwrap();
        assert_eq!(
            std::fs::read(to.join("tests/run.sh")).unwrap(),
            std::fs::read(draft.join("tests/test.sh")).unwrap()
        );
        assert!(!to.join("tests/run.sh").is_symlink());
    }
}
