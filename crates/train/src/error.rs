//! Errors of the trainer, written for the user: what failed, where, what to do.

use std::path::PathBuf;

/// Everything that can go wrong while loading, training, sampling or saving.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    /// A file-system operation failed.
    #[error("cannot {op} {}: {source}", path.display())]
    Io {
        /// What was being done ("read", "write", "rename", ...).
        op: &'static str,
        /// The file or folder concerned.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A model, adapter or checkpoint file is missing something or is inconsistent.
    #[error("{}: {reason}", path.display())]
    BadFile {
        /// The file at fault.
        path: PathBuf,
        /// What is wrong with it, and what to do.
        reason: String,
    },
    /// A tensor operation failed (shape mismatch, unsupported dtype, device error).
    #[error("tensor computation failed while {context}: {source}")]
    Tensor {
        /// What the trainer was doing.
        context: String,
        /// candle's error.
        source: candle_core::Error,
    },
    /// The settings do not make sense together.
    #[error("invalid training settings: {0}")]
    Config(String),
    /// A rollout, tokenizer or data problem that stops training.
    #[error("{0}")]
    Other(String),
    /// Another rank failed or died, or the ranks could not meet.
    #[error("the distributed run stopped: {0}")]
    Distributed(String),
    /// The preset is not usable.
    #[error(transparent)]
    Preset(#[from] super::preset::PresetError),
}

impl TrainError {
    /// A [`TrainError::Io`] for `path`.
    pub fn io(op: &'static str, path: &std::path::Path, source: std::io::Error) -> Self {
        TrainError::Io { op, path: path.to_path_buf(), source }
    }

    /// A [`TrainError::BadFile`] for `path`.
    pub fn bad_file(path: &std::path::Path, reason: impl Into<String>) -> Self {
        TrainError::BadFile { path: path.to_path_buf(), reason: reason.into() }
    }
}

/// Adds what the trainer was doing to a candle error.
pub trait TensorContext<T> {
    /// Wraps the error with `context`.
    fn ctx(self, context: &str) -> Result<T, TrainError>;
}

impl<T> TensorContext<T> for Result<T, candle_core::Error> {
    fn ctx(self, context: &str) -> Result<T, TrainError> {
        self.map_err(|source| TrainError::Tensor { context: context.to_string(), source })
    }
}

impl From<candle_core::Error> for TrainError {
    fn from(source: candle_core::Error) -> Self {
        TrainError::Tensor { context: "a tensor operation".to_string(), source }
    }
}
