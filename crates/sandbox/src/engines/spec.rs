//! `[[sandbox.engines]]`: where a Docker engine listens and how much it may run, checked
//! before anything connects (a plain `tcp://` engine is root on its host for anyone who
//! can reach the port, so only TLS is accepted off loopback).

use std::net::IpAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::super::error::SandboxError;

/// One Docker engine of the pool, as the user's config names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EngineSpec {
    /// `unix:///var/run/docker.sock`, `tcp://host:2376` (TLS) or `ssh://user@host`.
    pub url: String,
    /// A short name for logs and results (default: the URL's host, or `local`).
    #[serde(default)]
    pub name: Option<String>,
    /// Containers of ours it may run at once (default 8).
    #[serde(default = "default_max_containers")]
    pub max_containers: usize,
    /// The CA that signed the engine's certificate (`tcp://` only).
    #[serde(default)]
    pub tls_ca: Option<PathBuf>,
    /// This client's certificate, signed by a CA the engine trusts.
    #[serde(default)]
    pub tls_cert: Option<PathBuf>,
    /// This client's private key.
    #[serde(default)]
    pub tls_key: Option<PathBuf>,
}

fn default_max_containers() -> usize {
    8
}

/// How the engine is reached, once the spec has been checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Transport {
    Unix(PathBuf),
    /// Plain HTTP: loopback only.
    Http(String),
    Tls {
        addr: String,
        ca: PathBuf,
        cert: PathBuf,
        key: PathBuf,
    },
    /// `ssh` forwards a local socket to the remote engine's socket.
    Ssh {
        destination: String,
        port: Option<u16>,
        socket: String,
    },
}

impl EngineSpec {
    /// The local engine (`DOCKER_HOST` or the default socket), unbounded: the pool when
    /// the config names no engines.
    /// With `DOCKER_TLS_VERIFY`, the engine's TLS files are `ca.pem`, `cert.pem` and
    /// `key.pem` in `DOCKER_CERT_PATH` (default `~/.docker`), as the docker CLI reads them.
    pub fn local() -> EngineSpec {
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let (url, tls) = docker_host_url(env("DOCKER_HOST").as_deref(), env("DOCKER_TLS_VERIFY").is_some());
        let dir = env("DOCKER_CERT_PATH")
            .map(PathBuf::from)
            .or_else(|| env("HOME").map(|h| PathBuf::from(h).join(".docker")))
            .unwrap_or_else(|| PathBuf::from("/root/.docker"));
        let file = |f: &str| tls.then(|| dir.join(f));
        EngineSpec {
            url,
            name: Some("local".into()),
            max_containers: usize::MAX,
            tls_ca: file("ca.pem"),
            tls_cert: file("cert.pem"),
            tls_key: file("key.pem"),
        }
    }

    /// Refuses, before anything connects, the `DOCKER_HOST` that [`Self::local`] read when
    /// it names a plain-HTTP engine off loopback: whoever reaches that port is root on its
    /// host, and so is anyone on the path who rewrites our requests.
    pub(crate) fn check_docker_host(&self) -> Result<(), SandboxError> {
        let plain = self.url.strip_prefix("tcp://").filter(|_| self.tls_ca.is_none());
        match plain {
            Some(addr) if !is_loopback(addr.trim_end_matches('/')) => Err(SandboxError::DockerHostRefused {
                host: self.url.clone(),
                reason: "a plain tcp:// engine gives root on its host to anyone who can reach the port; \
                         use TLS (DOCKER_TLS_VERIFY=1 and DOCKER_CERT_PATH holding ca.pem, cert.pem, key.pem, \
                         the engine started with --tlsverify), or ssh://USER@HOST, or a loopback tcp://127.0.0.1:PORT"
                    .into(),
            }),
            _ => Ok(()),
        }
    }

    /// The name results and logs use.
    pub fn display_name(&self) -> String {
        if let Some(n) = self.name.as_deref().filter(|n| !n.is_empty()) {
            return n.to_string();
        }
        match self.transport() {
            Ok(Transport::Unix(_)) => "local".into(),
            Ok(Transport::Http(a) | Transport::Tls { addr: a, .. }) => a,
            Ok(Transport::Ssh { destination, .. }) => destination,
            Err(_) => self.url.clone(),
        }
    }

