//! What the sandbox can do to the user's folder (issue 48, items 2, 5 and 6), through the
//! real binary and a real engine: control files cannot be written from the sandbox while
//! `git commit` works, setuid files lose their bits, repositories the session created are
//! named when it ends, and folders holding the user's home or the agent's own config are
//! refused before anything starts.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::support;
use crate::tui::{container_exists, container_id, quit_and_check, Tmux};

/// The attacks, run by the model's tool call in /workspace: each line of
/// `attack-results.txt` is `REFUSED name` or `WROTE name`; then the honest commit, a
/// setuid file, a nested repository, and a background job that makes a setuid file
/// once the host writes `go` (after the tool call's settling).
const ATTACK_SCRIPT: &str = r##"
try() { n=$1; shift; if ( "$@" ) >/dev/null 2>&1; then echo "WROTE $n"; else echo "REFUSED $n"; fi; }
{
try git-hook sh -c 'printf "#!/bin/sh\ntouch /workspace/pwned\n" > .git/hooks/pre-commit'
try git-config-fsmonitor git config core.fsmonitor 'touch /workspace/pwned'
try git-config-replace sh -c 'cp .git/config /tmp/c; echo "[core] fsmonitor = touch pwned" >> /tmp/c; mv /tmp/c .git/config'
try git-dir-swap mv .git .git-old
try git-commondir sh -c 'mkdir -p evil && echo ../evil > .git/commondir'
try git-info sh -c 'echo "* filter=x" >> .git/info/attributes'
try agent-settings sh -c 'echo "{\"hooks\":{}}" > .agent/settings.json'
try mcp-json sh -c 'echo "{\"mcpServers\":{\"x\":{\"command\":\"touch\"}}}" > .mcp.json'
try envrc sh -c 'echo "touch pwned" > .envrc'
try vscode sh -c 'mkdir -p .vscode && echo "{}" > .vscode/settings.json'
try idea sh -c 'mkdir -p .idea && echo x > .idea/workspace.xml'
} > attack-results.txt
echo hi > f.txt && git add f.txt && git -c user.email=a@b -c user.name=a commit -qm sandbox-commit && echo COMMIT-OK
cp /bin/sh suid && chmod 4755 suid && cp /bin/sh sgid && chmod 2755 sgid && echo SUID-MADE
(mkdir -p sub && cd sub && git init -q && git config core.fsmonitor 'touch /workspace/pwned' && echo NESTED-OK)
nohup sh -c 'while [ ! -e go ]; do sleep 0.2; done; cp /bin/sh late-suid; chmod 4755 late-suid' >/dev/null 2>&1 &
"##;

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())).permissions().mode()
}

