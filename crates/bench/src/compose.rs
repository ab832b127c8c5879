//! The part of a task's `docker-compose.yaml` a trial needs: services, their builds,
//! commands, environment, mounts, ports, privileges, health checks and start order, in
//! Terminal-Bench 1's dialect (the agent works in `client`, `T_BENCH_*` variables) and
//! Harbor's, which Terminal-Bench 2 tasks are written in (the agent works in `main`;
//! `CONTEXT_DIR`, `TEST_DIR`, …), with variables read as Docker Compose reads them
//! (`compose/interpolate.rs`). A Harbor task's file is an overlay: it is merged over
//! Harbor's own base file, which already defines `main` ([`HARBOR_BASE`],
//! `compose/merge.rs`). What the harness does not do is named in a notice,
//! never dropped silently; what a task must not do (privileged containers, host paths
//! outside its folder) is refused.

mod build;
mod envfile;
mod interpolate;
mod merge;
mod mounts;
mod ports;
mod service;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_yaml::Value;

use super::error::TaskError;
pub use agent_sandbox::{Mount, PublishedPort};
pub(crate) use envfile::merge_env;
use service::{parse_service, Found};

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
/// Harbor's own compose base, over which a task's `environment/docker-compose.yaml` is
/// merged: `main` built from the environment folder (`${CONTEXT_DIR}`), as Harbor's
/// `docker-compose-build.yaml` builds it. Harbor's base files also mount its log folders
/// and set `ulimits`, `deploy` limits and `command: sleep infinity`; a trial gives `main`
/// its own `/logs`, the run's limits and the sandbox's init instead, so those are left out.
pub const HARBOR_BASE: &str = "services:\n  main:\n    build:\n      context: ${CONTEXT_DIR}\n";

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
    /// Entrypoint replacing the image's (sidecars only: the agent's service runs the
    /// sandbox's init).
    pub entrypoint: Option<Vec<String>>,
    /// `KEY=VALUE` pairs: the `env_file` entries, overridden by `environment` (its
    /// variables read as Docker Compose reads them).
    pub environment: Vec<String>,
    pub working_dir: Option<String>,
    pub healthcheck: Option<HealthCheck>,
    /// Services that must be up (and healthy, when they have a check) first.
    pub depends_on: Vec<String>,
    /// Mounts; a named volume is named as in the file (each trial creates its own).
    pub mounts: Vec<Mount>,
    /// Ports published on the host's loopback address.
    pub ports: Vec<PublishedPort>,
    pub user: Option<String>,
    /// Capabilities asked for; granted only when the run allows it (`--allow-cap-add`).
    pub cap_add: Vec<String>,
    pub cap_drop: Vec<String>,
    /// `/dev/shm` size in bytes.
    pub shm_size: Option<i64>,
    /// The engine's init as PID 1 (sidecars only).
    pub init: bool,
    pub hostname: Option<String>,
    /// Extra `/etc/hosts` entries (`name:ip`).
    pub extra_hosts: Vec<String>,
}

impl Service {
    /// A service of `image` with nothing else set.
    pub fn new(name: impl Into<String>, image: ImageSource) -> Service {
        Service {
            name: name.into(),
            image,
            command: None,
            entrypoint: None,
            environment: Vec::new(),
            working_dir: None,
            healthcheck: None,
            depends_on: Vec::new(),
            mounts: Vec::new(),
            ports: Vec::new(),
            user: None,
            cap_add: Vec::new(),
            cap_drop: Vec::new(),
            shm_size: None,
            init: false,
            hostname: None,
            extra_hosts: Vec::new(),
        }
    }
}

/// A parsed compose file.
#[derive(Debug, Clone, PartialEq)]
pub struct Compose {
    pub path: PathBuf,
    /// Every service, the agent's included, in start order (dependencies first).
    pub services: Vec<Service>,
    /// The agent's service (`client` or `main`); also its name on the task's network.
    pub agent_service: String,
    /// Named volumes declared at the top level; each trial creates its own.
    pub volumes: Vec<String>,
    /// What the file asks for that the harness does not do, one line each.
    pub notices: Vec<String>,
}

/// Where a compose file's relative paths lead.
#[derive(Debug, Clone, Copy)]
pub struct ComposePaths<'a> {
    /// Build contexts, bind-mount sources and env files are relative to this folder.
    pub dir: &'a Path,
    /// The task's folder: no host path outside it is mounted or read.
    pub root: &'a Path,
}

/// Top-level keys a trial honours or that are the harness's business (one network per
/// trial, its own names).
const TOP_LEVEL_KEYS: [&str; 5] = ["services", "volumes", "networks", "version", "name"];

impl Compose {
    /// The agent's service.
    pub fn client(&self) -> Option<&Service> {
        self.services.iter().find(|s| s.name == self.agent_service)
    }

    /// The other services, in start order.
    pub fn sidecars(&self) -> impl Iterator<Item = &Service> {
        self.services.iter().filter(|s| s.name != self.agent_service)
    }

    /// Parses `path`.
    pub fn load(path: &Path, paths: ComposePaths, dialect: Dialect) -> Result<Compose, TaskError> {
        Self::load_with_env(path, paths, dialect, &BTreeMap::new())
    }

