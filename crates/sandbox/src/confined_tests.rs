use std::collections::BTreeMap;
use std::os::unix::fs::symlink;

use super::*;

fn write(dir: &Path, rel: &str, text: &str) {
    let p = dir.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

/// Every entry of an archive: path → contents (`None` for a folder).
fn unpack(bytes: &[u8]) -> BTreeMap<String, Option<String>> {
    let mut found = BTreeMap::new();
    for e in tar::Archive::new(bytes).entries().unwrap() {
        let mut e = e.unwrap();
        let path = e.path().unwrap().display().to_string().trim_end_matches('/').to_string();
        let content = if e.header().entry_type().is_dir() {
            None
        } else {
            assert!(e.header().entry_type().is_file(), "{path}: only folders and files are packed");
            let mut s = String::new();
            e.read_to_string(&mut s).unwrap();
            Some(s)
        };
        found.insert(path, content);
    }
    found
}

/// A task folder and, beside it, a "home" holding a secret.
fn task_and_home() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let d = tempfile::tempdir().unwrap();
    let task = d.path().join("task");
    let home = d.path().join("home");
    write(&home, "secret.txt", "MARKER-5d1f");
    write(&task, "tests/test_outputs.py", "def test_a(): pass\n");
    (d, task, home)
}

#[test]
fn a_link_out_of_the_task_folder_is_refused_naming_it_and_its_target() {
    let (_d, task, home) = task_and_home();
    symlink(home.join("secret.txt"), task.join("tests/secret.txt")).unwrap();
    let e = pack_confined(&task, Path::new("tests"), "tests", &TreeOptions::TASK).unwrap_err().to_string();
    let want = format!(
        "tests/secret.txt is a link to {}, outside the task folder: refused",
        home.join("secret.txt").display()
    );
    assert!(e.contains(&want), "{e}");
    assert!(!e.contains("MARKER"), "{e}");
    // A relative link climbing out is refused the same way, and so is a folder link.
    std::fs::remove_file(task.join("tests/secret.txt")).unwrap();
    symlink("../../home", task.join("tests/up")).unwrap();
    let e = pack_confined(&task, Path::new("tests"), "tests", &TreeOptions::TASK).unwrap_err().to_string();
    assert!(
        e.contains("tests/up is a link to ../../home (which leads to") && e.contains("outside the task folder"),
        "{e}"
    );
}

#[test]
fn the_walked_folder_itself_may_not_be_a_link_out() {
    let (_d, task, home) = task_and_home();
    symlink(&home, task.join("solution")).unwrap();
    let e = pack_confined(&task, Path::new("solution"), "solution", &TreeOptions::TASK).unwrap_err().to_string();
    assert!(e.contains("solution is a link to") && e.contains("outside the task folder: refused"), "{e}");
    let e = read_confined(&task, Path::new("solution/secret.txt"), 1 << 20, "the task folder").unwrap_err();
    assert!(e.to_string().contains("solution is a link to"), "{e}");
    let e = confined_path(&task, Path::new("solution/secret.txt"), "the task folder").unwrap_err();
    assert!(e.to_string().contains("outside the task folder"), "{e}");
}

#[test]
fn links_inside_the_task_folder_are_copied_as_their_content() {
    let (_d, task, _home) = task_and_home();
    write(&task, "data/input.csv", "a,b\n");
    write(&task, "solution.sh", "echo hi\n");
    symlink("../data", task.join("tests/data")).unwrap();
    symlink(task.join("solution.sh"), task.join("tests/solve.sh")).unwrap();
    symlink("test_outputs.py", task.join("tests/alias.py")).unwrap();
    let found = unpack(&pack_confined(&task, Path::new("tests"), "tests", &TreeOptions::TASK).unwrap());
    assert_eq!(found["tests"], None);
    assert_eq!(found["tests/data"], None);
    assert_eq!(found["tests/data/input.csv"].as_deref(), Some("a,b\n"));
    assert_eq!(found["tests/solve.sh"].as_deref(), Some("echo hi\n"));
    assert_eq!(found["tests/alias.py"].as_deref(), Some("def test_a(): pass\n"));
    assert_eq!(read_confined(&task, Path::new("tests/solve.sh"), 100, "t").unwrap().unwrap(), b"echo hi\n");
    assert_eq!(
        confined_path(&task, Path::new("tests/data"), "t").unwrap().unwrap(),
        task.join("data").canonicalize().unwrap()
    );
}

