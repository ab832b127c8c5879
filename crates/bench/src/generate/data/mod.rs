//! Task families as data: a TOML file of parameters and templates (minijinja) for the
//! instruction, the input files, the set-up, the solution and the tests, so a family
//! is written without Rust (`docs/tasks.md`, "Task families as data").
//!
//! The tests compute what they expect from `INPUTS` (every input file as it was
//! written) and `PARAMS`, which the generator puts at the top of the test file: the
//! agent never sees the tests, and changing an input cannot change the expectation.

mod format;
mod render;

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use format::{Count, FamilyFile, ParamDef};

use super::write::io;
use super::{Builder, Family, GenerateError, MAX_LEVEL};

pub(crate) use render::DataFamily;

/// The family files that ship with the binary (`crates/bench/families/`), in the order
/// mixed sets cycle through them.
pub(crate) const BUILT_IN: &[(&str, &str)] = &[
    ("checksum.toml", include_str!("../../../families/checksum.toml")),
    ("symlinks.toml", include_str!("../../../families/symlinks.toml")),
    ("base64.toml", include_str!("../../../families/base64.toml")),
    ("sort-rows.toml", include_str!("../../../families/sort-rows.toml")),
    ("file-modes.toml", include_str!("../../../families/file-modes.toml")),
    ("extract-matches.toml", include_str!("../../../families/extract-matches.toml")),
    ("sqlite-query.toml", include_str!("../../../families/sqlite-query.toml")),
    ("env-file.toml", include_str!("../../../families/env-file.toml")),
    ("dedupe-lines.toml", include_str!("../../../families/dedupe-lines.toml")),
    ("log-levels.toml", include_str!("../../../families/log-levels.toml")),
    ("ipv4-regex.toml", include_str!("../../../families/ipv4-regex.toml")),
    ("find-files.toml", include_str!("../../../families/find-files.toml")),
    ("disk-usage.toml", include_str!("../../../families/disk-usage.toml")),
    ("awk-fields.toml", include_str!("../../../families/awk-fields.toml")),
    ("join-files.toml", include_str!("../../../families/join-files.toml")),
    ("split-merge.toml", include_str!("../../../families/split-merge.toml")),
    ("users-groups.toml", include_str!("../../../families/users-groups.toml")),
    ("yaml-config.toml", include_str!("../../../families/yaml-config.toml")),
    ("json-aggregate.toml", include_str!("../../../families/json-aggregate.toml")),
    ("csv-json.toml", include_str!("../../../families/csv-json.toml")),
    ("ini-config.toml", include_str!("../../../families/ini-config.toml")),
    ("python-cli.toml", include_str!("../../../families/python-cli.toml")),
    ("bash-script.toml", include_str!("../../../families/bash-script.toml")),
    ("fix-python.toml", include_str!("../../../families/fix-python.toml")),
    ("jsonl-logs.toml", include_str!("../../../families/jsonl-logs.toml")),
    ("git-basics.toml", include_str!("../../../families/git-basics.toml")),
    ("git-history.toml", include_str!("../../../families/git-history.toml")),
    ("c-build.toml", include_str!("../../../families/c-build.toml")),
    ("makefile.toml", include_str!("../../../families/makefile.toml")),
    ("local-service.toml", include_str!("../../../families/local-service.toml")),
    ("http-query.toml", include_str!("../../../families/http-query.toml")),
    ("compression.toml", include_str!("../../../families/compression.toml")),
    ("process-control.toml", include_str!("../../../families/process-control.toml")),
];

/// The least number of phrasings a level offers.
pub(crate) const MIN_PHRASINGS: usize = 5;
/// The largest family file read.
const MAX_FILE_BYTES: u64 = 1 << 20;
/// Names the generator puts in every template's context.
const RESERVED: &[&str] = &["level", "split", "item", "index", "loop", "INPUTS", "PARAMS"];
/// The lists every family may draw from besides its own.
pub(crate) const SHARED_LISTS: &[&str] = &["words", "exts"];

/// Reads one family file's text; `origin` names it in errors and listings.
pub(crate) fn parse(text: &str, origin: &str) -> Result<Family, GenerateError> {
    let bad = |reason: String| GenerateError::Family { origin: origin.to_string(), reason };
    let file: FamilyFile = toml::from_str(text).map_err(|e| bad(e.to_string()))?;
    validate(&file).map_err(bad)?;
    let data = DataFamily::new(file.clone());
    data.check_templates().map_err(bad)?;
    Ok(Family {
        name: file.name.clone(),
        summary: file.summary.clone(),
        levels: file.level.iter().map(|l| l.summary.clone()).collect(),
        origin: origin.to_string(),
        build: Builder::Data(Arc::new(data)),
    })
}

/// Every `*.toml` family file of `dir`, sorted by file name.
pub(crate) fn load_dir(dir: &Path) -> Result<Vec<Family>, GenerateError> {
    let mut paths: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| io(dir, e))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml") && p.is_file())
        .collect();
    paths.sort();
    let mut out = Vec::new();
    for path in paths {
        let origin = path.display().to_string();
        let len = std::fs::metadata(&path).map_err(|e| io(&path, e))?.len();
        if len > MAX_FILE_BYTES {
            return Err(GenerateError::Family {
                origin,
                reason: format!("{len} bytes; a family file holds at most 1 MiB"),
            });
        }
        let text = std::fs::read_to_string(&path).map_err(|e| io(&path, e))?;
        out.push(parse(&text, &origin)?);
    }
    Ok(out)
}

