//! A service's `volumes` and `tmpfs`: named volumes of the file, anonymous volumes, the
//! task's own files (never a host path outside the task's folder) and tmpfs.

use std::path::{Path, PathBuf};

use serde_yaml::Value;

use super::service::{parse_size, Ctx, Found};
use super::{Bad, Mount, TaskError};

/// Harness variables naming host folders the harness collects logs in: a trial gives
/// the container its own `/logs` and copies out what it needs, so these mounts are
/// dropped without a word.
const HARNESS_LOG_SOURCES: [&str; 5] = [
    "T_BENCH_TASK_LOGS_PATH",
    "T_BENCH_TASK_AGENT_LOGS_PATH",
    "HOST_VERIFIER_LOGS_PATH",
    "HOST_AGENT_LOGS_PATH",
    "HOST_ARTIFACTS_PATH",
];

/// Parses `volumes` (short `SRC:DST[:MODE]` and long syntax); `raw` is the list as
/// written, before its variables were read.
pub(super) fn parse_volumes(
    v: Option<&Value>,
    raw: Option<&Value>,
    ctx: &Ctx,
    service: &str,
    found: &mut Found,
    bad: Bad,
) -> Result<Vec<Mount>, TaskError> {
    let items = match v {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Sequence(items)) => items,
        Some(_) => return Err(bad("volumes", "expected a list")),
    };
    let mut mounts = Vec::new();
    let raw_items = raw.and_then(Value::as_sequence);
    for (i, item) in items.iter().enumerate() {
        let mount = match item {
            Value::String(text) => {
                let raw = raw_items.and_then(|r| r.get(i)).and_then(Value::as_str).unwrap_or(text);
                short_volume(raw, text, ctx, service, found, bad)?
            }
            Value::Mapping(_) => long_volume(item, ctx, bad)?,
            _ => return Err(bad("volumes", "each entry is a string or a mapping")),
        };
        mounts.extend(mount);
    }
    Ok(mounts)
}

/// `SRC:DST[:MODE]` or `DST` (an anonymous volume), `text` interpolated from `raw`;
/// `None` for a harness log mount.
fn short_volume(
    raw: &str,
    text: &str,
    ctx: &Ctx,
    service: &str,
    found: &mut Found,
    bad: Bad,
) -> Result<Option<Mount>, TaskError> {
    if let Some(var) = raw.strip_prefix("${").and_then(|r| r.split('}').next()) {
        if HARNESS_LOG_SOURCES.contains(&var) {
            return Ok(None);
        }
    }
    let parts: Vec<&str> = text.split(':').collect();
    let (source, target, mode) = match parts.as_slice() {
        [target] => return Ok(Some(Mount::Volume { name: None, target: target.to_string(), read_only: false })),
        [source, target] => (*source, *target, ""),
        [source, target, mode] => (*source, *target, *mode),
        _ => return Err(bad("volumes", &format!("`{raw}`: expected SOURCE:TARGET[:MODE]"))),
    };
    if source.is_empty() {
        // A variable of another harness: there is no host path to give it.
        found.notes.push(format!(
            "services.{service}.volumes: `{raw}` is not mounted (its source is a variable this harness does not set)"
        ));
        return Ok(None);
    }
    if target.is_empty() || !target.starts_with('/') {
        return Err(bad("volumes", &format!("`{raw}`: the target must be an absolute path in the container")));
    }
    let read_only = mode.split(',').any(|m| m == "ro");
    mount_of(source, target, read_only, ctx, &|r| bad("volumes", &format!("`{raw}`: {r}"))).map(Some)
}