    /// Checks the URL and its TLS files and says how to reach the engine.
    pub(crate) fn transport(&self) -> Result<Transport, SandboxError> {
        let bad = |reason: String| SandboxError::EngineConfig { url: self.url.clone(), reason };
        let tls = [&self.tls_ca, &self.tls_cert, &self.tls_key];
        let tls_given = tls.iter().filter(|p| p.is_some()).count();
        if let Some(path) = self.url.strip_prefix("unix://") {
            if tls_given > 0 {
                return Err(bad("tls_ca/tls_cert/tls_key apply to tcp:// engines only".into()));
            }
            return Ok(Transport::Unix(PathBuf::from(path)));
        }
        if let Some(rest) = self.url.strip_prefix("ssh://") {
            if tls_given > 0 {
                return Err(bad("ssh:// engines are authenticated by ssh; remove tls_ca/tls_cert/tls_key".into()));
            }
            let rest = rest.trim_end_matches('/');
            let (destination, port) = match rest.rsplit_once(':') {
                Some((d, p)) if !d.ends_with(']') || p.chars().all(|c| c.is_ascii_digit()) => match p.parse() {
                    Ok(port) => (d.to_string(), Some(port)),
                    Err(_) => return Err(bad(format!("`{p}` is not a port"))),
                },
                _ => (rest.to_string(), None),
            };
            if destination.is_empty() || destination.starts_with('-') {
                return Err(bad("name the host: ssh://user@host".into()));
            }
            return Ok(Transport::Ssh { destination, port, socket: "/var/run/docker.sock".into() });
        }
        let Some(addr) = self.url.strip_prefix("tcp://") else {
            return Err(bad("use unix://PATH, tcp://HOST:PORT (with TLS) or ssh://USER@HOST".into()));
        };
        let addr = addr.trim_end_matches('/').to_string();
        if addr.is_empty() || addr.contains('/') {
            return Err(bad("tcp:// takes HOST:PORT".into()));
        }
        match (&self.tls_ca, &self.tls_cert, &self.tls_key) {
            (Some(ca), Some(cert), Some(key)) => {
                // Relative to what? The config is read from several places: say it outright.
                if let Some(rel) = [ca, cert, key].into_iter().find(|p| !p.is_absolute()) {
                    return Err(bad(format!(
                        "{} is a relative path; give the TLS files as absolute paths",
                        rel.display()
                    )));
                }
                Ok(Transport::Tls { addr, ca: ca.clone(), cert: cert.clone(), key: key.clone() })
            }
            (None, None, None) if is_loopback(&addr) => Ok(Transport::Http(addr)),
            (None, None, None) => {
                Err(bad("a plain tcp:// engine gives root on its host to anyone who can reach the port; \
                 configure TLS (tls_ca, tls_cert, tls_key, the engine started with --tlsverify) or use ssh://"
                    .into()))
            }
            _ => Err(bad("TLS needs all three of tls_ca, tls_cert and tls_key".into())),
        }
    }
}

/// `DOCKER_HOST` as an engine URL, and whether it is reached over TLS: the docker CLI's
/// `http://` and `https://` spellings become `tcp://` (TLS for `https://`).
fn docker_host_url(host: Option<&str>, tls_verify: bool) -> (String, bool) {
    let Some(host) = host else { return ("unix:///var/run/docker.sock".into(), false) };
    if let Some(addr) = host.strip_prefix("https://") {
        return (format!("tcp://{addr}"), true);
    }
    if let Some(addr) = host.strip_prefix("http://") {
        return (format!("tcp://{addr}"), false);
    }
    let tls = tls_verify && host.starts_with("tcp://");
    (host.to_string(), tls)
}

