//! A persistent bash per container: `cd` and exported variables carry over between
//! calls, a timeout kills the command but keeps the shell, output is capped.
//!
//! Protocol: the command text travels as a quoted here-document into a variable and is
//! `eval`ed in the shell itself (so state persists) with stdin from `/dev/null` (so a
//! command that reads stdin cannot swallow the protocol). A marker line carrying a
//! per-command nonce, the exit status and `$PWD` ends each command's output.

use std::pin::Pin;
use std::time::{Duration, Instant};

use bollard::container::LogOutput;
use bollard::exec::{CreateExecOptions, StartExecResults};
use futures_util::{Stream, StreamExt};
use memchr::memmem;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

use super::container::Sandbox;
use super::error::{describe_bollard, SandboxError};
use super::output::OutputCollector;

/// Kills the descendants of the shell that started after a given moment: the running
/// command and everything it spawned, but not background jobs started by earlier
/// commands. Plain POSIX sh reading `/proc`, so it works in any image.
const KILL_TREE_SCRIPT: &str = r#"shell=$1; since=$2
read -r up _ < /proc/uptime
now=${up%.*}${up#*.}
thr=$((now - since))
tree=" $shell "
changed=1
while [ "$changed" = 1 ]; do
  changed=0
  for d in /proc/[0-9]*; do
    p=${d#/proc/}
    case "$tree" in *" $p "*) continue;; esac
    read -r line < "$d/stat" 2>/dev/null || continue
    rest=${line##*) }
    set -- $rest
    case "$tree" in *" $2 "*) tree="$tree$p "; changed=1;; esac
  done
done
for p in $tree; do
  [ "$p" = "$shell" ] && continue
  read -r line < "/proc/$p/stat" 2>/dev/null || continue
  rest=${line##*) }
  set -- $rest
  [ "${20}" -ge "$thr" ] && kill -9 "$p" 2>/dev/null
done
exit 0"#;

/// Where the shell keeps its exported variables for a restart.
const STATE_DIR: &str = "/tmp/.agent-shell";

/// Messages bash prints when the process limit is exhausted.
const FORK_FAILURES: [&[u8]; 2] =
    [b"fork: retry: Resource temporarily unavailable", b"fork: Resource temporarily unavailable"];

type OutputStream = Pin<Box<dyn Stream<Item = Result<LogOutput, bollard::errors::Error>> + Send>>;
type InputSink = Pin<Box<dyn AsyncWrite + Send>>;

/// The result of one command.
#[derive(Debug, Clone, PartialEq)]
pub struct CommandResult {
    /// Output (stdout and stderr interleaved), capped and cleaned.
    pub output: String,
    /// Exit status; `None` when the command was killed without reporting one.
    pub exit_code: Option<i64>,
    /// The per-call timeout fired.
    pub timed_out: bool,
    /// The caller cancelled the command.
    pub interrupted: bool,
    /// Wall time of the call.
    pub duration: Duration,
    /// Bytes the command printed in all.
    pub total_bytes: u64,
    /// Bytes cut from the middle of the output.
    pub cut_bytes: u64,
    /// What the sandbox had to do beyond running the command (e.g. a shell restart).
    pub notice: Option<String>,
}

/// How a command's read loop ended.
enum Ending {
    /// The command's end: its exit code, the processes the container held before and
    /// after it (from the pids cgroup; `None` where it cannot be read), its cwd.
    Marker {
        code: i64,
        procs: (Option<i64>, Option<i64>),
        cwd: String,
    },
    Eof,
    Deadline,
    Cancelled,
    ForkFailure,
}

/// Reads the container's process count into `__agent_np` with builtins only (cgroup v2,
/// then v1; empty where neither is readable).
const PROCS: &str = "__agent_np=; { read -r __agent_np < /sys/fs/cgroup/pids.current || \
                     read -r __agent_np < /sys/fs/cgroup/pids/pids.current; } 2>/dev/null\n";

/// A persistent shell in a sandbox.
pub struct Shell {
    sandbox: Sandbox,
    input: InputSink,
    output: OutputStream,
    pending: Vec<u8>,
    pid: String,
    cwd: String,
    max_output: usize,
}

impl Shell {
    /// Starts bash in the sandbox, in the image's working directory.
    pub async fn start(sandbox: &Sandbox, max_output: usize) -> Result<Shell, SandboxError> {
        Self::spawn(sandbox, max_output, None).await
    }

    async fn spawn(sandbox: &Sandbox, max_output: usize, restore_cwd: Option<&str>) -> Result<Shell, SandboxError> {
        let docker = sandbox.docker();
        let exec = docker
            .create_exec(
                sandbox.id(),
                CreateExecOptions {
                    cmd: Some(vec!["bash".to_string(), "--noprofile".into(), "--norc".into()]),
                    attach_stdin: Some(true),
                    attach_stdout: Some(true),
                    attach_stderr: Some(true),
                    env: Some(vec!["TERM=dumb".into(), "PAGER=cat".into(), "GIT_PAGER=cat".into()]),
                    ..Default::default()
                },
            )
            .await
            .map_err(|e| SandboxError::Shell(format!("cannot start bash in the sandbox: {}", describe_bollard(&e))))?;
        let started = docker
            .start_exec(&exec.id, None)
            .await
            .map_err(|e| SandboxError::Shell(format!("cannot start bash in the sandbox: {}", describe_bollard(&e))))?;
        let StartExecResults::Attached { output, input } = started else {
            return Err(SandboxError::Shell("the engine detached the shell".into()));
        };
        let mut shell = Shell {
            sandbox: sandbox.clone(),
            input,
            output,
            pending: Vec::new(),
            pid: String::new(),
            cwd: String::new(),
            max_output,
        };
        let nonce = new_nonce();
        let restore = match restore_cwd {
            Some(cwd) => format!("cd -- {} 2>/dev/null\n. {STATE_DIR}/env.sh >/dev/null 2>&1\n", shell_quote(cwd)),
            None => String::new(),
        };
        let boot = format!(
            "exec 2>&1\nmkdir -p {STATE_DIR} 2>/dev/null\n{restore}printf '\\n__AGENT_DONE_{nonce}:%s:::%s\\n' \"$$\" \"$PWD\"\n"
        );
        shell.write(boot.as_bytes()).await?;
        let mut sink = OutputCollector::new(4096);
        let ending = shell
            .read_until_marker(
                &nonce,
                &mut sink,
                Instant::now() + Duration::from_secs(30),
                &CancellationToken::new(),
                &mut |_| {},
            )
            .await?;
        match ending {
            Ending::Marker { code, cwd, .. } => {
                shell.pid = code.to_string();
                shell.cwd = cwd;
                Ok(shell)
            }
            _ => {
                let said = sink.render();
                let hint = if said.contains("not found") || said.contains("no such file") {
                    "the image has no bash".to_string()
                } else {
                    said.trim().chars().take(300).collect()
                };
                Err(SandboxError::Shell(format!("bash did not start in the sandbox: {hint}")))
            }
        }
    }

    /// The shell's working directory after the last command.
    pub fn cwd(&self) -> &str {
        &self.cwd
    }

    /// The sandbox this shell runs in.
    pub fn sandbox(&self) -> &Sandbox {
        &self.sandbox
    }

    /// Runs `cmd` in the shell. `on_output` receives raw output as it arrives.
    pub async fn run(
        &mut self,
        cmd: &str,
        timeout: Duration,
        cancel: &CancellationToken,
        on_output: &mut (dyn FnMut(&[u8]) + Send),
    ) -> Result<CommandResult, SandboxError> {
        let started = Instant::now();
        let nonce = new_nonce();
        // The process counts come from bash builtins (`read` from the pids cgroup): they
        // work when a fork bomb left no process to spare.
        let script = format!(
            "IFS= read -r -d '' __agent_cmd <<'__AGENT_EOF_{nonce}'\n{cmd}\n__AGENT_EOF_{nonce}\n\
             {PROCS}__agent_np0=$__agent_np\n\
             eval \"$__agent_cmd\" < /dev/null\n__agent_rc=$?\n\
             {PROCS}export -p > {STATE_DIR}/env.sh 2>/dev/null\n\
             printf '\\n__AGENT_DONE_{nonce}:%s:%s:%s:%s\\n' \"$__agent_rc\" \"$__agent_np0\" \"$__agent_np\" \"$PWD\"\n"
        );
        let mut collector = OutputCollector::new(self.max_output);
        let mut result = CommandResult {
            output: String::new(),
            exit_code: None,
            timed_out: false,
            interrupted: false,
            duration: Duration::ZERO,
            total_bytes: 0,
            cut_bytes: 0,
            notice: None,
        };
        if self.write(script.as_bytes()).await.is_err() {
            // The shell is gone (e.g. its stream broke): start a new one and retry once.
            self.restart("the shell had stopped; a new one was started").await?;
            self.write(script.as_bytes()).await?;
        }
        let deadline = started + timeout;
        let mut ending = self.read_until_marker(&nonce, &mut collector, deadline, cancel, on_output).await?;
        // Text about failed forks may just be output (a log being printed): reset only
        // when the process limit is really exhausted.
        while matches!(ending, Ending::ForkFailure) && !Self::process_limit_exhausted(&self.sandbox).await {
            ending = self.read_until_marker(&nonce, &mut collector, deadline, cancel, on_output).await?;
        }
        if matches!(ending, Ending::Deadline | Ending::Cancelled) {
            result.timed_out = matches!(ending, Ending::Deadline);
            result.interrupted = matches!(ending, Ending::Cancelled);
            let killed = Self::kill_running_command(&self.sandbox, &self.pid, started.elapsed()).await;
            ending = if killed {
                let grace = Instant::now() + Duration::from_secs(3);
                self.read_until_marker(&nonce, &mut collector, grace, &CancellationToken::new(), on_output).await?
            } else {
                Ending::Deadline
            };
            if matches!(ending, Ending::Deadline | Ending::Cancelled) {
                self.hard_reset().await?;
                result.notice = Some(format!(
                    "the command could not be stopped on its own, so every process in the sandbox was killed and the shell restarted in {} with its exported variables",
                    self.cwd
                ));
                ending = Ending::Marker { code: 137, procs: (None, None), cwd: self.cwd.clone() };
            }
        }
        match ending {
            Ending::Marker { code, procs, cwd } if Self::left_a_fork_bomb(&self.sandbox, procs).await => {
                // The command returned, but what it left behind fills the process table:
                // it is this call that failed, not the next one.
                self.cwd = cwd;
                self.hard_reset().await?;
                result.notice = Some(format!(
                    "this command exited with {code} but left processes that filled the sandbox's limit of {} (a fork bomb or runaway loop?); every process in it was killed and the shell restarted in {} with its exported variables",
                    self.sandbox.pids_limit(),
                    self.cwd
                ));
            }
            Ending::Marker { code, cwd, .. } => {
                result.exit_code = Some(code);
                self.cwd = cwd;
            }
            Ending::ForkFailure => {
                self.hard_reset().await?;
                result.notice = Some(format!(
                    "the sandbox reached its limit of {} processes (a fork bomb or runaway loop?); every process in it was killed and the shell restarted in {} with its exported variables",
                    self.sandbox.pids_limit(),
                    self.cwd
                ));
            }
            Ending::Eof => {
                self.restart("").await?;
                result.notice = Some(format!(
                    "the shell exited (e.g. `exit` or `set -e`); a new shell was started in {} with its exported variables",
                    self.cwd
                ));
            }
            Ending::Deadline | Ending::Cancelled => {}
        }
        result.total_bytes = collector.total_bytes();
        result.cut_bytes = collector.cut_bytes();
        result.output = collector.render();
        if result.interrupted || result.timed_out {
            result.output = strip_kill_reports(&result.output);
        }
        result.duration = started.elapsed();
        Ok(result)
    }

    async fn write(&mut self, bytes: &[u8]) -> Result<(), SandboxError> {
        self.input
            .write_all(bytes)
            .await
            .map_err(|e| SandboxError::Shell(format!("cannot write to the sandbox shell: {e}")))?;
        self.input.flush().await.map_err(|e| SandboxError::Shell(format!("cannot write to the sandbox shell: {e}")))
    }

    /// Reads output into `collector` until the marker with `nonce`, the deadline, a
    /// cancellation, the end of the stream, or bash reporting that it cannot fork.
    async fn read_until_marker(
        &mut self,
        nonce: &str,
        collector: &mut OutputCollector,
        deadline: Instant,
        cancel: &CancellationToken,
        on_output: &mut (dyn FnMut(&[u8]) + Send),
    ) -> Result<Ending, SandboxError> {
        let marker = format!("\n__AGENT_DONE_{nonce}:");
        let marker = marker.as_bytes();
        let finder = memmem::Finder::new(marker);
        loop {
            if let Some(at) = finder.find(&self.pending) {
                let after = at + marker.len();
                if let Some(nl) = self.pending[after..].iter().position(|&b| b == b'\n') {
                    let line = String::from_utf8_lossy(&self.pending[after..after + nl]).to_string();
                    let mut fields = line.splitn(4, ':');
                    let code = fields.next().unwrap_or_default().trim().parse().unwrap_or(-1);
                    let before = fields.next().and_then(|n| n.trim().parse().ok());
                    let after_count = fields.next().and_then(|n| n.trim().parse().ok());
                    let procs = (before, after_count);
                    let cwd = fields.next().unwrap_or_default().to_string();
                    let before: Vec<u8> = self.pending[..at].to_vec();
                    collector.push(&before);
                    on_output(&before);
                    self.pending.drain(..after + nl + 1);
                    return Ok(Ending::Marker { code, procs, cwd });
                }
            } else if self.pending.len() > marker.len() {
                // Everything but a possible marker prefix at the end is command output.
                let keep_from = self.pending.len() - marker.len();
                let chunk: Vec<u8> = self.pending.drain(..keep_from).collect();
                let fork_failed = FORK_FAILURES.iter().any(|m| memmem::find(&chunk, m).is_some());
                collector.push(&chunk);
                on_output(&chunk);
                if fork_failed {
                    return Ok(Ending::ForkFailure);
                }
            }
            let next = tokio::select! {
                biased;
                _ = cancel.cancelled() => return Ok(Ending::Cancelled),
                _ = tokio::time::sleep_until(deadline.into()) => return Ok(Ending::Deadline),
                next = self.output.next() => next,
            };
            match next {
                Some(Ok(msg)) => self.pending.extend_from_slice(&msg.into_bytes()),
                Some(Err(e)) => {
                    tracing::debug!("shell stream error: {e}");
                    self.flush_pending(collector, on_output);
                    return Ok(Ending::Eof);
                }
                None => {
                    self.flush_pending(collector, on_output);
                    return Ok(Ending::Eof);
                }
            }
        }
    }

    fn flush_pending(&mut self, collector: &mut OutputCollector, on_output: &mut (dyn FnMut(&[u8]) + Send)) {
        let rest = std::mem::take(&mut self.pending);
        collector.push(&rest);
        on_output(&rest);
    }

    /// Kills the running command's process tree; false when that was impossible (for
    /// example because the process limit is exhausted).
    async fn kill_running_command(sandbox: &Sandbox, pid: &str, elapsed: Duration) -> bool {
        // Centiseconds since the command started, with a second of slack.
        let since = (elapsed.as_millis() / 10 + 100).to_string();
        let argv = ["sh", "-c", KILL_TREE_SCRIPT, "sh", pid, since.as_str()];
        match sandbox.exec(&argv, None, Duration::from_secs(10), 4096).await {
            Ok(out) => out.exit_code == Some(0),
            Err(e) => {
                tracing::debug!("kill helper failed: {e}");
                false
            }
        }
    }

    /// True when the container runs (nearly) as many processes as it may.
    /// Whether the command that just ended left background processes that go on to
    /// exhaust the process limit. Only a command that left processes behind is looked
    /// at again (50 ms later), and only one whose leftovers keep multiplying is watched
    /// until the limit: an ordinary background job costs one look.
    async fn left_a_fork_bomb(sandbox: &Sandbox, procs: (Option<i64>, Option<i64>)) -> bool {
        let (Some(before), Some(after)) = procs else { return false };
        if after <= before {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        match sandbox.process_count().await {
            Some(now) if now as i64 > after + 4 => {}
            _ => return false,
        }
        for _ in 0..20 {
            if Self::process_limit_exhausted(sandbox).await {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        false
    }

    async fn process_limit_exhausted(sandbox: &Sandbox) -> bool {
        let limit = sandbox.pids_limit();
        match sandbox.process_count().await {
            Some(n) => n as i64 + 4 >= limit,
            None => true,
        }
    }

    /// Kills every process in the container and starts a new shell where the old one was.
    async fn hard_reset(&mut self) -> Result<(), SandboxError> {
        if let Err(e) = self.sandbox.kill_all_processes().await {
            // A stopped container has no process left to kill; `restart` starts it again.
            if !matches!(self.sandbox.revive().await, Ok(true)) {
                return Err(e);
            }
        }
        self.restart("").await
    }

    async fn restart(&mut self, _why: &str) -> Result<(), SandboxError> {
        let cwd = self.cwd.clone();
        let mut last = None;
        // Right after a mass kill the process limit may still be exhausted for a moment.
        for attempt in 0..8u64 {
            tokio::time::sleep(Duration::from_millis(100 * attempt)).await;
            match Shell::spawn(&self.sandbox, self.max_output, Some(&cwd)).await {
                Ok(new) => {
                    *self = new;
                    return Ok(());
                }
                Err(e) => {
                    last = Some(e);
                    if let Err(e) = self.sandbox.revive().await {
                        tracing::debug!("cannot check the sandbox container: {e}");
                    }
                }
            }
        }
        Err(last.unwrap_or_else(|| SandboxError::Shell("cannot restart the shell".into())))
    }
}

fn new_nonce() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// The output without bash's reports of the jobs we killed (`bash: line 7:    14
/// Killed   sleep 300`): the interrupt or timeout is said once, by the result.
fn strip_kill_reports(output: &str) -> String {
    let is_report = |line: &str| {
        let Some(rest) = line.strip_prefix("bash: line ") else { return false };
        let words: Vec<&str> = rest.split_whitespace().collect();
        words.len() >= 3
            && words[0].trim_end_matches(':').chars().all(|c| c.is_ascii_digit())
            && words[1].chars().all(|c| c.is_ascii_digit())
            && matches!(words[2], "Killed" | "Terminated")
    };
    let kept: Vec<&str> = output.split('\n').filter(|l| !is_report(l)).collect();
    kept.join("\n")
}

/// Single-quotes a string for POSIX shells.
pub fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kill_reports_are_dropped() {
        let out = "n1\nbash: line 7:    14 Killed                  sleep 30\nn2";
        assert_eq!(strip_kill_reports(out), "n1\nn2");
        assert_eq!(strip_kill_reports("bash: line 3: cd: x: No such file"), "bash: line 3: cd: x: No such file");
    }

    #[test]
    fn quotes_single_quotes() {
        assert_eq!(shell_quote("a'b"), "'a'\\''b'");
        assert_eq!(shell_quote("/tmp/x y"), "'/tmp/x y'");
    }
}
