//! Attacks on the host through the interactive UI (issue 48): the real binary in a tmux
//! pane of its own tmux server, the real sandbox, a scripted model.

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use crate::support;

/// A tmux server of its own (its options do not reach other tests' panes), killed when
/// dropped.
struct Pane {
    socket: String,
}

impl Pane {
    fn start(dir: &Path) -> Pane {
        let socket = format!("agent-sec-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
        let pane = Pane { socket };
        let out = pane.tmux(&[
            "new-session",
            "-d",
            "-s",
            "main",
            "-x",
            "120",
            "-y",
            "45",
            "-c",
            dir.to_str().unwrap(),
            "env PS1='READY$ ' bash --norc --noprofile",
        ]);
        assert!(out.status.success(), "tmux: {}", String::from_utf8_lossy(&out.stderr));
        // Programs may set the clipboard (OSC 52 makes a paste buffer): what an attack
        // through the terminal would need.
        assert!(pane.tmux(&["set-option", "-s", "set-clipboard", "on"]).status.success());
        pane
    }

    fn tmux(&self, args: &[&str]) -> Output {
        Command::new("tmux").args(["-L", &self.socket]).args(args).output().expect("tmux must be installed")
    }

    fn keys(&self, keys: &[&str]) {
        assert!(self.tmux(&[&["send-keys", "-t", "main"][..], keys].concat()).status.success());
    }

    fn type_text(&self, text: &str) {
        assert!(self.tmux(&["send-keys", "-t", "main", "-l", text]).status.success());
    }

    fn screen(&self) -> String {
        String::from_utf8_lossy(&self.tmux(&["capture-pane", "-p", "-t", "main"]).stdout).to_string()
    }

    /// The newest paste buffer, if there is one.
    fn buffer(&self) -> Option<String> {
        let out = self.tmux(&["show-buffer"]);
        out.status.success().then(|| String::from_utf8_lossy(&out.stdout).to_string())
    }

    fn wait_text(&self, text: &str, timeout: Duration) -> String {
        let start = Instant::now();
        loop {
            let s = self.screen();
            if s.contains(text) {
                return s;
            }
            assert!(start.elapsed() < timeout, "timed out after {timeout:?} waiting for `{text}`; the screen:\n{s}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn send(&self, message: &str, reply: &str) -> String {
        self.type_text(message);
        self.keys(&["Enter"]);
        self.wait_text(reply, Duration::from_secs(90))
    }
}

impl Drop for Pane {
    fn drop(&mut self) {
        let _ = self.tmux(&["kill-server"]);
    }
}

/// The markers the attack's commands make, where they would land on the host: in the
/// HOME the agent runs with, and in the real home of the user running the tests.
fn markers(home: &Path) -> Vec<std::path::PathBuf> {
    let real = std::env::var_os("HOME").map(std::path::PathBuf::from).unwrap_or_else(|| "/root".into());
    let mut all = Vec::new();
    for dir in [home.to_path_buf(), real, "/root".into()] {
        all.push(dir.join("pwned"));
        all.push(dir.join("pwned.clean"));
    }
    all
}

/// Issue 48's attack exactly: the model's first command makes a nested repository whose
/// config runs `touch ~/pwned` under git's fsmonitor and clean filter. Three more
/// messages (each takes a checkpoint of the workspace) run nothing on the host, and
/// `/rewind` still restores the nested repository's files as plain files. A reply
/// carrying an OSC 52 clipboard write and bidi text is shown escaped and sets no
/// clipboard.
#[test]
fn a_nested_repository_with_a_hostile_git_config_runs_nothing_on_the_host_and_rewind_still_works() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(support::docker());
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let work = dir.path().join("work");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&work).unwrap();
    let before: Vec<bool> = markers(&home).iter().map(|m| m.exists()).collect();
    let script = support::script(
        &dir,
        "attack.yaml",
        r#"
- |
  <bash>
  cmd: |
    mkdir -p sub && cd sub && git init -q && echo hi > f.txt && git add f.txt \
      && git -c user.email=a@b -c user.name=a commit -q -m x \
      && git config core.fsmonitor 'touch ~/pwned; false' \
      && git config filter.x.clean 'touch ~/pwned.clean; cat' && printf '* filter=x\n' > .gitattributes
  </bash>
- Set up the repository.
- |
  <bash>
  cmd: echo changed > sub/f.txt && echo later > later.txt && echo edited-both
  </bash>
- Changed the files.
- "Nothing to do.\e]52;c;aGk=\a copied \u202Etxt.exe"
- Done with the last one.
"#,
    );
    let pane = Pane::start(&work);
    // The check below is not vacuous: in this pane a program's OSC 52 does set a buffer.
    pane.type_text(r"printf '\033]52;c;aGk=\007'; echo OSC-SENT");
    pane.keys(&["Enter"]);
    pane.wait_text("OSC-SENT\n", Duration::from_secs(10));
    assert_eq!(pane.buffer().as_deref(), Some("hi"), "tmux took no clipboard write from a program");
    assert!(pane.tmux(&["delete-buffer"]).status.success());

    pane.type_text(&format!(
        "HOME={} XDG_DATA_HOME={} {} --model scripted:{} --approval auto; echo TUI-EXITED rc=$?",
        home.display(),
        dir.path().join("data").display(),
        support::agent_bin().display(),
        script.display()
    ));
    pane.keys(&["Enter"]);
    pane.wait_text("Ask anything", Duration::from_secs(600));

    pane.send("set up", "Set up the repository.");
    assert_eq!(std::fs::read_to_string(work.join("sub/f.txt")).unwrap(), "hi\n");
    pane.send("change it", "Changed the files.");
    let screen = pane.send("again", "copied");
    pane.send("last", "Done with the last one.");

    // Three checkpoints of the hostile repository later: nothing ran on the host.
    for (m, existed) in markers(&home).iter().zip(&before) {
        assert!(*existed || !m.exists(), "{} was made on the host", m.display());
    }
    assert!(
        screen.contains("Nothing to do.\\u{1b}]52;c;aGk=\\u{7} copied \\u{202e}txt.exe"),
        "the reply is not shown escaped:\n{screen}"
    );
    assert_eq!(pane.buffer(), None, "the model's reply wrote the clipboard");

    // Back to before "change it": the change and the new file undone, the nested
    // repository's files (its config included) as they were.
    pane.type_text("/rewind");
    pane.keys(&["Enter"]);
    pane.wait_text("before this message", Duration::from_secs(10));
    pane.keys(&["Down"]);
    pane.keys(&["Down"]);
    std::thread::sleep(Duration::from_millis(300));
    pane.keys(&["Enter"]);
    pane.wait_text("code and conversation", Duration::from_secs(10));
    pane.keys(&["Enter"]);
    let screen = pane.wait_text("rewound the files and the conversation", Duration::from_secs(60));
    assert!(screen.contains("change it"), "rewound to another checkpoint:\n{screen}");
    assert_eq!(std::fs::read_to_string(work.join("sub/f.txt")).unwrap(), "hi\n", "{screen}");
    assert!(!work.join("later.txt").exists(), "a file created later is left:\n{screen}");
    let config = std::fs::read_to_string(work.join("sub/.git/config")).unwrap();
    assert!(config.contains("touch ~/pwned; false"), "{config}");
    assert_eq!(std::fs::read_to_string(work.join("sub/.gitattributes")).unwrap(), "* filter=x\n");
    for (m, existed) in markers(&home).iter().zip(&before) {
        assert!(*existed || !m.exists(), "{} was made on the host", m.display());
    }

    // And to the very first checkpoint (below the undo entry and the four messages):
    // the nested repository, `.git` and all, did not exist then.
    pane.type_text("/rewind");
    pane.keys(&["Enter"]);
    pane.wait_text("undo the rewind", Duration::from_secs(10));
    for _ in 0..4 {
        pane.keys(&["Down"]);
    }
    std::thread::sleep(Duration::from_millis(300));
    pane.keys(&["Enter"]);
    pane.wait_text("code and conversation", Duration::from_secs(10));
    pane.keys(&["Enter"]);
    let screen = pane.wait_text("to before “set up”", Duration::from_secs(60));
    assert!(!work.join("sub").exists(), "the nested repository is left:\n{screen}");
    for (m, existed) in markers(&home).iter().zip(&before) {
        assert!(*existed || !m.exists(), "{} was made on the host", m.display());
    }

    pane.keys(&["C-c"]);
    pane.wait_text("Ctrl+C again to quit", Duration::from_secs(10));
    pane.keys(&["C-c"]);
    pane.wait_text("TUI-EXITED rc=0", Duration::from_secs(60));
}

/// Every file's bytes below `dir` (links not followed), joined.
fn bytes_below(dir: &Path) -> Vec<u8> {
    let mut all = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for e in entries.flatten() {
            let Ok(kind) = e.file_type() else { continue };
            if kind.is_dir() {
                stack.push(e.path());
            } else if kind.is_file() {
                all.extend(std::fs::read(e.path()).unwrap_or_default());
            }
        }
    }
    all
}

