//! The policy's LoRA adapters in llama.cpp's adapter format (`general.type = adapter`),
//! so llama.cpp serves the trained policy over the quantised base without a merge: the
//! rollout engine sets each new file on the loaded model, and `agent run --lora` reads
//! the same file.
//!
//! Layout, as llama.cpp's `llama_adapter_lora_init` checks it: one pair per projection,
//! `blk.{i}.{tensor}.weight.lora_a` with ggml shape `[in, r]` and `.lora_b` with `[r, out]`
//! (PEFT's `lora_A` r×in and `lora_B` out×r written row-major, unchanged), f32, and
//! `adapter.lora.alpha` so that llama.cpp scales by `alpha / r` as the trainer does.

use std::path::Path;

use candle_core::quantized::gguf_file::Value;
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{DType, Device};

use super::qwen3::Qwen3;
use crate::error::{TensorContext, TrainError};

/// The adapter file's name inside a checkpoint or adapter folder.
pub use agent_local::LORA_GGUF_FILE as ADAPTER_GGUF;

/// llama.cpp's tensor name of a projection (`self_attn.q_proj` → `attn_q`).
fn gguf_tensor(module: &str) -> Option<&'static str> {
    Some(match module {
        "self_attn.q_proj" => "attn_q",
        "self_attn.k_proj" => "attn_k",
        "self_attn.v_proj" => "attn_v",
        "self_attn.o_proj" => "attn_output",
        "mlp.gate_proj" => "ffn_gate",
        "mlp.up_proj" => "ffn_up",
        "mlp.down_proj" => "ffn_down",
        _ => return None,
    })
}

/// Writes the model's adapters to `path` in llama.cpp's LoRA GGUF format. `arch` is the
/// base GGUF's `general.architecture` (`qwen2`, `qwen3`): llama.cpp refuses an adapter
/// whose architecture differs from the model's.
pub fn save_adapter_gguf(model: &Qwen3, alpha: f64, arch: &str, path: &Path) -> Result<(), TrainError> {
    let mut tensors: Vec<(String, QTensor)> = Vec::new();
    let mut rank = None;
    for (i, module, lin) in model.projections() {
        let Some(lora) = &lin.lora else { continue };
        let Some(name) = gguf_tensor(module) else { continue };
        let to_q = |t: &candle_core::Tensor, what: &str| {
            let t = t.detach().to_dtype(DType::F32)?.to_device(&Device::Cpu)?.contiguous()?;
            QTensor::quantize(&t, GgmlDType::F32).ctx(what)
        };
        let a = to_q(lora.a.tensor(), "converting a LoRA A matrix for llama.cpp")?;
        let b = to_q(lora.b.tensor(), "converting a LoRA B matrix for llama.cpp")?;
        rank = Some(a.shape().dims()[0]);
        tensors.push((format!("blk.{i}.{name}.weight.lora_a"), a));
        tensors.push((format!("blk.{i}.{name}.weight.lora_b"), b));
    }
    let Some(rank) = rank else {
        return Err(TrainError::Config("the model has no LoRA adapters to write for llama.cpp".into()));
    };
    let metadata: Vec<(&str, Value)> = vec![
        ("general.architecture", Value::String(arch.to_string())),
        ("general.type", Value::String("adapter".into())),
        ("general.name", Value::String(format!("agent train LoRA r{rank}"))),
        ("adapter.type", Value::String("lora".into())),
        ("adapter.lora.alpha", Value::F32(alpha as f32)),
    ];
    let meta: Vec<(&str, &Value)> = metadata.iter().map(|(k, v)| (*k, v)).collect();
    let refs: Vec<(&str, &QTensor)> = tensors.iter().map(|(k, v)| (k.as_str(), v)).collect();
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| TrainError::io("create", dir, e))?;
    }
    // Written beside and renamed, so a reader never sees half a file.
    let tmp = path.with_extension("gguf.tmp");
    let file = std::fs::File::create(&tmp).map_err(|e| TrainError::io("create", &tmp, e))?;
    let mut w = std::io::BufWriter::new(file);
    candle_core::quantized::gguf_file::write(&mut w, &meta, &refs).ctx("writing the llama.cpp adapter")?;
    std::io::Write::flush(&mut w).map_err(|e| TrainError::io("write", &tmp, e))?;
    drop(w);
    std::fs::rename(&tmp, path).map_err(|e| TrainError::io("rename", &tmp, e))
}

/// The architecture llama.cpp knows the model by, from its `model_type`.
pub fn llama_arch(model: &Qwen3) -> &'static str {
    match model.cfg.model_type.as_deref() {
        Some("qwen2") => "qwen2",
        _ => "qwen3",
    }
}

/// Writes the adapter folder of a LoRA run: PEFT's files, and beside them the llama.cpp
/// adapter when the base was converted from a GGUF file (what `agent run --lora` loads
/// over that GGUF).
pub fn save_adapter_folder(
    model: &Qwen3,
    settings: &super::LoraSettings,
    base: &Path,
    dir: &Path,
) -> Result<(), TrainError> {
    super::peft::save_adapter(model, settings, &base.display().to_string(), dir)?;
    if super::gguf::is_materialised(base) {
        save_adapter_gguf(model, settings.alpha, llama_arch(model), &dir.join(ADAPTER_GGUF))?;
    }
    Ok(())
}
