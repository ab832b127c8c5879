//! A service's `env_file`: `KEY=VALUE` files of the task (relative to the compose
//! file, never outside the task's folder), read at load time; `environment` wins over
//! them.

use serde_yaml::Value;

use super::mounts::task_path;
use super::service::{Ctx, Found};
use super::{Bad, TaskError};

/// The `KEY=VALUE` entries of the service's env files, later files winning.
pub(super) fn load(
    v: Option<&Value>,
    ctx: &Ctx,
    service: &str,
    found: &mut Found,
    bad: Bad,
) -> Result<Vec<String>, TaskError> {
    // (path, required): the long syntax may mark a file optional.
    let files: Vec<(String, bool)> = match v {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::String(s)) => vec![(s.clone(), true)],
        Some(Value::Sequence(items)) => items
            .iter()
            .map(|item| match item {
                Value::String(s) => Ok((s.clone(), true)),
                Value::Mapping(_) => {
                    let path = item
                        .get("path")
                        .and_then(Value::as_str)
                        .ok_or_else(|| bad("env_file", "an entry needs `path`"))?;
                    Ok((path.to_string(), item.get("required").and_then(Value::as_bool).unwrap_or(true)))
                }
                _ => Err(bad("env_file", "each entry is a path or a mapping with `path`")),
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(bad("env_file", "expected a path or a list of paths")),
    };
    let mut env = Vec::new();
    for (file, required) in files {
        if !required && !ctx.paths.dir.join(&file).exists() {
            continue;
        }
        let on_bad = |r: &str| bad("env_file", &format!("`{file}`: {r}"));
        let path = task_path(&file, ctx.paths.dir, ctx.paths.root, &on_bad)?;
        let text = std::fs::read_to_string(&path).map_err(|e| on_bad(&format!("cannot read: {e}")))?;
        let (pairs, bare) = parse_env_file(&text);
        if !bare.is_empty() {
            found.notes.push(format!(
                "services.{service}.env_file `{file}`: {} not set (a name without a value would come from the host, which passes nothing)",
                bare.join(", ")
            ));
        }
        merge_env(&mut env, pairs.into_iter().map(|(k, v)| format!("{k}={v}")));
    }
    Ok(env)
}

/// The `(KEY, VALUE)` pairs of an env file, and the names listed without a value.
/// Blank lines and `#` comments are skipped; `export ` is allowed; a value in single
/// quotes is literal, one in double quotes understands `\n`, `\t`, `\"` and `\\`; an
/// unquoted value ends at ` #`.
pub(super) fn parse_env_file(text: &str) -> (Vec<(String, String)>, Vec<String>) {
    let mut pairs = Vec::new();
    let mut bare = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line.strip_prefix("export ").map(str::trim_start).unwrap_or(line);
        let Some((key, value)) = line.split_once('=') else {
            bare.push(line.to_string());
            continue;
        };
        let value = value.trim_start();
        let value = if let Some(inner) = value.strip_prefix('\'').and_then(|v| v.rsplit_once('\'')).map(|(v, _)| v) {
            inner.to_string()
        } else if let Some(inner) = value.strip_prefix('"').and_then(|v| v.rsplit_once('"')).map(|(v, _)| v) {
            unescape(inner)
        } else {
            value.split(" #").next().unwrap_or_default().trim_end().to_string()
        };
        pairs.push((key.trim().to_string(), value));
    }
    (pairs, bare)
}

fn unescape(s: &str) -> String {
    let mut out = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some(other) => out.push(other),
            None => out.push('\\'),
        }
    }
    out
}

/// Adds `KEY=VALUE` entries to `base`, each replacing an earlier entry of its key.
pub(crate) fn merge_env(base: &mut Vec<String>, over: impl IntoIterator<Item = String>) {
    for entry in over {
        let key = entry.split_once('=').map(|(k, _)| k).unwrap_or(&entry).to_string();
        base.retain(|e| e.split_once('=').map(|(k, _)| k).unwrap_or(e) != key);
        base.push(entry);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_files_are_read_like_compose_reads_them() {
        let text = "# a comment\n\nA=1\nexport B = two words\nC='lit $X # not a comment'\nD=\"line\\nnext\"\nE=x # note\nBARE\nF=\n";
        let (pairs, bare) = parse_env_file(text);
        let get = |k: &str| pairs.iter().find(|(key, _)| key == k).map(|(_, v)| v.as_str());
        assert_eq!(get("A"), Some("1"));
        assert_eq!(get("B"), Some("two words"));
        assert_eq!(get("C"), Some("lit $X # not a comment"));
        assert_eq!(get("D"), Some("line\nnext"));
        assert_eq!(get("E"), Some("x"));
        assert_eq!(get("F"), Some(""));
        assert_eq!(bare, ["BARE"]);
    }

    #[test]
    fn later_entries_win() {
        let mut env = vec!["A=1".to_string(), "B=2".into()];
        merge_env(&mut env, ["A=3".to_string(), "C=4".into()]);
        assert_eq!(env, ["B=2", "A=3", "C=4"]);
    }
}
