use super::*;

/// One archive entry as a container might send it: `name` written into the header as
/// is (no check), so hostile names can be built.
fn entry(b: &mut tar::Builder<Vec<u8>>, name: &str, kind: tar::EntryType, data: &[u8], link: Option<&str>) {
    let mut h = tar::Header::new_gnu();
    let raw = &mut h.as_gnu_mut().unwrap().name;
    raw[..name.len()].copy_from_slice(name.as_bytes());
    h.set_entry_type(kind);
    h.set_size(data.len() as u64);
    h.set_mode(0o4755);
    if let Some(l) = link {
        h.set_link_name(l).unwrap();
    }
    h.set_cksum();
    b.append(&h, data).unwrap();
}

fn archive(build: impl FnOnce(&mut tar::Builder<Vec<u8>>)) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    build(&mut b);
    b.into_inner().unwrap()
}

#[test]
fn a_folder_lands_under_dest_with_plain_files_only() {
    let bytes = archive(|b| {
        entry(b, "out/", tar::EntryType::Directory, b"", None);
        entry(b, "out/a.txt", tar::EntryType::Regular, b"hello", None);
        entry(b, "out/sub/b.txt", tar::EntryType::Regular, b"bye", None);
        entry(b, "out/link", tar::EntryType::Symlink, b"", Some("/etc/passwd"));
        entry(b, "out/hard", tar::EntryType::Link, b"", Some("out/a.txt"));
        entry(b, "out/../escape.txt", tar::EntryType::Regular, b"x", None);
        entry(b, "/abs.txt", tar::EntryType::Regular, b"x", None);
        entry(b, "out/fifo", tar::EntryType::Fifo, b"", None);
    });
    let host = tempfile::tempdir().unwrap();
    let dest = host.path().join("artifacts").join("out");
    std::fs::create_dir(host.path().join("artifacts")).unwrap();
    let got = unpack_hostile(&bytes, &dest).unwrap();
    assert_eq!((got.files, got.bytes, got.cut), (2, 8, false), "{got:?}");
    assert_eq!(std::fs::read_to_string(dest.join("a.txt")).unwrap(), "hello");
    assert_eq!(std::fs::read_to_string(dest.join("sub/b.txt")).unwrap(), "bye");
    // Links, a fifo and names leaving the folder are named, never written.
    assert_eq!(got.skipped.len(), 5, "{got:?}");
    assert!(got.skipped.iter().any(|s| s.starts_with("out/link (a link)")), "{got:?}");
    assert!(got.skipped.iter().any(|s| s.contains("escape.txt (a name that leaves the folder)")), "{got:?}");
    assert!(std::fs::symlink_metadata(dest.join("link")).is_err());
    assert!(std::fs::symlink_metadata(dest.join("hard")).is_err());
    assert!(!host.path().join("artifacts/escape.txt").exists() && !host.path().join("escape.txt").exists());
    // The setuid bit of the container's file is not carried over.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(dest.join("a.txt")).unwrap().permissions().mode();
    assert_eq!(mode & 0o7000, 0, "{mode:o}");
}

#[test]
fn a_single_file_becomes_dest_and_a_cut_archive_keeps_its_whole_entries() {
    let host = tempfile::tempdir().unwrap();
    let bytes = archive(|b| entry(b, "report.json", tar::EntryType::Regular, b"{}", None));
    let got = unpack_hostile(&bytes, &host.path().join("report.json")).unwrap();
    assert_eq!(got.files, 1);
    assert_eq!(std::fs::read_to_string(host.path().join("report.json")).unwrap(), "{}");

    let big = vec![b'x'; 4096];
    let bytes = archive(|b| {
        entry(b, "d/", tar::EntryType::Directory, b"", None);
        entry(b, "d/first", tar::EntryType::Regular, b"1", None);
        entry(b, "d/second", tar::EntryType::Regular, &big, None);
    });
    // Cut inside the second file's content: the first stands, the second is not written.
    let cut = &bytes[..512 * 4 + 1000];
    let got = unpack_hostile(cut, &host.path().join("d")).unwrap();
    assert_eq!(got.files, 1, "{got:?}");
    assert!(host.path().join("d/first").is_file() && !host.path().join("d/second").exists());
}

#[test]
fn nothing_is_written_through_an_existing_link() {
    let host = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(outside.path(), host.path().join("d")).unwrap();
    let bytes = archive(|b| entry(b, "d/f", tar::EntryType::Regular, b"x", None));
    let e = unpack_hostile(&bytes, &host.path().join("d")).unwrap_err();
    assert!(e.contains("in the way of a folder"), "{e}");
    assert!(std::fs::read_dir(outside.path()).unwrap().next().is_none());
}
