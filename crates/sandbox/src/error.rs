//! Sandbox errors, written for the user.

/// What went wrong in the sandbox layer.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("cannot reach the Docker engine ({endpoint}): {reason}. Is the daemon running and is DOCKER_HOST right?")]
    DockerUnreachable { endpoint: String, reason: String },
    #[error("the engine `{url}` in [[sandbox.engines]] is not usable: {reason}")]
    EngineConfig { url: String, reason: String },
    #[error("DOCKER_HOST={host} is refused (nothing was contacted): {reason}")]
    DockerHostRefused { host: String, reason: String },
    #[error("no Docker engine of the pool answers: {0}")]
    NoEngine(String),
    #[error("Docker failed to {action}: {reason}")]
    Docker { action: String, reason: String },
    #[error("the image `{image}` is not available: {hint}")]
    ImageMissing { image: String, hint: String },
    #[error("building the image `{image}` failed: {reason}")]
    ImageBuild { image: String, reason: String },
    #[error("cannot build the base image: {0}")]
    BaseImage(String),
    #[error("the sandbox shell failed: {0}")]
    Shell(String),
    #[error("refusing to start a container without limits: {0}")]
    NoLimits(String),
    #[error("the sandbox's network filter could not be set up, so it was not started: {0}")]
    Egress(String),
    #[error("{path}: {reason}")]
    File { path: String, reason: String },
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
}

impl SandboxError {
    /// Wraps a bollard error with the action that failed.
    pub fn docker(action: impl Into<String>, err: bollard::errors::Error) -> Self {
        SandboxError::Docker { action: action.into(), reason: describe_bollard(&err) }
    }
}

/// A one-line description of a bollard error (the engine's message when it sent one).
pub fn describe_bollard(err: &bollard::errors::Error) -> String {
    match err {
        bollard::errors::Error::DockerResponseServerError { status_code, message } => {
            format!("{message} (HTTP {status_code})")
        }
        bollard::errors::Error::DockerStreamError { error } => error.clone(),
        other => other.to_string().lines().next().unwrap_or_default().to_string(),
    }
}

/// True when the engine answered 404 (no such container, image or path).
pub fn is_not_found(err: &bollard::errors::Error) -> bool {
    matches!(err, bollard::errors::Error::DockerResponseServerError { status_code: 404, .. })
}
