//! A long-running process in the sandbox spoken to over its stdin and stdout (an MCP
//! server started over the engine's exec API): its stdout is a byte stream to read, its
//! stdin one to write, and the tail of its stderr is kept for the message when it dies.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use bollard::container::LogOutput;
use bollard::exec::{CreateExecOptions, StartExecResults};
use futures_util::StreamExt;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::io::StreamReader;

use super::container::Sandbox;
use super::error::{describe_bollard, SandboxError};

/// Bytes of stderr kept.
const STDERR_TAIL: usize = 8 * 1024;

/// The stdout of a process in the sandbox, as a byte stream.
pub type ExecReader = Pin<Box<dyn AsyncRead + Send>>;
/// The stdin of a process in the sandbox.
pub type ExecWriter = Pin<Box<dyn AsyncWrite + Send>>;

/// A process started in the sandbox with its stdin and stdout attached.
pub struct ExecStdio {
    /// Its stdout.
    pub reader: ExecReader,
    /// Its stdin.
    pub writer: ExecWriter,
    /// What ends the process's stderr said last.
    pub stderr: StderrTail,
    /// The engine's id of the exec, for its exit code.
    pub exec_id: String,
}

/// The last few KiB of a process's stderr, shared with the task reading it.
#[derive(Debug, Clone, Default)]
pub struct StderrTail(Arc<Mutex<Vec<u8>>>);

impl StderrTail {
    fn push(&self, bytes: &[u8]) {
        if let Ok(mut tail) = self.0.lock() {
            tail.extend_from_slice(bytes);
            let excess = tail.len().saturating_sub(STDERR_TAIL);
            tail.drain(..excess);
        }
    }

    /// The kept text, trimmed.
    pub fn text(&self) -> String {
        self.0.lock().map(|t| String::from_utf8_lossy(&t).trim().to_string()).unwrap_or_default()
    }
}

impl Sandbox {
    /// Starts `argv` in the container with `env` (`KEY=VALUE`) added, its stdin and
    /// stdout attached as byte streams.
    pub async fn exec_stdio(&self, argv: &[String], env: &[String]) -> Result<ExecStdio, SandboxError> {
        let what = argv.first().cloned().unwrap_or_default();
        let fail = |e: bollard::errors::Error| {
            SandboxError::Shell(format!("cannot start `{what}` in the sandbox: {}", describe_bollard(&e)))
        };
        let exec = self
            .docker()
            .create_exec(
                self.id(),
                CreateExecOptions {
                    cmd: Some(argv.to_vec()),
                    env: (!env.is_empty()).then(|| env.to_vec()),
                    attach_stdin: Some(true),
                    attach_stdout: Some(true),
                    attach_stderr: Some(true),
                    ..Default::default()
                },
            )
            .await
            .map_err(fail)?;
        let started = self.docker().start_exec(&exec.id, None).await.map_err(fail)?;
        let StartExecResults::Attached { output, input } = started else {
            return Err(SandboxError::Shell(format!("the engine detached `{what}`")));
        };
        let stderr = StderrTail::default();
        let tail = stderr.clone();
        let stdout = output.filter_map(move |item| {
            let out = match item {
                Ok(LogOutput::StdOut { message }) => Some(Ok(message)),
                Ok(LogOutput::StdErr { message }) => {
                    tail.push(&message);
                    None
                }
                Ok(_) => None,
                Err(e) => Some(Err(io::Error::other(describe_bollard(&e)))),
            };
            std::future::ready(out)
        });
        Ok(ExecStdio { reader: Box::pin(StreamReader::new(Box::pin(stdout))), writer: input, stderr, exec_id: exec.id })
    }

    /// The exit code of an exec that ended (`None` while it runs or when the engine
    /// does not know).
    pub async fn exec_exit_code(&self, exec_id: &str) -> Option<i64> {
        let info = self.docker().inspect_exec(exec_id).await.ok()?;
        if info.running == Some(true) {
            return None;
        }
        info.exit_code
    }
}