    /// Parses `path` with the task's variables (`[environment.env]`) besides the harness's.
    pub fn load_with_env(
        path: &Path,
        paths: ComposePaths,
        dialect: Dialect,
        task_env: &BTreeMap<String, String>,
    ) -> Result<Compose, TaskError> {
        let (text, shown) = read_compose(path)?;
        Self::parse_with_env(&text, &shown, paths, dialect, task_env)
    }

    /// Parses compose text; `shown` names the file in errors.
    pub fn parse(text: &str, shown: &str, paths: ComposePaths, dialect: Dialect) -> Result<Compose, TaskError> {
        Self::parse_with_env(text, shown, paths, dialect, &BTreeMap::new())
    }

    /// Parses compose text with the task's variables as well as the harness's (which win).
    pub fn parse_with_env(
        text: &str,
        shown: &str,
        paths: ComposePaths,
        dialect: Dialect,
        task_env: &BTreeMap<String, String>,
    ) -> Result<Compose, TaskError> {
        Self::parse_layered(None, text, shown, paths, dialect, task_env)
    }

    /// Loads a Harbor task's `environment/docker-compose.yaml` as Harbor runs it: merged
    /// over [`HARBOR_BASE`] the way `docker compose -f base -f task` merges files, so a
    /// file that only adds a sidecar and `depends_on`, volumes or variables for `main`
    /// gets `main` built from the environment folder.
    pub fn load_harbor(
        path: &Path,
        paths: ComposePaths,
        task_env: &BTreeMap<String, String>,
    ) -> Result<Compose, TaskError> {
        let (text, shown) = read_compose(path)?;
        Self::parse_harbor(&text, &shown, paths, task_env)
    }

    /// [`Compose::load_harbor`] on text; `shown` names the file in errors.
    pub fn parse_harbor(
        text: &str,
        shown: &str,
        paths: ComposePaths,
        task_env: &BTreeMap<String, String>,
    ) -> Result<Compose, TaskError> {
        Self::parse_layered(Some(HARBOR_BASE), text, shown, paths, Dialect::Harbor, task_env)
    }

    /// Parses `text`, merged over `base` when there is one; each file's variables are
    /// read before the merge, as Compose reads them.
    fn parse_layered(
        base: Option<&str>,
        text: &str,
        shown: &str,
        paths: ComposePaths,
        dialect: Dialect,
        task_env: &BTreeMap<String, String>,
    ) -> Result<Compose, TaskError> {
        let read = |text: &str, shown: &str| -> Result<Value, TaskError> {
            serde_yaml::from_str(text).map_err(|e| TaskError::Invalid {
                path: shown.to_string(),
                reason: match e.location() {
                    Some(l) => format!("line {}: {e}", l.line()),
                    None => e.to_string(),
                },
            })
        };
        let bad = |field: String, reason: &str| TaskError::BadField {
            path: shown.to_string(),
            field,
            reason: reason.to_string(),
        };
        let mut raw = read(text, shown)?;
        let (mut doc, unset) = interpolated(&raw, dialect, task_env)
            .map_err(|e| bad(e.field, &format!("`{}`: {}", e.template, e.error)))?;
        if let Some(base) = base {
            let base_shown = "Harbor's base compose file";
            let base_raw = read(base, base_shown)?;
            let (base_doc, _) = interpolated(&base_raw, dialect, task_env).map_err(|e| TaskError::BadField {
                path: base_shown.into(),
                field: e.field,
                reason: e.error.to_string(),
            })?;
            // The file as written merges like the file as read, so that a value's
            // written form (`mounts.rs` reads it) stays beside its read form.
            raw = merge::merge_files(base_raw, raw);
            doc = merge::merge_files(base_doc, doc);
        }
        let services = doc
            .get("services")
            .and_then(Value::as_mapping)
            .ok_or_else(|| TaskError::MissingField { path: shown.to_string(), field: "services".into() })?;
        let mut found = Found::default();
        for key in doc.as_mapping().into_iter().flat_map(|m| m.keys()).filter_map(Value::as_str) {
            if !TOP_LEVEL_KEYS.contains(&key) && !key.starts_with("x-") {
                found.ignored.push(key.to_string());
            }
        }
        let volumes = declared_volumes(doc.get("volumes"), &mut found, &|f, r| bad(f.to_string(), r))?;
        let agent = dialect.agent_service();
        let ctx = service::Ctx { paths, volumes: &volumes };
        let mut parsed = Vec::new();
        let raw_services = raw.get("services");
        for (name, body) in services {
            let name = name.as_str().ok_or_else(|| bad("services".into(), "a service name is not a string"))?;
            let bad_field = |f: &str, r: &str| bad(format!("services.{name}.{f}"), r);
            let raw_body = raw_services.and_then(|s| s.get(name)).unwrap_or(body);
            parsed.push(parse_service(name, body, raw_body, &ctx, name == agent, &mut found, &bad_field)?);
        }
        found.notes.extend(unset);
        if !parsed.iter().any(|s| s.name == agent) {
            return Err(TaskError::MissingField { path: shown.to_string(), field: format!("services.{agent}") });
        }
        let services = start_order(parsed, &|r| bad("depends_on".into(), r))?;
        Ok(Compose {
            path: PathBuf::from(shown),
            services,
            agent_service: agent.to_string(),
            volumes,
            notices: found.into_notices(),
        })
    }
}

