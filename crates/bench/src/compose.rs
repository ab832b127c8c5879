//! The part of a task's `docker-compose.yaml` a trial needs: services, their builds,
//! commands, environment, health checks and start order, in Terminal-Bench 1's dialect
//! (the agent works in `client`, `T_BENCH_*` variables) and Harbor's, which Terminal-Bench
//! 2 tasks are written in (the agent works in `main`; `CONTEXT_DIR`, `TEST_DIR`, …).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_yaml::Value;

use super::error::TaskError;

/// The service the agent works in (Terminal-Bench 1's convention).
pub const CLIENT: &str = "client";
/// The service the agent works in under Harbor (Terminal-Bench 2).
pub const MAIN: &str = "main";

/// Which harness wrote the compose file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// Terminal-Bench 1: `client`, `${T_BENCH_TEST_DIR}` and friends.
    Tb1,
    /// Harbor (Terminal-Bench 2): `main`, `${CONTEXT_DIR}`, `${TEST_DIR}`,
    /// `${MAIN_IMAGE_NAME}`, `${CPUS}`, `${MEMORY}`.
    Harbor,
}

impl Dialect {
    /// The name of the agent's service.
    pub fn agent_service(self) -> &'static str {
        match self {
            Dialect::Tb1 => CLIENT,
            Dialect::Harbor => MAIN,
        }
    }
}
/// Where the tests are copied in the agent's container.
pub const TEST_DIR: &str = "/tests";
/// Where Terminal-Bench mounts its logs in the container.
pub const LOGS_DIR: &str = "/logs";

/// How a service's image is made.
#[derive(Debug, Clone, PartialEq)]
pub enum ImageSource {
    /// Built from a Dockerfile in a context directory.
    Build { context: PathBuf, dockerfile: PathBuf },
    /// A named image, used as is (through the image map).
    Named(String),
}

/// A service's health check, run by the harness inside the container.
#[derive(Debug, Clone, PartialEq)]
pub struct HealthCheck {
    /// argv of the check.
    pub argv: Vec<String>,
    /// How long the service may take to become healthy.
    pub deadline: Duration,
}

/// One service of the compose file.
#[derive(Debug, Clone, PartialEq)]
pub struct Service {
    pub name: String,
    pub image: ImageSource,
    /// Command replacing the image's (not used for the client, which runs our init).
    pub command: Option<Vec<String>>,
    /// `KEY=VALUE` pairs, Terminal-Bench variables substituted.
    pub environment: Vec<String>,
    pub working_dir: Option<String>,
    pub healthcheck: Option<HealthCheck>,
    /// Services that must be up (and healthy, when they have a check) first.
    pub depends_on: Vec<String>,
}

/// A parsed compose file.
#[derive(Debug, Clone, PartialEq)]
pub struct Compose {
    pub path: PathBuf,
    /// Every service, the agent's included, in start order (dependencies first).
    pub services: Vec<Service>,
    /// The agent's service (`client` or `main`); also its name on the task's network.
    pub agent_service: String,
}

impl Compose {
    /// The agent's service.
    pub fn client(&self) -> Option<&Service> {
        self.services.iter().find(|s| s.name == self.agent_service)
    }

    /// The other services, in start order.
    pub fn sidecars(&self) -> impl Iterator<Item = &Service> {
        self.services.iter().filter(|s| s.name != self.agent_service)
    }

    /// Parses `path`; `dir` is the directory build contexts are relative to.
    pub fn load(path: &Path, dir: &Path, dialect: Dialect) -> Result<Compose, TaskError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path)
            .map_err(|e| TaskError::Invalid { path: shown.clone(), reason: format!("cannot read: {e}") })?;
        Self::parse(&text, &shown, dir, dialect)
    }

    /// Parses compose text; `shown` names the file in errors.
    pub fn parse(text: &str, shown: &str, dir: &Path, dialect: Dialect) -> Result<Compose, TaskError> {
        let doc: Value = serde_yaml::from_str(text).map_err(|e| TaskError::Invalid {
            path: shown.to_string(),
            reason: match e.location() {
                Some(l) => format!("line {}: {e}", l.line()),
                None => e.to_string(),
            },
        })?;
        let bad = |field: String, reason: &str| TaskError::BadField {
            path: shown.to_string(),
            field,
            reason: reason.to_string(),
        };
        let services = doc
            .get("services")
            .and_then(Value::as_mapping)
            .ok_or_else(|| TaskError::MissingField { path: shown.to_string(), field: "services".into() })?;
        let mut parsed = Vec::new();
        for (name, body) in services {
            let name = name.as_str().ok_or_else(|| bad("services".into(), "a service name is not a string"))?;
            parsed.push(parse_service(name, body, dir, dialect, &|f, r| bad(format!("services.{name}.{f}"), r))?);
        }
        let agent = dialect.agent_service();
        if !parsed.iter().any(|s| s.name == agent) {
            return Err(TaskError::MissingField { path: shown.to_string(), field: format!("services.{agent}") });
        }
        let services = start_order(parsed, &|r| bad("depends_on".into(), r))?;
        Ok(Compose { path: PathBuf::from(shown), services, agent_service: agent.to_string() })
    }
}

