//! Errors of the bench, written for the user: what failed, where, and what to do.

use std::sync::Arc;

use agent_sandbox::SandboxError;

/// A task directory that cannot be used, naming the file and field at fault.
#[derive(Debug, Clone, thiserror::Error)]
pub enum TaskError {
    #[error("{path}: not a directory")]
    NotADirectory { path: String },
    #[error("{path}: missing; {hint}")]
    MissingFile { path: String, hint: String },
    #[error("{path}: {reason}")]
    Invalid { path: String, reason: String },
    #[error("{path}: the field `{field}` is missing or empty; add it (see Terminal-Bench's task format)")]
    MissingField { path: String, field: String },
    #[error("{path}: the field `{field}` is not valid: {reason}")]
    BadField { path: String, field: String, reason: String },
    #[error("{path}: neither a task (task.yaml or task.toml) nor a folder of tasks")]
    NoTasks { path: String },
}

/// What can stop a whole bench run (single trials fail into their failure mode instead).
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error(transparent)]
    Task(#[from] TaskError),
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    #[error("{path}: {reason}")]
    Io { path: String, reason: String },
    #[error("{path}: {reason}")]
    Results { path: String, reason: String },
    #[error("the model could not be loaded: {0}")]
    Model(String),
    #[error("{0}")]
    Usage(String),
}

impl BenchError {
    /// An I/O error on `path`.
    pub fn io(path: &std::path::Path, e: impl std::fmt::Display) -> Self {
        BenchError::Io { path: path.display().to_string(), reason: e.to_string() }
    }
}

/// A task's images that could not be built or resolved. Cloneable, because the image
/// cache hands the same failure to every trial of the task (the sources sit in `Arc`s).
#[derive(Debug, Clone, thiserror::Error)]
pub enum ImageError {
    /// A trial panicked while holding the image cache's lock.
    #[error("the image cache is poisoned")]
    Poisoned,
    /// A service's named image is neither present nor obtainable.
    #[error("service `{service}`: {source}")]
    Resolve {
        service: String,
        #[source]
        source: Arc<SandboxError>,
    },
    /// A service's Dockerfile did not build; `first_errors` are the build output lines
    /// that usually carry the cause (a failed download, a missing host).
    #[error("service `{service}` ({dockerfile}){}; {source}", first_lines(.first_errors))]
    Build {
        service: String,
        dockerfile: String,
        first_errors: Vec<String>,
        #[source]
        source: Arc<SandboxError>,
    },
    /// A service's image build ran past the task's `build_timeout_sec`.
    #[error("service `{service}`: the image build ran past the task's build timeout of {secs} s")]
    BuildTimeout { service: String, secs: f64 },
    /// Several of the task's images failed; each is named.
    #[error("{}", .0.iter().map(|e| e.to_string()).collect::<Vec<_>>().join(" — and "))]
    Several(Vec<ImageError>),
    /// No scratch directory for a bench stand-in's Dockerfile.
    #[error("a temporary directory for {tag}: {source}")]
    StandinDir {
        tag: String,
        #[source]
        source: Arc<std::io::Error>,
    },
    /// A bench stand-in's Dockerfile could not be written.
    #[error("{path}: {source}")]
    StandinDockerfile {
        path: String,
        #[source]
        source: Arc<std::io::Error>,
    },
    /// A bench stand-in image did not build.
    #[error("the bench stand-in {tag}: {source}")]
    Standin {
        tag: String,
        #[source]
        source: Arc<SandboxError>,
    },
}

/// `; first error lines: a | b`, or nothing.
fn first_lines(lines: &[String]) -> String {
    if lines.is_empty() {
        String::new()
    } else {
        format!("; first error lines: {}", lines.join(" | "))
    }
}

/// A trial environment that did not start (everything started so far is removed).
#[derive(Debug, thiserror::Error)]
pub enum EnvError {
    /// The task's images lack one of its services.
    #[error("no image for the service `{service}`")]
    NoImage { service: String },
    /// The environment defines no `client` service for the agent.
    #[error("the environment has no `client` service")]
    NoClient,
    /// A service container did not start.
    #[error("cannot start the `{service}` service: {source}")]
    ServiceStart {
        service: String,
        #[source]
        source: SandboxError,
    },
    /// A service's health check never passed within its deadline.
    #[error("the `{service}` service did not become healthy within {secs} s (last check: {last_check})")]
    Unhealthy { service: String, secs: u64, last_check: String },
    /// The agent's container could not join the services' network.
    #[error("cannot connect the agent's container to its services: {0}")]
    Connect(#[source] SandboxError),
    /// A service asks for capabilities and the run does not grant them.
    #[error(
        "the `{service}` service asks for the capabilities {caps} (cap_add); rerun with --allow-cap-add to grant them"
    )]
    CapAdd { service: String, caps: String },
    /// One of the task's named volumes could not be created.
    #[error("cannot create the task's volume `{volume}`: {source}")]
    Volume {
        volume: String,
        #[source]
        source: SandboxError,
    },
    /// The network or the agent's container could not be created.
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
}

/// Tests that could not be copied in or run (failing tests are a result, not this).
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    /// The task's test script cannot be read on the host.
    #[error("{path}: cannot read: {source}")]
    ReadScript {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// Copying the tests in or running them in the container failed.
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    /// The previous step's tests and reward could not be removed before a step's tests
    /// (its reward would otherwise count again).
    #[error("cannot clear {TEST_DIRS} before step `{step}`'s tests (exit {code:?}): {output}")]
    ClearStep { step: String, code: Option<i64>, output: String },
}

/// What [`VerifyError::ClearStep`] clears.
const TEST_DIRS: &str = "/tests and /logs/verifier";
