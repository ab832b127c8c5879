//! Task image builds as the official harness makes them (`docker compose build`, i.e.
//! BuildKit): every `FROM` resolved to a local image first, the host's CA bundle and
//! name overrides handed in, heredocs lowered where the engine's Dockerfile frontend
//! predates them, and the classic builder only where the engine has no BuildKit.

mod buildkit;
mod classic;
mod dockerfile;
mod dockerignore;
mod lower;
mod vars;

use std::collections::HashMap;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use super::docker::Engine;
use super::error::SandboxError;
use super::image::{resolve_image_with, ImageMap};
use dockerfile::{from_parts, Dockerfile, Item};
use dockerignore::DockerIgnore;
use lower::{lower_heredocs, strip_cache_mounts, ContextFiles, Lowering};

/// Which builder makes images.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum BuilderChoice {
    /// BuildKit when the engine has it, else the classic builder (said in a notice).
    #[default]
    Auto,
    /// BuildKit or an error.
    BuildKit,
    /// The classic builder (heredocs lowered, cache mounts dropped).
    Classic,
}

impl BuilderChoice {
    /// The choice named by `AGENT_BUILDER` (`auto`, `buildkit`, `classic`); `Auto`
    /// when unset. An unknown value is an error naming the accepted ones.
    pub fn from_env() -> Result<BuilderChoice, String> {
        match std::env::var("AGENT_BUILDER").unwrap_or_default().to_ascii_lowercase().as_str() {
            "" | "auto" => Ok(BuilderChoice::Auto),
            "buildkit" => Ok(BuilderChoice::BuildKit),
            "classic" => Ok(BuilderChoice::Classic),
            other => Err(format!("AGENT_BUILDER={other}: expected auto, buildkit or classic")),
        }
    }
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
    /// The builder.
    pub builder: BuilderChoice,
}

/// Where [`BuildEnv::ca_bundle`] lands in an image.
pub const CA_BUNDLE_PATH: &str = "/usr/local/share/agent/host-ca-bundle.crt";
const CA_CONTEXT_NAME: &str = "agent-host-ca-bundle.crt";
/// The name of the rewritten Dockerfile in the build context.
const RESOLVED_DOCKERFILE: &str = "Dockerfile.agent-resolved";

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

/// A failed build: the engine's message, every failed step (name, error) and the last
/// output.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct BuildFailure {
    pub message: String,
    pub step_errors: Vec<(String, String)>,
    pub recent_output: Vec<String>,
}

impl BuildFailure {
    fn simple(message: String) -> BuildFailure {
        BuildFailure { message, ..Default::default() }
    }

    fn into_error(self, tag: &str) -> SandboxError {
        // Every failed step by name; the engine's own message only when it adds to them.
        let mut parts: Vec<String> = Vec::new();
        let covered =
            self.step_errors.iter().any(|(_, e)| self.message.contains(e.as_str()) || e.contains(&self.message));
        if !covered {
            parts.push(self.message.clone());
        }
        parts.extend(self.step_errors.iter().map(|(name, e)| format!("{name}: {e}")));
        let mut reason = parts.join("; ");
        if !self.recent_output.is_empty() {
            reason.push_str(&format!(" (last build output: {})", self.recent_output.join(" | ")));
        }
        SandboxError::ImageBuild { image: tag.into(), reason }
    }

    /// Whether the failure is the `# syntax=` frontend image, not the Dockerfile.
    fn is_frontend_image(&self) -> bool {
        let m = self.message.to_lowercase();
        m.contains("gateway.v0") || m.contains("frontend gateway")
    }
}

/// The images named by a Dockerfile's `FROM` instructions (stage names included; they
/// map to nothing), or none when it does not parse.
pub fn dockerfile_from_images(text: &str) -> Vec<String> {
    Dockerfile::parse(text).map(|d| d.base_images()).unwrap_or_default()
}

