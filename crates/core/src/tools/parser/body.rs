//! Action bodies: the YAML body of a tool tag, the raw-body fallback of tools with a
//! `raw_body_arg` (bash's `cmd`), and the clean-up (blank lines, code fences, common
//! indentation) done before either is read.

use serde_json::{Map, Value as Json};
use serde_yaml::Value as Yaml;

use crate::tools::validate::suggest;
use crate::tools::{validate_args, ToolSpec};

const YAML_HINT: &str = "Write one `name: value` line per argument. Put a value in quotes \
    if it contains `: ` or ` #` or starts with a special character (`*`, `&`, `!`, `[`, \
    `{`, `|`, `>`, `%`, `@`, or a quote), or write it as a `|` block: `name: |` followed \
    by the text on the next lines, indented.";

pub(super) fn parse_yaml_body(spec: &ToolSpec, body: &str) -> Result<Map<String, Json>, String> {
    match serde_yaml::from_str::<Yaml>(body) {
        Ok(value) => validate_args(spec, value),
        Err(e) => Err(format!("the body of <{}> is not valid YAML ({e}). {YAML_HINT}", spec.name)),
    }
}

/// Reads the body of a tool with a raw-body argument (see the module docs).
pub(super) fn parse_raw_body(spec: &ToolSpec, raw: &str, body: &str) -> Result<Map<String, Json>, String> {
    let first_line = body.split('\n').next().unwrap_or("");
    let starts_with_arg = leading_arg(spec, first_line).is_some();
    // `command: ls`: a misspelt argument, not a shell command.
    let misnamed = leading_key(first_line).filter(|(key, _)| spec.arg(key).is_none()).filter(|(key, _)| {
        RAW_ALIASES.contains(&key.to_ascii_lowercase().as_str()) || suggest(key, &spec.arguments).is_some()
    });
    match serde_yaml::from_str::<Yaml>(body) {
        Ok(Yaml::Mapping(mapping)) => {
            let raw_value = mapping.get(raw);
            let all_known = mapping.keys().all(|k| k.as_str().is_some_and(|k| spec.arg(k).is_some()));
            if raw_value.is_none() && !all_known && !starts_with_arg && misnamed.is_none() {
                // e.g. `echo a: b`, which YAML reads as a mapping.
                return whole_body(spec, raw, body);
            }
            match raw_value {
                None | Some(Yaml::Null) | Some(Yaml::String(_)) => validate_args(spec, Yaml::Mapping(mapping)),
                // `cmd: [ -f x ] && …`, `cmd: {a,b}`, `cmd: 1.10`: keep the text.
                Some(_) => literal_args(spec, raw, body),
            }
        }
        Ok(Yaml::Null) => validate_args(spec, Yaml::Null),
        Ok(Yaml::String(s)) if is_quoted_line(body) => whole_body(spec, raw, &s),
        Ok(_) => whole_body(spec, raw, body),
        Err(_) if starts_with_arg => literal_args(spec, raw, body),
        Err(_) => match misnamed {
            Some((key, rest)) => {
                let mut mapping = serde_yaml::Mapping::new();
                mapping.insert(Yaml::String(key.into()), Yaml::String(rest.trim().into()));
                validate_args(spec, Yaml::Mapping(mapping))
            }
            None => whole_body(spec, raw, body),
        },
    }
}

/// Whether a line starts (column 0) with `name:` where `name` is an argument of the
/// tool: what makes a fenced code block a tool block.
pub(super) fn starts_with_arg(spec: &ToolSpec, line: &str) -> bool {
    leading_arg(spec, line).is_some()
}

/// Reads the body of a fenced tool block, which starts with an argument line: the
/// same reading as a tag body, but never the raw-body fallback (plain code in a
/// fence is not a command).
pub(super) fn parse_fenced_body(spec: &ToolSpec, body: &str) -> Result<Map<String, Json>, String> {
    let first_line = body.split('\n').next().unwrap_or("");
    match spec.raw_body_arg.as_deref() {
        // With an argument first, the raw-body reading never takes the body whole.
        Some(raw) if starts_with_arg(spec, first_line) => parse_raw_body(spec, raw, body),
        _ => parse_yaml_body(spec, body),
    }
}

/// Keys that name the raw argument under another name (`command: ls`).
const RAW_ALIASES: &[&str] = &["command", "commands", "script", "code", "shell", "bash", "run", "exec", "input"];

/// The whole body as the raw argument, other arguments at their defaults.
fn whole_body(spec: &ToolSpec, raw: &str, body: &str) -> Result<Map<String, Json>, String> {
    let mut mapping = serde_yaml::Mapping::new();
    let text = body.trim();
    if !text.is_empty() {
        mapping.insert(Yaml::String(raw.into()), Yaml::String(text.into()));
    }
    validate_args(spec, Yaml::Mapping(mapping))
}

