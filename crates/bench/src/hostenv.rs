//! What containers need from the host to reach package mirrors: the host's name
//! overrides (`/etc/hosts`) and its CA bundle. Containers inherit neither.

use std::path::{Path, PathBuf};

use super::error::BenchError;
use agent_sandbox::{BuildEnv, BuilderChoice};

/// Where the bundle comes from when none is named.
const DEFAULT_BUNDLES: &[&str] =
    &["/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem"];

/// Name overrides and CA bundle handed to builds and containers.
#[derive(Debug, Clone, Default)]
pub struct HostEnv {
    /// `name:ip` pairs.
    pub extra_hosts: Vec<String>,
    /// The bundle's path (for the report) and bytes.
    pub ca_bundle: Option<(PathBuf, Vec<u8>)>,
    /// The image builder (`AGENT_BUILDER`).
    pub builder: BuilderChoice,
}

impl HostEnv {
    /// Derives the overrides from `hosts_file` (loopback entries and this host's own
    /// names are skipped: inside a container they would point at the container) and
    /// the CA bundle from `ca` or, when `None`, `SSL_CERT_FILE` or the system bundle.
    pub fn from_host(hosts_file: &Path, ca: Option<&Path>) -> Result<HostEnv, BenchError> {
        let extra_hosts = match std::fs::read_to_string(hosts_file) {
            Ok(text) => parse_hosts(&text),
            Err(_) => Vec::new(),
        };
        let ca_path = match ca {
            Some(p) => Some(p.to_path_buf()),
            None => std::env::var_os("SSL_CERT_FILE")
                .map(PathBuf::from)
                .filter(|p| p.is_file())
                .or_else(|| DEFAULT_BUNDLES.iter().map(PathBuf::from).find(|p| p.is_file())),
        };
        let ca_bundle = match ca_path {
            Some(p) => {
                let bytes =
                    std::fs::read(&p).map_err(|e| BenchError::io(&p, format!("cannot read the CA bundle: {e}")))?;
                if !String::from_utf8_lossy(&bytes).contains("-----BEGIN CERTIFICATE-----") {
                    return Err(BenchError::io(&p, "not a PEM CA bundle (no BEGIN CERTIFICATE line)"));
                }
                Some((p, bytes))
            }
            None => None,
        };
        let builder = BuilderChoice::from_env().map_err(BenchError::Usage)?;
        Ok(HostEnv { extra_hosts, ca_bundle, builder })
    }

    /// Adds explicit `name:ip` overrides, checking their form.
    pub fn add_hosts(&mut self, hosts: &[String]) -> Result<(), BenchError> {
        for h in hosts {
            match h.split_once(':') {
                Some((name, ip)) if !name.is_empty() && ip.parse::<std::net::IpAddr>().is_ok() => {
                    self.extra_hosts.retain(|e| e.split_once(':').map(|(n, _)| n) != Some(name));
                    self.extra_hosts.push(h.clone());
                }
                _ => return Err(BenchError::Usage(format!("--add-host `{h}`: expected NAME:IP"))),
            }
        }
        Ok(())
    }

    /// The sandbox's build options.
    pub fn build_env(&self) -> BuildEnv {
        BuildEnv {
            extra_hosts: self.extra_hosts.clone(),
            ca_bundle: self.ca_bundle.as_ref().map(|(_, b)| b.clone()),
            exec_shebangs: true,
            builder: self.builder,
        }
    }
}

/// `name:ip` pairs of an `/etc/hosts` text, loopback and the host's own names left out.
pub fn parse_hosts(text: &str) -> Vec<String> {
    let own = std::fs::read_to_string("/proc/sys/kernel/hostname").map(|s| s.trim().to_string()).unwrap_or_default();
    let mut out: Vec<String> = Vec::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("");
        let mut words = line.split_whitespace();
        let Some(ip) = words.next() else { continue };
        let Ok(addr) = ip.parse::<std::net::IpAddr>() else { continue };
        if addr.is_loopback()
            || addr.is_unspecified()
            || addr.is_multicast()
            || ip.starts_with("fe00")
            || ip.starts_with("ff0")
        {
            continue;
        }
        for name in words {
            if name == own || name == "localhost" || out.iter().any(|e| e.split_once(':').map(|(n, _)| n) == Some(name))
            {
                continue;
            }
            out.push(format!("{name}:{ip}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_file_overrides_skip_loopback() {
        let text = "127.0.0.1 localhost vm\n::1 localhost ip6-localhost\n10.1.2.3 deb.debian.org pypi.org # mirror\n\
                    ff02::1 ip6-allnodes\n10.9.9.9 deb.debian.org\n";
        assert_eq!(parse_hosts(text), ["deb.debian.org:10.1.2.3", "pypi.org:10.1.2.3"]);
    }

    #[test]
    fn explicit_hosts_and_bundle_are_checked() {
        let mut env = HostEnv::default();
        env.add_hosts(&["a.example:10.0.0.1".into()]).unwrap();
        assert!(env.add_hosts(&["nonsense".into()]).is_err());
        assert_eq!(env.build_env().extra_hosts, ["a.example:10.0.0.1"]);
        let d = tempfile::tempdir().unwrap();
        let bad = d.path().join("ca.pem");
        std::fs::write(&bad, "hello").unwrap();
        let e = HostEnv::from_host(Path::new("/nonexistent"), Some(&bad)).unwrap_err().to_string();
        assert!(e.contains("ca.pem") && e.contains("PEM"), "{e}");
    }
}
