//! Finding and removing containers, networks and volumes left behind by crashed runs.

use std::collections::HashMap;

use super::docker::Engine;
use bollard::container::{ListContainersOptions, RemoveContainerOptions};

use super::container::{LABEL_EPISODE, LABEL_OWNER, LABEL_RUN};
use super::error::SandboxError;
use super::network::{count_labelled_networks, remove_labelled_networks};
use super::volume::{count_labelled_volumes, labelled_volumes, remove_labelled_volumes};

/// Which sandbox containers to remove.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PruneScope {
    /// Containers of this host whose owning process is gone (crashed or killed runs).
    Orphaned,
    /// Every container labelled by `agent`, whoever owns it.
    All,
}

/// `host:pid:start-ticks` of this process: pid reuse cannot make a dead owner look alive.
pub fn owner_label() -> String {
    let pid = std::process::id();
    format!("{}:{}:{}", hostname(), pid, process_start_ticks(pid).unwrap_or(0))
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

/// Field 22 of `/proc/PID/stat`: start time in clock ticks since boot.
fn process_start_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// True when the owner label names a process of this host that is still running.
fn owner_alive(owner: &str) -> bool {
    let mut parts = owner.rsplitn(3, ':');
    let (Some(start), Some(pid), Some(host)) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    if host != hostname() {
        // Another host's run: never ours to judge.
        return true;
    }
    let (Ok(pid), Ok(start)) = (pid.parse::<u32>(), start.parse::<u64>()) else {
        return false;
    };
    process_start_ticks(pid) == Some(start)
}

/// The labels of everything an episode creates (containers, networks, volumes): its
/// run, its episode and the owning process, which the clean-up paths select by.
pub(crate) fn resource_labels(run_id: &str, episode_id: &str) -> HashMap<String, String> {
    HashMap::from([
        (LABEL_RUN.to_string(), run_id.to_string()),
        (LABEL_EPISODE.to_string(), episode_id.to_string()),
        (LABEL_OWNER.to_string(), owner_label()),
    ])
}

/// The engine's list filter for a label (`key` or `key=value`).
pub(crate) fn label_filter(label: &str) -> HashMap<String, Vec<String>> {
    HashMap::from([("label".to_string(), vec![label.to_string()])])
}

/// Whether something with these labels is to be pruned: everything of ours for
/// [`PruneScope::All`], only what a dead process owned for [`PruneScope::Orphaned`].
fn in_scope(labels: Option<&HashMap<String, String>>, scope: PruneScope) -> bool {
    let owner = labels.and_then(|l| l.get(LABEL_OWNER)).map(String::as_str).unwrap_or_default();
    scope == PruneScope::All || !owner_alive(owner)
}

/// Removes sandbox containers in `scope`, then the networks and volumes of
/// multi-service tasks by the same owner rule; returns the names removed (networks as
/// `network NAME`, volumes as `volume NAME`).
pub async fn prune(engine: &Engine, scope: PruneScope) -> Result<Vec<String>, SandboxError> {
    let mut removed = Vec::new();
    // A killed process's last request may still create a container after the listing;
    // the network it joined then refuses removal. A few rounds let that settle.
    for round in 0..3 {
        removed.extend(prune_containers(engine, scope).await?);
        let (networks, refused) = prune_networks(engine, scope).await?;
        removed.extend(networks);
        if refused == 0 || round == 2 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    removed.extend(prune_volumes(engine, scope).await?);
    Ok(removed)
}

async fn prune_volumes(engine: &Engine, scope: PruneScope) -> Result<Vec<String>, SandboxError> {
    let mut removed = Vec::new();
    for (name, labels) in labelled_volumes(engine, LABEL_RUN).await? {
        if !in_scope(Some(&labels), scope) {
            continue;
        }
        let opts = bollard::volume::RemoveVolumeOptions { force: true };
        match engine.api().remove_volume(&name, Some(opts)).await {
            Ok(()) => removed.push(format!("volume {name}")),
            Err(e) => tracing::warn!("could not remove leftover volume {name}: {e}"),
        }
    }
    Ok(removed)
}

/// Removes the networks in scope; returns those removed and how many refused.
async fn prune_networks(engine: &Engine, scope: PruneScope) -> Result<(Vec<String>, usize), SandboxError> {
    let list = engine
        .api()
        .list_networks(Some(bollard::network::ListNetworksOptions { filters: label_filter(LABEL_RUN) }))
        .await
        .map_err(|e| SandboxError::docker("list sandbox networks", e))?;
    let mut removed = Vec::new();
    let mut refused = 0;
    for net in list {
        let Some(id) = net.id else { continue };
        if !in_scope(net.labels.as_ref(), scope) {
            continue;
        }
        match engine.api().remove_network(&id).await {
            Ok(()) => removed.push(format!("network {}", net.name.unwrap_or(id))),
            Err(e) => {
                refused += 1;
                tracing::warn!("could not remove leftover network {id}: {e}");
            }
        }
    }
    Ok((removed, refused))
}

async fn prune_containers(docker: &Engine, scope: PruneScope) -> Result<Vec<String>, SandboxError> {
    let docker = docker.api();
    let list = docker
        .list_containers(Some(ListContainersOptions {
            all: true,
            filters: label_filter(LABEL_RUN),
            ..Default::default()
        }))
        .await
        .map_err(|e| SandboxError::docker("list sandbox containers", e))?;
    let mut removed = Vec::new();
    for c in list {
        let Some(id) = c.id else { continue };
        if !in_scope(c.labels.as_ref(), scope) {
            continue;
        }
        let opts = RemoveContainerOptions { force: true, v: true, ..Default::default() };
        match docker.remove_container(&id, Some(opts)).await {
            Ok(()) => {
                let name = c.names.and_then(|n| n.first().cloned()).unwrap_or(id);
                removed.push(name.trim_start_matches('/').to_string());
            }
            Err(e) => tracing::warn!("could not remove leftover container {id}: {e}"),
        }
    }
    Ok(removed)
}

/// Removes every container labelled with `run_id`; returns how many were removed.
pub async fn remove_run(docker: &Engine, run_id: &str) -> Result<usize, SandboxError> {
    remove_labelled(docker, &format!("{LABEL_RUN}={run_id}")).await
}

/// Removes every container carrying `label` (`key=value`); returns how many.
async fn remove_labelled(docker: &Engine, label: &str) -> Result<usize, SandboxError> {
    let docker = docker.api();
    let list = docker
        .list_containers(Some(ListContainersOptions { all: true, filters: label_filter(label), ..Default::default() }))
        .await
        .map_err(|e| SandboxError::docker("list sandbox containers", e))?;
    let mut n = 0;
    for c in list {
        let Some(id) = c.id else { continue };
        let opts = RemoveContainerOptions { force: true, v: true, ..Default::default() };
        if docker.remove_container(&id, Some(opts)).await.is_ok() {
            n += 1;
        }
    }
    Ok(n)
}

/// Running containers of ours (any run, any owner) on the engine.
pub async fn count_running(docker: &Engine) -> Result<usize, SandboxError> {
    let opts = ListContainersOptions { all: false, filters: label_filter(LABEL_OWNER), ..Default::default() };
    docker
        .api()
        .list_containers(Some(opts))
        .await
        .map(|l| l.len())
        .map_err(|e| SandboxError::docker("list containers", e))
}

/// Containers (any state) carrying `label` (1 when the engine cannot say).
async fn count_labelled(docker: &Engine, label: &str) -> usize {
    let opts = ListContainersOptions { all: true, filters: label_filter(label), ..Default::default() };
    docker.api().list_containers(Some(opts)).await.map(|l| l.len()).unwrap_or(1)
}

/// How many of each kind a clean-up removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Removed {
    pub containers: usize,
    pub networks: usize,
    pub volumes: usize,
}

impl Removed {
    /// Whether anything was removed.
    pub fn any(&self) -> bool {
        self.containers + self.networks + self.volumes > 0
    }
}

/// Removes every container, network and volume of `run_id` until nothing of the run is
/// left: after an interrupt, a create call that was in flight can finish (or still be
/// finishing, which makes its removal fail) after the first pass.
pub async fn remove_run_settled(engine: &Engine, run_id: &str) -> Removed {
    remove_settled(engine, &format!("{LABEL_RUN}={run_id}")).await
}

/// What a front end that was interrupted removes: the containers it registered (started
/// but perhaps not yet labelled as its run's) and everything labelled with `run_id`.
pub async fn cleanup_run(engine: &Engine, run_id: &str) {
    crate::container::cleanup_registered().await;
    remove_run_settled(engine, run_id).await;
}

/// Like [`remove_run_settled`] for everything this process created, whatever its run
/// (a trainer's rollouts run under many run ids).
pub async fn remove_own_settled(engine: &Engine) -> Removed {
    remove_settled(engine, &format!("{LABEL_OWNER}={}", owner_label())).await
}

/// Containers, networks and volumes still carrying `label`.
async fn count_left(engine: &Engine, label: &str) -> usize {
    count_labelled(engine, label).await
        + count_labelled_networks(engine, label).await
        + count_labelled_volumes(engine, label).await
}

async fn remove_settled(engine: &Engine, label: &str) -> Removed {
    let mut total = Removed::default();
    for pass in 0..20 {
        // Containers first: a network or volume in use cannot be removed.
        total.containers += remove_labelled(engine, label).await.unwrap_or(0);
        total.networks += remove_labelled_networks(engine, label).await;
        total.volumes += remove_labelled_volumes(engine, label).await;
        if pass >= 1 && count_left(engine, label).await == 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_a_dead_pid_is_not() {
        assert!(owner_alive(&owner_label()));
        let h = hostname();
        assert!(!owner_alive(&format!("{h}:{}:1", std::process::id())));
        assert!(!owner_alive(&format!("{h}:999999999:1")));
        assert!(!owner_alive("garbage"));
        assert!(owner_alive("some-other-host:1:1"));
    }
}