/// Line-based reading of a body that starts with an argument line: each line that
/// starts with a known argument opens that argument; other lines continue the
/// previous one. The raw argument's text is taken literally.
fn literal_args(spec: &ToolSpec, raw: &str, body: &str) -> Result<Map<String, Json>, String> {
    let mut segments: Vec<(&str, String)> = Vec::new();
    for line in body.split('\n') {
        match leading_arg(spec, line) {
            Some((key, rest)) if !segments.iter().any(|(k, _)| *k == key) => {
                segments.push((key, rest.to_string()));
            }
            _ => match segments.last_mut() {
                Some((_, value)) => {
                    value.push('\n');
                    value.push_str(line);
                }
                None => return whole_body(spec, raw, body),
            },
        }
    }
    let mut mapping = serde_yaml::Mapping::new();
    for (key, value) in segments {
        let value = if key == raw {
            literal_value(&value)
        } else {
            serde_yaml::from_str::<Yaml>(&value).unwrap_or_else(|_| Yaml::String(value.trim().to_string()))
        };
        mapping.insert(Yaml::String(key.into()), value);
    }
    validate_args(spec, Yaml::Mapping(mapping))
}

/// The text after `cmd:`: a block (`|`, `>`, or nothing on the first line) is
/// dedented; otherwise the first line and its continuation lines are kept as written.
fn literal_value(value: &str) -> Yaml {
    let (first, rest) = value.split_once('\n').unwrap_or((value, ""));
    let first = first.trim();
    let text = if first.is_empty() || is_block_indicator(first) {
        dedent(&rest.split('\n').collect::<Vec<_>>())
    } else if rest.trim().is_empty() {
        first.to_string()
    } else {
        format!("{first}\n{rest}")
    };
    let text = text.trim_end();
    if text.trim().is_empty() {
        Yaml::Null
    } else {
        Yaml::String(text.to_string())
    }
}

pub(super) fn is_block_indicator(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some('|' | '>')) && chars.all(|c| c == '-' || c == '+' || c.is_ascii_digit())
}

/// `key: rest` when the line starts (column 0) with a known argument of the tool.
fn leading_arg<'s>(spec: &'s ToolSpec, line: &'s str) -> Option<(&'s str, &'s str)> {
    let (key, rest) = leading_key(line)?;
    let arg = spec.arg(key)?;
    Some((arg.name.as_str(), rest))
}

/// `key: rest` when the line starts (column 0) with a word and a colon.
fn leading_key(line: &str) -> Option<(&str, &str)> {
    let end = line.bytes().position(|b| !(b.is_ascii_alphanumeric() || b == b'_')).unwrap_or(line.len());
    let key = &line[..end];
    let rest = line[end..].strip_prefix(':')?;
    if key.is_empty() || !(rest.is_empty() || rest.starts_with([' ', '\t'])) {
        return None;
    }
    Some((key, rest))
}

/// A one-line body in matching quotes: `"ls -la"`.
fn is_quoted_line(body: &str) -> bool {
    let t = body.trim();
    !t.contains('\n')
        && t.len() >= 2
        && ((t.starts_with('"') && t.ends_with('"')) || (t.starts_with('\'') && t.ends_with('\'')))
}

/// Drops blank lines around the body, a code fence at its start and end, and the
/// indentation common to all its lines.
pub(super) fn clean_body(body: &str) -> String {
    let lines: Vec<&str> = body.split('\n').collect();
    let mut lines = trim_blank(&lines);
    if lines.first().is_some_and(|l| is_fence(l)) {
        lines = trim_blank(&lines[1..]);
    }
    if let Some((last, rest)) = lines.split_last() {
        if last.trim() == "```" || last.trim() == "````" {
            let fence_indent = indent_of(last);
            let body_indent = rest.iter().filter(|l| !l.trim().is_empty()).map(|l| indent_of(l)).min().unwrap_or(0);
            if fence_indent <= body_indent {
                lines = trim_blank(rest);
            }
        }
    }
    let mut out = dedent(lines);
    if !out.is_empty() {
        // The final line break ends the last `|` block (its "clip" keeps one newline).
        out.push('\n');
    }
    out
}

fn trim_blank<'l, 's>(mut lines: &'l [&'s str]) -> &'l [&'s str] {
    while lines.first().is_some_and(|l| l.trim().is_empty()) {
        lines = &lines[1..];
    }
    while lines.last().is_some_and(|l| l.trim().is_empty()) {
        lines = &lines[..lines.len() - 1];
    }
    lines
}

/// A code fence line: ```` ``` ```` optionally followed by a language name.
pub(super) fn is_fence(line: &str) -> bool {
    let t = line.trim();
    t.strip_prefix("```").is_some_and(|lang| {
        lang.chars().all(|c| c == '`' || c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '+' | '.'))
    })
}

fn indent_of(line: &str) -> usize {
    line.len() - line.trim_start_matches([' ', '\t']).len()
}

/// Removes the leading whitespace common to all non-blank lines.
pub(super) fn dedent(lines: &[&str]) -> String {
    let mut prefix: Option<&str> = None;
    for line in lines.iter().filter(|l| !l.trim().is_empty()) {
        let own = &line[..indent_of(line)];
        prefix = Some(match prefix {
            None => own,
            Some(p) => {
                let common = p.bytes().zip(own.bytes()).take_while(|(a, b)| a == b).count();
                &p[..common]
            }
        });
    }
    let cut = prefix.map_or(0, str::len);
    let mut out = String::with_capacity(lines.iter().map(|l| l.len() + 1).sum());
    for (i, line) in lines.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        // The prefix is ASCII whitespace, so cutting at `cut` or at the line's own
        // (shorter, blank) length stays on a char boundary.
        if line.len() >= cut && line.is_char_boundary(cut) {
            out.push_str(&line[cut..]);
        } else {
            out.push_str(line.trim_start_matches([' ', '\t']));
        }
    }
    out
}
