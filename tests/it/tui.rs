//! The interactive UI end to end: the real binary in a tmux pane, driven with
//! `send-keys` and read with `capture-pane`.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::support;

/// A detached tmux session running bash, killed when dropped.
pub(crate) struct Tmux {
    name: String,
}

impl Tmux {
    pub(crate) fn start(dir: &Path, width: u16, height: u16) -> Tmux {
        let name = format!("agent-it-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
        let status = Command::new("tmux")
            .args(["new-session", "-d", "-s", &name, "-x", &width.to_string(), "-y", &height.to_string()])
            .args(["-c", dir.to_str().unwrap(), "env PS1='READY$ ' bash --norc --noprofile"])
            .status()
            .expect("tmux must be installed (scripts/setup.sh installs it)");
        assert!(status.success());
        Tmux { name }
    }

    pub(crate) fn keys(&self, keys: &[&str]) {
        let status = Command::new("tmux").args(["send-keys", "-t", &self.name]).args(keys).status().unwrap();
        assert!(status.success());
    }

    /// Types text literally (no key names).
    pub(crate) fn type_text(&self, text: &str) {
        let status = Command::new("tmux").args(["send-keys", "-t", &self.name, "-l", text]).status().unwrap();
        assert!(status.success());
    }

    pub(crate) fn screen(&self) -> String {
        let out = Command::new("tmux").args(["capture-pane", "-p", "-t", &self.name]).output().unwrap();
        String::from_utf8_lossy(&out.stdout).to_string()
    }

    pub(crate) fn alternate_on(&self) -> bool {
        let out = Command::new("tmux").args(["display", "-p", "-t", &self.name, "#{alternate_on}"]).output().unwrap();
        String::from_utf8_lossy(&out.stdout).trim() == "1"
    }

    /// Waits until the screen satisfies `pred`; panics with the screen after `timeout`.
    pub(crate) fn wait_for(&self, what: &str, timeout: Duration, pred: impl Fn(&str) -> bool) -> String {
        let start = Instant::now();
        loop {
            let s = self.screen();
            if pred(&s) {
                return s;
            }
            if start.elapsed() > timeout {
                panic!("timed out after {timeout:?} waiting for {what}; the screen:\n{s}");
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    pub(crate) fn wait_text(&self, text: &str, timeout: Duration) -> String {
        self.wait_for(&format!("`{text}`"), timeout, |s| s.contains(text))
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux").args(["kill-session", "-t", &self.name]).status();
    }
}

/// The 12-hex container id printed after `cid=` on the screen, if any.
pub(crate) fn container_id(screen: &str) -> Option<String> {
    screen.match_indices("cid=").find_map(|(i, _)| {
        let id: String = screen[i + 4..].chars().take(12).collect();
        (id.len() == 12 && id.chars().all(|c| c.is_ascii_hexdigit())).then_some(id)
    })
}

pub(crate) fn container_exists(id: &str) -> bool {
    let out = Command::new("docker").args(["ps", "-a", "-q", "--filter", &format!("id={id}")]).output().unwrap();
    !String::from_utf8_lossy(&out.stdout).trim().is_empty()
}

fn processes(id: &str) -> String {
    let out = Command::new("docker").args(["top", id]).output().unwrap();
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// The shell line that starts the UI in `dir/work` with its data under `dir/data`.
fn ui_command(dir: &tempfile::TempDir, model: &str, extra: &str) -> String {
    format!(
        "XDG_DATA_HOME={} {} {extra} --model {model} --approval ask; echo TUI-EXITED rc=$?",
        dir.path().join("data").display(),
        support::agent_bin().display()
    )
}

/// Waits for the UI, then reads the container id with a `!cmd` (the hostname).
fn wait_ui(tmux: &Tmux) -> String {
    tmux.wait_text("Ask anything", Duration::from_secs(600));
    assert!(tmux.alternate_on(), "the UI runs on the alternate screen");
    // `!cmd` runs in the sandbox directly; the hostname is the container id.
    tmux.type_text("!echo cid=$(hostname)");
    tmux.keys(&["Enter"]);
    let screen = tmux.wait_for("the container id", Duration::from_secs(60), |s| container_id(s).is_some());
    let cid = container_id(&screen).unwrap_or_default();
    assert!(container_exists(&cid), "{cid} should be running");
    cid
}

/// Starts the UI in a fresh workspace; returns the tmux pane and the container id.
fn open_ui(dir: &tempfile::TempDir, model: &str, extra: &str) -> (Tmux, String) {
    let work = dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::write(work.join("marker.txt"), "marker-from-the-host\n").unwrap();
    let tmux = Tmux::start(&work, 110, 40);
    tmux.keys(&[&ui_command(dir, model, extra), "Enter"]);
    let cid = wait_ui(&tmux);
    (tmux, cid)
}

/// Quits with Ctrl+C twice and checks the terminal and the container.
pub(crate) fn quit_and_check(tmux: &Tmux, cid: &str) {
    tmux.keys(&["C-c"]);
    tmux.wait_text("Ctrl+C again to quit", Duration::from_secs(10));
    tmux.keys(&["C-c"]);
    let screen = tmux.wait_text("TUI-EXITED rc=0", Duration::from_secs(60));
    assert!(!tmux.alternate_on(), "the alternate screen was left");
    assert!(screen.contains("READY$"), "the shell prompt is back:\n{screen}");
    // Raw mode is off again: the terminal echoes and works line by line.
    tmux.type_text("stty -a | grep -q -- ' -icanon' && echo STTY-RAW || echo STTY-COOKED");
    tmux.keys(&["Enter"]);
    tmux.wait_for("the stty verdict", Duration::from_secs(10), |s| s.lines().any(|l| l.trim() == "STTY-COOKED"));
    assert!(!container_exists(cid), "container {cid} is left behind");
}

#[test]
fn tui_runs_approves_interrupts_and_quits_cleanly() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(support::docker());
    let dir = tempfile::tempdir().unwrap();
    let script = support::script(
        &dir,
        "tui.yaml",
        r#"
- |
  I'll print it.
  <bash>
  cmd: echo "tui-e2e-$((6*7))" && cat marker.txt
  </bash>
- |
  <finish>
  message: Printed the marker.
  </finish>
- |
  This takes a while.
  <bash>
  cmd: sleep 300
  </bash>
- |
  <finish>
  message: this reply is never reached
  </finish>
"#,
    );
    let (tmux, cid) = open_ui(&dir, &format!("scripted:{}", script.display()), "");

    tmux.type_text("print the marker");
    tmux.keys(&["Enter"]);
    tmux.wait_text("allow bash?", Duration::from_secs(30));
    tmux.keys(&["y"]);
    let screen = tmux.wait_text("Printed the marker.", Duration::from_secs(30));
    assert!(screen.contains("tui-e2e-42"), "{screen}");
    assert!(screen.contains("marker-from-the-host"), "the workspace is mounted:\n{screen}");

    tmux.type_text("now wait");
    tmux.keys(&["Enter"]);
    tmux.wait_text("allow bash?", Duration::from_secs(30));
    tmux.keys(&["y"]);
    tmux.wait_text("running… (Esc to interrupt)", Duration::from_secs(30));
    let deadline = Instant::now() + Duration::from_secs(20);
    while !processes(&cid).contains("sleep 300") {
        assert!(Instant::now() < deadline, "sleep 300 never started: {}", processes(&cid));
        std::thread::sleep(Duration::from_millis(200));
    }
    let pressed = Instant::now();
    tmux.keys(&["Escape"]);
    let screen = tmux.wait_text("⎿ interrupted", Duration::from_secs(15));
    assert!(pressed.elapsed() < Duration::from_secs(10), "Esc took {:?}", pressed.elapsed());
    assert!(!screen.contains("never reached"), "{screen}");
    // The interrupt's kill runs inside the container: the transcript may say so a moment
    // before the process table does.
    let gone_by = Instant::now() + Duration::from_secs(10);
    while processes(&cid).contains("sleep 300") {
        assert!(Instant::now() < gone_by, "the command still runs: {}", processes(&cid));
        std::thread::sleep(Duration::from_millis(200));
    }

    quit_and_check(&tmux, &cid);
    // The session was saved for --resume / --continue.
    let sessions = dir.path().join("data/agent/sessions");
    let files: Vec<_> = std::fs::read_dir(&sessions).unwrap().collect();
    assert_eq!(files.len(), 1, "one session file in {}", sessions.display());
}

#[test]
fn tui_with_the_default_model_streams_a_reply_and_exits_cleanly() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(support::docker());
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("agent.toml");
    // One short reply keeps this to a few minutes on two CPU cores.
    std::fs::write(&cfg, "[episode]\nmax_reply_tokens = 32\n").unwrap();
    let (tmux, cid) = open_ui(&dir, "smollm2-135m", &format!("--config {}", cfg.display()));
    tmux.type_text("Say hello.");
    tmux.keys(&["Enter"]);
    // A reply has streamed once the context counter moved (the usage follows the message).
    tmux.wait_for("a streamed reply", Duration::from_secs(1500), |s| !s.contains("ctx 0/") && s.contains("\n● "));
    tmux.keys(&["Escape"]);
    quit_and_check(&tmux, &cid);
}

#[test]
fn tui_continue_restores_the_transcript_in_a_new_sandbox() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(support::docker());
    let dir = tempfile::tempdir().unwrap();
    let script = support::script(&dir, "one.yaml", "- |\n  <finish>\n  message: noted the kumquat\n  </finish>\n");
    let model = format!("scripted:{}", script.display());
    let (tmux, first) = open_ui(&dir, &model, "");
    tmux.type_text("remember the word kumquat");
    tmux.keys(&["Enter"]);
    tmux.wait_text("noted the kumquat", Duration::from_secs(30));
    quit_and_check(&tmux, &first);
    tmux.type_text("clear");
    tmux.keys(&["Enter"]);
    tmux.keys(&[&ui_command(&dir, &model, "--continue"), "Enter"]);
    let second = wait_ui(&tmux);
    assert_ne!(first, second, "a resumed session gets a new sandbox");
    let screen = tmux.screen();
    assert!(screen.contains("remember the word kumquat") && screen.contains("noted the kumquat"), "{screen}");
    assert!(screen.contains("resumed session"), "{screen}");
    quit_and_check(&tmux, &second);
}

/// The pid of the `agent` process running in the pane's shell.
fn agent_pid(tmux: &Tmux) -> String {
    let out = Command::new("tmux").args(["display", "-p", "-t", &tmux.name, "#{pane_pid}"]).output().unwrap();
    let shell = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let out = Command::new("pgrep").args(["-P", &shell, "-x", "agent"]).output().unwrap();
    String::from_utf8_lossy(&out.stdout).lines().next().unwrap_or_default().to_string()
}

/// After the UI ended some other way than a quit: the terminal and the container.
fn check_exit(tmux: &Tmux, cid: &str, rc: &str) -> String {
    let screen = tmux.wait_text(&format!("TUI-EXITED rc={rc}"), Duration::from_secs(60));
    assert!(!tmux.alternate_on(), "the alternate screen was left:\n{screen}");
    tmux.type_text("stty -a | grep -q -- ' -icanon' && echo STTY-RAW || echo STTY-COOKED");
    tmux.keys(&["Enter"]);
    tmux.wait_for("the stty verdict", Duration::from_secs(10), |s| s.lines().any(|l| l.trim() == "STTY-COOKED"));
    assert!(!container_exists(cid), "container {cid} is left behind");
    screen
}

#[test]
fn tui_cleans_up_after_sigterm_and_after_a_panic() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(support::docker());
    let dir = tempfile::tempdir().unwrap();
    let script = support::script(&dir, "none.yaml", "[]\n");
    let model = format!("scripted:{}", script.display());
    let (tmux, cid) = open_ui(&dir, &model, "");
    let pid = agent_pid(&tmux);
    assert!(!pid.is_empty(), "no agent process under the pane's shell");
    assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    // 128 + SIGTERM, as `agent run` exits after a signal.
    check_exit(&tmux, &cid, "143");

    tmux.type_text("clear");
    tmux.keys(&["Enter"]);
    tmux.keys(&[&format!("RUST_BACKTRACE=0 AGENT_TUI_TEST_PANIC=boom {}", ui_command(&dir, &model, "")), "Enter"]);
    let cid = wait_ui(&tmux);
    tmux.type_text("boom");
    tmux.keys(&["Enter"]);
    let screen = check_exit(&tmux, &cid, "2");
    assert!(
        screen.contains("panic requested through AGENT_TUI_TEST_PANIC"),
        "the panic message is readable:\n{screen}"
    );
}

/// The prompt tokens the status line shows (`ctx 1.2k/32.8k`).
fn ctx_used(screen: &str) -> f64 {
    let at = screen.rfind("ctx ").expect("a status line");
    let value: String = screen[at + 4..].chars().take_while(|c| *c != '/').collect();
    match value.strip_suffix('k') {
        Some(k) => k.parse::<f64>().unwrap() * 1000.0,
        None => value.parse::<f64>().unwrap(),
    }
}

/// What a user hits within minutes (issue 17): a plain answer ends the turn, `/compact`
/// of nothing says so, files the agent writes belong to the project's owner, a `!cmd`
/// streams and stops on Esc, and `/model` keeps the conversation.
#[test]
fn tui_answers_hands_files_back_streams_shell_commands_and_keeps_the_conversation() {
    use std::os::unix::fs::MetadataExt;
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(support::docker());
    let dir = tempfile::tempdir().unwrap();
    let first = support::script(
        &dir,
        "first.yaml",
        r#"
- "Hello! There is nothing to run for that."
- |
  <bash>
  cmd: echo made > made-by-agent.txt && mkdir -p sub && echo x > sub/inner.txt
  </bash>
- |
  <finish>
  message: files written
  </finish>
"#,
    );
    let second = support::script(&dir, "second.yaml", "- \"Still here, with the history.\"\n");
    // A project that belongs to a user who is not root.
    let work = dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    std::os::unix::fs::chown(&work, Some(4321), Some(4321)).unwrap();
    let (tmux, cid) = open_ui(&dir, &format!("scripted:{}", first.display()), "");

    tmux.type_text("/compact");
    tmux.keys(&["Enter"]);
    tmux.wait_text("nothing to compact yet", Duration::from_secs(20));

    // A long message, so that the history is visible in the prompt size later.
    tmux.type_text(&format!("hello {}", "kumquat ".repeat(100)));
    tmux.keys(&["Enter"]);
    tmux.wait_text("There is nothing to run for that.", Duration::from_secs(30));
    let screen = tmux.wait_for("the turn to end", Duration::from_secs(20), |s| !s.contains("Esc to interrupt"));
    assert!(!screen.contains("no valid action"), "a plain answer is not an error:\n{screen}");
    let before = ctx_used(&screen);

    tmux.type_text("write the files");
    tmux.keys(&["Enter"]);
    tmux.wait_text("allow bash?", Duration::from_secs(30));
    tmux.keys(&["y"]);
    tmux.wait_text("files written", Duration::from_secs(30));
    for f in ["made-by-agent.txt", "sub", "sub/inner.txt"] {
        let meta = std::fs::metadata(work.join(f)).unwrap();
        assert_eq!((meta.uid(), meta.gid()), (4321, 4321), "{f} belongs to the project's owner");
    }

    tmux.type_text("!for i in $(seq 1 30); do echo tick$i; sleep 1; done");
    tmux.keys(&["Enter"]);
    let screen = tmux.wait_text("tick2", Duration::from_secs(30));
    assert!(!screen.contains("tick30"), "the output arrives as it is written:\n{screen}");
    let pressed = Instant::now();
    tmux.keys(&["Escape"]);
    tmux.wait_for("the command to stop", Duration::from_secs(15), |s| !s.contains("running the command"));
    assert!(pressed.elapsed() < Duration::from_secs(10), "Esc took {:?}", pressed.elapsed());
    let left = processes(&cid);
    assert!(!left.lines().any(|l| l.trim_end().ends_with("sleep 1")), "the command still runs: {left}");

    tmux.type_text(&format!("/model scripted:{}", second.display()));
    tmux.keys(&["Enter"]);
    tmux.type_text("and now?");
    tmux.keys(&["Enter"]);
    let screen = tmux.wait_text("Still here, with the history.", Duration::from_secs(30));
    let after = ctx_used(&screen);
    assert!(after > before, "the new model got the conversation: {after} prompt tokens, {before} before");
    quit_and_check(&tmux, &cid);
}

/// Approves every call asked about until `text` shows.
fn approve_until(tmux: &Tmux, text: &str) -> String {
    let start = Instant::now();
    loop {
        let s = tmux.screen();
        if s.contains(text) {
            return s;
        }
        if s.contains("allow file?") || s.contains("allow bash?") {
            tmux.keys(&["y"]);
            std::thread::sleep(Duration::from_millis(500));
            continue;
        }
        assert!(start.elapsed() < Duration::from_secs(90), "timed out waiting for `{text}`:\n{s}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Two turns change files; `/rewind` takes code and conversation back to before the
/// second (files byte for byte, the transcript without the second turn), and undoes it.
#[test]
fn tui_rewinds_files_and_conversation_and_the_rewind_is_undone() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(support::docker());
    let dir = tempfile::tempdir().unwrap();
    let script = support::script(
        &dir,
        "rewind.yaml",
        r#"
- "<file>\naction: write\npath: /workspace/notes.txt\ncontent: \"one\\n\"\n</file>"
- Wrote the first version.
- "<file>\naction: write\npath: /workspace/notes.txt\ncontent: \"two\\n\"\n</file>"
- "<file>\naction: write\npath: /workspace/extra.txt\ncontent: created\n</file>"
- "<bash>\ncmd: rm /workspace/marker.txt && echo removed\n</bash>"
- Changed everything.
"#,
    );
    let (tmux, cid) = open_ui(&dir, &format!("scripted:{}", script.display()), "");
    let work = dir.path().join("work");
    let read = |name: &str| std::fs::read(work.join(name)).ok();
    tmux.type_text("first version");
    tmux.keys(&["Enter"]);
    approve_until(&tmux, "Wrote the first version.");
    assert_eq!(read("notes.txt").as_deref(), Some(&b"one\n"[..]));
    tmux.type_text("second version");
    tmux.keys(&["Enter"]);
    approve_until(&tmux, "Changed everything.");
    assert_eq!(read("notes.txt").as_deref(), Some(&b"two\n"[..]));
    assert!(read("extra.txt").is_some() && read("marker.txt").is_none());

    // The checkpoints, newest first. (`Esc Esc` opens the same list; it is not pressed
    // here because a terminal delivers two quick escapes as one when the UI reads them
    // together, which a loaded machine makes likely. The state machine's test covers it.)
    tmux.type_text("/rewind");
    tmux.keys(&["Enter"]);
    tmux.wait_text("before this message", Duration::from_secs(10));
    tmux.keys(&["Enter"]);
    tmux.wait_text("code and conversation", Duration::from_secs(10));
    tmux.keys(&["Enter"]);
    let screen = tmux.wait_text("rewound the files and the conversation", Duration::from_secs(30));
    assert_eq!(read("notes.txt").as_deref(), Some(&b"one\n"[..]), "{screen}");
    assert_eq!(read("marker.txt").as_deref(), Some(&b"marker-from-the-host\n"[..]));
    assert!(read("extra.txt").is_none(), "a file created since is left");
    assert!(screen.contains("Wrote the first version.") && !screen.contains("Changed everything."), "{screen}");
    assert!(!screen.contains("› second version"), "the second message is still shown:\n{screen}");

    // The rewind is itself a checkpoint: undo it.
    tmux.type_text("/rewind");
    tmux.keys(&["Enter"]);
    tmux.wait_text("undo the rewind", Duration::from_secs(10));
    tmux.keys(&["Enter"]);
    tmux.wait_text("code and conversation", Duration::from_secs(10));
    tmux.keys(&["Enter"]);
    let screen = tmux.wait_text("Changed everything.", Duration::from_secs(30));
    assert_eq!(read("notes.txt").as_deref(), Some(&b"two\n"[..]), "{screen}");
    assert!(read("extra.txt").is_some() && read("marker.txt").is_none());
    assert!(screen.contains("› second version"), "{screen}");
    quit_and_check(&tmux, &cid);
}
