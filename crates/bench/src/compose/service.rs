//! One service of a compose file: its image, process, environment, mounts, ports,
//! user and privileges, health check and dependencies. Keys a trial does not honour
//! are collected for the task's notice.

use std::time::Duration;

use serde_yaml::Value;

use super::{envfile, mounts, ports, Bad, BadReason, ComposePaths, HealthCheck};
use super::{Service, TaskError};

/// Service keys a trial honours.
const HANDLED: [&str; 20] = [
    "build",
    "image",
    "command",
    "entrypoint",
    "environment",
    "env_file",
    "working_dir",
    "healthcheck",
    "depends_on",
    "volumes",
    "tmpfs",
    "ports",
    "user",
    "privileged",
    "cap_add",
    "cap_drop",
    "shm_size",
    "init",
    "hostname",
    "extra_hosts",
];

/// Service keys that are the harness's business: every trial names its containers,
/// puts its services on one network of its own and applies the run's limits; exposed
/// ports are reachable on that network anyway; there is no terminal to attach.
const HARNESS: [&str; 6] = ["container_name", "networks", "deploy", "expose", "stdin_open", "tty"];

/// What parsing a compose file leaves for the task's notices.
#[derive(Debug, Default)]
pub(super) struct Found {
    /// Keys not honoured, named in full (`services.db.restart`).
    pub ignored: Vec<String>,
    /// Other things the harness does differently, one sentence each.
    pub notes: Vec<String>,
}

impl Found {
    /// One notice naming every ignored key, then the other notes.
    pub fn into_notices(self) -> Vec<String> {
        let mut out = Vec::new();
        if !self.ignored.is_empty() {
            out.push(format!("compose: ignoring {}", self.ignored.join(", ")));
        }
        out.extend(self.notes.into_iter().map(|n| format!("compose: {n}")));
        out
    }
}

/// What every service of one file shares.
pub(super) struct Ctx<'a> {
    pub paths: ComposePaths<'a>,
    /// The named volumes declared at the top level.
    pub volumes: &'a [String],
}

/// Parses one service (`body` interpolated, `raw` as written); `agent` says whether it is
/// the agent's.
#[allow(clippy::too_many_arguments)]
pub(super) fn parse_service(
    name: &str,
    body: &Value,
    raw: &Value,
    ctx: &Ctx,
    agent: bool,
    found: &mut Found,
    bad: Bad,
) -> Result<Service, TaskError> {
    for key in body.as_mapping().into_iter().flat_map(|m| m.keys()).filter_map(Value::as_str) {
        if !HANDLED.contains(&key) && !HARNESS.contains(&key) && !key.starts_with("x-") {
            found.ignored.push(format!("services.{name}.{key}"));
        }
    }
    let mut service = Service::new(name, super::build::image_of(body, ctx, bad)?);
    service.command = argv(body.get("command"), "command", bad, |s| vec!["sh".into(), "-c".into(), s.to_string()])?;
    let entrypoint = argv(body.get("entrypoint"), "entrypoint", bad, split_words)?;
    if agent && entrypoint.is_some() {
        found
            .notes
            .push(format!("services.{name}.entrypoint is ignored: the agent's container runs the sandbox's own init"));
    } else {
        service.entrypoint = entrypoint;
    }
    let mut environment = envfile::load(body.get("env_file"), ctx, name, found, bad)?;
    envfile::merge_env(&mut environment, environment_of(body.get("environment"), bad)?);
    service.environment = environment;
    service.working_dir = body.get("working_dir").and_then(Value::as_str).map(str::to_string);
    service.healthcheck = match body.get("healthcheck") {
        None => None,
        Some(h) => parse_healthcheck(h, &|r| bad("healthcheck", r))?,
    };
    service.depends_on = match body.get("depends_on") {
        None => Vec::new(),
        Some(Value::Sequence(items)) => strings(items).ok_or_else(|| bad("depends_on", "expected names"))?,
        Some(Value::Mapping(m)) => m.keys().filter_map(|k| k.as_str().map(str::to_string)).collect(),
        Some(_) => return Err(bad("depends_on", "expected a list or a mapping")),
    };
    service.mounts = mounts::parse_volumes(body.get("volumes"), raw.get("volumes"), ctx, name, found, bad)?;
    service.mounts.extend(mounts::parse_tmpfs(body.get("tmpfs"), bad)?);
    service.ports = ports::parse_ports(body.get("ports"), name, found, bad)?;
    service.user = scalar(body.get("user"), "user", bad)?;
    match body.get("privileged") {
        None | Some(Value::Null) | Some(Value::Bool(false)) => {}
        Some(Value::Bool(true)) => {
            return Err(bad(
                "privileged",
                "privileged containers are refused: they get every device and capability of the host",
            ))
        }
        Some(_) => return Err(bad("privileged", "expected true or false")),
    }
    service.cap_add = list(body.get("cap_add"), "cap_add", bad)?;
    service.cap_drop = list(body.get("cap_drop"), "cap_drop", bad)?;
    service.shm_size = match body.get("shm_size") {
        None | Some(Value::Null) => None,
        Some(v) => Some(parse_size(v).ok_or_else(|| bad("shm_size", "expected a size like `256m` or a byte count"))?),
    };
    let init = match body.get("init") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(bad("init", "expected true or false")),
    };
    if agent && init {
        found.notes.push(format!("services.{name}.init is ignored: the agent's container runs the sandbox's own init"));
    } else {
        service.init = init;
    }
    service.hostname = scalar(body.get("hostname"), "hostname", bad)?;
    service.extra_hosts = extra_hosts(body.get("extra_hosts"), bad)?;
    Ok(service)
}

