//! Runs one hook command on the host: `sh -c COMMAND` in its own process group, the
//! event's JSON on stdin, stdout and stderr captured, everything it started killed at
//! the timeout.

use std::path::Path;
use std::process::Stdio;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

use super::settings::HookCommand;

/// Bytes of a hook's stdout or stderr kept; the rest is read and dropped.
const MAX_CAPTURE: usize = 64 * 1024;

/// How a hook command ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HookExit {
    /// It exited with this code.
    Code(i32),
    /// A signal ended it.
    Signalled,
    /// It ran past its timeout and was killed.
    TimedOut,
    /// It could not be started.
    NotStarted(String),
}

/// What one hook command did.
#[derive(Debug, Clone)]
pub struct HookRun {
    pub exit: HookExit,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `hook` with `input` on stdin, in `dir` with `env` added to its environment.
pub async fn run_hook(hook: &HookCommand, input: &[u8], dir: Option<&Path>, env: &[(&str, String)]) -> HookRun {
    let mut cmd = Command::new("sh");
    cmd.arg("-c").arg(&hook.command);
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    // Its own process group, so that the timeout kills what the hook started too.
    cmd.process_group(0);
    cmd.kill_on_drop(true);
    if let Some(dir) = dir {
        cmd.current_dir(dir);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            return HookRun { exit: HookExit::NotStarted(e.to_string()), stdout: String::new(), stderr: String::new() }
        }
    };
    let pgid = child.id();
    let mut stdin = child.stdin.take();
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let input = input.to_vec();
    // A hook that does not read its stdin must not block us: the write runs beside the
    // wait, and a closed pipe is fine.
    let feed = async move {
        if let Some(mut w) = stdin.take() {
            let _ = w.write_all(&input).await;
            let _ = w.shutdown().await;
        }
    };
    let work = async {
        let (_, out, err, status) = tokio::join!(feed, capture(stdout), capture(stderr), child.wait());
        (out, err, status)
    };
    match tokio::time::timeout(hook.timeout, work).await {
        Ok((stdout, stderr, status)) => {
            let exit = match status {
                Ok(s) => s.code().map(HookExit::Code).unwrap_or(HookExit::Signalled),
                Err(e) => HookExit::NotStarted(e.to_string()),
            };
            HookRun { exit, stdout, stderr }
        }
        Err(_) => {
            if let Some(pgid) = pgid {
                kill_group(pgid);
            }
            HookRun { exit: HookExit::TimedOut, stdout: String::new(), stderr: String::new() }
        }
    }
}

async fn capture(stream: Option<impl AsyncRead + Unpin>) -> String {
    let Some(mut stream) = stream else { return String::new() };
    let mut kept = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let room = MAX_CAPTURE.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
            }
        }
    }
    String::from_utf8_lossy(&kept).into_owned()
}

fn kill_group(pgid: u32) {
    let Ok(pgid) = libc::pid_t::try_from(pgid) else { return };
    // SAFETY: `killpg` only sends a signal; it takes no pointers. The group is the one
    // the hook's shell leads (`process_group(0)` in `run_hook`), and that shell has not
    // been reaped yet (its `Child` is owned by `run_hook`, which calls this before it
    // drops it), so the group id cannot have been reused by an unrelated process.
    unsafe {
        libc::killpg(pgid, libc::SIGKILL);
    }
}
