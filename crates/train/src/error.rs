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
    #[error("tensor computation failed while {context}: {}", without_backtrace(source))]
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

/// candle's message without the backtrace it captures when `RUST_BACKTRACE` is set (dozens
/// of frames that would fill a trajectory's error event and the terminal; `Debug` keeps it).
fn without_backtrace(e: &candle_core::Error) -> String {
    match e {
        candle_core::Error::WithBacktrace { inner, .. } => without_backtrace(inner),
        candle_core::Error::Context { inner, context } => format!("{context}: {}", without_backtrace(inner)),
        candle_core::Error::WithPath { inner, path } => format!("{}: {}", path.display(), without_backtrace(inner)),
        other => other.to_string(),
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tensor_error_reads_without_candles_backtrace() {
        let inner = candle_core::Error::Msg("unsupported dtype BF16 for op matmul".into());
        let with = candle_core::Error::WithBacktrace {
            inner: Box::new(inner),
            backtrace: Box::new(std::backtrace::Backtrace::force_capture()),
        };
        let text = Err::<(), _>(with).ctx("sampling from the policy").unwrap_err().to_string();
        assert_eq!(
            text,
            "tensor computation failed while sampling from the policy: unsupported dtype BF16 for op matmul"
        );
    }
}
