//! BuildKit builds through the engine's `/build?version=2`, as `docker compose` builds
//! a task. The context travels in the request body, so no gRPC session is needed (a
//! session serves registry credentials and local-directory contexts, and every `FROM`
//! is resolved to a local image before the build). The engine answers with JSON lines
//! whose `moby.buildkit.trace` entries are base64 protobuf progress, decoded here.

use std::collections::HashMap;

use base64::Engine as _;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use prost::Message;

use super::super::docker::{Endpoint, Engine};
use super::BuildFailure;

/// Why a BuildKit build did not happen at all (the caller falls back to the classic
/// builder and says so).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Unsupported(pub String);

/// What the engine needs for one build.
pub(crate) struct Request<'a> {
    pub tag: &'a str,
    pub dockerfile: &'a str,
    pub labels: &'a HashMap<String, String>,
    pub extra_hosts: &'a [String],
    pub context: Vec<u8>,
}

/// Runs one BuildKit build. `Ok(Err(Unsupported))` when the engine has no BuildKit or
/// cannot be reached without bollard.
pub(crate) async fn build(
    engine: &Engine,
    req: Request<'_>,
    log: &mut (dyn FnMut(&str) + Send),
) -> Result<Result<(), Unsupported>, BuildFailure> {
    let api = engine.api_version();
    if version_below(&api, (1, 39)) {
        return Ok(Err(Unsupported(format!("the engine's API {api} predates BuildKit (1.39)"))));
    }
    if let Endpoint::Other(host) = &engine.info().endpoint {
        return Ok(Err(Unsupported(format!(
            "the engine is reached at {host}; BuildKit builds are sent over a unix socket or plain TCP only"
        ))));
    }
    let mut query: Vec<(&str, String)> = vec![
        ("version", "2".into()),
        ("t", req.tag.into()),
        ("dockerfile", req.dockerfile.into()),
        ("rm", "1".into()),
        ("forcerm", "1".into()),
    ];
    if !req.labels.is_empty() {
        query.push(("labels", serde_json::to_string(req.labels).unwrap_or_default()));
    }
    if !req.extra_hosts.is_empty() {
        query.push(("extrahosts", req.extra_hosts.join(",")));
    }
    let query = serde_urlencoded::to_string(&query).map_err(|e| BuildFailure::simple(e.to_string()))?;
    let uri = format!("/v{api}/build?{query}");
    let response = send(engine, &uri, req.context).await.map_err(BuildFailure::simple)?;
    let status = response.status();
    let mut body = response.into_body();
    if !status.is_success() {
        let bytes = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
        let message = serde_json::from_slice::<serde_json::Value>(&bytes)
            .ok()
            .and_then(|v| v.get("message").and_then(|m| m.as_str()).map(str::to_string))
            .unwrap_or_else(|| String::from_utf8_lossy(&bytes).trim().to_string());
        let lower = message.to_lowercase();
        if lower.contains("buildkit") || lower.contains("builder version") || lower.contains("session") {
            return Ok(Err(Unsupported(format!("{message} (HTTP {status})"))));
        }
        return Err(BuildFailure::simple(format!("{message} (HTTP {})", status.as_u16())));
    }
    let mut progress = Progress::default();
    let mut pending: Vec<u8> = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| progress.failure(format!("the build stream broke: {e}")))?;
        let Ok(data) = frame.into_data() else { continue };
        pending.extend_from_slice(&data);
        while let Some(at) = pending.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = pending.drain(..=at).collect();
            progress.line(&line, log)?;
        }
    }
    if !pending.is_empty() {
        progress.line(&pending, log)?;
    }
    if progress.image_id.is_none() {
        return Err(progress.failure("the engine ended the build without an image".into()));
    }
    Ok(Ok(()))
}

/// Posts the context to the engine over its unix socket or plain TCP.
async fn send(engine: &Engine, uri: &str, context: Vec<u8>) -> Result<hyper::Response<hyper::body::Incoming>, String> {
    let request = hyper::Request::post(uri)
        .header("Host", "docker")
        .header("Content-Type", "application/x-tar")
        .body(Full::new(Bytes::from(context)))
        .map_err(|e| e.to_string())?;
    let unreachable = |e: std::io::Error| format!("cannot reach the engine for a BuildKit build: {e}");
    macro_rules! over {
        ($stream:expr) => {{
            let (mut sender, conn) =
                hyper::client::conn::http1::handshake(TokioIo::new($stream)).await.map_err(|e| e.to_string())?;
            tokio::spawn(async move {
                if let Err(e) = conn.await {
                    tracing::debug!("BuildKit build connection: {e}");
                }
            });
            sender.send_request(request).await.map_err(|e| e.to_string())
        }};
    }
    match &engine.info().endpoint {
        Endpoint::Unix(path) => over!(tokio::net::UnixStream::connect(path).await.map_err(unreachable)?),
        Endpoint::Tcp(addr) => over!(tokio::net::TcpStream::connect(addr.as_str()).await.map_err(unreachable)?),
        Endpoint::Other(host) => Err(format!("the engine at {host} is reached only through bollard")),
    }
}

