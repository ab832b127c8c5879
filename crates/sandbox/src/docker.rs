//! Connecting to the Docker engine.

use std::sync::Arc;

use bollard::Docker;

use super::error::{describe_bollard, SandboxError};

/// Where the engine listens, as far as the sandbox speaks to it without bollard (the
/// BuildKit build stream, which bollard decodes only with its gRPC session feature).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Endpoint {
    Unix(std::path::PathBuf),
    Tcp(String),
    /// TLS, SSH or a named pipe: reached only through bollard.
    Other(String),
}

impl Endpoint {
    fn from_docker_host(host: Option<&str>, tls: bool) -> Endpoint {
        match host {
            None => Endpoint::Unix("/var/run/docker.sock".into()),
            Some(h) if h.starts_with("unix://") => Endpoint::Unix(h["unix://".len()..].into()),
            Some(h) if h.starts_with("tcp://") && !tls => {
                Endpoint::Tcp(h["tcp://".len()..].trim_end_matches('/').into())
            }
            Some(h) => Endpoint::Other(h.to_string()),
        }
    }
}

/// A connection to the Docker engine. The rest of the program holds this handle and
/// asks the sandbox module for what it needs; only this module speaks the engine's API.
#[derive(Debug, Clone)]
pub struct Engine {
    docker: Docker,
    info: Arc<EngineInfo>,
    /// The engine images missing here are copied from (the local one, where `agent
    /// sandbox base` builds them); none for the local engine itself.
    seed: Option<Arc<Engine>>,
}

/// What the sandbox needs to know of the engine beyond the API client.
#[derive(Debug)]
pub(crate) struct EngineInfo {
    pub endpoint: Endpoint,
    /// The engine's version (`20.10.24+dfsg1`); empty when it did not say.
    pub version: String,
    /// Its name in the pool (`local` for the default engine).
    pub name: String,
    /// The `ssh` forward it is reached through, kept open while any handle lives.
    pub _tunnel: Option<Tunnel>,
}

/// An `ssh -L` forward of a remote engine's socket to a local one.
#[derive(Debug)]
pub(crate) struct Tunnel {
    pub local: std::path::PathBuf,
    /// Killed when dropped (`kill_on_drop`).
    pub _child: std::sync::Mutex<tokio::process::Child>,
    pub _dir: tempfile::TempDir,
}

impl Engine {
    pub(crate) fn from_parts(docker: Docker, info: Arc<EngineInfo>) -> Engine {
        Engine { docker, info, seed: None }
    }

    /// This engine, taking images it lacks from `seed` (see [`super::image_exists`]).
    pub fn with_seed(&self, seed: Engine) -> Engine {
        Engine { seed: Some(Arc::new(seed)), ..self.clone() }
    }

    /// The engine images are copied from, if any.
    pub(crate) fn seed(&self) -> Option<&Engine> {
        self.seed.as_deref()
    }

    /// Whether two handles speak to the same engine endpoint.
    pub fn same_endpoint(&self, other: &Engine) -> bool {
        self.info.endpoint == other.info.endpoint
    }

    /// Its name in the pool (`local` for the default engine), as results record it.
    pub fn name(&self) -> &str {
        &self.info.name
    }

    /// The engine's version, as it reports it.
    pub fn version(&self) -> &str {
        &self.info.version
    }

    /// Whether the engine answers a ping within `limit`; the error says why not.
    pub async fn answers(&self, limit: std::time::Duration) -> Result<(), String> {
        match tokio::time::timeout(limit, self.docker.ping()).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(describe_bollard(&e)),
            Err(_) => Err(format!("no answer within {} s", limit.as_secs())),
        }
    }

    /// The engine's API client, for the sandbox module's own use.
    pub(crate) fn api(&self) -> &Docker {
        &self.docker
    }

    pub(crate) fn info(&self) -> &EngineInfo {
        &self.info
    }

    /// The API version negotiated with the engine (`1.41`).
    pub(crate) fn api_version(&self) -> String {
        let v = self.docker.client_version();
        format!("{}.{}", v.major_version, v.minor_version)
    }
}

impl EngineInfo {
    /// The engine's major version (20 for `20.10.24`), when it parses.
    pub fn major(&self) -> Option<u32> {
        self.version.split('.').next()?.parse().ok()
    }
}

/// Connects to the engine named by `DOCKER_HOST` (or the local socket) and negotiates
/// the API version, so that older engines (API 1.41) work too.
pub async fn connect() -> Result<Engine, SandboxError> {
    let host = std::env::var("DOCKER_HOST").ok().filter(|h| !h.is_empty());
    let url = host.clone().unwrap_or_else(|| "unix:///var/run/docker.sock".into());
    let docker = Docker::connect_with_defaults()
        .map_err(|e| SandboxError::DockerUnreachable { endpoint: url.clone(), reason: describe_bollard(&e) })?;
    let tls = std::env::var("DOCKER_TLS_VERIFY").is_ok_and(|v| !v.is_empty() && v != "0");
    let endpoint = Endpoint::from_docker_host(host.as_deref(), tls);
    super::engines::handshake(docker, endpoint, "local".into(), None, &url).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_from_docker_host() {
        assert_eq!(Endpoint::from_docker_host(None, false), Endpoint::Unix("/var/run/docker.sock".into()));
        assert_eq!(Endpoint::from_docker_host(Some("unix:///run/d.sock"), false), Endpoint::Unix("/run/d.sock".into()));
        assert_eq!(Endpoint::from_docker_host(Some("tcp://h:2375/"), false), Endpoint::Tcp("h:2375".into()));
        assert!(matches!(Endpoint::from_docker_host(Some("tcp://h:2376"), true), Endpoint::Other(_)));
        assert!(matches!(Endpoint::from_docker_host(Some("ssh://u@h"), false), Endpoint::Other(_)));
    }
}
