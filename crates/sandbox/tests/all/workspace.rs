//! A host folder as the sandbox's workspace, against a real engine: its control files
//! cannot be written from the sandbox, `git commit` still works, setuid files lose their
//! bits, and the placeholders for missing control files leave nothing behind.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use agent_sandbox::{ContainerConfig, Sandbox, BASE_IMAGE};

use crate::support;

/// Every file below `dir` with its bytes (no link followed).
fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let t = e.file_type().unwrap();
            if t.is_dir() {
                stack.push(e.path());
            } else {
                let bytes = if t.is_file() { std::fs::read(e.path()).unwrap() } else { Vec::new() };
                out.push((e.path().strip_prefix(dir).unwrap().display().to_string(), bytes));
            }
        }
    }
    out.sort();
    out
}

/// Each attack prints `REFUSED name` or `WROTE name`.
const ATTACKS: &str = r##"
try() { n=$1; shift; if ( "$@" ) >/dev/null 2>&1; then echo "WROTE $n"; else echo "REFUSED $n"; fi; }
try hook sh -c 'printf "#!/bin/sh\ntouch /workspace/pwned\n" > .git/hooks/pre-commit'
try hooks-swap mv .git/hooks .git/hooks-old
try fsmonitor git config core.fsmonitor 'touch /workspace/pwned'
try config-append sh -c 'echo "[core] fsmonitor = touch pwned" >> .git/config'
try config-replace sh -c 'rm -f .git/config; echo x > .git/config'
try git-swap mv .git .git-old
try commondir sh -c 'mkdir -p evil && echo ../evil > .git/commondir'
try info sh -c 'echo "* filter=x" >> .git/info/attributes'
try agent-settings sh -c 'echo "{\"hooks\":{}}" > .agent/settings.json'
try agent-swap mv .agent .agent-old
try mcp sh -c 'echo "{\"mcpServers\":{}}" > .mcp.json'
try envrc sh -c 'echo "touch pwned" > .envrc'
try vscode sh -c 'mkdir -p .vscode && echo "{}" > .vscode/settings.json'
try idea sh -c 'mkdir -p .idea && echo x > .idea/workspace.xml'
try claude-hooks sh -c 'mkdir -p .claude && echo "{\"hooks\":{}}" > .claude/settings.json'
try codex-config sh -c 'mkdir -p .codex && echo "[mcp_servers.x]" > .codex/config.toml'
"##;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_files_are_read_only_in_the_sandbox_while_git_commit_works_and_setuid_bits_go() {
    let docker = support::docker().await;
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("work");
    std::fs::create_dir_all(ws.join(".agent")).unwrap();
    support::host_git(&ws, &["init", "-q"]);
    std::fs::write(ws.join(".agent/settings.json"), "{}\n").unwrap();
    std::fs::write(ws.join(".mcp.json"), "{\"mcpServers\":{}}\n").unwrap();
    std::fs::write(ws.join("a.txt"), "a\n").unwrap();
    support::host_git(&ws, &["add", "a.txt"]);
    support::host_git(&ws, &["-c", "user.email=h@h", "-c", "user.name=h", "commit", "-qm", "host-commit"]);
    let git_before = snapshot(&ws.join(".git"));
    let control = [".git/config", ".agent/settings.json", ".mcp.json"].map(|f| std::fs::read(ws.join(f)).unwrap());

    let mut cfg = ContainerConfig::new(BASE_IMAGE, format!("it-{}", uuid::Uuid::new_v4().simple()), "ws");
    cfg.binds = vec![format!("{}:/workspace", ws.display())];
    cfg.workdir = Some("/workspace".into());
    cfg.network = false;
    cfg.name_prefix = "agent-it".into();
    let sb = support::TestSandbox(Sandbox::start(&docker, &cfg).await.expect("start a sandbox"));
    assert!(sb.notices().is_empty(), "{:?}", sb.notices());
    let run = |cmd: String| {
        let sb = sb.0.clone();
        async move {
            let out = sb.exec(&["sh", "-c", &cmd], Some("/workspace"), Duration::from_secs(60), 1 << 20).await.unwrap();
            String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr)
        }
    };
    let results = run(ATTACKS.to_string()).await;
    let wrote: Vec<&str> = results.lines().filter(|l| !l.starts_with("REFUSED ")).collect();
    assert!(wrote.is_empty(), "writes that went through: {wrote:?}\n{results}");
    assert_eq!(results.lines().count(), 16, "{results}");

    // The honest case: a commit from the sandbox, seen by the host.
    let commit = "echo hi > f.txt && git add f.txt && git -c user.email=a@b -c user.name=a commit -qm sandbox-commit \
                  && echo COMMITTED";
    let out = run(commit.to_string()).await;
    assert!(out.contains("COMMITTED"), "{out}");
    assert_eq!(support::host_git(&ws, &["log", "--format=%s"]), "sandbox-commit\nhost-commit\n");

    // A setuid and a setgid file made in the sandbox lose their bits when it settles.
    run("cp /bin/sh suid && chmod 4755 suid && cp /bin/sh sgid && chmod 2755 sgid".into()).await;
    assert_ne!(std::fs::metadata(ws.join("suid")).unwrap().permissions().mode() & 0o6000, 0, "made setuid");
    sb.restore_ownership().await;
    for f in ["suid", "sgid"] {
        let mode = std::fs::metadata(ws.join(f)).unwrap().permissions().mode();
        assert_eq!(mode & 0o6000, 0, "{f} is {mode:o}");
        assert_eq!(mode & 0o111, 0o111, "{f} is still executable: {mode:o}");
    }
    // One made after the last settling goes too, when the sandbox is removed.
    run("cp /bin/sh late && chmod 4755 late".into()).await;
    sb.remove().await;
    assert_eq!(std::fs::metadata(ws.join("late")).unwrap().permissions().mode() & 0o6000, 0);

    // Nothing of the control files changed, and no placeholder is left.
    for (f, bytes) in [".git/config", ".agent/settings.json", ".mcp.json"].iter().zip(control) {
        assert_eq!(std::fs::read(ws.join(f)).unwrap(), bytes, "{f} changed");
    }
    let git_after = snapshot(&ws.join(".git"));
    for (path, bytes) in git_before.iter().filter(|(p, _)| p.starts_with("hooks/") || p.starts_with("info/")) {
        assert!(git_after.contains(&(path.clone(), bytes.clone())), ".git/{path} changed");
    }
    let hooks_after: Vec<_> = git_after.iter().filter(|(p, _)| p.starts_with("hooks/")).collect();
    let hooks_before: Vec<_> = git_before.iter().filter(|(p, _)| p.starts_with("hooks/")).collect();
    assert_eq!(hooks_after, hooks_before, "no hook was added");
    for absent in
        [".envrc", ".vscode", ".idea", ".claude", ".codex", ".git/commondir", ".git/hooks-old", ".git-old", "pwned"]
    {
        assert!(std::fs::symlink_metadata(ws.join(absent)).is_err(), "{absent} exists on the host");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_folder_without_git_cannot_become_a_repository_from_the_sandbox() {
    let docker = support::docker().await;
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = ContainerConfig::new(BASE_IMAGE, format!("it-{}", uuid::Uuid::new_v4().simple()), "ws");
    cfg.binds = vec![format!("{}:/workspace", dir.path().display())];
    cfg.network = false;
    cfg.name_prefix = "agent-it".into();
    let sb = support::TestSandbox(Sandbox::start(&docker, &cfg).await.expect("start a sandbox"));
    let script = "cd /workspace && git init -q 2>&1; git config core.fsmonitor x 2>&1; \
                  mkdir -p sub && cd sub && git init -q && echo NESTED-OK";
    let out = sb.exec(&["sh", "-c", script], None, Duration::from_secs(60), 1 << 20).await.unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("NESTED-OK"), "a nested repository can be made: {out:?}");
    sb.remove().await;
    assert!(std::fs::symlink_metadata(dir.path().join(".git")).is_err(), "the workspace became a repository");
    assert!(dir.path().join("sub/.git/config").is_file());
    let listing = agent_sandbox::nested_repositories(dir.path());
    assert_eq!(listing.repos.into_iter().collect::<Vec<_>>(), vec![std::path::PathBuf::from("sub")]);
}
