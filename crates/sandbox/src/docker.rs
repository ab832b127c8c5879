//! Connecting to the Docker engine.

use bollard::Docker;

use super::error::{describe_bollard, SandboxError};

/// A connection to the Docker engine. The rest of the program holds this handle and
/// asks the sandbox module for what it needs; only this module speaks the engine's API.
#[derive(Debug, Clone)]
pub struct Engine(Docker);

impl Engine {
    /// The engine's API client, for the sandbox module's own use.
    pub(crate) fn api(&self) -> &Docker {
        &self.0
    }
}

/// Connects to the engine named by `DOCKER_HOST` (or the local socket) and negotiates
/// the API version, so that older engines (API 1.41) work too.
pub async fn connect() -> Result<Engine, SandboxError> {
    let endpoint = std::env::var("DOCKER_HOST").unwrap_or_else(|_| "unix:///var/run/docker.sock".into());
    let unreachable = |reason: String| SandboxError::DockerUnreachable { endpoint: endpoint.clone(), reason };
    let docker = Docker::connect_with_defaults().map_err(|e| unreachable(describe_bollard(&e)))?;
    let docker = tokio::time::timeout(std::time::Duration::from_secs(15), docker.negotiate_version())
        .await
        .map_err(|_| unreachable("no answer within 15 s".into()))?
        .map_err(|e| unreachable(describe_bollard(&e)))?;
    docker.ping().await.map_err(|e| unreachable(describe_bollard(&e)))?;
    Ok(Engine(docker))
}