/// Builds a task's Dockerfile with every `FROM` image resolved through
/// [`super::resolve_image`]; returns the tag built.
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

/// [`build_task_image`] with the host's name overrides and CA bundle handed to the
/// build and the builder of `env`.
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
    let bad = |reason: String| SandboxError::ImageBuild { image: tag.into(), reason };
    let mut df = Dockerfile::parse(&text).map_err(|e| bad(format!("{}: {e}", dockerfile.display())))?;
    resolve_froms(docker, map, &mut df, env, notice).await.map_err(|e| match e {
        ResolveError::Sandbox(e) => e,
        ResolveError::NoImage(line) => bad(format!("{} line {line}: a FROM names no image", dockerfile.display())),
    })?;
    // The rewritten text takes the Dockerfile's place, so that `COPY . /app` finds
    // what it would find under `docker compose build`.
    let rel = dockerfile
        .strip_prefix(context_dir)
        .ok()
        .map(|r| r.to_string_lossy().to_string())
        .filter(|r| !r.is_empty() && !r.starts_with(".."));
    let source = Source::Dir(context_dir, rel);
    let before = docker.api().inspect_image(tag).await.ok().and_then(|i| i.id);
    build(docker, &source, df, tag, env, notice, log).await?;
    remove_replaced(docker, tag, before).await;
    Ok(tag.to_string())
}

/// Builds `tag` from a Dockerfile alone (a stand-in image), with the builder of `env`.
pub(crate) async fn build_from_dockerfile(
    docker: &Engine,
    tag: &str,
    text: &str,
    env: &BuildEnv,
) -> Result<(), SandboxError> {
    let df =
        Dockerfile::parse(text).map_err(|e| SandboxError::ImageBuild { image: tag.into(), reason: e.to_string() })?;
    build(docker, &Source::Empty, df, tag, env, &mut |n| tracing::info!("{n}"), &mut |_| {}).await
}

/// What goes in the context besides the rewritten Dockerfile.
enum Source<'a> {
    /// The task's folder, and the Dockerfile's path inside it (whose entry the
    /// rewritten text replaces) when it lies inside.
    Dir(&'a Path, Option<String>),
    Empty,
}

impl Source<'_> {
    /// The name of the rewritten Dockerfile in the context.
    fn dockerfile_name(&self) -> &str {
        match self {
            Source::Dir(_, Some(rel)) => rel,
            _ => RESOLVED_DOCKERFILE,
        }
    }
}

/// Runs the build with BuildKit (falling back as the engine requires) or the classic
/// builder.
async fn build(
    docker: &Engine,
    source: &Source<'_>,
    mut df: Dockerfile,
    tag: &str,
    env: &BuildEnv,
    notice: &mut (dyn FnMut(String) + Send),
    log: &mut (dyn FnMut(&str) + Send),
) -> Result<(), SandboxError> {
    let labels = image_labels();
    if env.builder != BuilderChoice::Classic {
        // A named frontend first, as written; the built-in one when it cannot be had.
        if let Some(frontend) = df.directive("syntax").map(str::to_string) {
            let context = pack(source, env, &df, &ContextFiles::new(), tag)?;
            let req = request(tag, source, &labels, env, context);
            match buildkit::build(docker, req, log).await {
                Ok(Ok(())) => return Ok(()),
                Ok(Err(buildkit::Unsupported(why))) => {
                    return classic_fallback(docker, source, df, tag, env, &why, notice, log).await
                }
                Err(f) if f.is_frontend_image() => {
                    notice(format!(
                        "the Dockerfile's frontend `{frontend}` cannot be had ({}); built with the engine's built-in Dockerfile frontend",
                        f.message
                    ));
                    df.remove_directive("syntax");
                }
                Err(f) => return Err(f.into_error(tag)),
            }
        }
        // The built-in frontend reads heredocs from Docker 23 on (Dockerfile 1.4+).
        // Lowered here they bind-mount their scripts, so a fallback starts from `df`.
        let mut lowered = df.clone();
        let extra = if df.has_heredocs() && docker.info().major().is_none_or(|m| m < 23) {
            lower_heredocs(&mut lowered, Lowering::BindMount)
        } else {
            ContextFiles::new()
        };
        let context = pack(source, env, &lowered, &extra, tag)?;
        match buildkit::build(docker, request(tag, source, &labels, env, context), log).await {
            Ok(Ok(())) => return Ok(()),
            Ok(Err(buildkit::Unsupported(why))) => {
                return classic_fallback(docker, source, df, tag, env, &why, notice, log).await;
            }
            Err(f) => return Err(f.into_error(tag)),
        }
    }
    classic_build(docker, source, df, tag, env, notice, log).await
}

