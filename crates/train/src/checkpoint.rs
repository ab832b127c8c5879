//! Checkpoints: the trained weights (PEFT adapter or full weights), the optimiser's
//! moments, the step, and the seed and data position, written into a temporary folder
//! and renamed into place, so that a kill at any moment leaves either the old set of
//! checkpoints or the new one, never a half-written one.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::error::TrainError;

/// Marks a finished checkpoint folder; written last, before the rename.
const COMPLETE: &str = "COMPLETE";

/// The scalar state of a checkpoint.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CheckpointState {
    /// GRPO steps finished.
    pub step: u64,
    /// Optimiser updates applied (bias correction needs it).
    pub optimizer_step: u64,
    /// The run's seed: every random choice of step `s` derives from (seed, s), so this
    /// and the step are the whole RNG state.
    pub seed: u64,
    /// Tasks drawn so far (the data position).
    pub tasks_drawn: u64,
    /// The success rate measured before training, so that a resumed run reports it.
    pub eval_before: Option<f64>,
    /// Each training task's running pass rate (what `grpo.task_band` draws by).
    #[serde(default)]
    pub task_stats: crate::grpo::TaskStats,
}

/// Where a run keeps its checkpoints.
pub struct Checkpoints {
    dir: PathBuf,
    keep: usize,
}

impl Checkpoints {
    /// Checkpoints under `dir` (created when needed); the newest `keep` are kept.
    pub fn new(dir: PathBuf, keep: usize) -> Self {
        Checkpoints { dir, keep: keep.max(1) }
    }

    /// The folder of the checkpoint after `step`.
    fn step_dir(&self, step: u64) -> PathBuf {
        self.dir.join(format!("step-{step:06}"))
    }

    /// Where the ranks stage their optimiser shards for the checkpoint after `step`
    /// (a `.tmp-` name: a run that dies while staging leaves nothing a resume reads).
    pub fn staging_dir(&self, step: u64) -> PathBuf {
        self.dir.join(format!(".tmp-shards-step-{step:06}"))
    }

    /// Writes a checkpoint: `fill` puts the weights and optimiser files into the folder
    /// it is given; the state file and the completion mark follow, then the rename.
    pub fn save(
        &self,
        state: &CheckpointState,
        fill: &dyn Fn(&Path) -> Result<(), TrainError>,
    ) -> Result<PathBuf, TrainError> {
        std::fs::create_dir_all(&self.dir).map_err(|e| TrainError::io("create", &self.dir, e))?;
        let tmp = self.dir.join(format!(".tmp-step-{:06}-{}", state.step, std::process::id()));
        if tmp.exists() {
            std::fs::remove_dir_all(&tmp).map_err(|e| TrainError::io("remove", &tmp, e))?;
        }
        std::fs::create_dir_all(&tmp).map_err(|e| TrainError::io("create", &tmp, e))?;
        fill(&tmp)?;
        let json = serde_json::to_vec_pretty(state).map_err(|e| TrainError::Other(e.to_string()))?;
        write_synced(&tmp.join("state.json"), &json)?;
        // Fault injection for the crash tests: die like `kill -9` with the checkpoint
        // half written (`AGENT_TRAIN_FAULT=checkpoint-write:STEP`).
        if std::env::var("AGENT_TRAIN_FAULT").ok().as_deref()
            == Some(format!("checkpoint-write:{}", state.step).as_str())
        {
            std::process::abort();
        }
        sync_tree(&tmp)?;
        write_synced(&tmp.join(COMPLETE), b"")?;
        sync_dir(&tmp)?;
        let dest = self.step_dir(state.step);
        if dest.exists() {
            std::fs::remove_dir_all(&dest).map_err(|e| TrainError::io("remove", &dest, e))?;
        }
        std::fs::rename(&tmp, &dest).map_err(|e| TrainError::io("rename", &tmp, e))?;
        sync_dir(&self.dir)?;
        self.prune()?;
        Ok(dest)
    }

