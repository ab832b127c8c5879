//! Conversion of one argument value to its declared type, with the gentle coercions
//! listed in the module docs of `validate`, and plain YAML → JSON for untyped values.

use serde_json::{Map, Value as Json};
use serde_yaml::Value as Yaml;

use super::{describe, shorten, untag, validate_mapping};
use crate::tools::{ArgSpec, ArgType};

/// Converts and checks one value; pushes an error and returns `None` when it does not
/// fit.
pub(super) fn coerce(arg: &ArgSpec, value: Yaml, name: &str, errors: &mut Vec<String>) -> Option<Json> {
    let result = match arg.ty {
        ArgType::String => match value {
            Yaml::Sequence(items) if arg.shell_command => list_as_command(items).map(Json::String).ok_or_else(|| {
                format!("`{name}` must be a string (a list is read only when all its items are strings)")
            }),
            value if arg.shell_command => to_string(value, name).map(|s| Json::String(unnest_command(&arg.name, s))),
            value => to_string(value, name).and_then(|s| check_enum(arg, s, name)),
        },
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
                                shell_command: false,
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

/// A list given for a shell command: an argv when the first item is one word, else the
/// lines of a script (see [`ArgSpec::shell_command`]).
fn list_as_command(items: Vec<Yaml>) -> Option<String> {
    let items: Vec<String> = items
        .into_iter()
        .map(|i| match untag(i) {
            Yaml::String(s) => Some(s),
            Yaml::Number(n) => Some(n.to_string()),
            _ => None,
        })
        .collect::<Option<_>>()?;
    let first = items.first()?;
    if first.split_whitespace().count() == 1 && first.trim() == first {
        Some(items.iter().map(|s| quote_word(s)).collect::<Vec<_>>().join(" "))
    } else {
        Some(items.join("\n"))
    }
}

/// A command that is the whole call written again as JSON (`{"cmd": "chmod +x a.sh",
/// "timeout_secs": 60}` inside `cmd`: the 1.5B did this six times in a row in issue 49's
/// ablation, and bash answered 127 each time): the command inside it. No shell command
/// is a JSON object (`{ ls; }` is not JSON), so nothing else changes.
fn unnest_command(key: &str, s: String) -> String {
    let trimmed = s.trim();
    if trimmed.starts_with('{') {
        if let Ok(Json::Object(inner)) = serde_json::from_str::<Json>(trimmed) {
            if let Some(Json::String(cmd)) = inner.get(key) {
                return cmd.clone();
            }
        }
    }
    s
}

/// One argv word for bash: as is when it holds nothing bash would read specially.
fn quote_word(s: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_-./=:@%+,".contains(c);
    if !s.is_empty() && s.chars().all(plain) {
        s.to_string()
    } else {
        agent_sandbox::shell_quote(s)
    }
}

fn to_string(value: Yaml, name: &str) -> Result<String, String> {
    match value {
        Yaml::String(s) => Ok(s),
        Yaml::Number(n) => Ok(n.to_string()),
        Yaml::Bool(b) => Ok(b.to_string()),
        other => Err(format!(
            "`{name}` must be a string, but it is {}. Several lines go in one string (in JSON \
             joined with \\n). In YAML, text that contains `: ` or starts with `[`, `{{`, `*`, \
             `&`, `!` or a quote must be quoted or written as a `|` block on the following, \
             indented lines",
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
pub(super) fn to_json(value: Yaml, name: &str) -> Result<Json, String> {
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