fn is_slug(s: &str) -> bool {
    (2..=40).contains(&s.len())
        && s.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// Debian's rule for package names, so that the name is safe in a `RUN` line.
fn is_package(s: &str) -> bool {
    s.len() >= 2
        && s.len() <= 64
        && s.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && s.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "+-.".contains(c))
}

fn is_ident(s: &str) -> bool {
    let mut cs = s.chars();
    cs.next().is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && cs.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// Everything about a family file that does not need a draw to check.
fn validate(f: &FamilyFile) -> Result<(), String> {
    if !is_slug(&f.name) {
        return Err(format!("name `{}`: use 2–40 lowercase letters, digits and `-`", f.name));
    }
    if f.summary.trim().is_empty() || f.category.trim().is_empty() {
        return Err("`summary` and `category` must not be empty".into());
    }
    if f.level.len() != MAX_LEVEL as usize {
        return Err(format!("{} `[[level]]` tables; a family has exactly {MAX_LEVEL}", f.level.len()));
    }
    for (name, list) in &f.lists {
        if !is_ident(name) || SHARED_LISTS.contains(&name.as_str()) {
            return Err(format!("list `{name}`: use a lowercase identifier other than {SHARED_LISTS:?}"));
        }
        if list.len() < 4 {
            return Err(format!(
                "list `{name}` has {} entries; it needs at least 4 to halve between the splits",
                list.len()
            ));
        }
        let distinct: BTreeSet<&String> = list.iter().collect();
        if distinct.len() != list.len() {
            return Err(format!("list `{name}` repeats an entry"));
        }
        if let Some(w) =
            list.iter().find(|w| w.is_empty() || !w.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)))
        {
            return Err(format!(
                "list `{name}`: `{w}` must be letters, digits, `-`, `_` or `.` (it is used in paths and shell commands)"
            ));
        }
    }
    if let Some(p) = f.packages.iter().find(|p| !is_package(p)) {
        return Err(format!("packages: `{p}` is not a Debian package name (lowercase letters, digits, `+`, `-`, `.`)"));
    }
    let mut family_names = BTreeSet::new();
    for p in &f.params {
        check_param(p, f, &mut family_names).map_err(|e| format!("params: {e}"))?;
    }
    for (i, level) in f.level.iter().enumerate() {
        let at = |e: String| format!("level {}: {e}", i + 1);
        if level.instructions.len() < MIN_PHRASINGS {
            return Err(at(format!(
                "{} instructions; give at least {MIN_PHRASINGS} phrasings of the task",
                level.instructions.len()
            )));
        }
        let mut names = family_names.clone();
        for p in &level.params {
            check_param(p, f, &mut names).map_err(|e| at(format!("params: {e}")))?;
        }
        if level.solution.trim().is_empty() || level.tests.trim().is_empty() {
            return Err(at("`solution` and `tests` must not be empty".into()));
        }
        if !level.tests.contains("def test_") {
            return Err(at("`tests` holds no `def test_…` function".into()));
        }
    }
    Ok(())
}

fn check_param(p: &ParamDef, f: &FamilyFile, names: &mut BTreeSet<String>) -> Result<(), String> {
    if !is_ident(&p.name) || RESERVED.contains(&p.name.as_str()) {
        return Err(format!("`{}`: use a lowercase identifier other than {RESERVED:?}", p.name));
    }
    if !names.insert(p.name.clone()) {
        return Err(format!("`{}` is drawn twice", p.name));
    }
    let kinds = [p.word.is_some(), p.words.is_some(), p.number.is_some(), p.size.is_some(), p.value.is_some()];
    if kinds.iter().filter(|k| **k).count() != 1 {
        return Err(format!("`{}`: give exactly one of word, words, number, size, value", p.name));
    }
    if p.count.is_some() != p.words.is_some() {
        return Err(format!("`{}`: `count` goes with `words`, and `words` needs it", p.name));
    }
    if let Some(list) = p.word.as_ref().or(p.words.as_ref()) {
        if !SHARED_LISTS.contains(&list.as_str()) && !f.lists.contains_key(list) {
            return Err(format!("`{}`: no list `{list}` (the family's lists, or {SHARED_LISTS:?})", p.name));
        }
    }
    let range_ok = |[lo, hi]: [i64; 2]| lo <= hi;
    if p.number.is_some_and(|r| !range_ok(r)) || p.size.is_some_and(|r| !range_ok(r)) {
        return Err(format!("`{}`: the range is [low, high] with low ≤ high", p.name));
    }
    if let Some(n) = p.number {
        if n[0] == n[1] {
            return Err(format!("`{}`: a number needs a range of two values at least (one per split)", p.name));
        }
    }
    match p.count {
        Some(Count::Exactly(n)) if !(1..=64).contains(&n) => Err(format!("`{}`: count 1 to 64", p.name)),
        Some(Count::Between([lo, hi])) if lo < 1 || hi > 64 || lo > hi => {
            Err(format!("`{}`: count [low, high] within 1 to 64", p.name))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests;
