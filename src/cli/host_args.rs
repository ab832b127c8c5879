//! What of the host a command hands to task images and containers (`/etc/hosts`
//! entries, the CA bundle), shared by `agent bench` and `agent tasks`.

use std::path::PathBuf;

use clap::Args;

use agent_bench::HostEnv;

/// The host-environment flags.
#[derive(Debug, Clone, Args)]
pub struct HostArgs {
    /// Extra `/etc/hosts` entry for builds and containers (NAME:IP; repeatable).
    #[arg(long = "add-host")]
    pub add_host: Vec<String>,
    /// CA bundle installed in task images (default: the host's, from SSL_CERT_FILE or the system store).
    #[arg(long)]
    pub ca_bundle: Option<PathBuf>,
    /// Hand containers nothing from the host (no /etc/hosts entries, no CA bundle).
    #[arg(long)]
    pub no_host_env: bool,
}

impl HostArgs {
    /// The host environment these flags ask for.
    pub fn host_env(&self) -> anyhow::Result<HostEnv> {
        let mut host = if self.no_host_env {
            HostEnv::default()
        } else {
            HostEnv::from_host(std::path::Path::new("/etc/hosts"), self.ca_bundle.as_deref())?
        };
        host.add_hosts(&self.add_host)?;
        Ok(host)
    }
}
