//! Private networks for tasks with several services, labelled like the containers so
//! that every clean-up path finds them.

use bollard::models::EndpointSettings;
use bollard::network::{ConnectNetworkOptions, CreateNetworkOptions, ListNetworksOptions};

use super::container::{Sandbox, LABEL_RUN};
use super::docker::Engine;
use super::error::SandboxError;
use super::prune::{label_filter, resource_labels};

/// A bridge network of one episode.
#[derive(Debug)]
pub struct Network {
    engine: Engine,
    name: String,
}

impl Network {
    /// Creates the network `name`, labelled with the run and episode; an `internal` one
    /// connects its containers to each other and to nothing else.
    pub async fn create(
        engine: &Engine,
        name: &str,
        run_id: &str,
        episode_id: &str,
        internal: bool,
    ) -> Result<Network, SandboxError> {
        let labels = resource_labels(run_id, episode_id);
        let opts = CreateNetworkOptions {
            name: name.to_string(),
            driver: "bridge".to_string(),
            internal,
            labels,
            ..Default::default()
        };
        engine
            .api()
            .create_network(opts)
            .await
            .map_err(|e| SandboxError::docker(format!("create the network {name}"), e))?;
        Ok(Network { engine: engine.clone(), name: name.to_string() })
    }

    /// The network's name (what a container's `join` names).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Connects a running container, reachable on this network as `alias`, and
    /// rewrites its egress firewall to let it reach this network's other containers.
    pub async fn connect(&self, sandbox: &Sandbox, alias: &str) -> Result<(), SandboxError> {
        let opts = ConnectNetworkOptions {
            container: sandbox.id().to_string(),
            endpoint_config: EndpointSettings { aliases: Some(vec![alias.to_string()]), ..Default::default() },
        };
        self.engine
            .api()
            .connect_network(&self.name, opts)
            .await
            .map_err(|e| SandboxError::docker(format!("connect {} to the network {}", sandbox.name(), self.name), e))?;
        // The new subnet is private: the firewall learns it is the container's own.
        super::egress::reapply(sandbox).await
    }

    /// Removes the network (its containers must be gone). Never fails; problems are logged.
    pub async fn remove(self) {
        if let Err(e) = self.engine.api().remove_network(&self.name).await {
            tracing::warn!("could not remove network {}: {e}", self.name);
        }
    }
}

/// Removes every network labelled with `run_id`; returns how many were removed.
pub async fn remove_run_networks(engine: &Engine, run_id: &str) -> usize {
    remove_labelled_networks(engine, &format!("{LABEL_RUN}={run_id}")).await
}

/// Removes every network carrying `label` (`key=value`); returns how many.
pub(crate) async fn remove_labelled_networks(engine: &Engine, label: &str) -> usize {
    let opts = ListNetworksOptions { filters: label_filter(label) };
    let Ok(list) = engine.api().list_networks(Some(opts)).await else { return 0 };
    let mut n = 0;
    for net in list {
        if let Some(id) = net.id {
            if engine.api().remove_network(&id).await.is_ok() {
                n += 1;
            }
        }
    }
    n
}

/// Networks carrying `label` (1 when the engine cannot say, so that callers retry).
pub(crate) async fn count_labelled_networks(engine: &Engine, label: &str) -> usize {
    let opts = ListNetworksOptions { filters: label_filter(label) };
    engine.api().list_networks(Some(opts)).await.map(|l| l.len()).unwrap_or(1)
}
