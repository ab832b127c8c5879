//! A trial's environment: a network when the task has several services, the
//! services started in order and health-checked, and the agent's container; all of
//! it labelled with the run id and removed on every path.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use bollard::container::{Config, CreateContainerOptions, RemoveContainerOptions};
use bollard::models::{EndpointSettings, HostConfig};
use bollard::network::{ConnectNetworkOptions, CreateNetworkOptions, ListNetworksOptions};
use bollard::Docker;

use super::compose::{Service, CLIENT, TEST_DIR};
use super::images::TaskImages;
use super::task::BenchTask;
use crate::sandbox::docker_name_part;
use crate::sandbox::{self, ContainerConfig, Sandbox, LABEL_EPISODE, LABEL_OWNER, LABEL_RUN};

/// Container settings shared by every trial of a run.
#[derive(Debug, Clone)]
pub struct EnvSettings {
    pub run_id: String,
    pub cpus: f64,
    pub memory_bytes: i64,
    pub pids_limit: i64,
    pub extra_hosts: Vec<String>,
}

/// A started environment.
pub struct TrialEnv {
    docker: Docker,
    client: Option<Sandbox>,
    sidecars: Vec<String>,
    network: Option<String>,
}

fn labels(run_id: &str, episode: &str) -> HashMap<String, String> {
    HashMap::from([
        (LABEL_RUN.to_string(), run_id.to_string()),
        (LABEL_EPISODE.to_string(), episode.to_string()),
        (LABEL_OWNER.to_string(), sandbox::owner_label()),
    ])
}

impl TrialEnv {
    /// Starts the environment; on failure everything started so far is removed and
    /// the reason returned.
    pub async fn start(
        docker: &Docker,
        task: &BenchTask,
        images: &TaskImages,
        settings: &EnvSettings,
        episode: &str,
    ) -> Result<TrialEnv, String> {
        let mut env = TrialEnv { docker: docker.clone(), client: None, sidecars: Vec::new(), network: None };
        match env.start_inner(task, images, settings, episode).await {
            Ok(client) => {
                env.client = Some(client);
                Ok(env)
            }
            Err(e) => {
                env.teardown().await;
                Err(e)
            }
        }
    }

    async fn start_inner(
        &mut self,
        task: &BenchTask,
        images: &TaskImages,
        settings: &EnvSettings,
        episode: &str,
    ) -> Result<Sandbox, String> {
        let image_of = |s: &Service| {
            images.by_service.get(&s.name).cloned().ok_or_else(|| format!("no image for the service `{}`", s.name))
        };
        if task.environment.sidecars().next().is_some() {
            let name = format!(
                "agent-bench-{}-{}",
                docker_name_part(episode),
                &uuid::Uuid::new_v4().simple().to_string()[..6]
            );
            let opts = CreateNetworkOptions {
                name: name.clone(),
                driver: "bridge".to_string(),
                labels: labels(&settings.run_id, episode),
                ..Default::default()
            };
            self.docker.create_network(opts).await.map_err(|e| format!("cannot create the network {name}: {e}"))?;
            self.network = Some(name);
        }
        for service in task.environment.sidecars() {
            let id = self.start_sidecar(service, &image_of(service)?, settings, episode).await?;
            if let Some(hc) = &service.healthcheck {
                wait_healthy(&self.docker, &id, &service.name, &hc.argv, hc.deadline).await?;
            }
        }
        let client = task.environment.client().ok_or("the environment has no `client` service")?;
        let mut cfg = ContainerConfig::new(image_of(client)?, settings.run_id.clone(), episode.to_string());
        cfg.cpus = settings.cpus;
        cfg.memory_bytes = settings.memory_bytes;
        cfg.pids_limit = settings.pids_limit;
        cfg.extra_hosts = settings.extra_hosts.clone();
        cfg.workdir = client.working_dir.clone();
        cfg.env = client.environment.clone();
        if !cfg.env.iter().any(|e| e.starts_with("TEST_DIR=")) {
            cfg.env.push(format!("TEST_DIR={TEST_DIR}"));
        }
        cfg.name_prefix = "agent-bench".into();
        let sandbox = Sandbox::start(&self.docker, &cfg).await.map_err(|e| e.to_string())?;
        if let Some(net) = &self.network {
            let opts = ConnectNetworkOptions {
                container: sandbox.id().to_string(),
                endpoint_config: EndpointSettings { aliases: Some(vec![CLIENT.to_string()]), ..Default::default() },
            };
            if let Err(e) = self.docker.connect_network(net, opts).await {
                sandbox.remove().await;
                return Err(format!("cannot connect the agent's container to {net}: {e}"));
            }
        }
        Ok(sandbox)
    }

