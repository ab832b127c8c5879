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

use serde_json::{Map, Value as Json};
use serde_yaml::Value as Yaml;

use super::{ArgSpec, ArgType, ToolSpec};

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

/// Converts and checks one value; pushes an error and returns `None` when it does not
/// fit.
fn coerce(arg: &ArgSpec, value: Yaml, name: &str, errors: &mut Vec<String>) -> Option<Json> {
    let result = match arg.ty {
        ArgType::String => to_string(value, name).and_then(|s| check_enum(arg, s, name)),
        ArgType::Integer => to_integer(value, name),
        ArgType::Number => to_number(value, name),
        ArgType::Boolean => to_bool(value, name),
        ArgType::List => match value {
            Yaml::Sequence(items) => {
                let mut out = Vec::with_capacity(items.len());
                let mut ok = true;
                for (i, item) in items.into_iter().enumerate() {
                    let item_name = format!("{name}[{i}]");
                    let converted = match arg.items {
                        None => to_json(untag(item), &item_name),
                        Some(ty) => {
                            let item_spec = ArgSpec {
                                name: String::new(),
                                ty,
                                required: false,
                                description: String::new(),
                                default: None,
                                enum_values: Vec::new(),
                                required_for: Vec::new(),
                                applies_to: Vec::new(),
                                items: None,
                                fields: arg.fields.clone(),
                            };
                            match coerce(&item_spec, untag(item), &item_name, errors) {
                                Some(json) => Ok(json),
                                None => {
                                    ok = false;
                                    continue;
                                }
                            }
                        }
                    };
                    match converted {
                        Ok(json) => out.push(json),
                        Err(e) => {
                            errors.push(e);
                            ok = false;
                        }
                    }
                }
                return ok.then_some(Json::Array(out));
            }
            other => Err(format!(
                "`{name}` must be a list (one `- item` line per element, indented under \
                 `{name}:`), but it is {}",
                describe(&other)
            )),
        },
        ArgType::Object => match value {
            Yaml::Mapping(mapping) if !arg.fields.is_empty() => {
                let before = errors.len();
                let map =
                    validate_mapping(&arg.fields, None, mapping, &format!("{name}."), &format!("`{name}`"), errors);
                return (errors.len() == before).then_some(Json::Object(map));
            }
            Yaml::Mapping(mapping) => to_json(Yaml::Mapping(mapping), name),
            other => Err(format!(
                "`{name}` must be a mapping (`key: value` lines indented under `{name}:`), \
                 but it is {}",
                describe(&other)
            )),
        },
    };
    match result {
        Ok(json) => Some(json),
        Err(e) => {
            errors.push(e);
            None
        }
    }
}

fn to_string(value: Yaml, name: &str) -> Result<String, String> {
    match value {
        Yaml::String(s) => Ok(s),
        Yaml::Number(n) => Ok(n.to_string()),
        Yaml::Bool(b) => Ok(b.to_string()),
        other => Err(format!(
            "`{name}` must be a string, but it is {}; if the text contains `: ` or starts \
             with `[`, `{{`, `*`, `&`, `!` or a quote, put it in quotes or write it as a `|` \
             block on the following, indented lines",
            describe(&other)
        )),
    }
}