/// A command or entrypoint: a list as is, a string through `from_string`.
fn argv(
    v: Option<&Value>,
    field: &str,
    bad: Bad,
    from_string: impl Fn(&str) -> Vec<String>,
) -> Result<Option<Vec<String>>, TaskError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(from_string(s))),
        Some(Value::Sequence(items)) => Ok(Some(strings(items).ok_or_else(|| bad(field, "expected strings"))?)),
        Some(_) => Err(bad(field, "expected a string or a list")),
    }
}

/// `environment` as `KEY=VALUE` strings (a list as is, a mapping joined).
fn environment_of(v: Option<&Value>, bad: Bad) -> Result<Vec<String>, TaskError> {
    Ok(match v {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Sequence(items)) => strings(items).ok_or_else(|| bad("environment", "expected strings"))?,
        Some(Value::Mapping(m)) => m
            .iter()
            .map(|(k, v)| {
                let v = match v {
                    Value::String(s) => s.clone(),
                    Value::Null => String::new(),
                    other => serde_yaml::to_string(other).unwrap_or_default().trim().to_string(),
                };
                format!("{}={v}", k.as_str().unwrap_or_default())
            })
            .collect(),
        Some(_) => return Err(bad("environment", "expected a list or a mapping")),
    })
}

/// A string (or number) field.
fn scalar(v: Option<&Value>, field: &str, bad: Bad) -> Result<Option<String>, TaskError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(Value::Number(n)) => Ok(Some(n.to_string())),
        Some(_) => Err(bad(field, "expected a string")),
    }
}

/// A list of strings (a lone string counts as a list of one).
fn list(v: Option<&Value>, field: &str, bad: Bad) -> Result<Vec<String>, TaskError> {
    match v {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(s)) => Ok(vec![s.clone()]),
        Some(Value::Sequence(items)) => strings(items).ok_or_else(|| bad(field, "expected strings")),
        Some(_) => Err(bad(field, "expected a list")),
    }
}

/// `extra_hosts` as `name:ip` (a list of `name:ip` or `name=ip`, or a mapping).
fn extra_hosts(v: Option<&Value>, bad: Bad) -> Result<Vec<String>, TaskError> {
    let pairs: Vec<(String, String)> = match v {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Sequence(items)) => strings(items)
            .ok_or_else(|| bad("extra_hosts", "expected `name:ip` strings"))?
            .iter()
            .map(|e| {
                let (name, ip) = e.split_once('=').or_else(|| e.split_once(':')).unwrap_or((e, ""));
                (name.trim().to_string(), ip.trim().to_string())
            })
            .collect(),
        Some(Value::Mapping(m)) => m
            .iter()
            .map(|(k, v)| {
                let ip = strings(std::slice::from_ref(v)).and_then(|v| v.into_iter().next()).unwrap_or_default();
                (k.as_str().unwrap_or_default().to_string(), ip)
            })
            .collect(),
        Some(_) => return Err(bad("extra_hosts", "expected a list or a mapping")),
    };
    pairs
        .into_iter()
        .map(|(name, ip)| {
            if name.is_empty() || ip.is_empty() {
                Err(bad("extra_hosts", "each entry needs a name and an address (`name:ip`)"))
            } else {
                Ok(format!("{name}:{ip}"))
            }
        })
        .collect()
}

pub(super) fn strings(items: &[Value]) -> Option<Vec<String>> {
    items
        .iter()
        .map(|v| match v {
            Value::String(s) => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            Value::Bool(b) => Some(b.to_string()),
            _ => None,
        })
        .collect()
}

