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

    /// Whether the engine runs on this computer (a Unix socket that is not an `ssh`
    /// tunnel's), so that a host folder can be bound into its containers.
    pub fn shares_host_paths(&self) -> bool {
        matches!(self.info.endpoint, Endpoint::Unix(_)) && self.info._tunnel.is_none()
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
/// the API version, so that older engines (API 1.41) work too. A plain `tcp://` engine
/// off loopback is refused before anything connects, as in `[[sandbox.engines]]`.
pub async fn connect() -> Result<Engine, SandboxError> {
    let spec = super::engines::EngineSpec::local();
    spec.check_docker_host()?;
    super::engines::connect_engine(&spec).await
}
