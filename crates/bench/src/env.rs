//! A trial's environment: a network when the task has several services, the
//! services started in order and health-checked, and the agent's container; all of
//! it labelled with the run id and removed on every path. Every container, services
//! included, is created by the sandbox module with the same hardening and limits.

use std::time::{Duration, Instant};

use super::compose::{Service, TEST_DIR};
use super::error::EnvError;
use super::images::TaskImages;
use super::task::BenchTask;
use agent_core::config::SandboxSettings;
use agent_sandbox::{docker_name_part, ContainerConfig, ContainerProcess, Engine, Network, Sandbox};

/// Container settings shared by every trial of a run.
#[derive(Debug, Clone)]
pub struct EnvSettings {
    pub run_id: String,
    /// The config's container limits.
    pub limits: SandboxSettings,
    pub extra_hosts: Vec<String>,
    /// Access beyond the environment's own network. Without it, a lone container has
    /// no network and a task's services share an internal one.
    pub network: bool,
}

impl EnvSettings {
    /// The config's container limits, with network access.
    pub fn from_config(config: &agent_core::config::Config, run_id: &str, extra_hosts: Vec<String>) -> Self {
        Self { run_id: run_id.to_string(), limits: config.sandbox.clone(), extra_hosts, network: true }
    }

    /// A container of this run with the run's limits.
    fn container(&self, image: String, episode: &str) -> ContainerConfig {
        let mut cfg = self.limits.container_config(image, &self.run_id, episode);
        // Network access is decided per trial below (`network`), not by the config.
        cfg.network = true;
        cfg.extra_hosts = self.extra_hosts.clone();
        cfg.name_prefix = "agent-bench".into();
        cfg
    }
}

/// A started environment.
pub struct TrialEnv {
    client: Option<Sandbox>,
    services: Vec<Sandbox>,
    network: Option<Network>,
}

impl TrialEnv {
    /// Starts the environment; on failure everything started so far is removed and
    /// the error returned.
    pub async fn start(
        engine: &Engine,
        task: &BenchTask,
        images: &TaskImages,
        settings: &EnvSettings,
        episode: &str,
    ) -> Result<TrialEnv, EnvError> {
        let mut env = TrialEnv { client: None, services: Vec::new(), network: None };
        match env.start_inner(engine, task, images, settings, episode).await {
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
        engine: &Engine,
        task: &BenchTask,
        images: &TaskImages,
        settings: &EnvSettings,
        episode: &str,
    ) -> Result<Sandbox, EnvError> {
        let image_of = |s: &Service| {
            images.by_service.get(&s.name).cloned().ok_or_else(|| EnvError::NoImage { service: s.name.clone() })
        };
        if task.environment.sidecars().next().is_some() {
            let name = format!(
                "agent-bench-{}-{}",
                docker_name_part(episode),
                &uuid::Uuid::new_v4().simple().to_string()[..6]
            );
            let network = Network::create(engine, &name, &settings.run_id, episode, !settings.network).await?;
            self.network = Some(network);
        }
        for service in task.environment.sidecars() {
            let mut cfg = settings.container(image_of(service)?, episode);
            cfg.name_prefix = format!("agent-bench-{}", docker_name_part(&service.name));
            cfg.process = ContainerProcess::Image(service.command.clone());
            cfg.env = service.environment.clone();
            cfg.workdir = service.working_dir.clone();
            cfg.join = self.network.as_ref().map(|n| (n.name().to_string(), vec![service.name.clone()]));
            let started = Sandbox::start(engine, &cfg)
                .await
                .map_err(|e| EnvError::ServiceStart { service: service.name.clone(), source: e })?;
            self.services.push(started.clone());
            if let Some(hc) = &service.healthcheck {
                wait_healthy(&started, &service.name, &hc.argv, hc.deadline).await?;
            }
        }
        let client = task.environment.client().ok_or(EnvError::NoClient)?;
        let mut cfg = settings.container(image_of(client)?, episode);
        cfg.workdir = client.working_dir.clone();
        cfg.env = client.environment.clone();
        if !cfg.env.iter().any(|e| e.starts_with("TEST_DIR=")) {
            cfg.env.push(format!("TEST_DIR={TEST_DIR}"));
        }
        if !settings.network {
            // Only the services' internal network, or none at all.
            cfg.join = self.network.as_ref().map(|n| (n.name().to_string(), vec![client.name.clone()]));
            cfg.network = cfg.join.is_some();
        }
        let sandbox = Sandbox::start(engine, &cfg).await?;
        if let (Some(net), true) = (&self.network, settings.network) {
            if let Err(e) = net.connect(&sandbox, &client.name).await {
                sandbox.remove().await;
                return Err(EnvError::Connect(e));
            }
        }
        Ok(sandbox)
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
        for service in self.services.drain(..) {
            service.remove().await;
        }
        if let Some(net) = self.network.take() {
            net.remove().await;
        }
    }
}

async fn wait_healthy(service: &Sandbox, name: &str, argv: &[String], deadline: Duration) -> Result<(), EnvError> {
    let started = Instant::now();
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let mut last = String::new();
    while started.elapsed() < deadline {
        match service.exec(&argv, None, Duration::from_secs(10), 2048).await {
            Ok(out) if out.exit_code == Some(0) => return Ok(()),
            Ok(out) => last = String::from_utf8_lossy(&out.stderr).trim().chars().take(200).collect(),
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    Err(EnvError::Unhealthy { service: name.to_string(), secs: deadline.as_secs(), last_check: last })
}