/// The error for a field (named relative to the service) with the reason given.
type Bad<'a> = &'a dyn Fn(&str, &str) -> TaskError;
/// The error for one field, already chosen, with the reason given.
type BadReason<'a> = &'a dyn Fn(&str) -> TaskError;

fn parse_service(name: &str, body: &Value, dir: &Path, dialect: Dialect, bad: Bad) -> Result<Service, TaskError> {
    let sub = |s: &str| substitute(s, dialect);
    let image = match body.get("build") {
        Some(Value::String(ctx)) => {
            let context = dir.join(sub(ctx));
            ImageSource::Build { dockerfile: context.join("Dockerfile"), context }
        }
        Some(b @ Value::Mapping(_)) => {
            let context = dir.join(sub(b.get("context").and_then(Value::as_str).unwrap_or(".")));
            let file = sub(b.get("dockerfile").and_then(Value::as_str).unwrap_or("Dockerfile"));
            ImageSource::Build { dockerfile: context.join(file), context }
        }
        Some(_) => return Err(bad("build", "expected a path or a mapping with `context` and `dockerfile`")),
        None => match body.get("image").and_then(Value::as_str) {
            Some(img) if !img.contains("${") => ImageSource::Named(img.to_string()),
            _ => return Err(bad("build", "a service needs `build` or a literal `image`")),
        },
    };
    let command = match body.get("command") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(vec!["sh".to_string(), "-c".into(), s.clone()]),
        Some(Value::Sequence(items)) => Some(strings(items).ok_or_else(|| bad("command", "expected strings"))?),
        Some(_) => return Err(bad("command", "expected a string or a list")),
    };
    let environment = match body.get("environment") {
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
    };
    let environment = environment.iter().map(|e| sub(e)).collect();
    let healthcheck = match body.get("healthcheck") {
        None => None,
        Some(h) => parse_healthcheck(h, &|r| bad("healthcheck", r))?,
    };
    let depends_on = match body.get("depends_on") {
        None => Vec::new(),
        Some(Value::Sequence(items)) => strings(items).ok_or_else(|| bad("depends_on", "expected names"))?,
        Some(Value::Mapping(m)) => m.keys().filter_map(|k| k.as_str().map(str::to_string)).collect(),
        Some(_) => return Err(bad("depends_on", "expected a list or a mapping")),
    };
    Ok(Service {
        name: name.to_string(),
        image,
        command,
        environment,
        working_dir: body.get("working_dir").and_then(Value::as_str).map(str::to_string),
        healthcheck,
        depends_on,
    })
}

