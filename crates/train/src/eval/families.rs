//! Which family each task belongs to, and holding whole families out of training.
//!
//! A folder written by `agent tasks generate` names every task's family in its
//! `manifest.json`; any other task (a Terminal-Bench task, a synth output's) is a family
//! of its own, so that per-family figures are per-task figures there.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

use agent_bench::generate::{Manifest, MANIFEST};
use agent_bench::TaskEntry;

use crate::error::TrainError;

/// The family of each task (by folder name) of the folder `dir`, from its manifest when
/// it has one; tasks the manifest does not list are their own family.
pub fn families_of(dir: &Path, tasks: &[Arc<TaskEntry>]) -> Result<Vec<String>, TrainError> {
    let listed: BTreeMap<String, String> = if dir.join(MANIFEST).is_file() {
        Manifest::load(dir)
            .map_err(|e| TrainError::Other(e.to_string()))?
            .tasks
            .into_iter()
            .map(|t| (t.name, t.family))
            .collect()
    } else {
        BTreeMap::new()
    };
    Ok(tasks.iter().map(|t| listed.get(&t.name).cloned().unwrap_or_else(|| t.name.clone())).collect())
}

/// Keeps the tasks whose family is (`keep_listed`) or is not in `families`; says what
/// is wrong when a named family has no task, or nothing is left.
pub fn split_by_family(
    tasks: Vec<Arc<TaskEntry>>,
    families: &[String],
    task_families: &[String],
    keep_listed: bool,
    what: &str,
    dir: &Path,
) -> Result<(Vec<Arc<TaskEntry>>, Vec<String>), TrainError> {
    let wanted: BTreeSet<&str> = families.iter().map(String::as_str).collect();
    let present: BTreeSet<&str> = task_families.iter().map(String::as_str).collect();
    if keep_listed {
        if let Some(missing) = wanted.iter().find(|f| !present.contains(*f)) {
            return Err(TrainError::Config(format!(
                "held-out family `{missing}` has no task in {} ({what}); its families are: {}",
                dir.display(),
                present.iter().copied().collect::<Vec<_>>().join(", ")
            )));
        }
    }
    let (kept, labels): (Vec<_>, Vec<_>) = tasks
        .into_iter()
        .zip(task_families.iter().cloned())
        .filter(|(_, f)| wanted.contains(f.as_str()) == keep_listed)
        .unzip();
    if kept.is_empty() {
        return Err(TrainError::Config(format!(
            "holding out the families {} leaves no {what} in {}",
            families.join(", "),
            dir.display()
        )));
    }
    Ok((kept, labels))
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_bench::generate::{generate, write_tasks, GenerateOptions, Split};

    fn entries(dir: &Path) -> Vec<Arc<TaskEntry>> {
        agent_bench::discover(&[dir.to_path_buf()]).unwrap().into_iter().map(Arc::new).collect()
    }

    /// A generated folder's families come from its manifest, and holding two out keeps
    /// them out of one side and alone on the other.
    #[test]
    fn generated_tasks_are_grouped_and_split_by_their_manifests_families() {
        let dir = tempfile::tempdir().unwrap();
        let opts = GenerateOptions {
            families: vec!["count-lines".into(), "checksum".into(), "symlinks".into()],
            family_dirs: Vec::new(),
            levels: vec![1],
            split: Split::Train,
            seed: 3,
            count: 6,
        };
        write_tasks(dir.path(), &generate(&opts).unwrap(), Split::Train, 3).unwrap();
        let tasks = entries(dir.path());
        let fams = families_of(dir.path(), &tasks).unwrap();
        assert_eq!(fams.iter().collect::<BTreeSet<_>>().len(), 3, "{fams:?}");
        for (t, f) in tasks.iter().zip(&fams) {
            assert!(t.name.starts_with(f.as_str()), "{} in {f}", t.name);
        }
        let out = vec!["checksum".to_string(), "symlinks".to_string()];
        let (train, tf) = split_by_family(tasks.clone(), &out, &fams, false, "training task", dir.path()).unwrap();
        assert_eq!(train.len(), 2);
        assert!(tf.iter().all(|f| f == "count-lines"));
        let (eval, ef) = split_by_family(tasks.clone(), &out, &fams, true, "evaluation task", dir.path()).unwrap();
        assert_eq!(eval.len(), 4);
        assert!(ef.iter().all(|f| out.contains(f)));
        // A misspelt family is named with the ones that exist.
        let e = split_by_family(tasks.clone(), &["chksum".into()], &fams, true, "evaluation task", dir.path())
            .unwrap_err()
            .to_string();
        assert!(e.contains("`chksum`") && e.contains("checksum"), "{e}");
        // Holding out every family leaves nothing to train on.
        let all: Vec<String> = fams.iter().cloned().collect::<BTreeSet<_>>().into_iter().collect();
        let e = split_by_family(tasks, &all, &fams, false, "training task", dir.path()).unwrap_err().to_string();
        assert!(e.contains("leaves no training task"), "{e}");
    }

    /// Tasks of any other folder are each their own family.
    #[test]
    fn a_task_without_a_manifest_is_its_own_family() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["alpha", "beta"] {
            let t = dir.path().join(name);
            std::fs::create_dir_all(t.join("tests")).unwrap();
            std::fs::write(t.join("task.yaml"), "instruction: do it\n").unwrap();
            std::fs::write(t.join("Dockerfile"), "FROM x\n").unwrap();
            std::fs::write(t.join("run-tests.sh"), "true\n").unwrap();
        }
        let tasks = entries(dir.path());
        assert_eq!(families_of(dir.path(), &tasks).unwrap(), ["alpha", "beta"]);
    }
}