#[test]
fn a_missing_folder_packs_as_an_empty_one() {
    let (_d, task, _home) = task_and_home();
    let found = unpack(&pack_confined(&task, Path::new("solution"), "solution", &TreeOptions::TASK).unwrap());
    assert_eq!(found.into_iter().collect::<Vec<_>>(), [("solution".to_string(), None)]);
    assert_eq!(read_confined(&task, Path::new("nothing.txt"), 10, "t").unwrap(), None);
    let e = confined_path(&task, Path::new("../task/tests"), "the task folder").unwrap_err().to_string();
    assert!(e.contains("not a path inside the task folder"), "{e}");
}

#[test]
fn two_links_to_dot_end_refused_or_skipped() {
    let (_d, task, _home) = task_and_home();
    symlink(".", task.join("tests/a")).unwrap();
    symlink(".", task.join("tests/b")).unwrap();
    symlink("..", task.join("tests/up")).unwrap();
    let e = pack_confined(&task, Path::new("tests"), "tests", &TreeOptions::TASK).unwrap_err().to_string();
    assert!(e.contains("tests/a is a link to ., a folder that holds the link (a loop): refused"), "{e}");
    let skip = TreeOptions { outside: OutsideLinks::Skip, ..TreeOptions::TASK };
    let mut seen = Vec::new();
    walk(&task, Path::new(""), &skip, &mut |n| {
        seen.push(match n {
            TreeNode::Dir { rel, .. } | TreeNode::File { rel, .. } => rel.to_string(),
        });
        Ok(())
    })
    .unwrap();
    assert_eq!(seen, ["", "tests", "tests/test_outputs.py"]);
}

#[test]
fn walks_stop_at_their_depth_entry_and_byte_limits() {
    let d = tempfile::tempdir().unwrap();
    let deep = (0..6).map(|i| format!("d{i}")).collect::<Vec<_>>().join("/");
    write(d.path(), &format!("{deep}/f"), "x");
    write(d.path(), "big", &"y".repeat(100));
    let run = |limits: TreeLimits| {
        let opts = TreeOptions { limits, outside: OutsideLinks::Skip, what: "the draft" };
        walk(d.path(), Path::new(""), &opts, &mut |_| Ok(())).map_err(|e| e.to_string())
    };
    let roomy = TreeLimits { max_depth: 10, max_entries: 100, max_bytes: 1000 };
    run(roomy).unwrap();
    let e = run(TreeLimits { max_depth: 3, ..roomy }).unwrap_err();
    assert!(e.contains("stopped reading the draft at a limit: more than 3 levels of folders"), "{e}");
    let e = run(TreeLimits { max_entries: 4, ..roomy }).unwrap_err();
    assert!(e.contains("more than 4 files and folders"), "{e}");
    let e = run(TreeLimits { max_bytes: 50, ..roomy }).unwrap_err();
    assert!(e.contains("more than 50 bytes of files (at big)"), "{e}");
}

#[test]
fn dangling_links_are_named_and_special_files_left_out() {
    let (_d, task, _home) = task_and_home();
    symlink("gone.txt", task.join("tests/later.txt")).unwrap();
    let e = pack_confined(&task, Path::new("tests"), "tests", &TreeOptions::TASK).unwrap_err().to_string();
    assert!(e.contains("tests/later.txt is a link to gone.txt, which does not exist"), "{e}");
    std::fs::remove_file(task.join("tests/later.txt")).unwrap();
    let fifo = task.join("tests/pipe");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let found = unpack(&pack_confined(&task, Path::new("tests"), "tests", &TreeOptions::TASK).unwrap());
    assert!(!found.contains_key("tests/pipe"), "{found:?}");
}

#[test]
fn modes_keep_their_permission_bits_only() {
    use std::os::unix::fs::PermissionsExt;
    let (_d, task, _home) = task_and_home();
    let p = task.join("tests/run.sh");
    std::fs::write(&p, "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o4755)).unwrap();
    let bytes = pack_confined(&task, Path::new("tests"), "tests", &TreeOptions::TASK).unwrap();
    let mut archive = tar::Archive::new(bytes.as_slice());
    let mode = archive
        .entries()
        .unwrap()
        .map(|e| e.unwrap())
        .find(|e| e.path().unwrap().ends_with("run.sh"))
        .map(|e| e.header().mode().unwrap())
        .unwrap();
    assert_eq!(mode, 0o755);
}
