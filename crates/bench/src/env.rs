//! A trial's environment: the task's named volumes, a network when the task has
//! several services, the services started in order and health-checked, and the
//! agent's container; all of it labelled with the run id and removed on every path.
//! Every container, services included, is created by the sandbox module with the same
//! hardening and limits; what a service asks for beyond that (mounts, ports, user,
//! capabilities) is applied here, capabilities only when the run grants them.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::compose::{merge_env, Service, TEST_DIR};
use super::error::EnvError;
use super::images::TaskImages;
use super::task::BenchTask;
use agent_core::config::SandboxSettings;
use agent_sandbox::{docker_name_part, ContainerConfig, ContainerProcess, Engine, Mount, Network, Sandbox, Volume};

/// Container settings shared by every trial of a run.
#[derive(Debug, Clone)]
pub struct EnvSettings {
    pub run_id: String,
    /// The config's container limits.
    pub limits: SandboxSettings,
    pub extra_hosts: Vec<String>,
    /// Access beyond the environment's own network. Without it (or when the task asks
    /// for none), a lone container has no network and a task's services share an
    /// internal one.
    pub network: bool,
    /// Grant the capabilities a task's services ask for (`cap_add`); refused otherwise.
    pub allow_cap_add: bool,
}

impl EnvSettings {
    /// The config's container limits, with network access.
    pub fn from_config(config: &agent_core::config::Config, run_id: &str, extra_hosts: Vec<String>) -> Self {
        Self {
            run_id: run_id.to_string(),
            limits: config.sandbox.clone(),
            extra_hosts,
            network: true,
            allow_cap_add: false,
        }
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
    volumes: Vec<Volume>,
    notices: Vec<String>,
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
        let mut env =
            TrialEnv { client: None, services: Vec::new(), network: None, volumes: Vec::new(), notices: Vec::new() };
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
        if !settings.allow_cap_add {
            if let Some(s) = task.environment.services.iter().find(|s| !s.cap_add.is_empty()) {
                return Err(EnvError::CapAdd { service: s.name.clone(), caps: s.cap_add.join(", ") });
            }
        }
        let internet = settings.network && task.internet;
        if !internet && task.environment.services.iter().any(|s| !s.ports.is_empty()) {
            self.notices.push("ports are not published: the task's containers have no network beyond their own".into());
        }
        let suffix = uuid::Uuid::new_v4().simple().to_string()[..6].to_string();
        let mut volumes = BTreeMap::new();
        for v in &task.environment.volumes {
            let name = format!("agent-bench-{}-{suffix}-{}", docker_name_part(episode), docker_name_part(v));
            let created = Volume::create(engine, &name, &settings.run_id, episode)
                .await
                .map_err(|e| EnvError::Volume { volume: v.clone(), source: e })?;
            self.volumes.push(created);
            volumes.insert(v.clone(), name);
        }
        if task.environment.sidecars().next().is_some() {
            let name = format!("agent-bench-{}-{suffix}", docker_name_part(episode));
            let network = Network::create(engine, &name, &settings.run_id, episode, !internet).await?;
            self.network = Some(network);
        }
        for service in task.environment.sidecars() {
            let mut cfg = settings.container(image_of(service)?, episode);
            apply_service(&mut cfg, service, &volumes, internet);
            cfg.name_prefix = format!("agent-bench-{}", docker_name_part(&service.name));
            cfg.process = ContainerProcess::Image(service.command.clone());
            cfg.entrypoint = service.entrypoint.clone();
            cfg.init = service.init;
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
        apply_service(&mut cfg, client, &volumes, internet);
        merge_env(&mut cfg.env, task.env.agent.iter().map(|(k, v)| format!("{k}={v}")));
        if !cfg.env.iter().any(|e| e.starts_with("TEST_DIR=")) {
            cfg.env.push(format!("TEST_DIR={TEST_DIR}"));
        }
        if !internet {
            // Only the services' internal network, or none at all.
            cfg.join = self.network.as_ref().map(|n| (n.name().to_string(), vec![client.name.clone()]));
            cfg.network = cfg.join.is_some();
        }
        let sandbox = Sandbox::start(engine, &cfg).await?;
        if let (Some(net), true) = (&self.network, internet) {
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

    /// What the environment does differently from what the task asks, one line each.
    pub fn notices(&self) -> &[String] {
        &self.notices
    }

    /// Removes every container, then the network and the volumes. Never fails;
    /// problems are logged.
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
        for volume in self.volumes.drain(..) {
            volume.remove().await;
        }
    }
}

/// Gives a container what its service asks for: environment, working directory, mounts
/// (named volumes under this trial's names), ports (only with a network to publish
/// them on), user, capabilities, `/dev/shm`, host name and `/etc/hosts` entries.
fn apply_service(cfg: &mut ContainerConfig, service: &Service, volumes: &BTreeMap<String, String>, internet: bool) {
    cfg.env = service.environment.clone();
    cfg.workdir = service.working_dir.clone();
    cfg.mounts = service
        .mounts
        .iter()
        .map(|m| match m {
            // The file's name becomes this trial's volume; an undeclared one cannot get
            // past loading, and would be an anonymous volume here rather than a host's.
            Mount::Volume { name: Some(name), target, read_only } => {
                Mount::Volume { name: volumes.get(name).cloned(), target: target.clone(), read_only: *read_only }
            }
            other => other.clone(),
        })
        .collect();
    if internet {
        cfg.ports = service.ports.clone();
    }
    cfg.user = service.user.clone();
    cfg.cap_add = service.cap_add.clone();
    cfg.cap_drop = service.cap_drop.clone();
    cfg.shm_size = service.shm_size;
    cfg.hostname = service.hostname.clone();
    cfg.extra_hosts.extend(service.extra_hosts.iter().cloned());
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compose::ImageSource;
    use agent_sandbox::PublishedPort;

    #[test]
    fn a_service_gets_its_trials_volumes_and_ports_only_with_a_network() {
        let mut s = Service::new("db", ImageSource::Named("img".into()));
        s.mounts = vec![
            Mount::Volume { name: Some("data".into()), target: "/data".into(), read_only: true },
            Mount::Tmpfs { target: "/run".into(), options: String::new() },
        ];
        s.ports = vec![PublishedPort::tcp(80)];
        s.user = Some("postgres".into());
        s.extra_hosts = vec!["mirror:10.0.0.1".into()];
        let volumes = BTreeMap::from([("data".to_string(), "agent-bench-t-0-abc123-data".to_string())]);
        let mut cfg = ContainerConfig::new("img", "run", "t-0");
        cfg.extra_hosts = vec!["proxy:10.0.0.2".into()];
        apply_service(&mut cfg, &s, &volumes, true);
        assert_eq!(
            cfg.mounts[0],
            Mount::Volume { name: Some("agent-bench-t-0-abc123-data".into()), target: "/data".into(), read_only: true }
        );
        assert_eq!(cfg.mounts[1], s.mounts[1]);
        assert_eq!(cfg.ports, s.ports);
        assert_eq!(cfg.user.as_deref(), Some("postgres"));
        assert_eq!(cfg.extra_hosts, ["proxy:10.0.0.2", "mirror:10.0.0.1"]);
        let mut cfg = ContainerConfig::new("img", "run", "t-0");
        apply_service(&mut cfg, &s, &volumes, false);
        assert!(cfg.ports.is_empty());
    }
}
