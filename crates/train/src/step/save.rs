//! The checkpoint phase: the policy and the optimiser state written as one checkpoint
//! (gathered for rank 0 under ZeRO-3; each rank's optimiser shard under ZeRO).

use std::path::Path;

use crate::checkpoint::{CheckpointState, Checkpoints};
use crate::dist::{barrier, blocking, Collective};
use crate::error::{TensorContext, TrainError};
use crate::model::lora_gguf::save_adapter_folder;
use crate::model::{peft, Qwen3, TrainMode};
use crate::optim::AdamW;

/// Writes a checkpoint. Rank 0 writes the weights (the same on every rank) and the
/// checkpoint; with a sharded optimiser every rank first stages its own shard of the
/// optimiser state beside it, and rank 0 moves the shards in before the rename, so a
/// checkpoint is complete for all ranks or absent.
pub(crate) fn save_checkpoint(
    checkpoints: &Checkpoints,
    policy: &Qwen3,
    opt: &AdamW,
    mode: &TrainMode,
    base: &Path,
    state: &CheckpointState,
    world: &dyn Collective,
) -> Result<(), TrainError> {
    // A sharded policy is gathered whole (into host memory) for rank 0, which writes it.
    let whole = match &policy.zero3 {
        Some(z) => blocking(|| z.gather_to(policy, world, &candle_core::Device::Cpu, world.rank() == 0))?,
        None => None,
    };
    let policy = whole.as_ref().unwrap_or(policy);
    let staging = checkpoints.staging_dir(state.step);
    let file = opt.state_file_name();
    // With ZeRO each rank holds its own part of the optimiser state.
    let sharded = opt.zero_stage() > 0;
    if sharded || world.rank() == 0 {
        std::fs::create_dir_all(&staging).map_err(|e| TrainError::io("create", &staging, e))?;
        candle_core::safetensors::save(&opt.state_tensors(), staging.join(&file)).ctx("writing the optimiser state")?;
    }
    blocking(|| barrier(world))?;
    if world.rank() == 0 {
        checkpoints.save(state, &|dir| {
            match mode {
                TrainMode::Lora(s) => save_adapter_folder(policy, s, base, &dir.join("adapter"))?,
                TrainMode::Full => peft::save_full_weights(policy, base, &dir.join("model"))?,
            }
            for entry in std::fs::read_dir(&staging).map_err(|e| TrainError::io("read", &staging, e))?.flatten() {
                let to = dir.join(entry.file_name());
                std::fs::rename(entry.path(), &to).map_err(|e| TrainError::io("move", &entry.path(), e))?;
            }
            Ok(())
        })?;
        let _ = std::fs::remove_dir_all(&staging);
    }
    // Nobody goes on (and may be killed) before the checkpoint is in place.
    blocking(|| barrier(world))
}