#[allow(clippy::too_many_arguments)]
async fn classic_fallback(
    docker: &Engine,
    source: &Source<'_>,
    df: Dockerfile,
    tag: &str,
    env: &BuildEnv,
    why: &str,
    notice: &mut (dyn FnMut(String) + Send),
    log: &mut (dyn FnMut(&str) + Send),
) -> Result<(), SandboxError> {
    if env.builder == BuilderChoice::BuildKit {
        return Err(SandboxError::ImageBuild {
            image: tag.into(),
            reason: format!("BuildKit was asked for (AGENT_BUILDER=buildkit) but cannot be used: {why}"),
        });
    }
    notice(format!("built `{tag}` with the engine's classic builder: BuildKit cannot be used ({why})"));
    classic_build(docker, source, df, tag, env, notice, log).await
}

#[allow(clippy::too_many_arguments)]
async fn classic_build(
    docker: &Engine,
    source: &Source<'_>,
    mut df: Dockerfile,
    tag: &str,
    env: &BuildEnv,
    notice: &mut (dyn FnMut(String) + Send),
    log: &mut (dyn FnMut(&str) + Send),
) -> Result<(), SandboxError> {
    df.remove_directive("syntax");
    // Heredocs first: a cache folder is then made before the lowered script runs.
    let extra = if df.has_heredocs() { lower_heredocs(&mut df, Lowering::CopyAndRemove) } else { ContextFiles::new() };
    let had_cache_mounts = df.instructions().any(|i| i.keyword == "RUN" && i.args.contains("type=cache"));
    let unsupported = strip_cache_mounts(&mut df);
    if !unsupported.is_empty() {
        return Err(SandboxError::ImageBuild {
            image: tag.into(),
            reason: format!(
                "the classic builder has no `RUN --mount` ({}); BuildKit is needed",
                unsupported.join(", ")
            ),
        });
    }
    if had_cache_mounts {
        notice(format!("`{tag}`: `RUN --mount=type=cache` dropped (the classic builder has no cache mounts)"));
    }
    let context = pack(source, env, &df, &extra, tag)?;
    let labels = image_labels();
    classic::build(docker, request(tag, source, &labels, env, context), log).await.map_err(|f| f.into_error(tag))
}

/// The labels every image the sandbox builds carries.
fn image_labels() -> HashMap<String, String> {
    HashMap::from([("agent.image".to_string(), "1".to_string())])
}

fn request<'a>(
    tag: &'a str,
    source: &'a Source<'_>,
    labels: &'a HashMap<String, String>,
    env: &'a BuildEnv,
    context: Vec<u8>,
) -> buildkit::Request<'a> {
    buildkit::Request { tag, dockerfile: source.dockerfile_name(), labels, extra_hosts: &env.extra_hosts, context }
}

enum ResolveError {
    Sandbox(SandboxError),
    NoImage(usize),
}