fn strings(items: &[Value]) -> Option<Vec<String>> {
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

/// Replaces the harness's variables a container needs; others become empty. Harbor's
/// `CONTEXT_DIR` is the environment folder itself (contexts are relative to it); its
/// image name, CPU and memory variables are the harness's business (our limits apply).
fn substitute(s: &str, dialect: Dialect) -> String {
    let vars = match dialect {
        Dialect::Tb1 => BTreeMap::from([("T_BENCH_TEST_DIR", TEST_DIR), ("T_BENCH_CONTAINER_LOGS_PATH", LOGS_DIR)]),
        Dialect::Harbor => BTreeMap::from([("TEST_DIR", TEST_DIR), ("CONTEXT_DIR", "."), ("LOGS_DIR", LOGS_DIR)]),
    };
    let mut out = String::new();
    let mut rest = s;
    while let Some(at) = rest.find("${") {
        out.push_str(&rest[..at]);
        match rest[at..].find('}') {
            Some(end) => {
                let name = &rest[at + 2..at + end];
                out.push_str(vars.get(name).copied().unwrap_or(""));
                rest = &rest[at + end + 1..];
            }
            None => {
                out.push_str(&rest[at..]);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

fn parse_duration(v: Option<&Value>, default: Duration, bad: BadReason) -> Result<Duration, TaskError> {
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

/// Orders services so that dependencies start first; rejects unknown names and cycles.
fn start_order(services: Vec<Service>, bad: BadReason) -> Result<Vec<Service>, TaskError> {
    let names: Vec<String> = services.iter().map(|s| s.name.clone()).collect();
    for s in &services {
        if let Some(d) = s.depends_on.iter().find(|d| !names.contains(d)) {
            return Err(bad(&format!("`{}` depends on `{d}`, which is not a service", s.name)));
        }
    }
    let mut pending = services;
    let mut ordered: Vec<Service> = Vec::new();
    while !pending.is_empty() {
        let ready = pending.iter().position(|s| s.depends_on.iter().all(|d| ordered.iter().any(|o| &o.name == d)));
        match ready {
            Some(i) => ordered.push(pending.remove(i)),
            None => {
                let left: Vec<&str> = pending.iter().map(|s| s.name.as_str()).collect();
                return Err(bad(&format!("a dependency cycle among {}", left.join(", "))));
            }
        }
    }
    Ok(ordered)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCRAPER: &str = r#"
services:
  client:
    build:
      context: client
      dockerfile: Dockerfile
    image: ${T_BENCH_TASK_DOCKER_CLIENT_IMAGE_NAME}
    command: [ "sh", "-c", "sleep infinity" ]
    environment:
      - TEST_DIR=${T_BENCH_TEST_DIR}
    depends_on:
      server:
        condition: service_healthy
  server:
    build:
      context: server
    command: [ "python", "./mock_website.py" ]
    healthcheck:
      test: [ "CMD", "curl", "-f", "http://localhost:8000" ]
      interval: 10s
      timeout: 5s
      retries: 1
"#;

    #[test]
    fn parses_a_two_service_file_in_start_order() {
        let c = Compose::parse(SCRAPER, "dc.yaml", Path::new("/t"), Dialect::Tb1).unwrap();
        let names: Vec<&str> = c.services.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["server", "client"]);
        let client = c.client().unwrap();
        assert_eq!(client.environment, ["TEST_DIR=/tests"]);
        assert_eq!(
            client.image,
            ImageSource::Build { context: "/t/client".into(), dockerfile: "/t/client/Dockerfile".into() }
        );
        let server = c.sidecars().next().unwrap();
        assert_eq!(server.command.as_deref().unwrap(), ["python", "./mock_website.py"]);
        let hc = server.healthcheck.as_ref().unwrap();
        assert_eq!(hc.argv, ["curl", "-f", "http://localhost:8000"]);
        assert_eq!(hc.deadline, Duration::from_secs(60));
    }

    #[test]
    fn errors_name_the_field() {
        let e = Compose::parse("services:\n  server:\n    image: x\n", "dc.yaml", Path::new("/t"), Dialect::Tb1)
            .unwrap_err();
        assert!(e.to_string().contains("services.client"), "{e}");
        let e = Compose::parse("services:\n  client:\n    image: ${X}\n", "dc.yaml", Path::new("/t"), Dialect::Tb1)
            .unwrap_err();
        assert!(e.to_string().contains("services.client.build"), "{e}");
        let text = "services:\n  client:\n    build: .\n    depends_on: [db]\n";
        let e = Compose::parse(text, "dc.yaml", Path::new("/t"), Dialect::Tb1).unwrap_err();
        assert!(e.to_string().contains("depends on `db`"), "{e}");
        let e = Compose::parse("services: [\n", "dc.yaml", Path::new("/t"), Dialect::Tb1).unwrap_err();
        assert!(e.to_string().contains("line"), "{e}");
    }

    #[test]
    fn variables_and_durations() {
        assert_eq!(substitute("A=${T_BENCH_TEST_DIR}/x${NOPE}", Dialect::Tb1), "A=/tests/x");
        assert_eq!(substitute("TEST_DIR=${TEST_DIR}", Dialect::Harbor), "TEST_DIR=/tests");
        let bad =
            |r: &str| TaskError::BadField { path: "dc.yaml".into(), field: "healthcheck".into(), reason: r.into() };
        assert_eq!(parse_duration(Some(&Value::from("1.5m")), Duration::ZERO, &bad).unwrap(), Duration::from_secs(90));
        let e = parse_duration(Some(&Value::from("3 weeks")), Duration::ZERO, &bad).unwrap_err();
        assert!(e.to_string().contains("`3 weeks`: unknown unit"), "{e}");
    }
}
