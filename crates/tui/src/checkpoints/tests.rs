use std::os::unix::fs::{symlink, FileTypeExt, PermissionsExt};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use super::*;

fn store(store_dir: &tempfile::TempDir, w: &Path) -> CheckpointStore {
    CheckpointStore::open(&store_dir.path().join("s"), w).unwrap()
}

fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git").args(args).current_dir(dir).output().unwrap();
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// Every byte the store holds, blobs and manifests.
fn store_bytes(dir: &Path) -> Vec<u8> {
    let mut all = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                all.extend(std::fs::read(&p).unwrap());
            }
        }
    }
    all
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn restores_changed_deleted_and_created_files_and_leaves_the_users_repo_alone() {
    let ws = tempfile::tempdir().unwrap();
    let store_dir = tempfile::tempdir().unwrap();
    let w = ws.path();
    std::fs::create_dir_all(w.join(".git")).unwrap();
    std::fs::write(w.join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
    std::fs::write(w.join("a.txt"), "one\n").unwrap();
    std::fs::write(w.join("gone.txt"), "keep me\n").unwrap();
    let store = store(&store_dir, w);
    let first = store.snapshot("turn 1").unwrap().id;
    std::fs::write(w.join("a.txt"), "two\n").unwrap();
    std::fs::remove_file(w.join("gone.txt")).unwrap();
    std::fs::create_dir_all(w.join("new/dir")).unwrap();
    std::fs::write(w.join("new/dir/b.txt"), [0u8, 159, 146, 150]).unwrap();
    let second = store.snapshot("before rewind").unwrap().id;
    assert_eq!(store.restore(&first).unwrap(), Vec::<String>::new());
    assert_eq!(std::fs::read_to_string(w.join("a.txt")).unwrap(), "one\n");
    assert_eq!(std::fs::read_to_string(w.join("gone.txt")).unwrap(), "keep me\n");
    assert!(!w.join("new").exists(), "folders made since are removed too");
    // The user's repository is untouched.
    assert_eq!(std::fs::read_to_string(w.join(".git/HEAD")).unwrap(), "ref: refs/heads/main\n");
    assert_eq!(std::fs::read_dir(w.join(".git")).unwrap().count(), 1);
    // And the rewind is undone byte for byte.
    store.snapshot("after rewind").unwrap();
    store.restore(&second).unwrap();
    assert_eq!(std::fs::read_to_string(w.join("a.txt")).unwrap(), "two\n");
    assert_eq!(std::fs::read(w.join("new/dir/b.txt")).unwrap(), [0u8, 159, 146, 150]);
    assert!(!w.join("gone.txt").exists());
}

#[test]
fn ignored_files_are_neither_kept_nor_removed() {
    let ws = tempfile::tempdir().unwrap();
    let store_dir = tempfile::tempdir().unwrap();
    let w = ws.path();
    std::fs::write(w.join(".gitignore"), "*.log\nbuild/\n!keep.log\n").unwrap();
    std::fs::write(w.join("keep.log"), "kept\n").unwrap();
    let store = store(&store_dir, w);
    let first = store.snapshot("one").unwrap().id;
    std::fs::write(w.join("later.log"), "ignored\n").unwrap();
    std::fs::create_dir_all(w.join("build")).unwrap();
    std::fs::write(w.join("build/out.o"), "object\n").unwrap();
    std::fs::write(w.join("keep.log"), "changed\n").unwrap();
    store.snapshot("two").unwrap();
    assert!(!contains(&store_bytes(&store_dir.path().join("s")), b"object\n"), "an ignored file was copied");
    store.restore(&first).unwrap();
    assert_eq!(std::fs::read_to_string(w.join("later.log")).unwrap(), "ignored\n");
    assert_eq!(std::fs::read_to_string(w.join("build/out.o")).unwrap(), "object\n");
    assert_eq!(std::fs::read_to_string(w.join("keep.log")).unwrap(), "kept\n");
}

/// The attack of issue 48: a nested repository whose config runs commands under git.
/// Nothing runs (no marker), and its files, `.git` included, come back as plain files.
#[test]
fn a_nested_repository_with_a_hostile_config_is_kept_as_plain_files_and_runs_nothing() {
    let ws = tempfile::tempdir().unwrap();
    let store_dir = tempfile::tempdir().unwrap();
    let markers = tempfile::tempdir().unwrap();
    let w = ws.path();
    let sub = w.join("sub");
    std::fs::create_dir_all(&sub).unwrap();
    std::fs::write(sub.join("f.txt"), "hi\n").unwrap();
    git(&sub, &["init", "-q"]);
    git(&sub, &["add", "f.txt"]);
    git(&sub, &["-c", "user.email=a@b", "-c", "user.name=a", "commit", "-q", "-m", "x"]);
    let pwned = markers.path().join("pwned");
    let clean = markers.path().join("pwned.clean");
    git(&sub, &["config", "core.fsmonitor", &format!("touch {}; false", pwned.display())]);
    git(&sub, &["config", "filter.x.clean", &format!("touch {}; cat", clean.display())]);
    std::fs::write(sub.join(".gitattributes"), "* filter=x\n").unwrap();
    let config = std::fs::read(sub.join(".git/config")).unwrap();

    let store = store(&store_dir, w);
    let first = store.snapshot("one").unwrap().id;
    std::fs::write(sub.join("f.txt"), "changed\n").unwrap();
    std::fs::write(sub.join(".git/config"), "[core]\n\tfsmonitor = other\n").unwrap();
    std::fs::write(sub.join("later.txt"), "later\n").unwrap();
    store.snapshot("two").unwrap();
    store.restore(&first).unwrap();

    assert!(!pwned.exists() && !clean.exists(), "a command of the nested repository ran");
    assert_eq!(std::fs::read_to_string(sub.join("f.txt")).unwrap(), "hi\n");
    assert_eq!(std::fs::read(sub.join(".git/config")).unwrap(), config);
    assert!(!sub.join("later.txt").exists());
    // Still a repository git can read (checked here, by the test, not by the store).
    git(&sub, &["-c", "core.fsmonitor=false", "cat-file", "-e", "HEAD"]);
    assert!(!pwned.exists() && !clean.exists());
}

#[test]
fn an_uninitialised_nested_repository_does_not_break_checkpoints_or_rewind() {
    let ws = tempfile::tempdir().unwrap();
    let store_dir = tempfile::tempdir().unwrap();
    let w = ws.path();
    std::fs::write(w.join("a.txt"), "one\n").unwrap();
    let store = store(&store_dir, w);
    let first = store.snapshot("one").unwrap().id;
    std::fs::create_dir_all(w.join("sub")).unwrap();
    git(&w.join("sub"), &["init", "-q"]);
    std::fs::write(w.join("sub/f.txt"), "uncommitted\n").unwrap();
    std::fs::write(w.join("a.txt"), "two\n").unwrap();
    let second = store.snapshot("two").unwrap().id;
    std::fs::write(w.join("a.txt"), "three\n").unwrap();
    store.restore(&second).unwrap();
    assert_eq!(std::fs::read_to_string(w.join("a.txt")).unwrap(), "two\n");
    assert_eq!(std::fs::read_to_string(w.join("sub/f.txt")).unwrap(), "uncommitted\n");
    store.restore(&first).unwrap();
    assert_eq!(std::fs::read_to_string(w.join("a.txt")).unwrap(), "one\n");
    assert!(!w.join("sub").exists(), "the repository made since is removed");
}

/// Between the snapshot and the restore the sandbox swaps a folder for a link to a
/// folder outside the workspace: the snapshot does not read through it and the restore
/// does not write through it.
#[test]
fn a_folder_swapped_for_a_link_to_outside_is_neither_read_nor_written_through() {
    let ws = tempfile::tempdir().unwrap();
    let store_dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let w = ws.path();
    std::fs::write(outside.path().join("x.txt"), "outside-secret-7d1f\n").unwrap();
    std::fs::create_dir_all(w.join("d")).unwrap();
    std::fs::write(w.join("d/x.txt"), "inside\n").unwrap();
    std::fs::write(w.join("d/y.txt"), "inside too\n").unwrap();
    let store = store(&store_dir, w);
    let first = store.snapshot("one").unwrap().id;
    std::fs::remove_dir_all(w.join("d")).unwrap();
    symlink(outside.path(), w.join("d")).unwrap();
    store.snapshot("two").unwrap();
    assert!(
        !contains(&store_bytes(&store_dir.path().join("s")), b"outside-secret-7d1f"),
        "a file outside the workspace was read through the link"
    );
    store.restore(&first).unwrap();
    assert_eq!(std::fs::read_to_string(outside.path().join("x.txt")).unwrap(), "outside-secret-7d1f\n");
    assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 1, "something was written outside");
    assert!(!std::fs::symlink_metadata(w.join("d")).unwrap().file_type().is_symlink());
    assert_eq!(std::fs::read_to_string(w.join("d/y.txt")).unwrap(), "inside too\n");

    // The step that refuses a link raced in after the listing: a parent that is a link
    // is never opened.
    std::fs::remove_dir_all(w.join("d")).unwrap();
    symlink(outside.path(), w.join("d")).unwrap();
    let root = beneath::open_root(w).unwrap();
    let refused = beneath::open_parent(root.as_fd(), Path::new("d/y.txt"), true).unwrap_err();
    assert!(refused.describe(Path::new("d/y.txt")).contains("`d` is a symbolic link"), "{refused:?}");
    assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 1);
}