fn version_below(v: &str, min: (u32, u32)) -> bool {
    let mut parts = v.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    (major, minor) < min
}

/// The state of one build's progress: step numbers, recent output, errors.
#[derive(Default)]
struct Progress {
    steps: HashMap<String, usize>,
    names: HashMap<String, String>,
    reported: std::collections::HashSet<String>,
    recent: Vec<String>,
    errors: Vec<(String, String)>,
    image_id: Option<String>,
}

impl Progress {
    fn step(&mut self, digest: &str) -> usize {
        let next = self.steps.len() + 1;
        *self.steps.entry(digest.to_string()).or_insert(next)
    }

    fn output(&mut self, text: String, log: &mut (dyn FnMut(&str) + Send)) {
        log(&text);
        self.recent.push(text);
        if self.recent.len() > 8 {
            self.recent.remove(0);
        }
    }

    /// Handles one JSON line of the build stream.
    fn line(&mut self, raw: &[u8], log: &mut (dyn FnMut(&str) + Send)) -> Result<(), BuildFailure> {
        let text = String::from_utf8_lossy(raw);
        let text = text.trim();
        if text.is_empty() {
            return Ok(());
        }
        let Ok(v) = serde_json::from_str::<serde_json::Value>(text) else {
            tracing::debug!("build stream: not JSON: {text}");
            return Ok(());
        };
        if let Some(err) = v.get("error").and_then(|e| e.as_str()) {
            return Err(self.failure(err.to_string()));
        }
        match (v.get("id").and_then(|i| i.as_str()), v.get("aux")) {
            (Some("moby.buildkit.trace"), Some(aux)) => {
                let Some(b64) = aux.as_str() else { return Ok(()) };
                let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(b64) else { return Ok(()) };
                match StatusResponse::decode(bytes.as_slice()) {
                    Ok(status) => self.status(status, log),
                    Err(e) => tracing::debug!("build stream: undecodable BuildKit progress: {e}"),
                }
            }
            (Some("moby.image.id"), Some(aux)) => {
                self.image_id = aux.get("ID").and_then(|i| i.as_str()).map(str::to_string);
            }
            _ => {
                if let Some(s) = v.get("stream").and_then(|s| s.as_str()) {
                    for l in s.lines().filter(|l| !l.trim().is_empty()) {
                        log(l);
                    }
                }
            }
        }
        Ok(())
    }

    fn status(&mut self, status: StatusResponse, log: &mut (dyn FnMut(&str) + Send)) {
        for vertex in status.vertexes {
            let n = self.step(&vertex.digest);
            self.names.insert(vertex.digest.clone(), vertex.name.clone());
            if vertex.started.is_some() && self.reported.insert(format!("start {}", vertex.digest)) {
                let cached = if vertex.cached { " (cached)" } else { "" };
                log(&format!("#{n} {}{cached}", vertex.name));
            }
            if !vertex.error.is_empty() && self.reported.insert(format!("error {}", vertex.digest)) {
                log(&format!("#{n} ERROR: {}", vertex.error));
                // A step stopped because another failed says only "context canceled".
                let own = vertex.error.replace(": context canceled", "");
                if own != "context canceled" && !own.is_empty() {
                    self.errors.push((vertex.name.clone(), own));
                }
            }
        }
        for entry in status.logs {
            let n = self.step(&entry.vertex);
            let text = String::from_utf8_lossy(&entry.msg).to_string();
            for l in text.lines().filter(|l| !l.trim().is_empty()) {
                self.output(format!("#{n} {l}"), log);
            }
        }
        for w in status.warnings {
            let n = self.step(&w.vertex);
            log(&format!("#{n} WARNING: {}", String::from_utf8_lossy(&w.short)));
        }
    }

    /// The failure with `message`, every step error seen and the last output.
    fn failure(&self, message: String) -> BuildFailure {
        BuildFailure { message, step_errors: self.errors.clone(), recent_output: self.recent.clone() }
    }
}

/// `moby.buildkit.v1.StatusResponse`, the fields used here.
#[derive(Clone, PartialEq, Message)]
struct StatusResponse {
    #[prost(message, repeated, tag = "1")]
    vertexes: Vec<Vertex>,
    #[prost(message, repeated, tag = "3")]
    logs: Vec<VertexLog>,
    #[prost(message, repeated, tag = "4")]
    warnings: Vec<VertexWarning>,
}

/// `moby.buildkit.v1.Vertex`: one step of the build.
#[derive(Clone, PartialEq, Message)]
struct Vertex {
    #[prost(string, tag = "1")]
    digest: String,
    #[prost(string, tag = "3")]
    name: String,
    #[prost(bool, tag = "4")]
    cached: bool,
    #[prost(message, optional, tag = "5")]
    started: Option<Timestamp>,
    #[prost(message, optional, tag = "6")]
    completed: Option<Timestamp>,
    #[prost(string, tag = "7")]
    error: String,
}

