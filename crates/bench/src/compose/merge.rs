//! Docker Compose's merge of one file over another (`docker compose -f base -f over`),
//! which is how Harbor runs a task's `environment/docker-compose.yaml`: over its own base
//! file. Mappings merge key by key; sequences append, keeping one of equal entries;
//! `command`, `entrypoint` and `healthcheck.test` are replaced whole; `environment`,
//! `labels`, `build.args` and the like merge by variable name; `volumes` by target
//! path; `build` given as a path is its `context`; `depends_on` given as a list is a
//! mapping of its names; a scalar of the later file wins; `!reset` removes a value and
//! `!override` replaces it without merging (Compose's merge rules, compose-spec 13).

use serde_yaml::{Mapping, Value};

/// `over` merged onto `base`, both whole compose documents (each already interpolated:
/// Compose reads every file's variables before it merges them).
pub(super) fn merge_files(base: Value, over: Value) -> Value {
    merge_key(Some(base), over, &mut Vec::new()).unwrap_or(Value::Null)
}

/// How the value at a path merges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rule {
    /// Mappings key by key, sequences appended, anything else replaced.
    Default,
    /// The later value replaces the earlier one whole (shell commands).
    Replace,
    /// A path is `{context: PATH}`; then key by key.
    Build,
    /// `KEY=VALUE` entries or a mapping, merged by `KEY`.
    ByName,
    /// A list of names is a mapping of them; then key by key.
    DependsOn,
    /// Mounts, unique by their target path in the container.
    Volumes,
    /// A lone string is a list of one; then appended.
    List,
}

/// The rule for the value at `path` (keys from the document's root).
fn rule(path: &[String]) -> Rule {
    let key: Vec<&str> = match path {
        [services, _, rest @ ..] if services == "services" => rest.iter().map(String::as_str).collect(),
        _ => return Rule::Default,
    };
    match key.as_slice() {
        ["command"] | ["entrypoint"] | ["healthcheck", "test"] => Rule::Replace,
        ["build"] => Rule::Build,
        ["environment"]
        | ["labels"]
        | ["annotations"]
        | ["sysctls"]
        | ["build", "args"]
        | ["build", "labels"]
        | ["deploy", "labels"] => Rule::ByName,
        ["depends_on"] => Rule::DependsOn,
        ["volumes"] => Rule::Volumes,
        ["env_file"] | ["tmpfs"] | ["dns"] | ["dns_search"] | ["dns_opt"] => Rule::List,
        _ => Rule::Default,
    }
}

/// The value of one key after the merge: `None` when the later file resets it.
fn merge_key(base: Option<Value>, over: Value, path: &mut Vec<String>) -> Option<Value> {
    let over = match over {
        Value::Tagged(t) if t.tag == "reset" => return None,
        Value::Tagged(t) if t.tag == "override" => return Some(resolved(t.value)),
        other => other,
    };
    let Some(base) = base else { return Some(resolved(over)) };
    // An empty value (`key:`) adds nothing to what the earlier file set.
    if over.is_null() {
        return Some(base);
    }
    Some(match rule(path) {
        Rule::Replace => resolved(over),
        Rule::Build => merge_mappings(build_mapping(base), build_mapping(over), path),
        Rule::DependsOn => merge_mappings(depends_mapping(base), depends_mapping(over), path),
        Rule::ByName => by_name(base, resolved(over)),
        Rule::Volumes => by_target(list_of(base), list_of(resolved(over))),
        Rule::List => appended(list_of(base), list_of(resolved(over))),
        Rule::Default => match (base, over) {
            (Value::Mapping(b), Value::Mapping(o)) => merge_mappings(b, o, path),
            (Value::Sequence(b), Value::Sequence(o)) => appended(b, list_of(resolved(Value::Sequence(o)))),
            (_, o) => resolved(o),
        },
    })
}

/// Two mappings merged key by key: a key keeps its place, keys new in `over` come after
/// the earlier ones (the order of `services` is the start order among equals).
fn merge_mappings(mut base: Mapping, over: Mapping, path: &mut Vec<String>) -> Value {
    for (key, value) in over {
        path.push(key_text(&key));
        match base.get_mut(&key) {
            Some(slot) => {
                let earlier = std::mem::replace(slot, Value::Null);
                match merge_key(Some(earlier), value, path) {
                    Some(v) => *slot = v,
                    None => {
                        base.shift_remove(&key);
                    }
                }
            }
            None => {
                if let Some(v) = merge_key(None, value, path) {
                    base.insert(key, v);
                }
            }
        }
        path.pop();
    }
    Value::Mapping(base)
}

