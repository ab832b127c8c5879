//! Argument validation against a [`ToolSpec`], with error messages written for the
//! model: each says what is wrong and what is expected.
//!
//! Coercions (only where the intent is unambiguous):
//! - string: numbers and booleans become their text (`cmd: 123` → `"123"`);
//! - integer: `"60"`, `" 60 "` and `60.0` become `60`;
//! - number: numeric strings become numbers;
//! - boolean: `"true"/"false"`, `"yes"/"no"`, `"on"/"off"`, `"y"/"n"`, `1`/`0`;
//! - enum values match case-insensitively and are returned in their canonical form;
//! - a key with no value (`path:`) counts as absent;
//! - YAML tags (`!foo value`) are ignored.

mod coerce;
mod suggest;

#[cfg(test)]
mod tests;

use serde_json::{Map, Value as Json};
use serde_yaml::Value as Yaml;

use super::{ArgSpec, ToolSpec};
use coerce::coerce;

pub(super) use suggest::suggest;

/// Validates a parsed YAML body against the tool's spec and returns the arguments as
/// a JSON object with defaults filled in. An empty body counts as an empty mapping.
/// The error lists every problem found, for the model.
pub fn validate_args(spec: &ToolSpec, value: Yaml) -> Result<Map<String, Json>, String> {
    let mapping = match untag(value) {
        Yaml::Null => serde_yaml::Mapping::new(),
        Yaml::Mapping(m) => m,
        other => {
            return Err(format!(
                "the body of <{name}> must be YAML `name: value` lines, one per argument, \
                 but it is {what}; arguments of {name}: {args}",
                name = spec.name,
                what = describe(&other),
                args = arg_list(&spec.arguments),
            ))
        }
    };
    let mut errors = Vec::new();
    let map = validate_mapping(
        &spec.arguments,
        spec.discriminator.as_deref(),
        mapping,
        "",
        &format!("<{}>", spec.name),
        &mut errors,
    );
    const MAX_LISTED: usize = 8;
    match errors.len() {
        0 => Ok(map),
        1 => Err(errors.remove(0)),
        n => {
            let more = n.saturating_sub(MAX_LISTED);
            errors.truncate(MAX_LISTED);
            let mut text = format!("{n} problems:\n- {}", errors.join("\n- "));
            if more > 0 {
                text.push_str(&format!("\n- … and {more} more"));
            }
            Err(text)
        }
    }
}

fn untag(mut value: Yaml) -> Yaml {
    while let Yaml::Tagged(tagged) = value {
        value = tagged.value;
    }
    value
}

fn describe(value: &Yaml) -> &'static str {
    match value {
        Yaml::Null => "empty",
        Yaml::Bool(_) => "a boolean",
        Yaml::Number(_) => "a number",
        Yaml::String(_) => "a plain string",
        Yaml::Sequence(_) => "a list",
        Yaml::Mapping(_) => "a mapping",
        Yaml::Tagged(_) => "a tagged value",
    }
}

fn arg_list(args: &[ArgSpec]) -> String {
    args.iter().map(|a| a.name.as_str()).collect::<Vec<_>>().join(", ")
}