/// `moby.buildkit.v1.VertexLog`: output of a step.
#[derive(Clone, PartialEq, Message)]
struct VertexLog {
    #[prost(string, tag = "1")]
    vertex: String,
    #[prost(bytes = "vec", tag = "4")]
    msg: Vec<u8>,
}

/// `moby.buildkit.v1.VertexWarning`.
#[derive(Clone, PartialEq, Message)]
struct VertexWarning {
    #[prost(string, tag = "1")]
    vertex: String,
    #[prost(bytes = "vec", tag = "3")]
    short: Vec<u8>,
}

/// `google.protobuf.Timestamp`.
#[derive(Clone, PartialEq, Message)]
struct Timestamp {
    #[prost(int64, tag = "1")]
    seconds: i64,
    #[prost(int32, tag = "2")]
    nanos: i32,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A trace line as the engine sends it (taken from a real 20.10 build).
    const TRACE: &str = r#"{"id":"moby.buildkit.trace","aux":"CqwBCkdzaGEyNTY6MjkyNGJhNGQzMzlhNTJlZjY2ODEzYWIwZGU3NjU4YjA2MGFlNjQwZDZlOTdjMTkzNzdiYTE5YmI4MGQzZGQ4NBJHc2hhMjU2OjA2NDQ3YTllZDYzYzgyZjAwMmUxZDRkMjc1MzAwNTA5ODY4OGUwNWQwMDk0YTAzYzBiNjM1MDZiNzc3N2EwMWUaGFsxLzFdIENPUFkgRG9ja2VyZmlsZSAveA=="}"#;

    #[test]
    fn trace_lines_decode_into_steps() {
        let mut p = Progress::default();
        let mut lines = Vec::new();
        p.line(TRACE.as_bytes(), &mut |l| lines.push(l.to_string())).unwrap();
        assert_eq!(p.names.values().next().map(String::as_str), Some("[1/1] COPY Dockerfile /x"));
        // Not started yet in this message: nothing printed.
        assert!(lines.is_empty(), "{lines:?}");
    }

    #[test]
    fn logs_errors_and_the_image_id_are_collected() {
        let status = StatusResponse {
            vertexes: vec![
                Vertex {
                    digest: "d1".into(),
                    name: "[2/3] RUN make".into(),
                    started: Some(Timestamp { seconds: 1, nanos: 0 }),
                    error: "exit code: 2".into(),
                    ..Default::default()
                },
                Vertex {
                    digest: "d2".into(),
                    name: "[3/3] RUN x".into(),
                    error: "context canceled".into(),
                    ..Default::default()
                },
                Vertex {
                    digest: "d3".into(),
                    name: "[b 2/2] RUN y".into(),
                    error: "exit code: 4: context canceled: context canceled".into(),
                    ..Default::default()
                },
            ],
            logs: vec![VertexLog { vertex: "d1".into(), msg: b"cc: error\nmake: *** failed\n".to_vec() }],
            warnings: vec![],
        };
        let aux = base64::engine::general_purpose::STANDARD.encode(status.encode_to_vec());
        let line = serde_json::json!({"id": "moby.buildkit.trace", "aux": aux}).to_string();
        let mut p = Progress::default();
        let mut lines = Vec::new();
        p.line(line.as_bytes(), &mut |l| lines.push(l.to_string())).unwrap();
        assert_eq!(
            lines,
            [
                "#1 [2/3] RUN make",
                "#1 ERROR: exit code: 2",
                "#2 ERROR: context canceled",
                "#3 ERROR: exit code: 4: context canceled: context canceled",
                "#1 cc: error",
                "#1 make: *** failed"
            ]
        );
        let err = p
            .line(br#"{"errorDetail":{"message":"boom"},"error":"executor failed: exit code: 2"}"#, &mut |_| {})
            .unwrap_err();
        assert_eq!(err.message, "executor failed: exit code: 2");
        let steps: Vec<(&str, &str)> = err.step_errors.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
        assert_eq!(steps, [("[2/3] RUN make", "exit code: 2"), ("[b 2/2] RUN y", "exit code: 4")]);
        assert_eq!(err.recent_output, ["#1 cc: error", "#1 make: *** failed"]);
        let mut p = Progress::default();
        p.line(br#"{"id":"moby.image.id","aux":{"ID":"sha256:abc"}}"#, &mut |_| {}).unwrap();
        assert_eq!(p.image_id.as_deref(), Some("sha256:abc"));
    }

    #[test]
    fn api_versions_compare() {
        assert!(version_below("1.38", (1, 39)));
        assert!(!version_below("1.41", (1, 39)));
        assert!(!version_below("2.0", (1, 39)));
    }
}
