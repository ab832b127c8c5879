//! File operations through the archive API and the `file` tool, on a real engine.

use std::time::Duration;

use serde_json::json;
use tokio_util::sync::CancellationToken;

use agent_core::episode::ToolExecutor;
use agent_core::tools::Action;
use agent_sandbox::FileKind;

use crate::support;

fn action(tool: &str, args: serde_json::Value) -> Action {
    Action { tool: tool.into(), args: args.as_object().cloned().unwrap_or_default() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_bytes_round_trip_including_ten_megabytes() {
    let (sb, mut sh) = support::shell().await;
    let tricky = "quotes ' \" ` $(rm -rf /) \\n\nnew\tline\ttabs\r\nEOF\n'EOF'\n".as_bytes().to_vec();
    let mut binary: Vec<u8> = (0..=255u8).collect();
    binary.extend_from_slice(b"\x00\x00\xff\xfe");
    let big: Vec<u8> = (0..10 * 1024 * 1024u32).map(|i| (i % 251) as u8).collect();
    for (path, data) in [("/tmp/a/b/c/tricky.txt", &tricky), ("/tmp/bin.dat", &binary), ("/tmp/big.bin", &big)] {
        sb.write_file(path, data, None).await.unwrap();
        let back = sb.read_file(path).await.unwrap();
        assert_eq!(back.kind, FileKind::File);
        assert_eq!(&back.bytes, data, "{path} did not round-trip");
    }
    // The shell sees the same bytes.
    let r = sh
        .run(
            "sha256sum /tmp/big.bin | cut -c1-16; wc -c < /tmp/a/b/c/tricky.txt",
            Duration::from_secs(30),
            &CancellationToken::new(),
            &mut |_| {},
        )
        .await
        .unwrap();
    use sha2::Digest;
    let digest = format!("{:x}", sha2::Sha256::digest(&big));
    assert_eq!(r.output, format!("{}\n{}\n", &digest[..16], tricky.len()));
    assert_eq!(sb.read_file("/tmp").await.unwrap().kind, FileKind::Directory);
    let missing = sb.read_file("/nope/x").await.unwrap_err().to_string();
    assert!(missing.contains("/nope/x") && missing.contains("no such file"), "{missing}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_tool_reads_writes_edits_relative_to_the_shell() {
    let (_sb, mut sh) = support::shell().await;
    sh.run(
        "mkdir -p /work && cd /work && printf 'x\\n' > keep.sh && chmod 755 keep.sh",
        Duration::from_secs(10),
        &CancellationToken::new(),
        &mut |_| {},
    )
    .await
    .unwrap();
    let mut ex = ToolExecutor::new(sh, Duration::from_secs(30), 16 * 1024);
    let cancel = CancellationToken::new();
    let mut sink = |_: &str| {};
    let out = ex
        .execute(
            &action(
                "file",
                json!({"action": "write", "path": "src/main.py", "content": "print('a')\nprint('b')\nprint('a')\n"}),
            ),
            &cancel,
            &mut sink,
        )
        .await
        .unwrap();
    assert!(out.observation.contains("created /work/src/main.py"), "{}", out.observation);
    // A directory as the path (small models write "in the current directory" as `.`)
    // is refused with the path it should have been.
    let out = ex
        .execute(&action("file", json!({"action": "write", "path": ".", "content": "hi"})), &cancel, &mut sink)
        .await
        .unwrap();
    assert!(
        out.observation.contains("/work is a directory; `path` must be the file's own path, such as /work/NAME"),
        "{}",
        out.observation
    );
    let out = ex
        .execute(&action("file", json!({"action": "edit", "path": "src/main.py", "old_string": "print('a')", "new_string": "print(\"A\")"})), &cancel, &mut sink)
        .await
        .unwrap();
    assert!(out.observation.contains("occurs 2 times"), "{}", out.observation);
    let out = ex
        .execute(&action("file", json!({"action": "edit", "path": "src/main.py", "old_string": "print('a')", "new_string": "print(\"A\")", "replace_all": true})), &cancel, &mut sink)
        .await
        .unwrap();
    assert!(out.observation.contains("2 replacement"), "{}", out.observation);
    let out = ex
        .execute(
            &action("file", json!({"action": "read", "path": "/work/src/main.py", "offset": 2, "limit": 2})),
            &cancel,
            &mut sink,
        )
        .await
        .unwrap();
    assert!(out.observation.contains("     2\tprint('b')\n     3\tprint(\"A\")"), "{}", out.observation);
    let out = ex
        .execute(
            &action(
                "file",
                json!({"action": "multi_edit", "path": "keep.sh", "edits": [
                    {"old_string": "x", "new_string": "#!/bin/sh\necho y"},
                    {"old_string": "not there", "new_string": "z"}
                ]}),
            ),
            &cancel,
            &mut sink,
        )
        .await
        .unwrap();
    assert!(out.observation.contains("edit 2") && out.observation.contains("not changed"), "{}", out.observation);
    ex.execute(
        &action(
            "file",
            json!({"action": "edit", "path": "keep.sh", "old_string": "x", "new_string": "#!/bin/sh\necho y"}),
        ),
        &cancel,
        &mut sink,
    )
    .await
    .unwrap();
    let out = ex
        .execute(&action("bash", json!({"cmd": "./keep.sh && stat -c %a keep.sh"})), &cancel, &mut sink)
        .await
        .unwrap();
    assert!(out.observation.contains("y\n755"), "mode kept: {}", out.observation);
    let out = ex
        .execute(
            &action("search", json!({"action": "grep", "pattern": "print\\(\"A", "path": "."})),
            &cancel,
            &mut sink,
        )
        .await
        .unwrap();
    assert!(out.observation.contains("./src/main.py:1:"), "{}", out.observation);
    let out = ex
        .execute(&action("search", json!({"action": "glob", "pattern": "**/*.py"})), &cancel, &mut sink)
        .await
        .unwrap();
    assert!(out.observation.contains("src/main.py"), "{}", out.observation);
    let out = ex
        .execute(&action("search", json!({"action": "glob", "pattern": "$(touch /tmp/pwned)*"})), &cancel, &mut sink)
        .await
        .unwrap();
    assert!(out.observation.contains("no files match"), "{}", out.observation);
    let out = ex
        .execute(&action("bash", json!({"cmd": "test -e /tmp/pwned && echo PWNED || echo safe"})), &cancel, &mut sink)
        .await
        .unwrap();
    assert!(out.observation.contains("safe"));
    let out = ex
        .execute(&action("file", json!({"action": "metadata", "path": "keep.sh"})), &cancel, &mut sink)
        .await
        .unwrap();
    assert!(out.observation.contains("mode: 755"), "{}", out.observation);
    let out = ex
        .execute(&action("file", json!({"action": "read", "path": "missing.txt"})), &cancel, &mut sink)
        .await
        .unwrap();
    assert!(out.observation.contains("error: /work/missing.txt: no such file"), "{}", out.observation);
}