    /// The newest complete checkpoint, if any; leftovers of interrupted writes are removed.
    pub fn latest(&self) -> Result<Option<(PathBuf, CheckpointState)>, TrainError> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else { return Ok(None) };
        let mut best: Option<(u64, PathBuf)> = None;
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().to_string();
            if name.starts_with(".tmp-") {
                let _ = std::fs::remove_dir_all(&path);
                continue;
            }
            let Some(step) = name.strip_prefix("step-").and_then(|s| s.parse::<u64>().ok()) else { continue };
            if path.join(COMPLETE).exists() && best.as_ref().is_none_or(|(b, _)| step > *b) {
                best = Some((step, path));
            }
        }
        let Some((_, path)) = best else { return Ok(None) };
        let state_path = path.join("state.json");
        let text = std::fs::read_to_string(&state_path).map_err(|e| TrainError::io("read", &state_path, e))?;
        let state: CheckpointState = serde_json::from_str(&text)
            .map_err(|e| TrainError::bad_file(&state_path, format!("not a checkpoint state: {e}")))?;
        Ok(Some((path, state)))
    }

    fn prune(&self) -> Result<(), TrainError> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else { return Ok(()) };
        let mut steps: Vec<(u64, PathBuf)> = entries
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().to_string();
                name.strip_prefix("step-").and_then(|s| s.parse::<u64>().ok()).map(|s| (s, e.path()))
            })
            .collect();
        steps.sort();
        while steps.len() > self.keep {
            let (_, path) = steps.remove(0);
            std::fs::remove_dir_all(&path).map_err(|e| TrainError::io("remove", &path, e))?;
        }
        Ok(())
    }
}

/// Writes a file and flushes it to the disk.
pub fn write_synced(path: &Path, bytes: &[u8]) -> Result<(), TrainError> {
    use std::io::Write;
    let mut f = std::fs::File::create(path).map_err(|e| TrainError::io("create", path, e))?;
    f.write_all(bytes).map_err(|e| TrainError::io("write", path, e))?;
    f.sync_all().map_err(|e| TrainError::io("sync", path, e))
}

/// Writes `path` atomically ([`super::metrics::write_atomic`]), then syncs its folder so
/// that the rename itself survives a crash.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), TrainError> {
    super::metrics::write_atomic(path, bytes).map_err(|e| TrainError::io("write", path, e))?;
    if let Some(parent) = path.parent() {
        sync_dir(parent)?;
    }
    Ok(())
}

fn sync_tree(dir: &Path) -> Result<(), TrainError> {
    for entry in std::fs::read_dir(dir).map_err(|e| TrainError::io("read", dir, e))?.flatten() {
        let path = entry.path();
        if path.is_dir() {
            sync_tree(&path)?;
        } else {
            let f = std::fs::File::open(&path).map_err(|e| TrainError::io("open", &path, e))?;
            f.sync_all().map_err(|e| TrainError::io("sync", &path, e))?;
        }
    }
    sync_dir(dir)
}

fn sync_dir(dir: &Path) -> Result<(), TrainError> {
    let f = std::fs::File::open(dir).map_err(|e| TrainError::io("open", dir, e))?;
    f.sync_all().map_err(|e| TrainError::io("sync", dir, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(step: u64) -> CheckpointState {
        CheckpointState {
            step,
            optimizer_step: step * 2,
            seed: 7,
            tasks_drawn: step * 4,
            eval_before: Some(0.5),
            task_stats: Default::default(),
        }
    }

    #[test]
    fn latest_ignores_incomplete_and_temporary_folders_and_old_ones_are_pruned() {
        let d = tempfile::tempdir().unwrap();
        let c = Checkpoints::new(d.path().to_path_buf(), 2);
        for s in 1..=3 {
            c.save(&state(s), &|dir| write_synced(&dir.join("w.bin"), &[s as u8])).unwrap();
        }
        assert!(!d.path().join("step-000001").exists());
        // A half-written checkpoint (no COMPLETE) and a temporary folder.
        std::fs::create_dir_all(d.path().join("step-000009")).unwrap();
        std::fs::create_dir_all(d.path().join(".tmp-step-000010-1")).unwrap();
        let (path, st) = c.latest().unwrap().unwrap();
        assert_eq!(st, state(3));
        assert_eq!(std::fs::read(path.join("w.bin")).unwrap(), vec![3]);
        assert!(!d.path().join(".tmp-step-000010-1").exists());
    }

    #[test]
    fn a_failing_fill_leaves_the_previous_checkpoint() {
        let d = tempfile::tempdir().unwrap();
        let c = Checkpoints::new(d.path().to_path_buf(), 2);
        c.save(&state(1), &|_| Ok(())).unwrap();
        let err = c.save(&state(2), &|_| Err(TrainError::Other("disk full".into())));
        assert!(err.is_err());
        assert_eq!(c.latest().unwrap().unwrap().1.step, 1);
    }
}