    async fn start_sidecar(
        &mut self,
        service: &Service,
        image: &str,
        settings: &EnvSettings,
        episode: &str,
    ) -> Result<String, String> {
        let name = format!(
            "agent-bench-{}-{}-{}",
            docker_name_part(episode),
            docker_name_part(&service.name),
            &uuid::Uuid::new_v4().simple().to_string()[..6]
        );
        let net = self.network.clone().unwrap_or_else(|| "bridge".into());
        let config = Config {
            image: Some(image.to_string()),
            cmd: service.command.clone(),
            env: Some(service.environment.clone()),
            working_dir: service.working_dir.clone(),
            labels: Some(labels(&settings.run_id, episode)),
            host_config: Some(HostConfig {
                network_mode: Some(net.clone()),
                extra_hosts: (!settings.extra_hosts.is_empty()).then(|| settings.extra_hosts.clone()),
                memory: Some(settings.memory_bytes),
                pids_limit: Some(settings.pids_limit),
                ..Default::default()
            }),
            networking_config: Some(bollard::container::NetworkingConfig {
                endpoints_config: HashMap::from([(
                    net,
                    EndpointSettings { aliases: Some(vec![service.name.clone()]), ..Default::default() },
                )]),
            }),
            ..Default::default()
        };
        let created = self
            .docker
            .create_container(Some(CreateContainerOptions { name: name.clone(), platform: None }), config)
            .await
            .map_err(|e| format!("cannot create the `{}` service: {e}", service.name))?;
        self.sidecars.push(created.id.clone());
        self.docker
            .start_container::<String>(&created.id, None)
            .await
            .map_err(|e| format!("cannot start the `{}` service: {e}", service.name))?;
        Ok(created.id)
    }

    /// The agent's container (absent only after [`TrialEnv::teardown`]).
    pub fn client(&self) -> Option<&Sandbox> {
        self.client.as_ref()
    }

    /// Removes every container and the network. Never fails; problems are logged.
    pub async fn teardown(&mut self) {
        if let Some(client) = self.client.take() {
            client.remove().await;
        }
        for id in self.sidecars.drain(..) {
            let opts = RemoveContainerOptions { force: true, v: true, ..Default::default() };
            if let Err(e) = self.docker.remove_container(&id, Some(opts)).await {
                tracing::warn!("could not remove service container {id}: {e}");
            }
        }
        if let Some(net) = self.network.take() {
            if let Err(e) = self.docker.remove_network(&net).await {
                tracing::warn!("could not remove network {net}: {e}");
            }
        }
    }
}

async fn wait_healthy(
    docker: &Docker,
    id: &str,
    name: &str,
    argv: &[String],
    deadline: Duration,
) -> Result<(), String> {
    let started = Instant::now();
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let mut last = String::new();
    while started.elapsed() < deadline {
        match sandbox::exec_capture(docker, id, &argv, None, Duration::from_secs(10), 2048).await {
            Ok(out) if out.exit_code == Some(0) => return Ok(()),
            Ok(out) => last = String::from_utf8_lossy(&out.stderr).trim().chars().take(200).collect(),
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    Err(format!("the `{name}` service did not become healthy within {} s (last check: {last})", deadline.as_secs()))
}

/// Removes every network labelled with `run_id` (containers go through
/// [`sandbox::remove_run`]); returns how many were removed.
pub async fn remove_run_networks(docker: &Docker, run_id: &str) -> usize {
    let filters = HashMap::from([("label".to_string(), vec![format!("{LABEL_RUN}={run_id}")])]);
    let Ok(list) = docker.list_networks(Some(ListNetworksOptions { filters })).await else { return 0 };
    let mut n = 0;
    for net in list {
        if let Some(id) = net.id {
            if docker.remove_network(&id).await.is_ok() {
                n += 1;
            }
        }
    }
    n
}

/// Removes every container and network of `run_id`.
pub async fn remove_run(docker: &Docker, run_id: &str) -> (usize, usize) {
    let containers = sandbox::remove_run(docker, run_id).await.unwrap_or(0);
    (containers, remove_run_networks(docker, run_id).await)
}

/// [`remove_run`] until nothing of the run is left: after an interrupt, a create
/// call that was in flight can finish (or still be finishing, which makes its
/// removal fail) after the first pass.
pub async fn remove_run_settled(docker: &Docker, run_id: &str) -> (usize, usize) {
    let mut total = (0, 0);
    for pass in 0..20 {
        let (c, n) = remove_run(docker, run_id).await;
        total = (total.0 + c, total.1 + n);
        if pass >= 1 && count_run(docker, run_id).await == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    total
}

/// Containers (any state) and networks labelled with `run_id`.
async fn count_run(docker: &Docker, run_id: &str) -> usize {
    let filters = HashMap::from([("label".to_string(), vec![format!("{LABEL_RUN}={run_id}")])]);
    let opts = bollard::container::ListContainersOptions { all: true, filters: filters.clone(), ..Default::default() };
    let containers = docker.list_containers(Some(opts)).await.map(|l| l.len()).unwrap_or(1);
    let networks = docker.list_networks(Some(ListNetworksOptions { filters })).await.map(|l| l.len()).unwrap_or(1);
    containers + networks
}
