//! Connecting to one engine of the pool through bollard's own transports (a Unix
//! socket, HTTP on loopback, mutual TLS), or through an `ssh` forward of the remote
//! engine's socket: nothing of ours runs on the remote host.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bollard::Docker;

use super::super::docker::{Endpoint, Engine, EngineInfo, Tunnel};
use super::super::error::{describe_bollard, SandboxError};
use super::spec::{EngineSpec, Transport};

/// Seconds bollard waits for one request (an exec stream is one request too).
const REQUEST_TIMEOUT_SECS: u64 = 120;

/// How long connecting and the version handshake may take before the engine counts as
/// unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// Connects to the engine `spec` names and checks that it answers.
pub async fn connect_engine(spec: &EngineSpec) -> Result<Engine, SandboxError> {
    let name = spec.display_name();
    let unreachable = |reason: String| SandboxError::DockerUnreachable { endpoint: spec.url.clone(), reason };
    let version = bollard::API_DEFAULT_VERSION;
    let (docker, endpoint, tunnel) = match spec.transport()? {
        Transport::Unix(path) => {
            let d = Docker::connect_with_unix(&path.to_string_lossy(), REQUEST_TIMEOUT_SECS, version);
            (d, Endpoint::Unix(path), None)
        }
        Transport::Http(addr) => {
            let d = Docker::connect_with_http(&addr, REQUEST_TIMEOUT_SECS, version);
            (d, Endpoint::Tcp(addr), None)
        }
        Transport::Tls { addr, ca, cert, key } => {
            for p in [&ca, &cert, &key] {
                if !p.is_file() {
                    return Err(SandboxError::EngineConfig {
                        url: spec.url.clone(),
                        reason: format!("the TLS file {} does not exist", p.display()),
                    });
                }
            }
            // Only `tls_ca` vouches for the engine: the system's roots are not consulted.
            let config = super::tls::client_config(&ca, &cert, &key)
                .map_err(|reason| SandboxError::EngineConfig { url: spec.url.clone(), reason })?;
            let d = super::tls::connect(&addr, config, REQUEST_TIMEOUT_SECS, version);
            (d, Endpoint::Other(format!("https://{addr}")), None)
        }
        Transport::Ssh { destination, port, socket } => {
            let tunnel = Tunnel::open(&destination, port, &socket).await.map_err(unreachable)?;
            let path = tunnel.local.clone();
            let d = Docker::connect_with_unix(&path.to_string_lossy(), REQUEST_TIMEOUT_SECS, version);
            (d, Endpoint::Unix(path), Some(tunnel))
        }
    };
    let docker = docker.map_err(|e| unreachable(describe_bollard(&e)))?;
    handshake(docker, endpoint, name, tunnel, &spec.url).await
}

/// Negotiates the API version (older engines speak 1.41), pings, and reads the version.
async fn handshake(
    docker: Docker,
    endpoint: Endpoint,
    name: String,
    tunnel: Option<Tunnel>,
    url: &str,
) -> Result<Engine, SandboxError> {
    let unreachable = |reason: String| SandboxError::DockerUnreachable { endpoint: url.to_string(), reason };
    let docker = tokio::time::timeout(CONNECT_TIMEOUT, docker.negotiate_version())
        .await
        .map_err(|_| unreachable(format!("no answer within {} s", CONNECT_TIMEOUT.as_secs())))?
        .map_err(|e| unreachable(describe_bollard(&e)))?;
    tokio::time::timeout(CONNECT_TIMEOUT, docker.ping())
        .await
        .map_err(|_| unreachable(format!("no answer within {} s", CONNECT_TIMEOUT.as_secs())))?
        .map_err(|e| unreachable(describe_bollard(&e)))?;
    let version = docker.version().await.ok().and_then(|v| v.version).unwrap_or_default();
    let info = EngineInfo { endpoint, version, name, _tunnel: tunnel };
    Ok(Engine::from_parts(docker, Arc::new(info)))
}

impl Tunnel {
    /// `ssh -L LOCAL_SOCKET:REMOTE_SOCKET`, in batch mode (keys or an agent, never a
    /// password prompt), ended when the last handle to the engine goes.
    async fn open(destination: &str, port: Option<u16>, remote: &str) -> Result<Tunnel, String> {
        let dir = tempfile::Builder::new()
            .prefix("agent-ssh-")
            .tempdir()
            .map_err(|e| format!("cannot create a folder for the ssh socket: {e}"))?;
        let local: PathBuf = dir.path().join("docker.sock");
        let mut cmd = tokio::process::Command::new("ssh");
        cmd.args(["-nNT", "-o", "BatchMode=yes", "-o", "ExitOnForwardFailure=yes", "-o", "ServerAliveInterval=15"]);
        if let Some(p) = port {
            cmd.args(["-p", &p.to_string()]);
        }
        cmd.arg("-L").arg(format!("{}:{remote}", local.display())).arg("--").arg(destination);
        cmd.stdin(std::process::Stdio::null()).stdout(std::process::Stdio::null());
        cmd.stderr(std::process::Stdio::piped()).kill_on_drop(true);
        let mut child = cmd.spawn().map_err(|e| format!("cannot run ssh: {e}"))?;
        // The socket appears once the connection is up and the forward is in place.
        let deadline = tokio::time::Instant::now() + CONNECT_TIMEOUT;
        while !local.exists() {
            if let Ok(Some(status)) = child.try_wait() {
                let mut err = String::new();
                if let Some(mut e) = child.stderr.take() {
                    use tokio::io::AsyncReadExt;
                    let _ = e.read_to_string(&mut err).await;
                }
                return Err(format!("ssh {destination} ended ({status}): {}", err.trim()));
            }
            if tokio::time::Instant::now() > deadline {
                return Err(format!("ssh {destination}: no forward within {} s", CONNECT_TIMEOUT.as_secs()));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(Tunnel { local, _child: std::sync::Mutex::new(child), _dir: dir })
    }
}
