//! Container ports published on the host, always on its loopback address: a task's
//! service must never be reachable from the host's network.

use std::collections::HashMap;

use bollard::models::{PortBinding, PortMap};

/// The only host address ports are published on.
pub const PUBLISH_ADDRESS: &str = "127.0.0.1";

/// A container port published on the host's loopback address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishedPort {
    /// The port inside the container.
    pub container_port: u16,
    /// The host port; an ephemeral one chosen by the engine when `None`.
    pub host_port: Option<u16>,
    /// `tcp`, `udp` or `sctp`.
    pub protocol: String,
}

impl PublishedPort {
    /// A TCP port published on an ephemeral host port.
    pub fn tcp(container_port: u16) -> Self {
        Self { container_port, host_port: None, protocol: "tcp".into() }
    }

    /// The engine's key for the port (`80/tcp`).
    pub fn key(&self) -> String {
        format!("{}/{}", self.container_port, self.protocol)
    }
}

/// The engine's exposed ports and port bindings for `ports`, every binding on
/// [`PUBLISH_ADDRESS`].
pub(crate) fn engine_ports(ports: &[PublishedPort]) -> (HashMap<String, HashMap<(), ()>>, PortMap) {
    let mut exposed = HashMap::new();
    let mut bindings: PortMap = HashMap::new();
    for p in ports {
        exposed.insert(p.key(), HashMap::new());
        let binding = PortBinding {
            host_ip: Some(PUBLISH_ADDRESS.into()),
            // An empty host port asks the engine for an ephemeral one.
            host_port: Some(p.host_port.map(|h| h.to_string()).unwrap_or_default()),
        };
        bindings.entry(p.key()).or_insert_with(|| Some(Vec::new())).get_or_insert_with(Vec::new).push(binding);
    }
    (exposed, bindings)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_binding_is_on_loopback() {
        let ports = [
            PublishedPort::tcp(80),
            PublishedPort { container_port: 53, host_port: Some(5353), protocol: "udp".into() },
            PublishedPort { container_port: 80, host_port: Some(8080), protocol: "tcp".into() },
        ];
        let (exposed, bindings) = engine_ports(&ports);
        assert_eq!(exposed.len(), 2);
        let http = bindings["80/tcp"].as_ref().unwrap();
        assert_eq!(http.len(), 2);
        assert!(http.iter().all(|b| b.host_ip.as_deref() == Some("127.0.0.1")));
        assert_eq!(http[0].host_port.as_deref(), Some(""));
        assert_eq!(http[1].host_port.as_deref(), Some("8080"));
        assert_eq!(bindings["53/udp"].as_ref().unwrap()[0].host_port.as_deref(), Some("5353"));
    }
}