fn check_enum(arg: &ArgSpec, value: String, name: &str) -> Result<Json, String> {
    if arg.enum_values.is_empty() || arg.enum_values.contains(&value) {
        return Ok(Json::String(value));
    }
    let wanted = value.trim();
    if let Some(canonical) =
        arg.enum_values.iter().find(|v| v.eq_ignore_ascii_case(wanted) || v.replace('_', "-") == wanted)
    {
        return Ok(Json::String(canonical.clone()));
    }
    Err(format!("`{name}` must be one of: {}; got `{}`", arg.enum_values.join(", "), shorten(&value)))
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

fn to_integer(value: Yaml, name: &str) -> Result<Json, String> {
    let bad = |what: &str| format!("`{name}` must be a whole number (an integer such as 60), but it is {what}");
    match value {
        Yaml::Number(n) => {
            if let Some(i) = n.as_i64() {
                Ok(Json::from(i))
            } else if let Some(u) = n.as_u64() {
                Ok(Json::from(u))
            } else {
                match n.as_f64() {
                    Some(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => Ok(Json::from(f as i64)),
                    _ => Err(bad(&format!("`{n}`"))),
                }
            }
        }
        Yaml::String(s) => {
            let t = s.trim();
            if let Ok(i) = t.parse::<i64>() {
                Ok(Json::from(i))
            } else if let Ok(u) = t.parse::<u64>() {
                Ok(Json::from(u))
            } else {
                Err(bad(&format!("the text `{}`", shorten(&s))))
            }
        }
        other => Err(bad(describe(&other))),
    }
}

fn to_number(value: Yaml, name: &str) -> Result<Json, String> {
    let bad = |what: &str| format!("`{name}` must be a number, but it is {what}");
    let from_f64 = |f: f64, what: &str| serde_json::Number::from_f64(f).map(Json::Number).ok_or_else(|| bad(what));
    match value {
        Yaml::Number(n) => {
            if let Some(i) = n.as_i64() {
                Ok(Json::from(i))
            } else if let Some(u) = n.as_u64() {
                Ok(Json::from(u))
            } else {
                from_f64(n.as_f64().unwrap_or(f64::NAN), &format!("`{n}`"))
            }
        }
        Yaml::String(s) => {
            let what = format!("the text `{}`", shorten(&s));
            let t = s.trim();
            if let Ok(i) = t.parse::<i64>() {
                Ok(Json::from(i))
            } else {
                match t.parse::<f64>() {
                    Ok(f) => from_f64(f, &what),
                    Err(_) => Err(bad(&what)),
                }
            }
        }
        other => Err(bad(describe(&other))),
    }
}

fn to_bool(value: Yaml, name: &str) -> Result<Json, String> {
    let bad = |what: &str| format!("`{name}` must be true or false, but it is {what}");
    match value {
        Yaml::Bool(b) => Ok(Json::Bool(b)),
        Yaml::Number(n) => match n.as_i64() {
            Some(1) => Ok(Json::Bool(true)),
            Some(0) => Ok(Json::Bool(false)),
            _ => Err(bad(&format!("`{n}`"))),
        },
        Yaml::String(s) => match s.trim().to_ascii_lowercase().as_str() {
            "true" | "yes" | "y" | "on" | "1" => Ok(Json::Bool(true)),
            "false" | "no" | "n" | "off" | "0" => Ok(Json::Bool(false)),
            _ => Err(bad(&format!("the text `{}`", shorten(&s)))),
        },
        other => Err(bad(describe(&other))),
    }
}

/// Plain YAML → JSON for untyped list elements and object arguments without fields.
fn to_json(value: Yaml, name: &str) -> Result<Json, String> {
    Ok(match untag(value) {
        Yaml::Null => Json::Null,
        Yaml::Bool(b) => Json::Bool(b),
        Yaml::Number(n) => {
            if let Some(i) = n.as_i64() {
                Json::from(i)
            } else if let Some(u) = n.as_u64() {
                Json::from(u)
            } else {
                n.as_f64()
                    .and_then(serde_json::Number::from_f64)
                    .map(Json::Number)
                    .ok_or_else(|| format!("`{name}` holds `{n}`, which is not a finite number"))?
            }
        }
        Yaml::String(s) => Json::String(s),
        Yaml::Sequence(items) => Json::Array(
            items
                .into_iter()
                .enumerate()
                .map(|(i, v)| to_json(v, &format!("{name}[{i}]")))
                .collect::<Result<_, _>>()?,
        ),
        Yaml::Mapping(mapping) => {
            let mut out = Map::new();
            for (k, v) in mapping {
                let key = match untag(k) {
                    Yaml::String(s) => s,
                    Yaml::Number(n) => n.to_string(),
                    Yaml::Bool(b) => b.to_string(),
                    other => {
                        return Err(format!(
                            "`{name}` has a key that is {}; keys must be plain words",
                            describe(&other)
                        ))
                    }
                };
                let converted = to_json(v, &format!("{name}.{key}"))?;
                out.insert(key, converted);
            }
            Json::Object(out)
        }
        Yaml::Tagged(_) => unreachable!("untag removes tags"),
    })
}

/// A likely intended argument name for an unknown key.
pub(super) fn suggest<'a>(key: &str, args: &'a [ArgSpec]) -> Option<&'a str> {
    let key_l = key.to_ascii_lowercase();
    if key_l.len() > 64 {
        return None;
    }
    let mut best: Option<(usize, &str)> = None;
    for arg in args {
        let name = arg.name.as_str();
        let score = if key_l.contains(name) || (name.contains(&key_l) && key_l.len() >= 3) {
            0
        } else if is_subsequence(name, &key_l) && name.len() >= 3 {
            1
        } else {
            let d = edit_distance(&key_l, name);
            if d > 2 || d >= name.len() {
                continue;
            }
            d + 1
        };
        if best.is_none_or(|(s, _)| score < s) {
            best = Some((score, name));
        }
    }
    best.map(|(_, name)| name)
}

fn is_subsequence(needle: &str, haystack: &str) -> bool {
    let mut rest = haystack.chars();
    needle.chars().all(|c| rest.any(|h| h == c))
}

fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::super::ToolSpecs;
    use super::*;
    use serde_json::json;

    fn specs() -> ToolSpecs {
        ToolSpecs::builtin().unwrap()
    }

    fn check(tool: &str, yaml: &str) -> Result<Map<String, Json>, String> {
        let specs = specs();
        let value: Yaml = serde_yaml::from_str(yaml).unwrap();
        validate_args(specs.get(tool).unwrap(), value)
    }

    #[test]
    fn bash_defaults_are_filled() {
        let args = check("bash", "cmd: ls").unwrap();
        assert_eq!(Json::Object(args), json!({"cmd": "ls", "timeout_secs": 120, "background": false}));
    }

    #[test]
    fn gentle_coercions() {
        let args = check("bash", "cmd: 123\ntimeout_secs: '60'\nbackground: 'yes'").unwrap();
        assert_eq!(args["cmd"], "123");
        assert_eq!(args["timeout_secs"], 60);
        assert_eq!(args["background"], true);
        let args = check("bash", "cmd: true\ntimeout_secs: 30.0\nbackground: 0").unwrap();
        assert_eq!(args["cmd"], "true");
        assert_eq!(args["timeout_secs"], 30);
        assert_eq!(args["background"], false);
        let args = check("bash", "cmd: x\nbackground: \"True\"").unwrap();
        assert_eq!(args["background"], true);
        // Tags are ignored.
        let args = check("bash", "cmd: !shell ls").unwrap();
        assert_eq!(args["cmd"], "ls");
    }

    #[test]
    fn bad_types_are_explained() {
        let err = check("bash", "cmd: ls\ntimeout_secs: soon").unwrap_err();
        assert!(err.contains("`timeout_secs` must be a whole number"), "{err}");
        assert!(err.contains("soon"), "{err}");
        let err = check("bash", "cmd: ls\ntimeout_secs: 1.5").unwrap_err();
        assert!(err.contains("whole number"), "{err}");
        let err = check("bash", "cmd: ls\nbackground: maybe").unwrap_err();
        assert!(err.contains("`background` must be true or false"), "{err}");
        let err = check("bash", "cmd: [a, b]").unwrap_err();
        assert!(err.contains("`cmd` must be a string, but it is a list"), "{err}");
        assert!(err.contains("`|` block"), "{err}");
    }

    #[test]
    fn unknown_key_names_key_and_allowed() {
        let err = check("bash", "cmd: ls\ntimeout: 5").unwrap_err();
        assert!(err.contains("unknown argument `timeout`"), "{err}");
        assert!(err.contains("did you mean `timeout_secs`"), "{err}");
        assert!(err.contains("cmd, timeout_secs, background"), "{err}");
        let err = check("bash", "command: ls").unwrap_err();
        assert!(err.contains("did you mean `cmd`"), "{err}");
        // Both problems are reported at once.
        assert!(err.starts_with("2 problems"), "{err}");
        assert!(err.contains("missing required argument `cmd`"), "{err}");
        let err = check("file", "action: read\nfile_path: /a").unwrap_err();
        assert!(err.contains("did you mean `path`"), "{err}");
        let err = check("bash", "cmd: ls\nzzzz: 1").unwrap_err();
        assert!(!err.contains("did you mean"), "{err}");
    }

    #[test]
    fn non_mapping_body() {
        let specs = specs();
        let err = validate_args(specs.get("file").unwrap(), Yaml::String("x".into())).unwrap_err();
        assert!(err.contains("must be YAML `name: value` lines"), "{err}");
        assert!(err.contains("action, path"), "{err}");
        let err = validate_args(specs.get("finish").unwrap(), serde_yaml::from_str("[1]").unwrap()).unwrap_err();
        assert!(err.contains("it is a list"), "{err}");
    }

    #[test]
    fn empty_body_reports_missing() {
        let err = validate_args(specs().get("finish").unwrap(), Yaml::Null).unwrap_err();
        assert!(err.contains("missing required argument `message`"), "{err}");
        let err = check("finish", "message:").unwrap_err();
        assert!(err.contains("has no value"), "{err}");
    }

    #[test]
    fn enum_checks_and_canonicalises() {
        let err = check("file", "action: delete\npath: /a").unwrap_err();
        assert!(
            err.contains("`action` must be one of: read, write, edit, multi_edit, metadata; got `delete`"),
            "{err}"
        );
        let args = check("file", "action: Read\npath: /a").unwrap();
        assert_eq!(args["action"], "read");
        let args = check("file", "action: multi-edit\npath: /a\nedits: []").unwrap();
        assert_eq!(args["action"], "multi_edit");
    }

    #[test]
    fn required_for_depends_on_discriminator() {
        let err = check("file", "action: write\npath: /a").unwrap_err();
        assert!(err.contains("missing argument `content`, required when `action` is `write`"), "{err}");
        let err = check("file", "action: edit\npath: /a\nold_string: x").unwrap_err();
        assert!(err.contains("`new_string`"), "{err}");
        assert!(check("file", "action: read\npath: /a").is_ok());
        let err = check("todo", "action: complete").unwrap_err();
        assert!(err.contains("`id`"), "{err}");
        assert!(check("todo", "action: view").is_ok());
        let err = check("search", "action: glob").unwrap_err();
        assert!(err.contains("`pattern`"), "{err}");
    }

    #[test]
    fn defaults_only_where_they_apply() {
        let args = check("file", "action: read\npath: /a").unwrap();
        assert_eq!(Json::Object(args), json!({"action": "read", "path": "/a", "offset": 1, "limit": 2000}));
        let args = check("file", "action: write\npath: /a\ncontent: hi").unwrap();
        assert_eq!(Json::Object(args), json!({"action": "write", "path": "/a", "content": "hi"}));
        let args = check("search", "action: ls").unwrap();
        assert_eq!(Json::Object(args), json!({"action": "ls", "path": "."}));
        let args = check("search", "action: grep\npattern: foo").unwrap();
        assert_eq!(Json::Object(args), json!({"action": "grep", "pattern": "foo", "path": ".", "ignore_case": false}));
    }

    #[test]
    fn missing_discriminator() {
        let err = check("file", "path: /a").unwrap_err();
        assert!(err.contains("missing required argument `action`"), "{err}");
        assert!(err.contains("one of: read, write"), "{err}");
        // An invalid discriminator is reported alone (no guesses about the rest).
        let err = check("file", "action: fly\npath: /a").unwrap_err();
        assert!(!err.contains("problems"), "{err}");
    }

    #[test]
    fn multi_edit_items_are_validated() {
        let yaml = "action: multi_edit\npath: /a\nedits:\n  - old_string: a\n    new_string: b\n  - old_string: c\n    new_string: d\n    replace_all: true\n";
        let args = check("file", yaml).unwrap();
        assert_eq!(
            args["edits"],
            json!([
                {"old_string": "a", "new_string": "b", "replace_all": false},
                {"old_string": "c", "new_string": "d", "replace_all": true}
            ])
        );
        let yaml = "action: multi_edit\npath: /a\nedits:\n  - old_string: a\n  - old: c\n    new_string: d\n";
        let err = check("file", yaml).unwrap_err();
        assert!(err.contains("missing required argument `edits[0].new_string`"), "{err}");
        assert!(err.contains("unknown argument `edits[1].old`"), "{err}");
        let err = check("file", "action: multi_edit\npath: /a\nedits: [x]").unwrap_err();
        assert!(err.contains("`edits[0]` must be a mapping"), "{err}");
        let err = check("file", "action: multi_edit\npath: /a\nedits: x").unwrap_err();
        assert!(err.contains("`edits` must be a list"), "{err}");
    }

    #[test]
    fn block_scalars_keep_newlines() {
        let args = check("file", "action: write\npath: /a\ncontent: |\n  line 1\n    line 2\n").unwrap();
        assert_eq!(args["content"], "line 1\n  line 2\n");
    }

    #[test]
    fn untyped_values_convert() {
        assert_eq!(
            to_json(serde_yaml::from_str("{1: [a, 2.5, ~]}").unwrap(), "x").unwrap(),
            json!({"1": ["a", 2.5, null]})
        );
        assert!(to_json(serde_yaml::from_str(".nan").unwrap(), "x").is_err());
        assert!(to_json(serde_yaml::from_str("{[1]: 2}").unwrap(), "x").is_err());
    }

    #[test]
    fn messages_stay_short() {
        let keys: String = (0..50).map(|i| format!("k{i}: 1\n")).collect();
        let err = check("finish", &keys).unwrap_err();
        assert!(err.starts_with("51 problems"), "{err}");
        assert!(err.ends_with("… and 43 more"), "{err}");
        let long_key = format!("{}: 1", "x".repeat(1000));
        let err = check("finish", &format!("message: a\n{long_key}")).unwrap_err();
        assert!(err.len() < 300, "{}", err.len());
    }

    #[test]
    fn helpers() {
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("", "ab"), 2);
        assert!(is_subsequence("cmd", "command"));
        assert!(!is_subsequence("cmd", "mcd"));
        assert_eq!(shorten(&"é".repeat(100)).chars().count(), 31);
    }
}
