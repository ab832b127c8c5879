//! A task folder is hostile input (downloaded from anywhere): nothing a trial reads or
//! copies from it may lead out of it through a link. Checked when the task loads, before
//! any container starts; the copies into containers check again as they read
//! (`Sandbox::copy_dir_in`), beneath the folder with no-follow.

use std::path::Path;

use agent_sandbox::{confined_path, walk_confined, TreeOptions};

use super::super::error::TaskError;
use super::Layout;

/// The files a trial reads on the host, by layout (each checked when present; env
/// files, bind sources, build contexts and Dockerfiles named by a compose file are
/// checked where the file is parsed).
const TB1_FILES: &[&str] = &[
    "task.yaml",
    "docker-compose.yaml",
    "Dockerfile",
    "solution.sh",
    "solution.yaml",
    "run-tests.sh",
    "test_weights.json",
];
const TB2_FILES: &[&str] =
    &["task.toml", "instruction.md", "environment/docker-compose.yaml", "environment/Dockerfile"];
/// The folders copied into containers, with everything under them (a multi-step
/// task's `steps/` holds each step's tests, solution and working files).
const TREES: &[&str] = &["tests", "solution", "steps"];

/// Refuses the task when a file it reads, or anything under `tests/`, `solution/` or `steps/`, is
/// a link leading out of its folder (or nowhere, or into a loop), naming the link.
pub(super) fn check(dir: &Path, layout: Layout) -> Result<(), TaskError> {
    let refuse = |e: agent_sandbox::TreeError| TaskError::Invalid {
        path: dir.display().to_string(),
        reason: format!("{e} (a task may use only its own files)"),
    };
    let files = match layout {
        Layout::Tb1 => TB1_FILES,
        Layout::Tb2 => TB2_FILES,
    };
    for rel in files {
        confined_path(dir, Path::new(rel), "the task folder").map_err(refuse)?;
    }
    for rel in TREES {
        walk_confined(dir, Path::new(rel), &TreeOptions::TASK, &mut |_| Ok(())).map_err(refuse)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::super::BenchTask;

    fn write(dir: &std::path::Path, rel: &str, text: &str) {
        let p = dir.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    /// A TB1 task in `task/` and a secret in `home/` beside it.
    fn tb1() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
        let d = tempfile::tempdir().unwrap();
        let (task, home) = (d.path().join("task"), d.path().join("home"));
        write(&home, "secret.txt", "MARKER");
        write(&task, "task.yaml", "instruction: do it\n");
        write(&task, "Dockerfile", "FROM x\n");
        write(&task, "run-tests.sh", "pytest\n");
        write(&task, "tests/test_outputs.py", "def test_a(): pass\n");
        (d, task, home)
    }

    #[test]
    fn a_tb1_test_file_linked_out_of_the_task_is_refused_at_load() {
        let (_d, task, home) = tb1();
        assert!(BenchTask::load(&task).is_ok());
        symlink(home.join("secret.txt"), task.join("tests/secret.txt")).unwrap();
        let e = BenchTask::load(&task).unwrap_err().to_string();
        let want = format!(
            "tests/secret.txt is a link to {}, outside the task folder: refused",
            home.join("secret.txt").display()
        );
        assert!(e.contains(&want), "{e}");
        assert!(!e.contains("MARKER"), "{e}");
    }

    #[test]
    fn files_the_harness_reads_may_not_be_links_out_either() {
        for file in ["task.yaml", "run-tests.sh", "solution.sh", "Dockerfile"] {
            let (_d, task, home) = tb1();
            let _ = std::fs::remove_file(task.join(file));
            symlink(home.join("secret.txt"), task.join(file)).unwrap();
            let e = BenchTask::load(&task).unwrap_err().to_string();
            assert!(
                e.contains(&format!("{file} is a link to")) && e.contains("outside the task folder"),
                "{file}: {e}"
            );
        }
    }

    #[test]
    fn tb2_solution_and_test_links_are_refused_and_inside_links_kept() {
        let d = tempfile::tempdir().unwrap();
        let (task, home) = (d.path().join("task"), d.path().join("home"));
        write(&home, "solve.sh", "cat /etc/hostname\n");
        write(&task, "task.toml", "");
        write(&task, "instruction.md", "Do it.\n");
        write(&task, "environment/Dockerfile", "FROM x\n");
        write(&task, "tests/test.sh", "true\n");
        write(&task, "solution/helper.sh", "true\n");
        // Links that stay inside the folder are fine.
        symlink("helper.sh", task.join("solution/solve.sh")).unwrap();
        symlink("../environment", task.join("tests/env")).unwrap();
        assert!(BenchTask::load(&task).is_ok());
        std::fs::remove_file(task.join("solution/solve.sh")).unwrap();
        symlink(home.join("solve.sh"), task.join("solution/solve.sh")).unwrap();
        let e = BenchTask::load(&task).unwrap_err().to_string();
        assert!(e.contains("solution/solve.sh is a link to") && e.contains("outside the task folder"), "{e}");
        std::fs::remove_file(task.join("solution/solve.sh")).unwrap();
        symlink("../../home", task.join("tests/data")).unwrap();
        let e = BenchTask::load(&task).unwrap_err().to_string();
        assert!(e.contains("tests/data is a link to ../../home"), "{e}");
    }
}