/// A value of the later file with nothing under it to merge onto: `!reset` entries
/// dropped, `!override` ones unwrapped.
fn resolved(v: Value) -> Value {
    match v {
        Value::Tagged(t) if t.tag == "override" => resolved(t.value),
        Value::Mapping(m) => Value::Mapping(
            m.into_iter()
                .filter(|(_, v)| !matches!(v, Value::Tagged(t) if t.tag == "reset"))
                .map(|(k, v)| (k, resolved(v)))
                .collect(),
        ),
        Value::Sequence(items) => Value::Sequence(
            items.into_iter().filter(|v| !matches!(v, Value::Tagged(t) if t.tag == "reset")).map(resolved).collect(),
        ),
        other => other,
    }
}

fn key_text(key: &Value) -> String {
    match key {
        Value::String(s) => s.clone(),
        other => serde_yaml::to_string(other).unwrap_or_default().trim().to_string(),
    }
}

/// `build: PATH` as the mapping it stands for.
fn build_mapping(v: Value) -> Mapping {
    match v {
        Value::Mapping(m) => m,
        Value::String(context) => Mapping::from_iter([(Value::from("context"), Value::String(context))]),
        _ => Mapping::new(),
    }
}

/// `depends_on: [a, b]` as the mapping it stands for (each started first).
fn depends_mapping(v: Value) -> Mapping {
    match v {
        Value::Mapping(m) => m,
        Value::Sequence(names) => names
            .into_iter()
            .map(|name| {
                let started = Mapping::from_iter([(Value::from("condition"), Value::from("service_started"))]);
                (name, Value::Mapping(started))
            })
            .collect(),
        _ => Mapping::new(),
    }
}

/// A list, a lone value as a list of one.
fn list_of(v: Value) -> Vec<Value> {
    match v {
        Value::Sequence(items) => items,
        Value::Null => Vec::new(),
        other => vec![other],
    }
}

/// `over`'s entries after `base`'s, each entry once.
fn appended(mut base: Vec<Value>, over: Vec<Value>) -> Value {
    for item in over {
        if !base.contains(&item) {
            base.push(item);
        }
    }
    Value::Sequence(base)
}

/// Mounts merged by target: a later mount of the same path replaces the earlier one.
fn by_target(mut base: Vec<Value>, over: Vec<Value>) -> Value {
    for item in over {
        let target = mount_target(&item);
        match base.iter().position(|b| target.is_some() && mount_target(b) == target) {
            Some(i) => base[i] = item,
            None => base.push(item),
        }
    }
    Value::Sequence(base)
}

/// Where a mount lands: the long syntax's `target`, the short one's second part (or its
/// only part, for an anonymous volume).
fn mount_target(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => {
            let parts: Vec<&str> = s.split(':').collect();
            Some(parts.get(1).or(parts.first()).map(|p| p.to_string()).unwrap_or_default())
        }
        Value::Mapping(_) => v.get("target").and_then(Value::as_str).map(str::to_string),
        _ => None,
    }
}

/// `KEY=VALUE` lists or mappings merged by `KEY`, the later value winning; a mapping when
/// both are mappings, else a list of `KEY=VALUE` (`KEY` alone where it had no value).
fn by_name(base: Value, over: Value) -> Value {
    let both_mappings = base.is_mapping() && over.is_mapping();
    let mut entries = named_entries(base);
    for (name, value) in named_entries(over) {
        match entries.iter_mut().find(|(n, _)| *n == name) {
            Some(entry) => entry.1 = value,
            None => entries.push((name, value)),
        }
    }
    if both_mappings {
        return Value::Mapping(entries.into_iter().map(|(k, v)| (Value::String(k), v)).collect());
    }
    Value::Sequence(
        entries
            .into_iter()
            .map(|(k, v)| match scalar_text(&v) {
                Some(text) => Value::String(format!("{k}={text}")),
                None => Value::String(k),
            })
            .collect(),
    )
}

/// The `(name, value)` pairs of a `KEY=VALUE` list or a mapping (`Null` for no value).
fn named_entries(v: Value) -> Vec<(String, Value)> {
    match v {
        Value::Mapping(m) => m.into_iter().map(|(k, v)| (key_text(&k), v)).collect(),
        Value::Sequence(items) => items
            .into_iter()
            .filter_map(|item| {
                let text = scalar_text(&item)?;
                Some(match text.split_once('=') {
                    Some((k, v)) => (k.to_string(), Value::String(v.to_string())),
                    None => (text, Value::Null),
                })
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// A scalar as text; `None` for `Null` and for collections.
fn scalar_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

#[cfg(test)]
#[path = "merge_tests.rs"]
mod tests;
