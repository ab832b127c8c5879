//! Images without a registry: the Debian base image (debootstrap + import), stand-ins
//! for Terminal-Bench base images, the image map, and task Dockerfile builds.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use super::docker::Engine;
use bollard::image::CreateImageOptions;
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};

use super::build::BuildEnv;
use super::error::{describe_bollard, is_not_found, SandboxError};
use super::reference::ImageRef;
use super::standin::{build_standin, standin_for};

/// Tag of the local Debian base image.
pub const BASE_IMAGE: &str = "agent-base:bookworm";

/// Packages of the base image (the minimum the tools and task verifiers need).
const BASE_PACKAGES: &[&str] = &[
    "bash",
    "coreutils",
    "procps",
    "python3",
    "python3-pytest",
    "python3-pip",
    "python3-venv",
    "python-is-python3",
    "tmux",
    "git",
    "curl",
    "ca-certificates",
    "less",
    "xz-utils",
    // The egress helper runs this image to install the sandbox's firewall (`egress.rs`).
    "iptables",
];

/// The label recording the package list a base image was built with: an image built from
/// an older list is rebuilt without `--force` (the egress helper needs its iptables).
const PACKAGES_LABEL: &str = "agent.base.packages";

/// Options of `agent sandbox base`.
#[derive(Debug, Clone)]
pub struct BaseImageOptions {
    pub tag: String,
    pub suite: String,
    pub mirror: String,
    pub force: bool,
}

impl Default for BaseImageOptions {
    fn default() -> Self {
        Self {
            tag: BASE_IMAGE.into(),
            suite: "bookworm".into(),
            mirror: "http://deb.debian.org/debian".into(),
            force: false,
        }
    }
}

/// Whether an image exists in the engine, after copying it from the engine's seed (the
/// local engine of a pool) when only the seed has it: an engine of the pool thus gets
/// the bases and stand-ins built here without a registry.
pub async fn image_exists(docker: &Engine, image: &str) -> Result<bool, SandboxError> {
    if present(docker, image).await? {
        return Ok(true);
    }
    let Some(seed) = docker.seed() else { return Ok(false) };
    if !present(seed, image).await.unwrap_or(false) {
        return Ok(false);
    }
    super::engines::copy_image(seed, docker, image).await?;
    Ok(true)
}

async fn present(docker: &Engine, image: &str) -> Result<bool, SandboxError> {
    match docker.api().inspect_image(image).await {
        Ok(_) => Ok(true),
        Err(e) if is_not_found(&e) => Ok(false),
        Err(e) => Err(SandboxError::docker(format!("inspect the image `{image}`"), e)),
    }
}