/// Resolves every `FROM` image (stages excepted) and installs the CA bundle after it.
async fn resolve_froms(
    docker: &Engine,
    map: &ImageMap,
    df: &mut Dockerfile,
    env: &BuildEnv,
    notice: &mut (dyn FnMut(String) + Send),
) -> Result<(), ResolveError> {
    let mut stages: Vec<String> = Vec::new();
    let mut items = Vec::with_capacity(df.items.len());
    for item in std::mem::take(&mut df.items) {
        let Item::Instruction(mut ins) = item else {
            items.push(item);
            continue;
        };
        if ins.keyword != "FROM" {
            items.push(Item::Instruction(ins));
            continue;
        }
        let parts = from_parts(&ins.args).ok_or(ResolveError::NoImage(ins.line))?;
        let resolved = if stages.contains(&parts.image) || parts.image == "scratch" || parts.image.contains('$') {
            parts.image.clone()
        } else {
            resolve_image_with(docker, map, &parts.image, env, notice).await.map_err(ResolveError::Sandbox)?
        };
        if let Some(stage) = &parts.stage {
            stages.push(stage.clone());
        }
        // A platform flag would make the engine look for another architecture's image.
        let mut line = String::from("FROM");
        for f in parts.flags.iter().filter(|f| !f.starts_with("--platform")) {
            line.push(' ');
            line.push_str(f);
        }
        line.push(' ');
        line.push_str(&resolved);
        if let Some(stage) = &parts.stage {
            line.push_str(" AS ");
            line.push_str(stage);
        }
        ins.args = line["FROM ".len()..].to_string();
        ins.lines = vec![line];
        items.push(Item::Instruction(ins));
        for extra in env.stage_lines().lines() {
            items.push(Item::Verbatim(extra.to_string()));
        }
    }
    df.items = items;
    Ok(())
}

/// The build context: the task's folder as the Docker client sends it (`.dockerignore`
/// applied), the rewritten Dockerfile in the original's place, the CA bundle and the
/// lowered heredocs.
fn pack(
    source: &Source<'_>,
    env: &BuildEnv,
    df: &Dockerfile,
    extra: &ContextFiles,
    tag: &str,
) -> Result<Vec<u8>, SandboxError> {
    let io = |context: String| move |e| SandboxError::Io { context, source: e };
    let mut builder = tar::Builder::new(Vec::new());
    builder.follow_symlinks(false);
    let dockerfile_name = source.dockerfile_name().to_string();
    if let Source::Dir(dir, _) = source {
        let walk =
            Walk { ignore: DockerIgnore::load(dir), skip: dockerfile_name.clone(), exec_shebangs: env.exec_shebangs };
        walk.append(&mut builder, dir, "").map_err(io(format!("pack the build context {}", dir.display())))?;
    }
    let text = df.render();
    let mut files: Vec<(&str, &[u8], u32)> = vec![(dockerfile_name.as_str(), text.as_bytes(), 0o644)];
    if let Some(ca) = &env.ca_bundle {
        files.push((CA_CONTEXT_NAME, ca.as_slice(), 0o644));
    }
    for (name, (data, mode)) in extra {
        files.push((name.as_str(), data.as_slice(), *mode));
    }
    for (name, data, mode) in files {
        let mut header = tar::Header::new_gnu();
        header.set_size(data.len() as u64);
        header.set_mode(mode);
        header.set_mtime(0);
        builder.append_data(&mut header, name, data).map_err(io(format!("pack {name} for {tag}")))?;
    }
    builder.into_inner().map_err(io("pack the build context".into()))
}

/// How the task's folder goes into the context.
struct Walk {
    ignore: DockerIgnore,
    /// The Dockerfile's own entry (replaced by the rewritten text).
    skip: String,
    /// Give scripts (`#!`) without any execute bit `rwxr-xr-x`.
    exec_shebangs: bool,
}