/// The error for a field (named relative to the service) with the reason given.
type Bad<'a> = &'a dyn Fn(&str, &str) -> TaskError;
/// The error for one field, already chosen, with the reason given.
type BadReason<'a> = &'a dyn Fn(&str) -> TaskError;

/// The names of the top-level `volumes`. An external volume is a host resource a task
/// may not touch; driver settings are not honoured (every trial gets a local volume).
fn declared_volumes(v: Option<&Value>, found: &mut Found, bad: Bad) -> Result<Vec<String>, TaskError> {
    let map = match v {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Mapping(m)) => m,
        Some(_) => return Err(bad("volumes", "expected a mapping of volume names")),
    };
    let mut names = Vec::new();
    for (name, body) in map {
        let name = name.as_str().ok_or_else(|| bad("volumes", "a volume name is not a string"))?;
        if let Some(body) = body.as_mapping() {
            for key in body.keys().filter_map(Value::as_str) {
                match key {
                    "external" if body.get(key).and_then(Value::as_bool) != Some(false) => {
                        return Err(bad(
                            &format!("volumes.{name}.external"),
                            "an external volume belongs to the host; a task gets fresh volumes in every trial",
                        ))
                    }
                    "external" | "name" | "labels" => {}
                    k if k.starts_with("x-") => {}
                    k => found.ignored.push(format!("volumes.{name}.{k}")),
                }
            }
        } else if !body.is_null() {
            return Err(bad(&format!("volumes.{name}"), "expected a mapping or nothing"));
        }
        names.push(name.to_string());
    }
    Ok(names)
}

/// The harness's variables of `dialect` that a container needs. Harbor's `CONTEXT_DIR`
/// is the environment folder itself (contexts are relative to it).
fn harness_vars(dialect: Dialect) -> BTreeMap<&'static str, &'static str> {
    match dialect {
        Dialect::Tb1 => BTreeMap::from([("T_BENCH_TEST_DIR", TEST_DIR), ("T_BENCH_CONTAINER_LOGS_PATH", LOGS_DIR)]),
        Dialect::Harbor => BTreeMap::from([
            ("TEST_DIR", TEST_DIR),
            ("CONTEXT_DIR", "."),
            ("LOGS_DIR", LOGS_DIR),
            ("ENV_VERIFIER_LOGS_PATH", "/logs/verifier"),
            ("ENV_AGENT_LOGS_PATH", "/logs/agent"),
            ("ENV_ARTIFACTS_PATH", "/logs/artifacts"),
        ]),
    }
}

/// The harness's variables it leaves unset without a notice: image and container names,
/// host log folders (a trial collects logs its own way) and limits (the run's apply).
const HARNESS_UNSET: [&str; 13] = [
    "T_BENCH_TASK_DOCKER_CLIENT_IMAGE_NAME",
    "T_BENCH_TASK_DOCKER_CLIENT_CONTAINER_NAME",
    "T_BENCH_TASK_DOCKER_NAME_PREFIX",
    "T_BENCH_TASK_LOGS_PATH",
    "T_BENCH_TASK_AGENT_LOGS_PATH",
    "T_BENCH_CONTAINER_AGENT_LOGS_PATH",
    "MAIN_IMAGE_NAME",
    "PREBUILT_IMAGE_NAME",
    "HOST_VERIFIER_LOGS_PATH",
    "HOST_AGENT_LOGS_PATH",
    "HOST_ARTIFACTS_PATH",
    "CPUS",
    "MEMORY",
];

/// `raw` with every string value interpolated as Docker Compose does, from the harness's
/// variables, then the task's; and a note for each other variable read while unset.
fn interpolated(
    raw: &Value,
    dialect: Dialect,
    task_env: &BTreeMap<String, String>,
) -> Result<(Value, Vec<String>), interpolate::FieldError> {
    let mut vars = task_env.clone();
    vars.extend(harness_vars(dialect).into_iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let mut doc = raw.clone();
    let mut unset = Vec::new();
    interpolate::interpolate_doc(&mut doc, &vars, &mut unset)?;
    let mut notes: Vec<String> = Vec::new();
    let mut seen: Vec<String> = Vec::new();
    for (name, field) in unset {
        if HARNESS_UNSET.contains(&name.as_str()) || seen.contains(&name) {
            continue;
        }
        notes.push(format!("`{name}` is not set and reads as empty ({field})"));
        seen.push(name);
    }
    Ok((doc, notes))
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

/// A compose file's text and its path as errors show it.
fn read_compose(path: &Path) -> Result<(String, String), TaskError> {
    let shown = path.display().to_string();
    match std::fs::read_to_string(path) {
        Ok(text) => Ok((text, shown)),
        Err(e) => Err(TaskError::Invalid { path: shown, reason: format!("cannot read: {e}") }),
    }
}

#[cfg(test)]
mod tests;
