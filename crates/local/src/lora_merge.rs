//! Merging a PEFT LoRA adapter into a copy of its base model, so that an engine that
//! cannot load a local adapter (mistral.rs 0.8.1) runs the trained policy.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};

/// Files a model folder carries besides its weights, copied into the merged folder.
const SIDE_FILES: [&str; 5] =
    ["config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"];

/// Why an adapter could not be merged.
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    #[error("cannot {op} {}: {source}", path.display())]
    Io { op: &'static str, path: PathBuf, source: std::io::Error },
    #[error("{}: {reason}", path.display())]
    BadFile { path: PathBuf, reason: String },
    #[error("merging the adapter failed in candle: {0}")]
    Tensor(#[from] candle_core::Error),
}

fn bad_file(path: &Path, reason: impl Into<String>) -> MergeError {
    MergeError::BadFile { path: path.to_path_buf(), reason: reason.into() }
}

/// The multiplier of the low-rank update, `lora_alpha / r`, from `adapter_config.json`.
pub fn adapter_scale(adapter_dir: &Path) -> Result<f64, MergeError> {
    let path = adapter_dir.join("adapter_config.json");
    let text =
        std::fs::read_to_string(&path).map_err(|source| MergeError::Io { op: "read", path: path.clone(), source })?;
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| bad_file(&path, format!("not JSON: {e}")))?;
    let rank = v.get("r").and_then(|x| x.as_u64()).filter(|r| *r > 0);
    let rank = rank.ok_or_else(|| bad_file(&path, "no positive integer `r`"))?;
    let alpha = v.get("lora_alpha").and_then(|x| x.as_f64()).unwrap_or(rank as f64);
    Ok(alpha / rank as f64)
}

/// Writes a copy of `base_dir` with the PEFT adapter of `adapter_dir` merged in
/// (`W += alpha/r · B·A`, in f32, stored in the base's dtype): a plain model folder any
/// engine loads. Returns the number of merged projections.
pub fn merge_adapter_dir(base_dir: &Path, adapter_dir: &Path, out_dir: &Path) -> Result<usize, MergeError> {
    let scale = adapter_scale(adapter_dir)?;
    let apath = adapter_dir.join("adapter_model.safetensors");
    let adapter = candle_core::safetensors::load(&apath, &Device::Cpu)
        .map_err(|e| bad_file(&apath, format!("cannot read safetensors: {e}")))?;
    let bpath = base_dir.join("model.safetensors");
    let mut base: HashMap<String, Tensor> = candle_core::safetensors::load(&bpath, &Device::Cpu)
        .map_err(|e| bad_file(&bpath, format!("cannot read safetensors (merging needs a single-file model): {e}")))?;
    let mut merged = 0;
    let mut names: Vec<&String> = adapter.keys().filter(|k| k.ends_with(".lora_A.weight")).collect();
    names.sort();
    for a_name in names {
        let stem = a_name.trim_end_matches(".lora_A.weight");
        let b_name = format!("{stem}.lora_B.weight");
        let b = adapter.get(&b_name).ok_or_else(|| bad_file(&apath, format!("`{a_name}` has no `{b_name}`")))?;
        let a = &adapter[a_name];
        let target = format!("{}.weight", stem.trim_start_matches("base_model.model."));
        let w = base
            .get(&target)
            .ok_or_else(|| bad_file(&bpath, format!("the adapter targets `{target}`, which the base model lacks")))?;
        let dtype = w.dtype();
        let delta = b.to_dtype(DType::F32)?.matmul(&a.to_dtype(DType::F32)?)?;
        let new = (w.to_dtype(DType::F32)? + (delta * scale)?)?;
        base.insert(target, new.to_dtype(dtype)?);
        merged += 1;
    }
    std::fs::create_dir_all(out_dir).map_err(|source| MergeError::Io {
        op: "create",
        path: out_dir.to_path_buf(),
        source,
    })?;
    candle_core::safetensors::save(&base, out_dir.join("model.safetensors"))?;
    for name in SIDE_FILES {
        let src = base_dir.join(name);
        if src.exists() {
            std::fs::copy(&src, out_dir.join(name)).map_err(|source| MergeError::Io {
                op: "copy",
                path: src,
                source,
            })?;
        }
    }
    Ok(merged)
}
