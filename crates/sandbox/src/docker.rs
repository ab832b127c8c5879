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
}

/// What the sandbox needs to know of the engine beyond the API client.
#[derive(Debug)]
pub(crate) struct EngineInfo {
    pub endpoint: Endpoint,
    /// The engine's version (`20.10.24+dfsg1`); empty when it did not say.
    pub version: String,
}

impl Engine {
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
    let endpoint = host.clone().unwrap_or_else(|| "unix:///var/run/docker.sock".into());
    let unreachable = |reason: String| SandboxError::DockerUnreachable { endpoint: endpoint.clone(), reason };
    let docker = Docker::connect_with_defaults().map_err(|e| unreachable(describe_bollard(&e)))?;
    let docker = tokio::time::timeout(std::time::Duration::from_secs(15), docker.negotiate_version())
        .await
        .map_err(|_| unreachable("no answer within 15 s".into()))?
        .map_err(|e| unreachable(describe_bollard(&e)))?;
    docker.ping().await.map_err(|e| unreachable(describe_bollard(&e)))?;
    let version = docker.version().await.ok().and_then(|v| v.version).unwrap_or_default();
    let tls = std::env::var("DOCKER_TLS_VERIFY").is_ok_and(|v| !v.is_empty() && v != "0");
    let endpoint = Endpoint::from_docker_host(host.as_deref(), tls);
    Ok(Engine { docker, info: Arc::new(EngineInfo { endpoint, version }) })
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
