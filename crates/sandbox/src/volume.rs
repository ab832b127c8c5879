//! Named volumes of a task's trial, labelled like the containers so that every
//! clean-up path (teardown, the run's own sweep, `agent sandbox prune`) finds them.

use bollard::volume::{CreateVolumeOptions, ListVolumesOptions, RemoveVolumeOptions};

use super::docker::Engine;
use super::error::{is_not_found, SandboxError};
use super::prune::{label_filter, resource_labels};

/// A volume of one episode.
#[derive(Debug)]
pub struct Volume {
    engine: Engine,
    name: String,
}

impl Volume {
    /// Creates the volume `name`, labelled with the run and episode.
    pub async fn create(engine: &Engine, name: &str, run_id: &str, episode_id: &str) -> Result<Volume, SandboxError> {
        let opts = CreateVolumeOptions {
            name: name.to_string(),
            driver: "local".to_string(),
            labels: resource_labels(run_id, episode_id),
            ..Default::default()
        };
        engine
            .api()
            .create_volume(opts)
            .await
            .map_err(|e| SandboxError::docker(format!("create the volume {name}"), e))?;
        Ok(Volume { engine: engine.clone(), name: name.to_string() })
    }

    /// The volume's name (what a container's mount names).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Removes the volume (its containers must be gone). Never fails; problems are logged.
    pub async fn remove(self) {
        match self.engine.api().remove_volume(&self.name, Some(RemoveVolumeOptions { force: true })).await {
            Ok(()) => {}
            Err(e) if is_not_found(&e) => {}
            Err(e) => tracing::warn!("could not remove volume {}: {e}", self.name),
        }
    }
}

/// The names and labels of the volumes carrying `label` (`key` or `key=value`).
pub(crate) async fn labelled_volumes(
    engine: &Engine,
    label: &str,
) -> Result<Vec<(String, std::collections::HashMap<String, String>)>, SandboxError> {
    let opts = ListVolumesOptions { filters: label_filter(label) };
    let list = engine.api().list_volumes(Some(opts)).await.map_err(|e| SandboxError::docker("list volumes", e))?;
    Ok(list.volumes.unwrap_or_default().into_iter().map(|v| (v.name, v.labels)).collect())
}

/// Removes every volume carrying `label` (`key=value`); returns how many.
pub(crate) async fn remove_labelled_volumes(engine: &Engine, label: &str) -> usize {
    let Ok(list) = labelled_volumes(engine, label).await else { return 0 };
    let mut n = 0;
    for (name, _) in list {
        if engine.api().remove_volume(&name, Some(RemoveVolumeOptions { force: true })).await.is_ok() {
            n += 1;
        }
    }
    n
}

/// Volumes carrying `label` (1 when the engine cannot say, so that callers retry).
pub(crate) async fn count_labelled_volumes(engine: &Engine, label: &str) -> usize {
    labelled_volumes(engine, label).await.map(|l| l.len()).unwrap_or(1)
}