impl Walk {
    /// Packs `dir` (at `rel` in the context, `""` for the root) into `builder`.
    fn append(&self, builder: &mut tar::Builder<Vec<u8>>, dir: &Path, rel: &str) -> std::io::Result<()> {
        let mut entries: Vec<_> = std::fs::read_dir(dir)?.collect::<Result<_, _>>()?;
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().to_string();
            let child = if rel.is_empty() { name } else { format!("{rel}/{name}") };
            let kind = entry.file_type()?;
            // An excluded folder is still walked: a `!` pattern may bring back a file in it.
            let excluded = self.ignore.excludes(&child) || child == self.skip;
            if kind.is_dir() {
                if !excluded {
                    builder.append_dir(&child, &path)?;
                }
                self.append(builder, &path, &child)?;
            } else if excluded {
                continue;
            } else if kind.is_file() {
                // No-follow: a file swapped for a link after the listing fails here
                // instead of sending what the link points to.
                let mut file = std::fs::OpenOptions::new()
                    .read(true)
                    .custom_flags((rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::NONBLOCK).bits() as i32)
                    .open(&path)?;
                let meta = file.metadata()?;
                if !meta.is_file() {
                    continue;
                }
                let mut head = [0u8; 2];
                let is_script = std::io::Read::read(&mut file, &mut head)? == 2 && &head == b"#!";
                std::io::Seek::rewind(&mut file)?;
                let mut header = tar::Header::new_gnu();
                header.set_metadata(&meta);
                let mode = header.mode()?;
                if self.exec_shebangs && is_script && mode & 0o111 == 0 {
                    header.set_mode(mode | 0o755);
                }
                builder.append_data(&mut header, &child, file)?;
            } else {
                // A link goes in as a link (the builder resolves it inside the context;
                // nothing it points to on the host is read).
                builder.append_path_with_name(&path, &child)?;
            }
        }
        Ok(())
    }
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
    use std::collections::BTreeMap;

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

    fn packed(bytes: &[u8]) -> BTreeMap<String, (u32, Vec<u8>)> {
        let mut found = BTreeMap::new();
        for e in tar::Archive::new(bytes).entries().unwrap() {
            let mut e = e.unwrap();
            let path = e.path().unwrap().display().to_string();
            let mode = e.header().mode().unwrap() & 0o777;
            let mut data = Vec::new();
            std::io::Read::read_to_end(&mut e, &mut data).unwrap();
            found.insert(path.trim_end_matches('/').to_string(), (mode, data));
        }
        found
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
        let env = BuildEnv { exec_shebangs: true, ..Default::default() };
        let df = Dockerfile::parse("FROM a\n").unwrap();
        let found = packed(&pack(&Source::Dir(d.path(), None), &env, &df, &ContextFiles::new(), "t").unwrap());
        assert_eq!(found["sub/tool.py"].0, 0o755, "{found:?}");
        assert_eq!(found["data.txt"].0, 0o444, "{found:?}");
        // No Dockerfile inside the folder: the rewritten one gets a name of its own.
        assert!(found.contains_key(RESOLVED_DOCKERFILE), "{found:?}");
    }

    #[test]
    fn the_context_is_filtered_by_dockerignore_and_the_dockerfile_replaced_in_place() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("app/cache")).unwrap();
        std::fs::write(d.path().join("app/main.py"), "print()").unwrap();
        std::fs::write(d.path().join("app/cache/blob"), "x").unwrap();
        std::fs::write(d.path().join("secret.env"), "x").unwrap();
        std::fs::write(d.path().join("Dockerfile"), "FROM original\n").unwrap();
        std::fs::write(d.path().join(".dockerignore"), "*.env\napp/cache\n").unwrap();
        let mut df = Dockerfile::parse("FROM a\nRUN <<EOF\n#!/bin/sh\necho hi\nEOF\n").unwrap();
        let extra = lower_heredocs(&mut df, Lowering::BindMount);
        let env = BuildEnv { ca_bundle: Some(b"pem".to_vec()), ..Default::default() };
        let source = Source::Dir(d.path(), Some("Dockerfile".into()));
        let found = packed(&pack(&source, &env, &df, &extra, "t").unwrap());
        assert_eq!(found["app/main.py"].0, 0o644, "{found:?}");
        assert!(!found.contains_key("secret.env") && !found.contains_key("app/cache/blob"), "{found:?}");
        assert!(found.contains_key(".dockerignore"));
        assert_eq!(found["Dockerfile"].1, df.render().into_bytes(), "the rewritten text, once");
        assert_eq!(source.dockerfile_name(), "Dockerfile");
        assert_eq!(found[CA_CONTEXT_NAME].0, 0o644);
        assert_eq!(found[".agent-heredocs/1/run"].0, 0o755);
    }

    #[test]
    fn a_link_in_the_context_goes_as_a_link_and_its_host_target_is_never_read() {
        let d = tempfile::tempdir().unwrap();
        let (ctx, home) = (d.path().join("ctx"), d.path().join("home"));
        std::fs::create_dir_all(&ctx).unwrap();
        std::fs::create_dir_all(&home).unwrap();
        std::fs::write(home.join("secret"), "MARKER-ctx").unwrap();
        std::fs::write(home.join("ignore"), "*\n").unwrap();
        std::os::unix::fs::symlink(home.join("secret"), ctx.join("leak")).unwrap();
        std::os::unix::fs::symlink(&home, ctx.join("homedir")).unwrap();
        std::os::unix::fs::symlink(home.join("ignore"), ctx.join(".dockerignore")).unwrap();
        std::fs::write(ctx.join("app.py"), "print()").unwrap();
        let df = Dockerfile::parse("FROM a\n").unwrap();
        let bytes = pack(&Source::Dir(&ctx, None), &BuildEnv::default(), &df, &ContextFiles::new(), "t").unwrap();
        assert!(!bytes.windows(10).any(|w| w == b"MARKER-ctx"), "the host file's bytes are not in the context");
        let mut kinds = BTreeMap::new();
        for e in tar::Archive::new(bytes.as_slice()).entries().unwrap() {
            let e = e.unwrap();
            kinds.insert(e.path().unwrap().display().to_string(), e.header().entry_type());
        }
        assert_eq!(kinds["leak"], tar::EntryType::Symlink);
        assert_eq!(kinds["homedir"], tar::EntryType::Symlink);
        // The linked-out `.dockerignore` (which says `*`) was not read: app.py is packed.
        assert_eq!(kinds["app.py"], tar::EntryType::Regular);
        assert!(!kinds.keys().any(|k| k.starts_with("homedir/")), "{kinds:?}");
    }

    #[test]
    fn failures_list_every_error_and_the_last_output() {
        let f = BuildFailure {
            message: "failed to solve: executor failed running [/bin/sh -c false]: exit code: 1".into(),
            step_errors: vec![
                ("[a 2/2] RUN false".into(), "executor failed running [/bin/sh -c false]: exit code: 1".into()),
                ("[b 2/2] RUN exit 4".into(), "executor failed running [/bin/sh -c exit 4]: exit code: 4".into()),
            ],
            recent_output: vec!["#3 oops".into()],
        };
        let text = f.into_error("img").to_string();
        assert!(
            text.contains(": [a 2/2] RUN false: executor failed running [/bin/sh -c false]: exit code: 1; [b 2/2] RUN exit 4: executor failed running [/bin/sh -c exit 4]: exit code: 4 (last"),
            "{text}"
        );
        let lone = BuildFailure { message: "no space left".into(), ..Default::default() };
        assert_eq!(lone.into_error("img").to_string(), "building the image `img` failed: no space left");
        assert!(text.ends_with("(last build output: #3 oops)"), "{text}");
        assert!(BuildFailure::simple("failed to solve with frontend dockerfile.v0: failed to solve with frontend gateway.v0: failed to do request".into()).is_frontend_image());
    }
}
