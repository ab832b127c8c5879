//! Images without a registry: the Debian base image (debootstrap + import), stand-ins
//! for Terminal-Bench base images, the image map, and task Dockerfile builds.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::docker::Engine;
use bollard::image::{BuildImageOptions, CreateImageOptions};
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};

use super::error::{describe_bollard, is_not_found, SandboxError};

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
];

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

/// Whether an image exists in the engine.
pub async fn image_exists(docker: &Engine, image: &str) -> Result<bool, SandboxError> {
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
        progress(&format!("{} exists; nothing to do (--force rebuilds it)", opts.tag));
        return Ok(false);
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
    let changes = vec![
        "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "ENV LANG=C.UTF-8",
        "ENV PIP_BREAK_SYSTEM_PACKAGES=1",
        "CMD [\"bash\"]",
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
    /// The configured substitute for `image`, if any.
    pub fn lookup(&self, image: &str) -> Option<&str> {
        self.0.iter().find(|(pat, _)| glob_match(pat, image)).map(|(_, v)| v.as_str())
    }
}

fn glob_match(pattern: &str, text: &str) -> bool {
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

/// Built-in stand-ins for Terminal-Bench base images: (pattern, local tag, description).
const TB_STANDINS: &[(&str, &str, &str)] = &[
    (
        "ghcr.io/laude-institute/t-bench/python-3-13:*",
        "agent-tb-python-3-13:local",
        "Debian bookworm with its Python 3.11, pip, pytest and tmux, WORKDIR /app",
    ),
    (
        "ghcr.io/laude-institute/t-bench/ubuntu-24-04:*",
        "agent-tb-ubuntu-24-04:local",
        "Debian bookworm (not Ubuntu) with Python 3, tmux, WORKDIR /app",
    ),
];

/// Resolves `image` to something the engine has: a configured substitute, the image
/// itself when present or pullable, or a built-in stand-in (built on demand).
/// `notice` is told about every substitution.
pub async fn resolve_image(
    docker: &Engine,
    map: &ImageMap,
    image: &str,
    notice: &mut (dyn FnMut(String) + Send),
) -> Result<String, SandboxError> {
    if let Some(sub) = map.lookup(image) {
        notice(format!("image map: using `{sub}` for `{image}`"));
        return Ok(sub.to_string());
    }
    if image_exists(docker, image).await? {
        return Ok(image.to_string());
    }
    let pull_error = match try_pull(docker, image).await {
        Ok(()) => return Ok(image.to_string()),
        Err(e) => e,
    };
    if let Some((_, tag, what)) = TB_STANDINS.iter().find(|(pat, _, _)| glob_match(pat, image)) {
        if !image_exists(docker, tag).await? {
            build_standin(docker, tag).await?;
        }
        notice(format!(
            "`{image}` cannot be pulled ({pull_error}); using the local stand-in `{tag}` ({what}), built from {BASE_IMAGE}"
        ));
        return Ok(tag.to_string());
    }
    Err(SandboxError::ImageMissing {
        image: image.to_string(),
        hint: format!("it is not present locally and cannot be pulled ({pull_error}); build it locally or map it to a local image in the config's [image_map]"),
    })
}

async fn try_pull(docker: &Engine, image: &str) -> Result<(), String> {
    let (name, tag) = split_tag(image);
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

fn split_tag(image: &str) -> (&str, &str) {
    match image.rsplit_once(':') {
        Some((name, tag)) if !tag.contains('/') => (name, tag),
        _ => (image, "latest"),
    }
}

async fn build_standin(docker: &Engine, tag: &str) -> Result<(), SandboxError> {
    if !image_exists(docker, BASE_IMAGE).await? {
        return Err(SandboxError::ImageMissing {
            image: BASE_IMAGE.into(),
            hint: "run `agent sandbox base` first (it builds the local Debian image the stand-ins start from)".into(),
        });
    }
    let dockerfile = format!("FROM {BASE_IMAGE}\nENV PIP_BREAK_SYSTEM_PACKAGES=1\nWORKDIR /app\n");
    let mut files = BTreeMap::new();
    files.insert("Dockerfile".to_string(), dockerfile.into_bytes());
    build_from_files(docker, tag, &files, &mut |_| {}).await
}

/// Builds `tag` from an in-memory context.
async fn build_from_files(
    docker: &Engine,
    tag: &str,
    files: &BTreeMap<String, Vec<u8>>,
    log: &mut (dyn FnMut(&str) + Send),
) -> Result<(), SandboxError> {
    let mut builder = tar::Builder::new(Vec::new());
    for (name, data) in files {
        let mut header = tar::Header::new_gnu();
        header.set_size(data.len() as u64);
        header.set_mode(0o644);
        builder
            .append_data(&mut header, name, data.as_slice())
            .map_err(|e| SandboxError::ImageBuild { image: tag.into(), reason: e.to_string() })?;
    }
    let context =
        builder.into_inner().map_err(|e| SandboxError::ImageBuild { image: tag.into(), reason: e.to_string() })?;
    run_build(docker, tag, "Dockerfile", context, log).await
}

async fn run_build(
    docker: &Engine,
    tag: &str,
    dockerfile: &str,
    context: Vec<u8>,
    log: &mut (dyn FnMut(&str) + Send),
) -> Result<(), SandboxError> {
    run_build_with(docker, tag, dockerfile, context, &BuildEnv::default(), log).await
}

async fn run_build_with(
    docker: &Engine,
    tag: &str,
    dockerfile: &str,
    context: Vec<u8>,
    env: &BuildEnv,
    log: &mut (dyn FnMut(&str) + Send),
) -> Result<(), SandboxError> {
    let opts = BuildImageOptions::<String> {
        dockerfile: dockerfile.into(),
        t: tag.into(),
        rm: true,
        forcerm: true,
        labels: HashMap::from([("agent.image".to_string(), "1".to_string())]),
        extrahosts: (!env.extra_hosts.is_empty()).then(|| env.extra_hosts.join(",")),
        ..Default::default()
    };
    let mut stream = docker.api().build_image(opts, None, Some(context.into()));
    let mut recent: Vec<String> = Vec::new();
    while let Some(item) = stream.next().await {
        match item {
            Ok(info) => {
                if let Some(s) = info.stream.as_deref() {
                    for line in s.lines().filter(|l| !l.trim().is_empty()) {
                        log(line);
                        recent.push(line.to_string());
                        if recent.len() > 8 {
                            recent.remove(0);
                        }
                    }
                }
                if let Some(err) = info.error {
                    return Err(SandboxError::ImageBuild {
                        image: tag.into(),
                        reason: format!("{err} (last build output: {})", recent.join(" | ")),
                    });
                }
            }
            Err(e) => {
                return Err(SandboxError::ImageBuild {
                    image: tag.into(),
                    reason: format!("{} (last build output: {})", describe_bollard(&e), recent.join(" | ")),
                })
            }
        }
    }
    Ok(())
}

/// What a build hands its containers from the host: name overrides (`name:ip`, for
/// hosts that reach mirrors only through `/etc/hosts` entries) and a CA bundle (for
/// hosts behind a private CA), which containers do not inherit.
#[derive(Debug, Clone, Default)]
pub struct BuildEnv {
    /// `name:ip` entries added to `/etc/hosts` of the build containers.
    pub extra_hosts: Vec<String>,
    /// PEM bundle installed in every stage and named by the usual variables.
    pub ca_bundle: Option<Vec<u8>>,
    /// Give scripts (`#!` files) without any execute bit `rwxr-xr-x` in the context:
    /// copies of task repositories that lost their modes (read-only exports) would
    /// otherwise ship non-executable tools.
    pub exec_shebangs: bool,
}

/// Packs `dir` under `name` like `append_dir_all`, restoring execute bits of scripts.
fn append_tree(builder: &mut tar::Builder<Vec<u8>>, dir: &Path, name: &Path) -> std::io::Result<()> {
    builder.append_dir(name, dir)?;
    let mut entries: Vec<_> = std::fs::read_dir(dir)?.collect::<Result<_, _>>()?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let path = entry.path();
        let child = name.join(entry.file_name());
        let kind = entry.file_type()?;
        if kind.is_dir() {
            append_tree(builder, &path, &child)?;
        } else if kind.is_file() {
            let meta = entry.metadata()?;
            let mut file = std::fs::File::open(&path)?;
            let mut head = [0u8; 2];
            let is_script = std::io::Read::read(&mut file, &mut head)? == 2 && &head == b"#!";
            std::io::Seek::rewind(&mut file)?;
            let mut header = tar::Header::new_gnu();
            header.set_metadata(&meta);
            let mode = header.mode()?;
            if is_script && mode & 0o111 == 0 {
                header.set_mode(mode | 0o755);
            }
            builder.append_data(&mut header, &child, file)?;
        } else {
            builder.append_path_with_name(&path, &child)?;
        }
    }
    Ok(())
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

/// Where [`BuildEnv::ca_bundle`] lands in an image.
pub const CA_BUNDLE_PATH: &str = "/usr/local/share/agent/host-ca-bundle.crt";
const CA_CONTEXT_NAME: &str = "agent-host-ca-bundle.crt";

impl BuildEnv {
    /// The Dockerfile lines that install the CA bundle, right after a `FROM`.
    fn stage_lines(&self) -> String {
        if self.ca_bundle.is_none() {
            return String::new();
        }
        let p = CA_BUNDLE_PATH;
        format!(
            "COPY {CA_CONTEXT_NAME} {p}\nENV SSL_CERT_FILE={p} REQUESTS_CA_BUNDLE={p} PIP_CERT={p} CURL_CA_BUNDLE={p} GIT_SSL_CAINFO={p} NODE_EXTRA_CA_CERTS={p} UV_NATIVE_TLS=1\n"
        )
    }
}

/// Builds a task's Dockerfile with every `FROM` image resolved through
/// [`resolve_image`]; returns the tag built.
pub async fn build_task_image(
    docker: &Engine,
    map: &ImageMap,
    context_dir: &Path,
    dockerfile: &Path,
    tag: &str,
    notice: &mut (dyn FnMut(String) + Send),
    log: &mut (dyn FnMut(&str) + Send),
) -> Result<String, SandboxError> {
    build_task_image_with(docker, map, context_dir, dockerfile, tag, &BuildEnv::default(), notice, log).await
}

/// [`build_task_image`] with the host's name overrides and CA bundle handed to the build.
#[allow(clippy::too_many_arguments)]
pub async fn build_task_image_with(
    docker: &Engine,
    map: &ImageMap,
    context_dir: &Path,
    dockerfile: &Path,
    tag: &str,
    env: &BuildEnv,
    notice: &mut (dyn FnMut(String) + Send),
    log: &mut (dyn FnMut(&str) + Send),
) -> Result<String, SandboxError> {
    let io = |context: String| move |e| SandboxError::Io { context, source: e };
    let text = std::fs::read_to_string(dockerfile).map_err(io(format!("read {}", dockerfile.display())))?;
    let mut stages: Vec<String> = Vec::new();
    let mut rewritten = String::with_capacity(text.len());
    for line in text.lines() {
        let trimmed = line.trim_start();
        if trimmed.len() >= 5 && trimmed[..5].eq_ignore_ascii_case("FROM ") {
            let words: Vec<&str> = trimmed[5..].split_whitespace().collect();
            let flags: Vec<&str> = words.iter().copied().take_while(|w| w.starts_with("--")).collect();
            let Some(image) = words.get(flags.len()).copied() else {
                return Err(SandboxError::ImageBuild {
                    image: tag.into(),
                    reason: format!("{}: a FROM line names no image", dockerfile.display()),
                });
            };
            let rest = &words[flags.len() + 1..];
            let resolved = if stages.iter().any(|s| s == image) || image == "scratch" {
                image.to_string()
            } else {
                resolve_image(docker, map, image, notice).await?
            };
            if let [as_kw, name] = rest {
                if as_kw.eq_ignore_ascii_case("as") {
                    stages.push(name.to_string());
                }
            }
            let mut new_line = String::from("FROM ");
            for f in flags.iter().filter(|f| !f.starts_with("--platform")) {
                new_line.push_str(f);
                new_line.push(' ');
            }
            new_line.push_str(&resolved);
            for w in rest {
                new_line.push(' ');
                new_line.push_str(w);
            }
            rewritten.push_str(&new_line);
            rewritten.push('\n');
            rewritten.push_str(env.stage_lines().trim_end());
        } else {
            rewritten.push_str(line);
        }
        rewritten.push('\n');
    }
    let mut builder = tar::Builder::new(Vec::new());
    builder.follow_symlinks(false);
    let packed = if env.exec_shebangs {
        append_tree(&mut builder, context_dir, Path::new("."))
    } else {
        builder.append_dir_all(".", context_dir)
    };
    packed.map_err(io(format!("pack the build context {}", context_dir.display())))?;
    let name = "Dockerfile.agent-resolved";
    let mut header = tar::Header::new_gnu();
    header.set_size(rewritten.len() as u64);
    header.set_mode(0o644);
    builder.append_data(&mut header, name, rewritten.as_bytes()).map_err(io("pack the rewritten Dockerfile".into()))?;
    if let Some(ca) = &env.ca_bundle {
        let mut header = tar::Header::new_gnu();
        header.set_size(ca.len() as u64);
        header.set_mode(0o644);
        builder.append_data(&mut header, CA_CONTEXT_NAME, ca.as_slice()).map_err(io("pack the CA bundle".into()))?;
    }
    let context = builder.into_inner().map_err(io("pack the build context".into()))?;
    let before = docker.api().inspect_image(tag).await.ok().and_then(|i| i.id);
    run_build_with(docker, tag, name, context, env, log).await?;
    remove_replaced(docker, tag, before).await;
    Ok(tag.to_string())
}

/// Removes the image `tag` named before a rebuild moved the tag elsewhere, so that
/// rebuilds leave no dangling images. One still in use or tagged otherwise stays (the
/// engine refuses; nothing is forced).
async fn remove_replaced(docker: &Engine, tag: &str, before: Option<String>) {
    let Some(old) = before else { return };
    let now = docker.api().inspect_image(tag).await.ok().and_then(|i| i.id);
    if now.as_deref() == Some(old.as_str()) {
        return;
    }
    let untagged =
        docker.api().inspect_image(&old).await.ok().is_some_and(|i| i.repo_tags.unwrap_or_default().is_empty());
    if untagged {
        let opts = bollard::image::RemoveImageOptions { force: false, noprune: false };
        if let Err(e) = docker.api().remove_image(&old, Some(opts), None).await {
            tracing::debug!("kept the replaced image {old}: {e}");
        }
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
        assert_eq!(split_tag("localhost:5000/img"), ("localhost:5000/img", "latest"));
        assert_eq!(split_tag("debian:bookworm"), ("debian", "bookworm"));
    }

    #[test]
    fn a_ca_bundle_is_installed_and_named_in_every_stage() {
        assert_eq!(BuildEnv::default().stage_lines(), "");
        let env = BuildEnv { ca_bundle: Some(b"pem".to_vec()), ..Default::default() };
        let lines = env.stage_lines();
        assert!(lines.starts_with(&format!("COPY {CA_CONTEXT_NAME} {CA_BUNDLE_PATH}\n")), "{lines}");
        for var in ["SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "PIP_CERT", "CURL_CA_BUNDLE"] {
            assert!(lines.contains(&format!("{var}={CA_BUNDLE_PATH}")), "{var}: {lines}");
        }
    }

    #[test]
    fn scripts_without_execute_bits_get_them_and_other_files_keep_theirs() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("sub")).unwrap();
        std::fs::write(d.path().join("sub/tool.py"), "#!/usr/bin/env python3\n").unwrap();
        std::fs::write(d.path().join("data.txt"), "#").unwrap();
        for f in ["sub/tool.py", "data.txt"] {
            std::fs::set_permissions(d.path().join(f), std::fs::Permissions::from_mode(0o444)).unwrap();
        }
        let mut b = tar::Builder::new(Vec::new());
        append_tree(&mut b, d.path(), Path::new(".")).unwrap();
        let bytes = b.into_inner().unwrap();
        let mut modes = BTreeMap::new();
        for e in tar::Archive::new(bytes.as_slice()).entries().unwrap() {
            let e = e.unwrap();
            let path = e.path().unwrap().display().to_string();
            modes.insert(path.trim_start_matches("./").to_string(), e.header().mode().unwrap());
        }
        assert_eq!(modes["sub/tool.py"] & 0o777, 0o755, "{modes:?}");
        assert_eq!(modes["data.txt"] & 0o777, 0o444, "{modes:?}");
    }

    #[test]
    fn image_map_lookup() {
        let map = ImageMap(BTreeMap::from([("python:*".to_string(), "local-py".to_string())]));
        assert_eq!(map.lookup("python:3.13-slim"), Some("local-py"));
        assert_eq!(map.lookup("debian"), None);
    }
}
