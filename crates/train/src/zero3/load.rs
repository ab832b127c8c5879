//! A model read straight into ZeRO-3 shards: the safetensors files are memory-mapped and
//! each unit is read, cut and dropped in turn, so a rank never holds the whole model (the
//! ranks of a node share the mapped pages instead of reading a copy each).

use std::collections::HashMap;
use std::path::Path;

use candle_core::safetensors::MmapedSafetensors;
use candle_core::{DType, Device, Tensor};

use super::Zero3;
use crate::dist::Collective;
use crate::error::{TensorContext, TrainError};
use crate::model::qwen3::safetensors_files;
use crate::model::{Qwen3, Qwen3Config, TrainMode};

/// `dir`'s model (config.json and safetensors) as this rank's shards on `device`, in
/// `dtype` (a collective, as [`Zero3::shard`]); `trainable` false keeps no optimiser state.
pub fn load_sharded(
    dir: &Path,
    dtype: DType,
    world: &dyn Collective,
    device: &Device,
    trainable: bool,
) -> Result<Qwen3, TrainError> {
    let cfg = Qwen3Config::load(dir)?;
    let files = safetensors_files(dir)?;
    // SAFETY: a mapping is sound while the mapped files are not truncated or rewritten in
    // place. These are a model snapshot (the Hugging Face cache's blobs, or a folder rank 0
    // wrote and renamed into place before the barrier every rank passed), only read here,
    // and the mapping is dropped when this function returns.
    let mapped = unsafe { MmapedSafetensors::multi(&files) }
        .map_err(|e| TrainError::bad_file(dir, format!("cannot map the safetensors weights: {e}")))?;
    let empty = Tensor::zeros(0, dtype, &Device::Cpu).ctx("a placeholder")?;
    let placeholders: HashMap<String, Tensor> =
        mapped.tensors().into_iter().map(|(name, _)| (name, empty.clone())).collect();
    let skeleton = Qwen3::from_tensors(cfg, placeholders, &TrainMode::Full, dtype, &Device::Cpu, 0, dir)?;
    let mut fetch = |name: &str, _: &crate::model::Param| {
        mapped.load(name, &Device::Cpu).map_err(|e| TrainError::bad_file(dir, format!("cannot read `{name}`: {e}")))
    };
    Zero3::shard_with(&skeleton, &mut fetch, world, device, trainable)
}