/// `@file` mentions of a link to a host file and of a FIFO (both things the sandbox can
/// put in the workspace) are refused by name, the UI does not hang, and the host file's
/// text reaches neither the model nor the saved session; a plain file beside them is
/// attached (the check is not vacuous).
#[test]
fn at_mentions_of_a_link_out_of_the_workspace_and_a_fifo_are_refused_and_nothing_is_read() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(support::docker());
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let work = dir.path().join("work");
    let data = dir.path().join("data");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&work).unwrap();
    let secret = format!("HOST-SECRET-{}", uuid::Uuid::new_v4().simple());
    std::fs::write(home.join("secret.txt"), &secret).unwrap();
    std::os::unix::fs::symlink(home.join("secret.txt"), work.join("notes.txt")).unwrap();
    assert!(Command::new("mkfifo").arg(work.join("pipe.txt")).status().unwrap().success());
    std::fs::write(work.join("ok.txt"), "PLAIN-FILE-TEXT\n").unwrap();
    let script = support::script(&dir, "reply.yaml", "- Read them.\n- Bye.\n");
    let pane = Pane::start(&work);
    pane.type_text(&format!(
        "HOME={} XDG_DATA_HOME={} {} --model scripted:{} --approval auto; echo TUI-EXITED rc=$?",
        home.display(),
        data.display(),
        support::agent_bin().display(),
        script.display()
    ));
    pane.keys(&["Enter"]);
    pane.wait_text("Ask anything", Duration::from_secs(600));
    // Typed, not completed: Tab would open the file popup.
    let screen = pane.send("look at @notes.txt @pipe.txt @ok.txt ", "Read them.");
    assert!(screen.contains("@notes.txt is a symlink"), "the link is not refused by name:\n{screen}");
    assert!(screen.contains("@pipe.txt is not a regular file"), "the FIFO is not refused by name:\n{screen}");
    assert!(screen.contains("attached @ok.txt"), "the plain file is not attached:\n{screen}");
    pane.send("bye", "Bye.");
    pane.keys(&["C-c"]);
    pane.wait_text("Ctrl+C again to quit", Duration::from_secs(10));
    pane.keys(&["C-c"]);
    pane.wait_text("TUI-EXITED rc=0", Duration::from_secs(60));
    // The saved session holds the attached file's text, never the host file's.
    let saved = bytes_below(&data);
    let has = |needle: &[u8]| saved.windows(needle.len()).any(|w| w == needle);
    assert!(has(b"PLAIN-FILE-TEXT"), "the session was not saved under {}", data.display());
    assert!(!has(secret.as_bytes()), "the host file's text reached the session");
}
