//! A GGUF model file (llama.cpp's format: the built-in CPU models the user chats with)
//! as a model folder the trainer loads: the weights dequantised once into f32
//! safetensors under their Hugging Face names (they are the frozen base of LoRA), a
//! `config.json` from the file's metadata, and `tokenizer.json` and
//! `tokenizer_config.json` (with the chat template) from its tokenizer metadata. Once
//! written, the folder is the same kind the rest of the trainer reads, so Qwen2 and
//! Qwen3 GGUFs need no second model path.

use std::collections::HashMap;
use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};

use candle_core::quantized::gguf_file::{Content, Value};
use candle_core::{Device, Tensor};
use serde_json::{json, Map};

use crate::error::TrainError;

/// llama.cpp's token types that are added tokens rather than BPE pieces.
const TOKEN_TYPE_CONTROL: i32 = 3;
const TOKEN_TYPE_USER_DEFINED: i32 = 4;

/// The marker written last: a folder without it is an interrupted conversion.
const DONE_MARKER: &str = "gguf-source.json";

/// Writes the model folder for `gguf` into `out` (atomically: a temporary folder renamed
/// at the end), unless `out` already holds the conversion of the same file.
/// Whether `dir` is a model folder converted from a GGUF file by [`materialise`].
pub fn is_materialised(dir: &Path) -> bool {
    dir.join(DONE_MARKER).is_file()
}

/// The GGUF file `dir` was converted from, as [`materialise`] recorded it.
pub fn source_of(dir: &Path) -> Option<PathBuf> {
    let text = std::fs::read_to_string(dir.join(DONE_MARKER)).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    v.get("file").and_then(|p| p.as_str()).map(PathBuf::from)
}

pub fn materialise(gguf: &Path, out: &Path) -> Result<(), TrainError> {
    let (size, modified) = stamp(gguf)?;
    let source = json!({"file": gguf.display().to_string(), "size": size, "modified": modified});
    if std::fs::read_to_string(out.join(DONE_MARKER))
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .is_some_and(|v| v == source)
    {
        return Ok(());
    }
    let bad = |reason: String| TrainError::bad_file(gguf, reason);
    let mut reader = BufReader::new(File::open(gguf).map_err(|e| TrainError::io("open", gguf, e))?);
    let content = Content::read(&mut reader).map_err(|e| bad(format!("not a GGUF file: {e}")))?;
    let meta = Meta { content: &content, gguf };
    let arch = meta.string("general.architecture")?;
    if !matches!(arch.as_str(), "qwen2" | "qwen3") {
        return Err(bad(format!("architecture `{arch}`: the trainer knows qwen2 and qwen3")));
    }

    let mut tensors = HashMap::new();
    for name in content.tensor_infos.keys() {
        let Some(hf) = hf_name(name) else {
            return Err(bad(format!("tensor `{name}` has no place in a {arch} model")));
        };
        let q = content.tensor(&mut reader, name, &Device::Cpu).map_err(|e| bad(format!("tensor `{name}`: {e}")))?;
        let t = q.dequantize(&Device::Cpu).map_err(|e| bad(format!("dequantising `{name}`: {e}")))?;
        tensors.insert(hf, t);
    }
    let config = config_json(&meta, &arch, &tensors)?;
    let (tokenizer, special) = tokenizer_json(&meta)?;
    let tokenizer_config = tokenizer_config_json(&meta, &special)?;

    let parent = out.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).map_err(|e| TrainError::io("create", parent, e))?;
    let tmp = parent.join(format!(".tmp-{}", out.file_name().and_then(|n| n.to_str()).unwrap_or("gguf-model")));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).map_err(|e| TrainError::io("create", &tmp, e))?;
    let write_json = |name: &str, v: &serde_json::Value| -> Result<(), TrainError> {
        let path = tmp.join(name);
        let text = serde_json::to_string_pretty(v).map_err(|e| TrainError::Other(e.to_string()))?;
        std::fs::write(&path, text).map_err(|e| TrainError::io("write", &path, e))
    };
    let weights = tmp.join("model.safetensors");
    candle_core::safetensors::save(&tensors, &weights)
        .map_err(|e| TrainError::bad_file(&weights, format!("cannot write the dequantised weights: {e}")))?;
    write_json("config.json", &config)?;
    write_json("tokenizer.json", &tokenizer)?;
    write_json("tokenizer_config.json", &tokenizer_config)?;
    write_json(DONE_MARKER, &source)?;
    let _ = std::fs::remove_dir_all(out);
    std::fs::rename(&tmp, out).map_err(|e| TrainError::io("rename", &tmp, e))?;
    Ok(())
}