/// Splits a string into words as a POSIX shell would (quotes and backslashes; no
/// expansion), which is how compose reads a string entrypoint.
pub(super) fn split_words(s: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                word.extend(chars.by_ref().take_while(|&c| c != '\''));
            }
            '"' => {
                in_word = true;
                while let Some(c) = chars.next() {
                    match c {
                        '"' => break,
                        '\\' => word.extend(chars.next()),
                        c => word.push(c),
                    }
                }
            }
            '\\' => {
                in_word = true;
                word.extend(chars.next());
            }
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    words
}

/// A byte size: a number of bytes, or a string like `64m`, `1.5gb`, `512k`, `100b`.
pub(super) fn parse_size(v: &Value) -> Option<i64> {
    if let Some(n) = v.as_i64() {
        return (n >= 0).then_some(n);
    }
    let s = v.as_str()?.trim().to_ascii_lowercase();
    let s = s.strip_suffix('b').unwrap_or(&s);
    let (num, mult) = match s.chars().last()? {
        'k' => (&s[..s.len() - 1], 1i64 << 10),
        'm' => (&s[..s.len() - 1], 1 << 20),
        'g' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    let n: f64 = num.trim().parse().ok()?;
    (n.is_finite() && n >= 0.0).then_some((n * mult as f64) as i64)
}

pub(super) fn parse_duration(v: Option<&Value>, default: Duration, bad: BadReason) -> Result<Duration, TaskError> {
    let Some(v) = v else { return Ok(default) };
    if let Some(n) = v.as_f64() {
        return Ok(Duration::from_secs_f64(n.max(0.0)));
    }
    let s = v.as_str().ok_or_else(|| bad("a duration must be like `10s`"))?.trim();
    let (num, unit) = s.split_at(s.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(s.len()));
    let n: f64 = num.trim().parse().map_err(|_| bad(&format!("`{s}` is not a duration like `10s`")))?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" | "" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(bad(&format!("`{s}`: unknown unit (use ms, s, m or h)"))),
    };
    Ok(Duration::from_secs_f64(secs.max(0.0)))
}

fn parse_healthcheck(h: &Value, bad: BadReason) -> Result<Option<HealthCheck>, TaskError> {
    if h.get("disable").and_then(Value::as_bool) == Some(true) {
        return Ok(None);
    }
    let argv = match h.get("test") {
        Some(Value::String(s)) => vec!["sh".to_string(), "-c".into(), s.clone()],
        Some(Value::Sequence(items)) => {
            let v = strings(items).ok_or_else(|| bad("`test` must hold strings"))?;
            match v.first().map(String::as_str) {
                Some("NONE") => return Ok(None),
                Some("CMD") => v[1..].to_vec(),
                Some("CMD-SHELL") => vec!["sh".into(), "-c".into(), v[1..].join(" ")],
                _ => v,
            }
        }
        _ => return Err(bad("`test` is missing")),
    };
    if argv.is_empty() {
        return Err(bad("`test` names no command"));
    }
    let interval = parse_duration(h.get("interval"), Duration::from_secs(30), bad)?;
    let timeout = parse_duration(h.get("timeout"), Duration::from_secs(30), bad)?;
    let start = parse_duration(h.get("start_period"), Duration::ZERO, bad)?;
    let retries = h.get("retries").and_then(Value::as_u64).unwrap_or(3).max(1) as u32;
    // The harness polls more often than Docker would, so it grants at least a minute.
    let deadline = (start + (interval + timeout) * retries).max(Duration::from_secs(60));
    Ok(Some(HealthCheck { argv, deadline }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_sizes_and_durations() {
        assert_eq!(split_words(r#"/entry.sh -p "a b" 'c d' e\ f"#), ["/entry.sh", "-p", "a b", "c d", "e f"]);
        assert_eq!(split_words("  "), Vec::<String>::new());
        assert_eq!(split_words("x ''"), ["x", ""]);
        assert_eq!(parse_size(&Value::from("64m")), Some(64 << 20));
        assert_eq!(parse_size(&Value::from("1gb")), Some(1 << 30));
        assert_eq!(parse_size(&Value::from("1.5k")), Some(1536));
        assert_eq!(parse_size(&Value::from(1000)), Some(1000));
        assert_eq!(parse_size(&Value::from("lots")), None);
        let bad =
            |r: &str| TaskError::BadField { path: "dc.yaml".into(), field: "healthcheck".into(), reason: r.into() };
        assert_eq!(parse_duration(Some(&Value::from("1.5m")), Duration::ZERO, &bad).unwrap(), Duration::from_secs(90));
        let e = parse_duration(Some(&Value::from("3 weeks")), Duration::ZERO, &bad).unwrap_err();
        assert!(e.to_string().contains("`3 weeks`: unknown unit"), "{e}");
    }
}
