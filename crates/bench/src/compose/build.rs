//! A service's `build` (context and Dockerfile) or `image`. The build context and the
//! Dockerfile must be the task's own files: both are confined to the task's folder
//! after resolving `..` and links, since a context is sent whole to the engine and any
//! host folder could otherwise become one.

use std::path::{Component, Path, PathBuf};

use serde_yaml::Value;

use super::service::Ctx;
use super::{Bad, ImageSource, TaskError};

/// The service's image source, with its build context and Dockerfile confined.
pub(super) fn image_of(body: &Value, ctx: &Ctx, bad: Bad) -> Result<ImageSource, TaskError> {
    let dir = ctx.paths.dir;
    let root = ctx.paths.root;
    let (context, dockerfile) = match body.get("build") {
        Some(Value::String(raw)) => {
            let context = dir.join(raw);
            inside(&context, root).map_err(|r| bad("build", &format!("`{raw}`: {r}; a build context is {WHY}")))?;
            (context.clone(), context.join("Dockerfile"))
        }
        Some(b @ Value::Mapping(_)) => {
            let raw = b.get("context").and_then(Value::as_str).unwrap_or(".");
            let context = dir.join(raw);
            inside(&context, root)
                .map_err(|r| bad("build.context", &format!("`{raw}`: {r}; a build context is {WHY}")))?;
            let raw = b.get("dockerfile").and_then(Value::as_str).unwrap_or("Dockerfile");
            let dockerfile = context.join(raw);
            inside(&dockerfile, root)
                .map_err(|r| bad("build.dockerfile", &format!("`{raw}`: {r}; a Dockerfile is {WHY}")))?;
            (context, dockerfile)
        }
        Some(_) => return Err(bad("build", "expected a path or a mapping with `context` and `dockerfile`")),
        None => {
            return match body.get("image").and_then(Value::as_str) {
                Some(img) if !img.trim().is_empty() => Ok(ImageSource::Named(img.to_string())),
                _ => Err(bad("build", "a service needs `build` or an `image` (not empty once its variables are read)")),
            }
        }
    };
    Ok(ImageSource::Build { context, dockerfile })
}

const WHY: &str = "read from the task's own folder only (it is sent to the engine)";

/// Whether `path` lies inside `root`, first as written (`..` resolved), then, when it
/// exists, with its links resolved; the reason when not.
pub(super) fn inside(path: &Path, root: &Path) -> Result<(), String> {
    let abs = |p: &Path| std::path::absolute(p).map(|p| normalize(&p)).unwrap_or_else(|_| normalize(p));
    let (lexical, lexical_root) = (abs(path), abs(root));
    if !lexical.starts_with(&lexical_root) {
        return Err(format!("it leads to {}, outside the task's folder {}", lexical.display(), lexical_root.display()));
    }
    // A path that does not exist yet fails later, at the build, with its own message.
    let Ok(real) = path.canonicalize() else { return Ok(()) };
    let real_root = root.canonicalize().unwrap_or(lexical_root);
    if !real.starts_with(&real_root) {
        return Err(format!(
            "it leads through a link to {}, outside the task's folder {}",
            real.display(),
            real_root.display()
        ));
    }
    Ok(())
}

/// `path` with `.` and `..` resolved as written (no file system access).
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other.as_os_str()),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::{Compose, ComposePaths, Dialect};

    /// A Harbor task folder `task/` beside a host folder `host/` that holds a secret.
    fn parse(compose: &str) -> (tempfile::TempDir, Result<Compose, super::TaskError>) {
        let d = tempfile::tempdir().unwrap();
        let task = d.path().join("task");
        std::fs::create_dir_all(task.join("environment/app")).unwrap();
        std::fs::write(task.join("environment/Dockerfile"), "FROM x\n").unwrap();
        std::fs::create_dir_all(d.path().join("host")).unwrap();
        std::fs::write(d.path().join("host/Dockerfile"), "FROM x\n").unwrap();
        std::os::unix::fs::symlink(d.path().join("host"), task.join("environment/hostlink")).unwrap();
        let env = task.join("environment");
        let c = Compose::parse(compose, "dc.yaml", ComposePaths { dir: &env, root: &task }, Dialect::Harbor);
        (d, c)
    }

    #[test]
    fn a_build_context_or_dockerfile_out_of_the_task_is_refused_naming_the_field() {
        let refused = [
            ("build:\n      context: ../..", "services.main.build.context", "`../..`: it leads to"),
            ("build: ../..", "services.main.build", "`../..`: it leads to"),
            ("build:\n      context: /etc", "services.main.build.context", "`/etc`: it leads to /etc"),
            ("build:\n      context: hostlink", "services.main.build.context", "through a link"),
            ("build:\n      dockerfile: ../../host/Dockerfile", "services.main.build.dockerfile", "outside the task"),
            ("build:\n      dockerfile: hostlink/Dockerfile", "services.main.build.dockerfile", "through a link"),
            ("build:\n      dockerfile: /etc/passwd", "services.main.build.dockerfile", "outside the task"),
        ];
        for (build, field, reason) in refused {
            let (_d, c) = parse(&format!("services:\n  main:\n    {build}\n"));
            let e = c.unwrap_err().to_string();
            assert!(
                e.starts_with("dc.yaml: ") && e.contains(&format!("`{field}`")) && e.contains(reason),
                "{build}: {e}"
            );
        }
    }

    #[test]
    fn contexts_and_dockerfiles_inside_the_task_load() {
        for build in
            ["build: .", "build:\n      context: app/..\n      dockerfile: ./Dockerfile", "build: ../environment"]
        {
            let (_d, c) = parse(&format!("services:\n  main:\n    {build}\n"));
            assert!(c.is_ok(), "{build}: {c:?}");
        }
        // The task's folder itself may be the context (TB1 tasks are built that way).
        let (_d, c) =
            parse("services:\n  main:\n    build:\n      context: ..\n      dockerfile: environment/Dockerfile\n");
        assert!(c.is_ok(), "{c:?}");
    }
}