/// Size and modification time (seconds), to tell a changed file from the converted one.
fn stamp(path: &Path) -> Result<(u64, u64), TrainError> {
    let meta = std::fs::metadata(path).map_err(|e| TrainError::io("read", path, e))?;
    let modified =
        meta.modified().ok().and_then(|m| m.duration_since(std::time::UNIX_EPOCH).ok()).map_or(0, |d| d.as_secs());
    Ok((meta.len(), modified))
}

/// The Hugging Face name of a llama.cpp tensor name.
fn hf_name(name: &str) -> Option<String> {
    match name {
        "token_embd.weight" => return Some("model.embed_tokens.weight".into()),
        "output_norm.weight" => return Some("model.norm.weight".into()),
        "output.weight" => return Some("lm_head.weight".into()),
        _ => {}
    }
    let rest = name.strip_prefix("blk.")?;
    let (layer, rest) = rest.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let (part, kind) = rest.rsplit_once('.')?;
    let module = match part {
        "attn_norm" => "input_layernorm",
        "ffn_norm" => "post_attention_layernorm",
        "attn_q" => "self_attn.q_proj",
        "attn_k" => "self_attn.k_proj",
        "attn_v" => "self_attn.v_proj",
        "attn_output" => "self_attn.o_proj",
        "attn_q_norm" => "self_attn.q_norm",
        "attn_k_norm" => "self_attn.k_norm",
        "ffn_gate" => "mlp.gate_proj",
        "ffn_up" => "mlp.up_proj",
        "ffn_down" => "mlp.down_proj",
        _ => return None,
    };
    matches!(kind, "weight" | "bias").then(|| format!("model.layers.{layer}.{module}.{kind}"))
}

/// Typed reads of the file's metadata, with errors that name the key.
struct Meta<'a> {
    content: &'a Content,
    gguf: &'a Path,
}

impl Meta<'_> {
    fn get(&self, key: &str) -> Result<&Value, TrainError> {
        self.content
            .metadata
            .get(key)
            .ok_or_else(|| TrainError::bad_file(self.gguf, format!("the metadata has no `{key}`")))
    }

    fn bad(&self, key: &str, e: impl std::fmt::Display) -> TrainError {
        TrainError::bad_file(self.gguf, format!("metadata `{key}`: {e}"))
    }

    fn string(&self, key: &str) -> Result<String, TrainError> {
        self.get(key)?.to_string().cloned().map_err(|e| self.bad(key, e))
    }

    fn number(&self, key: &str) -> Result<f64, TrainError> {
        let v = self.get(key)?;
        let n = match v {
            Value::U8(x) => f64::from(*x),
            Value::I8(x) => f64::from(*x),
            Value::U16(x) => f64::from(*x),
            Value::I16(x) => f64::from(*x),
            Value::U32(x) => f64::from(*x),
            Value::I32(x) => f64::from(*x),
            Value::U64(x) => *x as f64,
            Value::I64(x) => *x as f64,
            Value::F32(x) => f64::from(*x),
            Value::F64(x) => *x,
            other => return Err(self.bad(key, format!("not a number ({:?})", other.value_type()))),
        };
        Ok(n)
    }

    fn count(&self, key: &str) -> Result<usize, TrainError> {
        let n = self.number(key)?;
        if n < 0.0 || n.fract() != 0.0 {
            return Err(self.bad(key, format!("{n} is not a count")));
        }
        Ok(n as usize)
    }

    fn strings(&self, key: &str) -> Result<Vec<String>, TrainError> {
        let list = self.get(key)?.to_vec().map_err(|e| self.bad(key, e))?;
        list.iter().map(|v| v.to_string().cloned().map_err(|e| self.bad(key, e))).collect()
    }

    fn ints(&self, key: &str) -> Result<Vec<i32>, TrainError> {
        let list = self.get(key)?.to_vec().map_err(|e| self.bad(key, e))?;
        list.iter().map(|v| v.to_i32().map_err(|e| self.bad(key, e))).collect()
    }
}