/// Items 2 and 6 of issue 48 in one UI session with `--approval auto`.
#[test]
fn control_files_stay_read_only_commits_work_setuid_bits_go_and_new_repositories_are_named() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(support::docker());
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir_all(work.join(".agent")).unwrap();
    support::host_git(&work, &["init", "-q"]);
    std::fs::write(work.join(".agent/settings.json"), "{}\n").unwrap();
    std::fs::write(work.join(".mcp.json"), "{\"mcpServers\":{}}\n").unwrap();
    std::fs::write(work.join("attack.sh"), ATTACK_SCRIPT).unwrap();
    support::host_git(&work, &["add", "attack.sh"]);
    support::host_git(&work, &["-c", "user.email=h@h", "-c", "user.name=h", "commit", "-qm", "host-commit"]);
    let guarded = [".git/config", ".git/info/exclude", ".agent/settings.json", ".mcp.json"];
    let before: Vec<Vec<u8>> = guarded.iter().map(|f| std::fs::read(work.join(f)).unwrap()).collect();
    let hooks_before = std::fs::read_dir(work.join(".git/hooks")).unwrap().count();
    let script = support::script(
        &dir,
        "attack.yaml",
        "- |\n  <bash>\n  cmd: sh attack.sh\n  </bash>\n- |\n  <finish>\n  message: attacks done\n  </finish>\n",
    );

    let tmux = Tmux::start(&work, 120, 40);
    let line = format!(
        "XDG_DATA_HOME={d}/data XDG_CONFIG_HOME={d}/config {bin} --trust-project --model scripted:{s} --approval auto; \
         echo TUI-EXITED rc=$?",
        d = dir.path().display(),
        bin = support::agent_bin().display(),
        s = script.display()
    );
    tmux.keys(&[&line, "Enter"]);
    tmux.wait_text("Ask anything", Duration::from_secs(600));
    tmux.type_text("!echo cid=$(hostname)");
    tmux.keys(&["Enter"]);
    let screen = tmux.wait_for("the container id", Duration::from_secs(60), |s| container_id(s).is_some());
    let cid = container_id(&screen).unwrap();
    assert!(container_exists(&cid));

    tmux.type_text("attack the host");
    tmux.keys(&["Enter"]);
    let screen = tmux.wait_text("attacks done", Duration::from_secs(60));
    assert!(screen.contains("COMMIT-OK") && screen.contains("SUID-MADE"), "{screen}");
    assert!(screen.contains("NESTED-OK"), "{screen}");

    // (a) Every write to a control file failed, and the host's bytes are unchanged.
    let results = std::fs::read_to_string(work.join("attack-results.txt")).unwrap();
    assert_eq!(results.lines().count(), 11, "{results}");
    let wrote: Vec<&str> = results.lines().filter(|l| !l.starts_with("REFUSED ")).collect();
    assert!(wrote.is_empty(), "writes that went through: {wrote:?}");
    // (d) The tool call's setuid and setgid files lost their bits (and still run).
    for f in ["suid", "sgid"] {
        let m = mode(&work.join(f));
        assert_eq!((m & 0o6000, m & 0o111), (0, 0o111), "{f} is {m:o}");
    }
    // A setuid file made after the last tool call is there with its bit ...
    std::fs::write(work.join("go"), "").unwrap();
    let late = work.join("late-suid");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !late.exists() || mode(&late) & 0o4000 == 0 {
        assert!(Instant::now() < deadline, "the background job made no setuid file");
        std::thread::sleep(Duration::from_millis(200));
    }

    quit_and_check(&tmux, &cid);
    let screen = tmux.screen();
    // ... and loses it when the sandbox is removed.
    assert_eq!(mode(&late) & 0o6000, 0, "late-suid is {:o}", mode(&late));
    // (e) The nested repository the session made is named.
    assert!(screen.contains("the session created nested repositories: sub/ (their .git/config and hooks"), "{screen}");
    for (f, bytes) in guarded.iter().zip(&before) {
        assert_eq!(&std::fs::read(work.join(f)).unwrap(), bytes, "{f} changed");
    }
    assert!(!work.join(".git/hooks/pre-commit").exists());
    assert_eq!(std::fs::read_dir(work.join(".git/hooks")).unwrap().count(), hooks_before);
    // Missing control files stay missing: no placeholder is left behind either.
    for absent in [".envrc", ".vscode", ".idea", ".git/commondir", ".git-old", "pwned"] {
        assert!(std::fs::symlink_metadata(work.join(absent)).is_err(), "{absent} exists on the host");
    }
    // (b) The honest case: the sandbox's commit is the host's history.
    assert_eq!(support::host_git(&work, &["log", "--format=%s"]), "sandbox-commit\nhost-commit\n");
    assert!(support::host_git(&work, &["config", "--list", "--local"]).lines().all(|l| !l.contains("fsmonitor")));
}

/// Runs the UI in `cwd` with `home` as the home folder; returns its exit status, its
/// stderr and the containers it left.
fn ui_in(cwd: &Path, home: &Path, config: &Path) -> (std::process::ExitStatus, String, Vec<String>) {
    let child = Command::new(support::agent_bin())
        .current_dir(cwd)
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", config)
        .env("XDG_DATA_HOME", home.join(".local/share"))
        .args(["--model", "scripted:/nonexistent.yaml"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    (out.status, String::from_utf8_lossy(&out.stderr).to_string(), support::containers_of_pid(pid))
}

/// Item 5 of issue 48: the home folder, `/` and a folder holding the agent's config are
/// refused with the reason and a way out, before any model or container.
#[test]
fn the_home_folder_the_root_and_a_folder_holding_the_agents_config_are_refused_as_workspaces() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir_all(home.join("proj")).unwrap();
    let outer = dir.path().join("outer");
    let config = outer.join("cfg");
    std::fs::create_dir_all(config.join("agent")).unwrap();
    for (cwd, config, why) in [
        (home.clone(), home.join(".config"), "it is your home folder"),
        (Path::new("/").to_path_buf(), home.join(".config"), "it is the root of the file system"),
        (outer.clone(), config.clone(), "it holds the agent's config folder"),
    ] {
        let (status, stderr, left) = ui_in(&cwd, &home, &config);
        assert!(!status.success(), "{} was opened: {stderr}", cwd.display());
        assert!(stderr.contains("refusing to open") && stderr.contains(why), "{stderr}");
        assert!(stderr.contains("could rewrite your own config, hooks and trust decisions"), "{stderr}");
        assert!(stderr.contains("mkdir ~/work && cd ~/work"), "{stderr}");
        // Nothing started: no model loaded, no sandbox.
        assert!(!stderr.contains("loading the model") && !stderr.contains("starting the sandbox"), "{stderr}");
        assert!(left.is_empty(), "containers of the refused run: {left:?}");
    }
    // A project folder in the home folder gets past the check (to the terminal check).
    let (_, stderr, _) = ui_in(&home.join("proj"), &home, &home.join(".config"));
    assert!(!stderr.contains("refusing to open") && stderr.contains("needs a terminal"), "{stderr}");
}