/// Builds the base image with debootstrap and imports it; skips when the tag exists
/// unless `force`. Returns false when it was skipped.
pub async fn build_base_image(
    docker: &Engine,
    opts: &BaseImageOptions,
    progress: &mut (dyn FnMut(&str) + Send),
) -> Result<bool, SandboxError> {
    if !opts.force && image_exists(docker, &opts.tag).await? {
        if built_with_current_packages(docker, &opts.tag).await? {
            progress(&format!("{} exists; nothing to do (--force rebuilds it)", opts.tag));
            return Ok(false);
        }
        progress(&format!("{} was built with an older package list; rebuilding it", opts.tag));
    }
    let debootstrap = which("debootstrap").ok_or_else(|| {
        SandboxError::BaseImage(
            "debootstrap is not installed; install it with `apt-get install debootstrap` (scripts/setup.sh does this)"
                .into(),
        )
    })?;
    let work = tempfile::Builder::new()
        .prefix("agent-base-")
        .tempdir_in(std::env::var_os("TMPDIR").map(PathBuf::from).unwrap_or_else(|| "/var/tmp".into()))
        .map_err(|e| SandboxError::Io { context: "create a temporary directory for debootstrap".into(), source: e })?;
    let root = work.path().join("rootfs");
    progress(&format!("debootstrap {} from {} (a few minutes) ...", opts.suite, opts.mirror));
    let status = tokio::process::Command::new(&debootstrap)
        .arg("--variant=minbase")
        .arg(format!("--include={}", BASE_PACKAGES.join(",")))
        .arg(&opts.suite)
        .arg(&root)
        .arg(&opts.mirror)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .output()
        .await
        .map_err(|e| SandboxError::Io { context: "run debootstrap".into(), source: e })?;
    if !status.status.success() {
        let err = String::from_utf8_lossy(&status.stderr);
        let tail: Vec<&str> = err.lines().rev().take(5).collect();
        let mut log_hint = String::new();
        if let Ok(log) = std::fs::read_to_string(root.join("debootstrap/debootstrap.log")) {
            log_hint = log.lines().rev().take(5).collect::<Vec<_>>().join(" | ");
        }
        return Err(SandboxError::BaseImage(format!(
            "debootstrap failed ({}): {} {}",
            status.status,
            tail.into_iter().rev().collect::<Vec<_>>().join(" | "),
            log_hint
        )));
    }
    for dir in ["var/cache/apt/archives", "var/lib/apt/lists"] {
        let d = root.join(dir);
        if let Ok(entries) = std::fs::read_dir(&d) {
            for e in entries.flatten() {
                if e.path().is_file() {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
    }
    progress("packing the root file system ...");
    let tar = tokio::process::Command::new("tar")
        .args(["--numeric-owner", "--xattrs", "-C"])
        .arg(&root)
        .args(["-cf", "-", "."])
        .stderr(std::process::Stdio::piped())
        .output()
        .await
        .map_err(|e| SandboxError::Io { context: "run tar on the debootstrap tree".into(), source: e })?;
    if !tar.status.success() {
        return Err(SandboxError::BaseImage(format!(
            "tar failed: {}",
            String::from_utf8_lossy(&tar.stderr).lines().next().unwrap_or_default()
        )));
    }
    progress(&format!("importing {} MB as {} ...", tar.stdout.len() >> 20, opts.tag));
    let (repo, tag) = opts.tag.rsplit_once(':').unwrap_or((opts.tag.as_str(), "latest"));
    let label = format!("LABEL {PACKAGES_LABEL}={}", BASE_PACKAGES.join(","));
    let changes = vec![
        "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "ENV LANG=C.UTF-8",
        "ENV PIP_BREAK_SYSTEM_PACKAGES=1",
        "CMD [\"bash\"]",
        label.as_str(),
    ];
    let mut stream = docker.api().create_image(
        Some(CreateImageOptions { from_src: "-", repo, tag, changes, ..Default::default() }),
        Some(bytes::Bytes::from(tar.stdout)),
        None,
    );
    while let Some(item) = stream.next().await {
        item.map_err(|e| SandboxError::BaseImage(format!("docker import failed: {}", describe_bollard(&e))))?;
    }
    progress(&format!("built {}", opts.tag));
    Ok(true)
}

/// Whether the image `tag` carries the current package list's label.
async fn built_with_current_packages(docker: &Engine, tag: &str) -> Result<bool, SandboxError> {
    let info = docker
        .api()
        .inspect_image(tag)
        .await
        .map_err(|e| SandboxError::docker(format!("inspect the image `{tag}`"), e))?;
    let labels = info.config.and_then(|c| c.labels).unwrap_or_default();
    Ok(labels.get(PACKAGES_LABEL).map(String::as_str) == Some(BASE_PACKAGES.join(",").as_str()))
}

fn which(bin: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin"].map(PathBuf::from))
        .map(|d| d.join(bin))
        .find(|p| p.is_file())
}

/// Substitutions for images that cannot be pulled: pattern (`*` matches any run of
/// characters) to local image.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ImageMap(pub BTreeMap<String, String>);

impl ImageMap {
    /// The configured substitute for `image`, if any: matched on the reference as
    /// written, then without its digest, then as the official image behind a mirror.
    pub fn lookup(&self, image: &str) -> Option<&str> {
        ImageRef::match_names(image)
            .iter()
            .find_map(|name| self.0.iter().find(|(pat, _)| glob_match(pat, name)).map(|(_, v)| v.as_str()))
    }
}

pub(crate) fn glob_match(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == text;
    }
    let mut rest = text;
    for (i, part) in parts.iter().enumerate() {
        if i == 0 {
            let Some(r) = rest.strip_prefix(part) else { return false };
            rest = r;
        } else if i == parts.len() - 1 {
            return rest.ends_with(part);
        } else {
            let Some(at) = rest.find(part) else { return false };
            rest = &rest[at + part.len()..];
        }
    }
    true
}

/// Resolves `image` to something the engine has: a configured substitute, the image
/// itself when present or pullable, or a built-in stand-in (built on demand).
/// `notice` is told about every substitution.
pub async fn resolve_image(
    docker: &Engine,
    map: &ImageMap,
    image: &str,
    notice: &mut (dyn FnMut(String) + Send),
) -> Result<String, SandboxError> {
    resolve_image_with(docker, map, image, &BuildEnv::default(), notice).await
}

/// [`resolve_image`], building a stand-in with the host's name overrides and CA bundle.
pub async fn resolve_image_with(
    docker: &Engine,
    map: &ImageMap,
    image: &str,
    env: &BuildEnv,
    notice: &mut (dyn FnMut(String) + Send),
) -> Result<String, SandboxError> {
    // A pinned digest cannot be checked against a substitute: say so where one is used.
    let unverified = match ImageRef::parse(image).and_then(|r| r.digest) {
        Some(d) => format!(" (its digest {} was not verified)", short_digest(&d)),
        None => String::new(),
    };
    if let Some(sub) = map.lookup(image) {
        notice(format!("image map: using `{sub}` for `{image}`{unverified}"));
        return Ok(sub.to_string());
    }
    if image_exists(docker, image).await? {
        return Ok(image.to_string());
    }
    let pull_error = match try_pull(docker, image).await {
        Ok(()) => return Ok(image.to_string()),
        Err(e) => e,
    };
    if let Some(standin) = standin_for(image) {
        build_standin(docker, standin, env).await?;
        notice(format!(
            "`{image}` cannot be pulled ({pull_error}); using the local stand-in `{}` ({}){unverified}",
            standin.tag, standin.description
        ));
        return Ok(standin.tag.to_string());
    }
    Err(SandboxError::ImageMissing {
        image: image.to_string(),
        hint: format!("it is not present locally and cannot be pulled ({pull_error}); build it locally or map it to a local image in the config's [image_map]"),
    })
}

async fn try_pull(docker: &Engine, image: &str) -> Result<(), String> {
    let (name, tag) = split_tag(image);
    let (name, tag) = (name.as_str(), tag.as_str());
    let pull = async {
        let mut stream = docker.api().create_image(
            Some(CreateImageOptions { from_image: name, tag, ..Default::default() }),
            None,
            None,
        );
        while let Some(item) = stream.next().await {
            item.map_err(|e| describe_bollard(&e))?;
        }
        Ok::<(), String>(())
    };
    match tokio::time::timeout(Duration::from_secs(120), pull).await {
        Ok(r) => r,
        Err(_) => Err("the pull timed out".into()),
    }
}

/// The repository and the tag or digest to pull (the API takes either as `tag`).
fn split_tag(image: &str) -> (String, String) {
    match ImageRef::parse(image) {
        Some(r) => {
            let tag = r.digest.clone().or(r.tag.clone()).unwrap_or_else(|| "latest".into());
            (r.repository(), tag)
        }
        None => (image.to_string(), "latest".into()),
    }
}

/// `sha256:4724b8cc51e3…`: enough to recognise it.
fn short_digest(d: &str) -> String {
    let cut: String = d.chars().take(19).collect();
    if cut.len() < d.len() {
        format!("{cut}…")
    } else {
        cut
    }
}

/// A Docker-safe image or container name part: lower case, anything but letters, digits,
/// `-`, `_` and `.` turned into `-` (`task` when nothing is left).
pub fn docker_name_part(name: &str) -> String {
    let s: String = name
        .to_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' { c } else { '-' })
        .collect();
    if s.is_empty() {
        "task".into()
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn name_parts_are_docker_safe() {
        assert_eq!(docker_name_part("Hello World"), "hello-world");
        assert_eq!(docker_name_part("a_b.c-D"), "a_b.c-d");
        assert_eq!(docker_name_part(""), "task");
    }

    #[test]
    fn glob_patterns() {
        assert!(glob_match("ghcr.io/x/python-3-13:*", "ghcr.io/x/python-3-13:20250620"));
        assert!(!glob_match("ghcr.io/x/python-3-13:*", "ghcr.io/x/ubuntu:1"));
        assert!(glob_match("a*c*e", "abcde"));
        assert!(glob_match("exact", "exact"));
        assert!(!glob_match("exact", "exactly"));
    }

    #[test]
    fn tags_split_off_registry_ports_correctly() {
        let pair = |a: &str, b: &str| (a.to_string(), b.to_string());
        assert_eq!(split_tag("localhost:5000/img"), pair("localhost:5000/img", "latest"));
        assert_eq!(split_tag("debian:bookworm"), pair("debian", "bookworm"));
        let digest = "sha256:4724b8cc51e33e398f0e2e15e18d5ec2851ff0c2280647e1310bc1642182655d";
        assert_eq!(
            split_tag(&format!("public.ecr.aws/docker/library/debian:bookworm-slim@{digest}")),
            pair("public.ecr.aws/docker/library/debian", digest)
        );
    }

    #[test]
    fn the_map_matches_digests_and_mirrors_by_what_they_name() {
        let map = ImageMap([("python:3.13*".to_string(), "local-py".to_string())].into());
        let digest = "sha256:4724b8cc51e33e398f0e2e15e18d5ec2851ff0c2280647e1310bc1642182655d";
        assert_eq!(map.lookup(&format!("python:3.13-slim-bookworm@{digest}")), Some("local-py"));
        assert_eq!(map.lookup("public.ecr.aws/docker/library/python:3.13-slim-bookworm"), Some("local-py"));
        assert_eq!(map.lookup("ghcr.io/someone/python:3.13"), None, "not an official mirror");
    }

    #[test]
    fn image_map_lookup() {
        let map = ImageMap(BTreeMap::from([("python:*".to_string(), "local-py".to_string())]));
        assert_eq!(map.lookup("python:3.13-slim"), Some("local-py"));
        assert_eq!(map.lookup("debian"), None);
    }
}
