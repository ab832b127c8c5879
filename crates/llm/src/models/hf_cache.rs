//! The Hugging Face hub cache on disk (`huggingface_hub`'s layout): where `hf:ORG/NAME[@REV]`
//! models live once downloaded, for the engines and the trainer that read them without a hub.
//!
//! Layout: `<root>/models--ORG--NAME/refs/<branch or tag>` holds a commit hash, and
//! `<root>/models--ORG--NAME/snapshots/<commit>/` the files of that commit (links into
//! `blobs/`). The root is `$HF_HUB_CACHE`, else `$HF_HOME/hub`, else `~/.cache/huggingface/hub`.

use std::path::{Path, PathBuf};

/// Why a repository's snapshot is not on disk.
#[derive(Debug, thiserror::Error)]
pub enum HfCacheError {
    /// No cache folder can be named (no home directory and no variable set).
    #[error("cannot find the Hugging Face cache: set HF_HUB_CACHE or HF_HOME")]
    NoRoot,
    /// The repository, or the revision asked for, is not in the cache.
    #[error(
        "{repo}{} is not in the Hugging Face cache at {}: download it first (`hf download {repo}{}`, \
         which fills that cache), or point HF_HUB_CACHE at a cache that holds it",
        rev.as_deref().map(|r| format!("@{r}")).unwrap_or_default(),
        root.display(),
        rev.as_deref().map(|r| format!(" --revision {r}")).unwrap_or_default()
    )]
    Missing {
        /// ORG/NAME.
        repo: String,
        /// The revision asked for.
        rev: Option<String>,
        /// The cache root looked in.
        root: PathBuf,
    },
}

/// The cache root from the environment, as `huggingface_hub` finds it.
pub fn cache_root() -> Result<PathBuf, HfCacheError> {
    root_from(&|name| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from), dirs::home_dir())
}

fn root_from(var: &dyn Fn(&str) -> Option<PathBuf>, home: Option<PathBuf>) -> Result<PathBuf, HfCacheError> {
    var("HF_HUB_CACHE")
        .or_else(|| var("HF_HOME").map(|h| h.join("hub")))
        .or_else(|| home.map(|h| h.join(".cache/huggingface/hub")))
        .ok_or(HfCacheError::NoRoot)
}

/// The folder of `repo` (ORG/NAME) in the cache under `root`.
pub fn repo_dir(root: &Path, repo: &str) -> PathBuf {
    root.join(format!("models--{}", repo.replace('/', "--")))
}

/// Every snapshot of `repo` in the cache (any revision).
pub fn snapshots(root: &Path, repo: &str) -> Vec<PathBuf> {
    std::fs::read_dir(repo_dir(root, repo).join("snapshots"))
        .map(|d| d.flatten().map(|e| e.path()).filter(|p| p.is_dir()).collect())
        .unwrap_or_default()
}

/// The snapshot folder of `repo` at `rev` (a branch, a tag or a commit hash; `main` when None).
pub fn snapshot(root: &Path, repo: &str, rev: Option<&str>) -> Result<PathBuf, HfCacheError> {
    let dir = repo_dir(root, repo);
    let wanted = rev.unwrap_or("main");
    let missing =
        || HfCacheError::Missing { repo: repo.to_string(), rev: rev.map(str::to_string), root: root.to_path_buf() };
    // A ref names a commit; a commit hash names its snapshot directly.
    let commit = std::fs::read_to_string(dir.join("refs").join(wanted))
        .map(|c| c.trim().to_string())
        .unwrap_or_else(|_| wanted.to_string());
    if commit.is_empty() || commit.contains(['/', '\\']) || commit.starts_with('.') {
        return Err(missing());
    }
    let path = dir.join("snapshots").join(&commit);
    if path.is_dir() {
        Ok(path)
    } else {
        Err(missing())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refs_and_commits_name_snapshots_and_a_missing_one_says_how_to_fetch_it() {
        let root = tempfile::tempdir().unwrap();
        let dir = repo_dir(root.path(), "Qwen/Qwen3-8B");
        std::fs::create_dir_all(dir.join("refs")).unwrap();
        std::fs::create_dir_all(dir.join("snapshots/abc123")).unwrap();
        std::fs::create_dir_all(dir.join("snapshots/def456")).unwrap();
        std::fs::write(dir.join("refs/main"), "abc123\n").unwrap();
        std::fs::write(dir.join("refs/v1"), "def456").unwrap();
        let at = |rev| snapshot(root.path(), "Qwen/Qwen3-8B", rev).map(|p| p.file_name().unwrap().to_owned());
        assert_eq!(at(None).unwrap(), "abc123");
        assert_eq!(at(Some("v1")).unwrap(), "def456");
        assert_eq!(at(Some("def456")).unwrap(), "def456");
        let e = at(Some("v2")).unwrap_err().to_string();
        assert!(e.contains("Qwen/Qwen3-8B@v2") && e.contains("hf download Qwen/Qwen3-8B --revision v2"), "{e}");
        assert!(snapshot(root.path(), "Qwen/Other", None).is_err());
        assert!(at(Some("../x")).is_err());
        assert_eq!(snapshots(root.path(), "Qwen/Qwen3-8B").len(), 2);
    }

    #[test]
    fn the_root_follows_huggingface_hub() {
        let vars = |pairs: &'static [(&'static str, &'static str)]| {
            move |n: &str| pairs.iter().find(|(k, _)| *k == n).map(|(_, v)| PathBuf::from(v))
        };
        let home = Some(PathBuf::from("/home/u"));
        assert_eq!(root_from(&vars(&[("HF_HUB_CACHE", "/c")]), home.clone()).unwrap(), PathBuf::from("/c"));
        assert_eq!(root_from(&vars(&[("HF_HOME", "/h")]), home.clone()).unwrap(), PathBuf::from("/h/hub"));
        assert_eq!(root_from(&vars(&[]), home).unwrap(), PathBuf::from("/home/u/.cache/huggingface/hub"));
        assert!(root_from(&vars(&[]), None).is_err());
    }
}
