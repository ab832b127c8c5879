//! Errors of the bench, written for the user: what failed, where, and what to do.

use crate::sandbox::SandboxError;

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