#[test]
fn a_fifo_is_skipped_without_hanging_even_as_a_gitignore() {
    let ws = tempfile::tempdir().unwrap();
    let store_dir = tempfile::tempdir().unwrap();
    let w = ws.path().to_path_buf();
    std::fs::create_dir_all(w.join("sub")).unwrap();
    std::fs::write(w.join("sub/a.txt"), "a\n").unwrap();
    for fifo in ["pipe", "sub/.gitignore"] {
        assert!(Command::new("mkfifo").arg(w.join(fifo)).status().unwrap().success());
    }
    let store = store(&store_dir, &w);
    let (tx, rx) = std::sync::mpsc::channel();
    let s = store.clone();
    std::thread::spawn(move || tx.send(s.snapshot("one").map(|s| s.id).map_err(|e| e.to_string())));
    let first = rx.recv_timeout(Duration::from_secs(20)).expect("the snapshot hangs on a FIFO").unwrap();
    std::fs::write(w.join("sub/a.txt"), "b\n").unwrap();
    store.restore(&first).unwrap();
    assert_eq!(std::fs::read_to_string(w.join("sub/a.txt")).unwrap(), "a\n");
    assert!(std::fs::symlink_metadata(w.join("pipe")).unwrap().file_type().is_fifo(), "the FIFO is left alone");
}

