//! Adapter and weight files: PEFT-format LoRA adapters (`adapter_model.safetensors` +
//! `adapter_config.json`, which PEFT, vLLM and mistral.rs read), full weights in
//! Hugging Face naming (merging an adapter into its base is `agent_local::lora_merge`).

use std::collections::HashMap;
use std::path::Path;

use candle_core::Tensor;
use serde_json::json;

use super::lora::{LoraSettings, LORA_TARGETS};
use super::qwen3::Qwen3;
use crate::error::{TensorContext, TrainError};

/// Files a model folder carries besides its weights, copied along with exported weights.
const SIDE_FILES: [&str; 5] =
    ["config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"];

/// Writes the model's adapters into `dir` in PEFT format.
pub fn save_adapter(model: &Qwen3, settings: &LoraSettings, base: &str, dir: &Path) -> Result<(), TrainError> {
    std::fs::create_dir_all(dir).map_err(|e| TrainError::io("create", dir, e))?;
    let tensors: HashMap<String, Tensor> =
        model.trainable().into_iter().map(|(name, var)| (name, var.as_tensor().detach())).collect();
    if tensors.is_empty() {
        return Err(TrainError::Config("the model has no LoRA adapters to save".into()));
    }
    let path = dir.join("adapter_model.safetensors");
    candle_core::safetensors::save(&tensors, &path).ctx("writing adapter_model.safetensors")?;
    let config = json!({
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": base,
        "r": settings.rank,
        "lora_alpha": settings.alpha,
        "lora_dropout": settings.dropout,
        "target_modules": settings.targets,
        "bias": "none",
        "fan_in_fan_out": false,
        "inference_mode": true,
        "use_rslora": false,
    });
    write_json(&dir.join("adapter_config.json"), &config)
}

/// Reads `adapter_config.json` of a PEFT adapter folder.
pub fn read_adapter_settings(dir: &Path) -> Result<LoraSettings, TrainError> {
    let path = dir.join("adapter_config.json");
    let text = std::fs::read_to_string(&path).map_err(|e| TrainError::io("read", &path, e))?;
    let v: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| TrainError::bad_file(&path, format!("not JSON: {e}")))?;
    let rank = v.get("r").and_then(|x| x.as_u64()).ok_or_else(|| TrainError::bad_file(&path, "no integer `r`"))?;
    let alpha = v.get("lora_alpha").and_then(|x| x.as_f64()).unwrap_or(rank as f64);
    let dropout = v.get("lora_dropout").and_then(|x| x.as_f64()).unwrap_or(0.0);
    let targets: Vec<String> = match v.get("target_modules") {
        Some(serde_json::Value::Array(a)) => a.iter().filter_map(|x| x.as_str().map(str::to_string)).collect(),
        Some(serde_json::Value::String(s)) => vec![s.clone()],
        _ => return Err(TrainError::bad_file(&path, "`target_modules` must be a list of projection names")),
    };
    if let Some(bad) = targets.iter().find(|t| !LORA_TARGETS.contains(&t.as_str())) {
        return Err(TrainError::bad_file(
            &path,
            format!("unsupported target module `{bad}` (known: {LORA_TARGETS:?})"),
        ));
    }
    if rank == 0 {
        return Err(TrainError::bad_file(&path, "`r` must be positive"));
    }
    Ok(LoraSettings { rank: rank as usize, alpha, dropout, targets })
}

/// Loads adapter tensors from `dir` into the model's adapters (same settings expected).
pub fn load_adapter_into(model: &Qwen3, dir: &Path) -> Result<(), TrainError> {
    let path = dir.join("adapter_model.safetensors");
    let tensors = candle_core::safetensors::load(&path, model.device())
        .map_err(|e| TrainError::bad_file(&path, format!("cannot read safetensors: {e}")))?;
    set_vars(model, &tensors, &path)
}

/// Writes every weight (adapters merged) in Hugging Face naming plus the base folder's side files.
pub fn save_full_weights(model: &Qwen3, base_dir: &Path, dir: &Path) -> Result<(), TrainError> {
    std::fs::create_dir_all(dir).map_err(|e| TrainError::io("create", dir, e))?;
    let merged = model.merged().ctx("merging adapters")?;
    let tensors: HashMap<String, Tensor> =
        merged.named_weights().into_iter().map(|(name, p)| (name, p.tensor().detach())).collect();
    candle_core::safetensors::save(&tensors, dir.join("model.safetensors")).ctx("writing model.safetensors")?;
    copy_side_files(base_dir, dir)
}

/// Loads full weights saved by [`save_full_weights`] into a full-mode model's variables.
pub fn load_full_weights_into(model: &Qwen3, dir: &Path) -> Result<(), TrainError> {
    let path = dir.join("model.safetensors");
    let tensors = candle_core::safetensors::load(&path, model.device())
        .map_err(|e| TrainError::bad_file(&path, format!("cannot read safetensors: {e}")))?;
    set_vars(model, &tensors, &path)
}

fn set_vars(model: &Qwen3, tensors: &HashMap<String, Tensor>, path: &Path) -> Result<(), TrainError> {
    for (name, var) in model.trainable() {
        let t = tensors.get(&name).ok_or_else(|| TrainError::bad_file(path, format!("no tensor `{name}`")))?;
        if t.dims() != var.as_tensor().dims() {
            return Err(TrainError::bad_file(
                path,
                format!("`{name}` has shape {:?}, the model expects {:?}", t.dims(), var.as_tensor().dims()),
            ));
        }
        var.set(&t.to_dtype(var.dtype()).ctx("loading weights")?).ctx("loading weights")?;
    }
    Ok(())
}

fn copy_side_files(from: &Path, to: &Path) -> Result<(), TrainError> {
    for name in SIDE_FILES {
        let src = from.join(name);
        if src.exists() {
            let dst = to.join(name);
            std::fs::copy(&src, &dst).map_err(|e| TrainError::io("copy", &src, e))?;
        }
    }
    Ok(())
}

fn write_json(path: &Path, value: &serde_json::Value) -> Result<(), TrainError> {
    let mut bytes = serde_json::to_vec_pretty(value).map_err(|e| TrainError::Other(e.to_string()))?;
    bytes.push(b'\n');
    std::fs::write(path, bytes).map_err(|e| TrainError::io("write", path, e))
}
