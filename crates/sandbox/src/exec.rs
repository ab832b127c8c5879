//! One-shot commands in a container (argv, never a shell string: no quoting issues).

use std::time::Duration;

use super::docker::Engine;
use bollard::exec::{CreateExecOptions, StartExecResults};
use futures_util::StreamExt;

use super::error::SandboxError;

/// Output of a one-shot command.
#[derive(Debug, Clone, Default)]
pub struct ExecOutput {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// `None` when the command was cut off by the timeout.
    pub exit_code: Option<i64>,
}

/// Runs `argv` in the container and collects its output (each stream capped at
/// `max_bytes`), waiting at most `timeout`.
pub async fn exec_capture(
    docker: &Engine,
    container: &str,
    argv: &[&str],
    workdir: Option<&str>,
    timeout: Duration,
    max_bytes: usize,
) -> Result<ExecOutput, SandboxError> {
    let docker = docker.api();
    let what = argv.first().copied().unwrap_or("command");
    let exec = docker
        .create_exec(
            container,
            CreateExecOptions {
                cmd: Some(argv.iter().map(|s| s.to_string()).collect()),
                attach_stdout: Some(true),
                attach_stderr: Some(true),
                working_dir: workdir.map(str::to_string),
                ..Default::default()
            },
        )
        .await
        .map_err(|e| SandboxError::docker(format!("run `{what}` in the sandbox"), e))?;
    let started = docker
        .start_exec(&exec.id, None)
        .await
        .map_err(|e| SandboxError::docker(format!("run `{what}` in the sandbox"), e))?;
    let StartExecResults::Attached { mut output, .. } = started else {
        return Err(SandboxError::Shell("the engine detached a command that should be attached".into()));
    };
    let mut out = ExecOutput::default();
    let collect = async {
        while let Some(item) = output.next().await {
            match item {
                Ok(bollard::container::LogOutput::StdErr { message }) => {
                    let room = max_bytes.saturating_sub(out.stderr.len());
                    out.stderr.extend_from_slice(&message[..message.len().min(room)]);
                }
                Ok(msg) => {
                    let bytes = msg.into_bytes();
                    let room = max_bytes.saturating_sub(out.stdout.len());
                    out.stdout.extend_from_slice(&bytes[..bytes.len().min(room)]);
                }
                Err(e) => return Err(SandboxError::docker(format!("read the output of `{what}`"), e)),
            }
        }
        Ok(())
    };
    match tokio::time::timeout(timeout, collect).await {
        Ok(res) => res?,
        Err(_) => return Ok(out),
    }
    let inspect = docker
        .inspect_exec(&exec.id)
        .await
        .map_err(|e| SandboxError::docker(format!("read the exit status of `{what}`"), e))?;
    out.exit_code = inspect.exit_code;
    Ok(out)
}

/// How a streamed command ended.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StreamedExit {
    /// `None` when the command was stopped (timeout or cancel) or the engine gave none.
    pub exit_code: Option<i64>,
    pub timed_out: bool,
    pub interrupted: bool,
}

/// Runs the shell command `cmd` with `bash -c` in the container, handing its output
/// (stdout and stderr interleaved as they come) to `on_output`. Cancelling `cancel` or
/// reaching `timeout` kills the command's whole process group: the command runs as its
/// own session leader (`setsid`, where the image has it) and records its pid, since the
/// engine has no way to stop an exec.
pub async fn exec_streaming(
    docker: &Engine,
    container: &str,
    cmd: &str,
    workdir: Option<&str>,
    timeout: Duration,
    cancel: &tokio_util::sync::CancellationToken,
    on_output: &mut (dyn FnMut(&[u8]) + Send),
) -> Result<StreamedExit, SandboxError> {
    let api = docker.api();
    let pid_file = format!("/tmp/.agent-exec-{}.pid", uuid::Uuid::new_v4().simple());
    // Inside `setsid` the shell's own pid is its process group's id.
    let inner = format!("echo $$ > {pid_file}; eval \"$1\"");
    let wrapper = format!(
        "if command -v setsid >/dev/null 2>&1; then exec setsid -w bash -c '{inner}' agent \"$1\"; \
         else {inner}; fi"
    );
    let exec = api
        .create_exec(
            container,
            CreateExecOptions {
                cmd: Some(vec!["bash".into(), "-c".into(), wrapper, "agent".into(), cmd.to_string()]),
                attach_stdout: Some(true),
                attach_stderr: Some(true),
                working_dir: workdir.map(str::to_string),
                ..Default::default()
            },
        )
        .await
        .map_err(|e| SandboxError::docker("run a command in the sandbox", e))?;
    let started =
        api.start_exec(&exec.id, None).await.map_err(|e| SandboxError::docker("run a command in the sandbox", e))?;
    let StartExecResults::Attached { mut output, .. } = started else {
        return Err(SandboxError::Shell("the engine detached a command that should be attached".into()));
    };
    let deadline = tokio::time::sleep(timeout);
    tokio::pin!(deadline);
    let mut exit = StreamedExit::default();
    loop {
        tokio::select! {
            item = output.next() => match item {
                Some(Ok(msg)) => on_output(&msg.into_bytes()),
                Some(Err(e)) => return Err(SandboxError::docker("read a command's output", e)),
                None => break,
            },
            _ = cancel.cancelled(), if !exit.interrupted && !exit.timed_out => {
                exit.interrupted = true;
                kill_group(docker, container, &pid_file).await;
            }
            _ = &mut deadline, if !exit.interrupted && !exit.timed_out => {
                exit.timed_out = true;
                kill_group(docker, container, &pid_file).await;
            }
        }
    }
    if !exit.interrupted && !exit.timed_out {
        let inspect =
            api.inspect_exec(&exec.id).await.map_err(|e| SandboxError::docker("read a command's exit status", e))?;
        exit.exit_code = inspect.exit_code;
    }
    let _ = exec_capture(docker, container, &["rm", "-f", &pid_file], None, Duration::from_secs(5), 0).await;
    Ok(exit)
}

/// Kills the process group of the command whose pid is in `pid_file` (the pid alone
/// where the command could not become a group leader).
async fn kill_group(docker: &Engine, container: &str, pid_file: &str) {
    let script = format!(
        "p=$(cat {pid_file} 2>/dev/null) && [ -n \"$p\" ] && {{ kill -KILL -- -$p 2>/dev/null || kill -KILL $p; }}"
    );
    let _ = exec_capture(docker, container, &["sh", "-c", &script], None, Duration::from_secs(5), 0).await;
}