#[test]
fn a_symlink_is_kept_as_a_link_and_its_target_is_never_read() {
    let ws = tempfile::tempdir().unwrap();
    let store_dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let w = ws.path();
    let target = outside.path().join("secret.txt");
    std::fs::write(&target, "host-secret-93ab\n").unwrap();
    symlink(&target, w.join("link")).unwrap();
    symlink("missing/nowhere", w.join("dangling")).unwrap();
    let store = store(&store_dir, w);
    let first = store.snapshot("one").unwrap().id;
    assert!(!contains(&store_bytes(&store_dir.path().join("s")), b"host-secret-93ab"));
    std::fs::remove_file(w.join("link")).unwrap();
    std::fs::remove_file(w.join("dangling")).unwrap();
    std::fs::write(w.join("dangling"), "now a file\n").unwrap();
    store.restore(&first).unwrap();
    assert_eq!(std::fs::read_link(w.join("link")).unwrap(), target);
    assert_eq!(std::fs::read_link(w.join("dangling")).unwrap(), Path::new("missing/nowhere"));
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "host-secret-93ab\n");
}

#[test]
fn setuid_and_setgid_bits_are_never_kept_or_restored() {
    let ws = tempfile::tempdir().unwrap();
    let store_dir = tempfile::tempdir().unwrap();
    let w = ws.path();
    std::fs::write(w.join("tool"), "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(w.join("tool"), std::fs::Permissions::from_mode(0o6755)).unwrap();
    std::fs::write(w.join("plain"), "x\n").unwrap();
    std::fs::set_permissions(w.join("plain"), std::fs::Permissions::from_mode(0o4644)).unwrap();
    let store = store(&store_dir, w);
    let first = store.snapshot("one").unwrap().id;
    std::fs::write(w.join("tool"), "changed\n").unwrap();
    store.restore(&first).unwrap();
    let mode = |p: &str| std::fs::metadata(w.join(p)).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode("tool"), 0o755);
    assert_eq!(std::fs::read_to_string(w.join("tool")).unwrap(), "#!/bin/sh\n");
    // Unchanged bytes, but setuid now: rewritten without the bit.
    assert_eq!(mode("plain"), 0o644);
}

