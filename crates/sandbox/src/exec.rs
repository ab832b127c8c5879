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