/// `127.0.0.1:2375`, `[::1]:2375`, `localhost:2375`.
fn is_loopback(addr: &str) -> bool {
    let host = match addr.rsplit_once(':') {
        Some((h, _)) => h,
        None => addr,
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host == "localhost" || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// Names are unique: results and metrics count trials per engine by name.
pub(crate) fn check_names(specs: &[EngineSpec]) -> Result<(), SandboxError> {
    let mut seen = std::collections::BTreeSet::new();
    for s in specs {
        let name = s.display_name();
        if !seen.insert(name.clone()) {
            return Err(SandboxError::EngineConfig {
                url: s.url.clone(),
                reason: format!("another engine is also named `{name}`; give each a distinct `name`"),
            });
        }
        if s.max_containers == 0 {
            return Err(SandboxError::EngineConfig {
                url: s.url.clone(),
                reason: "max_containers must be at least 1".into(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(url: &str) -> EngineSpec {
        EngineSpec { url: url.into(), name: None, max_containers: 2, tls_ca: None, tls_cert: None, tls_key: None }
    }

    #[test]
    fn plain_tcp_is_refused_off_loopback() {
        let err = spec("tcp://10.0.0.5:2375").transport().unwrap_err().to_string();
        assert!(err.contains("root on its host") && err.contains("tls_ca"), "{err}");
        assert_eq!(spec("tcp://127.0.0.1:2375").transport().unwrap(), Transport::Http("127.0.0.1:2375".into()));
        assert!(matches!(spec("tcp://[::1]:2375").transport(), Ok(Transport::Http(_))));
        assert!(matches!(spec("tcp://localhost:2375").transport(), Ok(Transport::Http(_))));
        assert!(spec("tcp://127.0.0.1.evil.example:2375").transport().is_err());
    }

    #[test]
    fn tls_needs_all_three_files() {
        let mut s = spec("tcp://build-1:2376");
        s.tls_ca = Some("/c/ca.pem".into());
        assert!(s.transport().unwrap_err().to_string().contains("all three"));
        s.tls_cert = Some("/c/cert.pem".into());
        s.tls_key = Some("c/key.pem".into());
        assert!(s.transport().unwrap_err().to_string().contains("relative path"));
        s.tls_key = Some("/c/key.pem".into());
        assert!(matches!(s.transport(), Ok(Transport::Tls { ref addr, .. }) if addr == "build-1:2376"));
        assert_eq!(s.display_name(), "build-1:2376");
        let mut u = spec("unix:///run/docker.sock");
        u.tls_ca = Some("/c/ca.pem".into());
        assert!(u.transport().is_err());
    }

    #[test]
    fn ssh_and_unix_urls() {
        assert_eq!(
            spec("ssh://ci@gpu-3:2222").transport().unwrap(),
            Transport::Ssh { destination: "ci@gpu-3".into(), port: Some(2222), socket: "/var/run/docker.sock".into() }
        );
        assert!(matches!(spec("ssh://ci@gpu-3").transport(), Ok(Transport::Ssh { port: None, .. })));
        assert!(spec("ssh://-oProxyCommand=x").transport().is_err(), "an option is not a host");
        assert_eq!(spec("unix:///run/d.sock").transport().unwrap(), Transport::Unix("/run/d.sock".into()));
        assert!(spec("http://h:2375").transport().is_err());
    }

    #[test]
    fn a_plain_remote_docker_host_is_refused_and_loopback_or_tls_is_not() {
        let local = |host: &str, tls: bool| {
            let (url, tls) = docker_host_url(Some(host), tls);
            let file = |f: &str| tls.then(|| PathBuf::from("/certs").join(f));
            EngineSpec { url, tls_ca: file("ca.pem"), tls_cert: file("cert.pem"), tls_key: file("key.pem"), ..spec("") }
        };
        for remote in ["tcp://10.1.2.3:2375", "http://10.1.2.3:2375", "tcp://docker.example:2375/"] {
            let err = local(remote, false).check_docker_host().unwrap_err().to_string();
            assert!(
                err.contains("DOCKER_HOST=") && err.contains("root on its host") && err.contains("DOCKER_TLS_VERIFY"),
                "{err}"
            );
        }
        for fine in
            ["tcp://127.0.0.1:2375", "tcp://[::1]:2375", "tcp://localhost:2375", "unix:///run/d.sock", "ssh://u@h"]
        {
            local(fine, false).check_docker_host().unwrap();
        }
        let tls = local("tcp://10.1.2.3:2376", true);
        tls.check_docker_host().unwrap();
        assert!(matches!(tls.transport(), Ok(Transport::Tls { ref addr, .. }) if addr == "10.1.2.3:2376"));
        assert!(matches!(local("https://10.1.2.3:2376", false).transport(), Ok(Transport::Tls { .. })));
        assert_eq!(docker_host_url(None, true).0, "unix:///var/run/docker.sock");
    }

    #[test]
    fn names_are_unique() {
        let mut a = spec("tcp://127.0.0.1:2375");
        let b = spec("tcp://127.0.0.1:2375");
        assert!(check_names(&[a.clone(), b.clone()]).is_err());
        a.name = Some("one".into());
        check_names(&[a, b]).unwrap();
    }
}