#[test]
fn a_file_over_the_limit_is_skipped_with_a_note_and_left_as_it_is() {
    let ws = tempfile::tempdir().unwrap();
    let store_dir = tempfile::tempdir().unwrap();
    let w = ws.path();
    std::fs::write(w.join("big.bin"), vec![7u8; 4096]).unwrap();
    std::fs::write(w.join("small.txt"), "s\n").unwrap();
    let limits = Limits { file_bytes: 1024, ..Limits::default() };
    let store = CheckpointStore::with_limits(&store_dir.path().join("s"), w, limits).unwrap();
    let first = store.snapshot("one").unwrap();
    assert!(first.notes.iter().any(|n| n.contains("`big.bin`") && n.contains("leaves it as it is")), "{first:?}");
    // Said once per session.
    assert!(store.snapshot("two").unwrap().notes.is_empty());
    std::fs::write(w.join("big.bin"), vec![8u8; 4096]).unwrap();
    std::fs::write(w.join("small.txt"), "t\n").unwrap();
    store.restore(&first.id).unwrap();
    assert_eq!(std::fs::read(w.join("big.bin")).unwrap(), vec![8u8; 4096]);
    assert_eq!(std::fs::read_to_string(w.join("small.txt")).unwrap(), "s\n");
}

#[test]
fn an_unknown_checkpoint_id_is_refused_without_touching_the_store_path() {
    let ws = tempfile::tempdir().unwrap();
    let store_dir = tempfile::tempdir().unwrap();
    let store = store(&store_dir, ws.path());
    for id in ["../../etc/passwd", &"a".repeat(64)] {
        let err = store.restore(id).unwrap_err();
        assert!(err.to_string().contains("is not in the store"), "{err}");
    }
}

#[test]
fn past_the_limit_on_entries_a_restore_puts_back_but_removes_nothing() {
    let ws = tempfile::tempdir().unwrap();
    let store_dir = tempfile::tempdir().unwrap();
    let w = ws.path();
    for name in ["a", "b", "c", "d"] {
        std::fs::write(w.join(name), name).unwrap();
    }
    let limits = Limits { entries: 2, ..Limits::default() };
    let store = CheckpointStore::with_limits(&store_dir.path().join("s"), w, limits).unwrap();
    let first = store.snapshot("one").unwrap();
    assert!(first.notes.iter().any(|n| n.contains("more than 2 files")), "{first:?}");
    std::fs::write(w.join("a"), "changed").unwrap();
    std::fs::write(w.join("0-new"), "new").unwrap();
    let notes = store.restore(&first.id).unwrap();
    assert_eq!(std::fs::read_to_string(w.join("a")).unwrap(), "a");
    for name in ["0-new", "c", "d"] {
        assert!(w.join(name).exists(), "{name} was removed");
    }
    assert!(notes.iter().any(|n| n.contains("too many files")), "{notes:?}");
}

#[test]
fn the_workspace_control_files_are_neither_kept_nor_restored_nor_removed() {
    // They are read-only mounts in the sandbox during a session: replacing one on the
    // host would detach its mount, so the store leaves them to the user.
    let ws = tempfile::tempdir().unwrap();
    let store_dir = tempfile::tempdir().unwrap();
    let w = ws.path();
    std::fs::create_dir_all(w.join(".agent")).unwrap();
    std::fs::write(w.join(".agent/settings.json"), "{}").unwrap();
    std::fs::write(w.join("a.txt"), "one\n").unwrap();
    let store = store(&store_dir, w);
    let first = store.snapshot("turn 1").unwrap().id;
    assert!(!contains(&store_bytes(&store_dir.path().join("s")), b".agent"));
    std::fs::write(w.join(".agent/settings.json"), "{\"changed\": true}").unwrap();
    std::fs::write(w.join(".envrc"), "export X=1\n").unwrap();
    std::fs::write(w.join("a.txt"), "two\n").unwrap();
    store.restore(&first).unwrap();
    assert_eq!(std::fs::read_to_string(w.join("a.txt")).unwrap(), "one\n");
    assert_eq!(std::fs::read_to_string(w.join(".agent/settings.json")).unwrap(), "{\"changed\": true}");
    assert_eq!(std::fs::read_to_string(w.join(".envrc")).unwrap(), "export X=1\n");
}