/// Validates one mapping against a list of argument specs. `prefix` is prepended to
/// argument names in messages (e.g. `edits[1].`); `owner` names what the arguments
/// belong to (e.g. `<file>`).
fn validate_mapping(
    args: &[ArgSpec],
    discriminator: Option<&str>,
    mapping: serde_yaml::Mapping,
    prefix: &str,
    owner: &str,
    errors: &mut Vec<String>,
) -> Map<String, Json> {
    let mut given: Vec<Option<Yaml>> = vec![None; args.len()];
    let mut empty_keys: Vec<usize> = Vec::new();
    for (key, value) in mapping {
        let key = match untag(key) {
            Yaml::String(s) => s,
            Yaml::Number(n) => n.to_string(),
            Yaml::Bool(b) => b.to_string(),
            other => {
                errors.push(format!(
                    "argument names must be plain words, but one is {}; arguments of {owner}: {}",
                    describe(&other),
                    arg_list(args)
                ));
                continue;
            }
        };
        let Some(index) = args.iter().position(|a| a.name == key) else {
            let hint = suggest(&key, args).map(|s| format!(" (did you mean `{s}`?)")).unwrap_or_default();
            errors.push(format!(
                "unknown argument `{prefix}{}`{hint}; arguments of {owner}: {}",
                shorten(&key),
                arg_list(args)
            ));
            continue;
        };
        match untag(value) {
            Yaml::Null => empty_keys.push(index),
            value => given[index] = Some(value),
        }
    }

    let mut out = Map::new();
    // The discriminator first: other arguments depend on its value.
    let disc_index = discriminator.and_then(|d| args.iter().position(|a| a.name == d));
    if let Some(di) = disc_index {
        if given[di].is_none() {
            if let Some(value) = infer_discriminator(args, di, &given) {
                given[di] = Some(Yaml::String(value));
            }
        }
    }
    let mut disc_value: Option<String> = None;
    let order = disc_index.into_iter().chain((0..args.len()).filter(|&i| Some(i) != disc_index));
    for index in order {
        let arg = &args[index];
        let name = format!("{prefix}{}", arg.name);
        if let Some(value) = given[index].take() {
            match coerce(arg, value, &name, errors) {
                Some(json) => {
                    if Some(index) == disc_index {
                        disc_value = json.as_str().map(str::to_string);
                    }
                    out.insert(arg.name.clone(), json);
                }
                None if Some(index) == disc_index => {
                    // Without a valid discriminator, requirements that depend on it
                    // cannot be judged; report only what is certain.
                    disc_value = None;
                }
                None => {}
            }
            continue;
        }
        let empty = if empty_keys.contains(&index) { " (the key is there but has no value)" } else { "" };
        if arg.required {
            errors.push(format!("missing required argument `{name}`{empty}: {}", expectation(arg)));
        } else if let (Some(d), Some(dv)) = (discriminator, disc_value.as_deref()) {
            if arg.required_for.iter().any(|v| v == dv) {
                errors.push(format!(
                    "missing argument `{name}`{empty}, required when `{d}` is `{dv}`: {}",
                    expectation(arg)
                ));
                continue;
            }
            if let Some(default) = &arg.default {
                if arg.applies(Some(dv)) {
                    out.insert(arg.name.clone(), default.clone());
                }
            }
        } else if let Some(default) = &arg.default {
            if discriminator.is_none() || arg.applies(None) {
                out.insert(arg.name.clone(), default.clone());
            }
        }
    }
    out
}

/// The discriminator's value when the call left it out but its other arguments say
/// which one it is: the only value whose own arguments were given and whose required
/// ones are all there (`content` alone means `write`), or, when none of the given
/// arguments belongs to a particular value, the first value if it needs nothing
/// (`file` with just a `path` reads it). `None` when that is ambiguous.
fn infer_discriminator(args: &[ArgSpec], disc_index: usize, given: &[Option<Yaml>]) -> Option<String> {
    let values = &args[disc_index].enum_values;
    let given_args: Vec<&ArgSpec> = args
        .iter()
        .zip(given)
        .enumerate()
        .filter(|(i, (_, g))| *i != disc_index && g.is_some())
        .map(|(_, (a, _))| a)
        .collect();
    let fits = |v: &str| {
        given_args.iter().all(|a| a.applies(Some(v)))
            && args
                .iter()
                .all(|a| !a.required_for.iter().any(|r| r == v) || given_args.iter().any(|g| g.name == a.name))
    };
    let own = |v: &str| given_args.iter().any(|a| a.applies_to.iter().chain(&a.required_for).any(|r| r == v));
    let specific: Vec<&String> = values.iter().filter(|v| fits(v) && own(v)).collect();
    match specific.as_slice() {
        [one] => Some((*one).clone()),
        [] if !given_args.iter().any(|a| !a.applies_to.is_empty() || !a.required_for.is_empty()) => {
            values.first().filter(|v| fits(v)).cloned()
        }
        _ => None,
    }
}

/// What an argument should look like, for messages.
fn expectation(arg: &ArgSpec) -> String {
    let mut text = format!("a {}", arg.type_label());
    if !arg.enum_values.is_empty() {
        text.push_str(&format!(", one of: {}", arg.enum_values.join(", ")));
    }
    let description = arg.description.trim();
    if !description.is_empty() {
        text.push_str(" — ");
        text.push_str(description);
    }
    text
}

fn shorten(s: &str) -> String {
    const MAX: usize = 60;
    if s.len() <= MAX {
        return s.to_string();
    }
    let mut end = MAX;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}