/// The long syntax: `type`, `source`, `target`, `read_only`, `tmpfs.size|mode`.
fn long_volume(item: &Value, ctx: &Ctx, bad: Bad) -> Result<Option<Mount>, TaskError> {
    let str_of = |k: &str| item.get(k).and_then(Value::as_str).map(str::to_string);
    let target = str_of("target")
        .filter(|t| t.starts_with('/'))
        .ok_or_else(|| bad("volumes", "a long-syntax entry needs `target`, an absolute path in the container"))?;
    let read_only = item.get("read_only").and_then(Value::as_bool).unwrap_or(false);
    let kind = str_of("type").unwrap_or_else(|| "volume".into());
    let shown = target.clone();
    let on_bad = |r: &str| bad("volumes", &format!("`{shown}`: {r}"));
    match kind.as_str() {
        "volume" => match str_of("source").filter(|s| !s.is_empty()) {
            None => Ok(Some(Mount::Volume { name: None, target, read_only })),
            Some(name) => named_volume(&name, target, read_only, ctx, &on_bad).map(Some),
        },
        "bind" => {
            let source = str_of("source").filter(|s| !s.is_empty()).ok_or_else(|| on_bad("a bind needs `source`"))?;
            let source = task_path(&source, ctx.paths.dir, ctx.paths.root, &on_bad)?;
            Ok(Some(Mount::Bind { source, target, read_only }))
        }
        "tmpfs" => {
            let mut options = Vec::new();
            if let Some(size) = item.get("tmpfs").and_then(|t| t.get("size")) {
                let bytes = parse_size(size).ok_or_else(|| on_bad("`tmpfs.size` is not a size"))?;
                options.push(format!("size={bytes}"));
            }
            if let Some(mode) = item.get("tmpfs").and_then(|t| t.get("mode")) {
                let mode = match mode {
                    Value::Number(n) => n.to_string(),
                    Value::String(s) => s.clone(),
                    _ => return Err(on_bad("`tmpfs.mode` is not a file mode")),
                };
                options.push(format!("mode={mode}"));
            }
            Ok(Some(Mount::Tmpfs { target, options: options.join(",") }))
        }
        other => Err(on_bad(&format!("the mount type `{other}` is not supported (use volume, bind or tmpfs)"))),
    }
}

/// A short-syntax source: a path (it has a `/` or starts with `.` or `~`) is a bind
/// mount of the task's files, anything else a named volume.
fn mount_of(
    source: &str,
    target: &str,
    read_only: bool,
    ctx: &Ctx,
    bad: &dyn Fn(&str) -> TaskError,
) -> Result<Mount, TaskError> {
    let target = target.to_string();
    if source.contains('/') || source.starts_with('.') || source.starts_with('~') {
        let source = task_path(source, ctx.paths.dir, ctx.paths.root, bad)?;
        return Ok(Mount::Bind { source, target, read_only });
    }
    named_volume(source, target, read_only, ctx, bad)
}

fn named_volume(
    name: &str,
    target: String,
    read_only: bool,
    ctx: &Ctx,
    bad: &dyn Fn(&str) -> TaskError,
) -> Result<Mount, TaskError> {
    if !ctx.volumes.iter().any(|v| v == name) {
        return Err(bad(&format!("the volume `{name}` is not declared under the top-level `volumes`")));
    }
    Ok(Mount::Volume { name: Some(name.to_string()), target, read_only })
}

/// The host path of a bind source, relative to `dir`; refused unless it exists inside
/// `root` (after resolving symbolic links): a task may mount its own files, never
/// arbitrary host paths.
pub(super) fn task_path(
    source: &str,
    dir: &Path,
    root: &Path,
    bad: &dyn Fn(&str) -> TaskError,
) -> Result<PathBuf, TaskError> {
    if source.starts_with('~') {
        return Err(bad("a home-directory path is outside the task's folder; a task may mount only its own files"));
    }
    let joined = dir.join(source);
    let real = joined.canonicalize().map_err(|e| bad(&format!("{} cannot be mounted: {e}", joined.display())))?;
    let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    if !real.starts_with(&root) {
        return Err(bad(&format!(
            "{} is outside the task's folder {}; a task may mount only its own files",
            real.display(),
            root.display()
        )));
    }
    Ok(real)
}

/// Parses `tmpfs`: a path or a list of paths, each `/path[:options]`.
pub(super) fn parse_tmpfs(v: Option<&Value>, bad: Bad) -> Result<Vec<Mount>, TaskError> {
    let items: Vec<String> = match v {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Sequence(items)) => super::service::strings(items).ok_or_else(|| bad("tmpfs", "expected paths"))?,
        Some(_) => return Err(bad("tmpfs", "expected a path or a list of paths")),
    };
    items
        .into_iter()
        .map(|item| {
            let (target, options) = item.split_once(':').unwrap_or((&item, ""));
            if !target.starts_with('/') {
                return Err(bad("tmpfs", &format!("`{item}`: the path must be absolute")));
            }
            Ok(Mount::Tmpfs { target: target.to_string(), options: options.to_string() })
        })
        .collect()
}