fn config_json(meta: &Meta, arch: &str, tensors: &HashMap<String, Tensor>) -> Result<serde_json::Value, TrainError> {
    let key = |k: &str| format!("{arch}.{k}");
    let embed = tensors
        .get("model.embed_tokens.weight")
        .ok_or_else(|| TrainError::bad_file(meta.gguf, "no token_embd.weight tensor"))?;
    let (vocab, hidden) = embed.dims2().map_err(|e| TrainError::bad_file(meta.gguf, e.to_string()))?;
    let heads = meta.count(&key("attention.head_count"))?;
    let mut cfg = Map::new();
    cfg.insert("architectures".into(), json!([if arch == "qwen2" { "Qwen2ForCausalLM" } else { "Qwen3ForCausalLM" }]));
    cfg.insert("model_type".into(), json!(arch));
    cfg.insert("vocab_size".into(), json!(vocab));
    cfg.insert("hidden_size".into(), json!(hidden));
    cfg.insert("intermediate_size".into(), json!(meta.count(&key("feed_forward_length"))?));
    cfg.insert("num_hidden_layers".into(), json!(meta.count(&key("block_count"))?));
    cfg.insert("num_attention_heads".into(), json!(heads));
    cfg.insert("num_key_value_heads".into(), json!(meta.count(&key("attention.head_count_kv"))?));
    let head_dim = meta.count(&key("attention.key_length")).unwrap_or(hidden / heads.max(1));
    cfg.insert("head_dim".into(), json!(head_dim));
    cfg.insert("rms_norm_eps".into(), json!(meta.number(&key("attention.layer_norm_rms_epsilon"))?));
    cfg.insert("rope_theta".into(), json!(meta.number(&key("rope.freq_base"))?));
    cfg.insert("max_position_embeddings".into(), json!(meta.count(&key("context_length"))?));
    cfg.insert("tie_word_embeddings".into(), json!(!tensors.contains_key("lm_head.weight")));
    cfg.insert("attention_bias".into(), json!(tensors.contains_key("model.layers.0.self_attn.q_proj.bias")));
    if let Ok(eos) = meta.count("tokenizer.ggml.eos_token_id") {
        cfg.insert("eos_token_id".into(), json!(eos));
    }
    if let Ok(bos) = meta.count("tokenizer.ggml.bos_token_id") {
        cfg.insert("bos_token_id".into(), json!(bos));
    }
    cfg.insert("torch_dtype".into(), json!("float32"));
    Ok(serde_json::Value::Object(cfg))
}

/// `tokenizer.json` from a GPT-2-style (byte-level BPE) GGUF vocabulary, and the ids of
/// its added tokens by text.
fn tokenizer_json(meta: &Meta) -> Result<(serde_json::Value, HashMap<String, u32>), TrainError> {
    let model = meta.string("tokenizer.ggml.model")?;
    if model != "gpt2" {
        return Err(TrainError::bad_file(
            meta.gguf,
            format!("tokenizer model `{model}`: only byte-level BPE (gpt2) is read"),
        ));
    }
    let tokens = meta.strings("tokenizer.ggml.tokens")?;
    let types = meta.ints("tokenizer.ggml.token_type").unwrap_or_default();
    let merges = meta.strings("tokenizer.ggml.merges")?;
    let mut vocab = Map::new();
    let mut added = Vec::new();
    let mut special = HashMap::new();
    for (id, text) in tokens.iter().enumerate() {
        let kind = types.get(id).copied().unwrap_or(1);
        if kind == TOKEN_TYPE_CONTROL || kind == TOKEN_TYPE_USER_DEFINED {
            added.push(agent_llm::models::qwen_tokenizer::added_token(id, text, kind == TOKEN_TYPE_CONTROL));
            special.insert(text.clone(), id as u32);
        }
        vocab.insert(text.clone(), json!(id));
    }
    // llama.cpp names Qwen's split pattern `qwen2` in `tokenizer.ggml.pre`.
    let merges = merges.into_iter().map(serde_json::Value::String).collect();
    let tokenizer = agent_llm::models::qwen_tokenizer::byte_level_bpe_json(vocab, merges, added);
    Ok((tokenizer, special))
}

fn tokenizer_config_json(meta: &Meta, special: &HashMap<String, u32>) -> Result<serde_json::Value, TrainError> {
    let text_of = |key: &str| -> Option<String> {
        let id = meta.count(key).ok()?;
        special.iter().find(|(_, v)| **v as usize == id).map(|(k, _)| k.clone())
    };
    let mut cfg = Map::new();
    if let Ok(template) = meta.string("tokenizer.chat_template") {
        cfg.insert("chat_template".into(), json!(template));
    }
    if let Some(eos) = text_of("tokenizer.ggml.eos_token_id") {
        cfg.insert("eos_token".into(), json!(eos));
    }
    cfg.insert("bos_token".into(), json!(null));
    Ok(serde_json::Value::Object(cfg))
}

#[cfg(test)]
mod tests {
    use super::hf_name;

    #[test]
    fn llama_cpp_names_map_to_hugging_face_names() {
        assert_eq!(hf_name("token_embd.weight").as_deref(), Some("model.embed_tokens.weight"));
        assert_eq!(hf_name("blk.3.attn_q.bias").as_deref(), Some("model.layers.3.self_attn.q_proj.bias"));
        assert_eq!(hf_name("blk.0.ffn_down.weight").as_deref(), Some("model.layers.0.mlp.down_proj.weight"));
        assert_eq!(hf_name("blk.1.attn_k_norm.weight").as_deref(), Some("model.layers.1.self_attn.k_norm.weight"));
        assert_eq!(hf_name("blk.x.attn_q.weight"), None);
        assert_eq!(hf_name("rope_freqs.weight"), None);
    }
}
