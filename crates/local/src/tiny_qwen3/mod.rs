//! A tiny random Qwen3 in Hugging Face layout, written by tests (and `agent model
//! tiny-qwen3`) so that model-loading code runs without any download.
//!
//! The folder gets `config.json` (Qwen3ForCausalLM), `model.safetensors` (f32,
//! Hugging Face tensor names, normal(0, std) weights from the seed, norms at 1, tied
//! embeddings), `tokenizer.json` (byte-level BPE learned from a small built-in corpus,
//! plus Qwen3's added tokens), `tokenizer_config.json` (with a Qwen3-style chat
//! template) and `generation_config.json`. The same configuration gives the same bytes.

mod bpe;

use std::collections::HashMap;
use std::path::Path;

use safetensors::tensor::{Dtype, TensorView};
use serde_json::{json, Value};

use crate::rng::SplitMix64;
use agent_llm::models::ModelError;
use bpe::{Bpe, ADDED_TOKENS};

/// Text the tokenizer's merges are learned from (English, Python, Rust, shell).
const CORPUS: &str = include_str!("corpus.txt");

/// Shape and initialisation of the tiny model. [`Default`] gives 2 layers, hidden 64,
/// 4 heads, 2 KV heads, intermediate 128, 400 merges.
#[derive(Debug, Clone, PartialEq)]
pub struct TinyQwen3Config {
    /// Seed of the weights (the tokenizer does not depend on it).
    pub seed: u64,
    /// Decoder layers.
    pub num_hidden_layers: usize,
    /// Model width.
    pub hidden_size: usize,
    /// Query heads.
    pub num_attention_heads: usize,
    /// Key/value heads (must divide the query heads).
    pub num_key_value_heads: usize,
    /// Per-head width; `None` means `hidden_size / num_attention_heads`.
    pub head_dim: Option<usize>,
    /// MLP width.
    pub intermediate_size: usize,
    /// Embedding rows; `None` means the tokenizer's size rounded up to a multiple of 64.
    pub vocab_size: Option<usize>,
    /// BPE merges to learn (fewer if the corpus runs out of repeated pairs).
    pub num_merges: usize,
    /// Context length written to the config.
    pub max_position_embeddings: usize,
    /// RoPE base.
    pub rope_theta: f64,
    /// RMSNorm epsilon.
    pub rms_norm_eps: f64,
    /// Standard deviation of the random weights.
    pub init_std: f32,
    /// Text added to the built-in corpus before the merges are learned (a training task
    /// set's demonstrations, so that its frequent strings become single tokens).
    pub extra_corpus: String,
}

impl Default for TinyQwen3Config {
    fn default() -> Self {
        TinyQwen3Config {
            seed: 0,
            num_hidden_layers: 2,
            hidden_size: 64,
            num_attention_heads: 4,
            num_key_value_heads: 2,
            head_dim: None,
            intermediate_size: 128,
            vocab_size: None,
            num_merges: 400,
            max_position_embeddings: 4096,
            rope_theta: 1_000_000.0,
            rms_norm_eps: 1e-6,
            init_std: 0.02,
            extra_corpus: String::new(),
        }
    }
}

impl TinyQwen3Config {
    /// The per-head width in effect.
    pub fn effective_head_dim(&self) -> usize {
        self.head_dim.unwrap_or(self.hidden_size / self.num_attention_heads.max(1))
    }

    /// Checks the shape and returns the vocabulary size for a tokenizer of `tokenizer_len` ids.
    fn validate(&self, tokenizer_len: usize) -> Result<usize, ModelError> {
        let bad = |m: String| Err(ModelError::InvalidConfig(m));
        let dims = [
            ("layers", self.num_hidden_layers),
            ("hidden size", self.hidden_size),
            ("heads", self.num_attention_heads),
            ("kv heads", self.num_key_value_heads),
            ("intermediate size", self.intermediate_size),
            ("max position embeddings", self.max_position_embeddings),
        ];
        if let Some((name, _)) = dims.iter().find(|(_, v)| *v == 0) {
            return bad(format!("{name} must be positive"));
        }
        if !self.num_attention_heads.is_multiple_of(self.num_key_value_heads) {
            return bad(format!(
                "kv heads ({}) must divide heads ({})",
                self.num_key_value_heads, self.num_attention_heads
            ));
        }
        match self.head_dim {
            Some(0) => return bad("head dim must be positive".into()),
            Some(d) if !d.is_multiple_of(2) => return bad(format!("head dim ({d}) must be even for RoPE")),
            None if !self.hidden_size.is_multiple_of(self.num_attention_heads) => {
                return bad(format!(
                    "hidden size ({}) must be a multiple of heads ({}) unless head dim is given",
                    self.hidden_size, self.num_attention_heads
                ))
            }
            None if !self.effective_head_dim().is_multiple_of(2) => {
                return bad(format!("head dim ({}) must be even for RoPE", self.effective_head_dim()))
            }
            _ => {}
        }
        if !(self.init_std.is_finite() && self.init_std >= 0.0) {
            return bad(format!("init std ({}) must be a finite non-negative number", self.init_std));
        }
        match self.vocab_size {
            Some(v) if v < tokenizer_len => {
                bad(format!("vocab size ({v}) is below the tokenizer's {tokenizer_len} ids"))
            }
            Some(v) => Ok(v),
            None => Ok(tokenizer_len.div_ceil(64) * 64),
        }
    }
}

/// Tensor names and shapes of a Qwen3 with this configuration, in Hugging Face naming
/// (no `lm_head.weight`: the embeddings are tied).
pub fn tensor_shapes(cfg: &TinyQwen3Config, vocab_size: usize) -> Vec<(String, Vec<usize>)> {
    let (h, hd, i) = (cfg.hidden_size, cfg.effective_head_dim(), cfg.intermediate_size);
    let (q, kv) = (cfg.num_attention_heads * hd, cfg.num_key_value_heads * hd);
    let mut out = vec![("model.embed_tokens.weight".to_string(), vec![vocab_size, h])];
    for l in 0..cfg.num_hidden_layers {
        let p = format!("model.layers.{l}");
        out.extend([
            (format!("{p}.input_layernorm.weight"), vec![h]),
            (format!("{p}.self_attn.q_proj.weight"), vec![q, h]),
            (format!("{p}.self_attn.k_proj.weight"), vec![kv, h]),
            (format!("{p}.self_attn.v_proj.weight"), vec![kv, h]),
            (format!("{p}.self_attn.o_proj.weight"), vec![h, q]),
            (format!("{p}.self_attn.q_norm.weight"), vec![hd]),
            (format!("{p}.self_attn.k_norm.weight"), vec![hd]),
            (format!("{p}.post_attention_layernorm.weight"), vec![h]),
            (format!("{p}.mlp.gate_proj.weight"), vec![i, h]),
            (format!("{p}.mlp.up_proj.weight"), vec![i, h]),
            (format!("{p}.mlp.down_proj.weight"), vec![h, i]),
        ]);
    }
    out.push(("model.norm.weight".to_string(), vec![h]));
    out
}

/// Writes a tiny random Qwen3 into `dir` (created if needed; files are overwritten).
pub fn write_tiny_qwen3(dir: &Path, cfg: &TinyQwen3Config) -> Result<(), ModelError> {
    let bpe = if cfg.extra_corpus.is_empty() {
        Bpe::train(CORPUS, cfg.num_merges)
    } else {
        Bpe::train(&format!("{CORPUS}\n{}", cfg.extra_corpus), cfg.num_merges)
    };
    let vocab_size = cfg.validate(bpe.len() + ADDED_TOKENS.len())?;
    std::fs::create_dir_all(dir).map_err(|e| ModelError::io("create", dir, e))?;
    let ids = SpecialIds { endoftext: bpe.len(), im_end: bpe.len() + 2 };
    write_json(dir, "config.json", &config_json(cfg, vocab_size, &ids))?;
    write_json(dir, "generation_config.json", &generation_config_json(&ids))?;
    write_json(dir, "tokenizer.json", &bpe.tokenizer_json())?;
    write_json(dir, "tokenizer_config.json", &tokenizer_config_json(&bpe, cfg))?;
    let weights = weights_safetensors(cfg, vocab_size)?;
    let path = dir.join("model.safetensors");
    std::fs::write(&path, weights).map_err(|e| ModelError::io("write", &path, e))
}

/// Ids of the tokens the configs refer to.
struct SpecialIds {
    endoftext: usize,
    im_end: usize,
}

fn write_json(dir: &Path, name: &'static str, value: &Value) -> Result<(), ModelError> {
    let mut bytes =
        serde_json::to_vec_pretty(value).map_err(|e| ModelError::Serialize { what: name, reason: e.to_string() })?;
    bytes.push(b'\n');
    let path = dir.join(name);
    std::fs::write(&path, bytes).map_err(|e| ModelError::io("write", &path, e))
}

fn config_json(cfg: &TinyQwen3Config, vocab_size: usize, ids: &SpecialIds) -> Value {
    json!({
        "architectures": ["Qwen3ForCausalLM"],
        "attention_bias": false,
        "attention_dropout": 0.0,
        "bos_token_id": ids.endoftext,
        "eos_token_id": ids.im_end,
        "head_dim": cfg.effective_head_dim(),
        "hidden_act": "silu",
        "hidden_size": cfg.hidden_size,
        "initializer_range": cfg.init_std,
        "intermediate_size": cfg.intermediate_size,
        "max_position_embeddings": cfg.max_position_embeddings,
        "max_window_layers": cfg.num_hidden_layers,
        "model_type": "qwen3",
        "num_attention_heads": cfg.num_attention_heads,
        "num_hidden_layers": cfg.num_hidden_layers,
        "num_key_value_heads": cfg.num_key_value_heads,
        "rms_norm_eps": cfg.rms_norm_eps,
        "rope_scaling": null,
        "rope_theta": cfg.rope_theta,
        "sliding_window": null,
        "tie_word_embeddings": true,
        "torch_dtype": "float32",
        "transformers_version": "4.51.0",
        "use_cache": true,
        "use_sliding_window": false,
        "vocab_size": vocab_size,
    })
}

fn generation_config_json(ids: &SpecialIds) -> Value {
    json!({
        "bos_token_id": ids.endoftext,
        "do_sample": true,
        "eos_token_id": [ids.im_end, ids.endoftext],
        "pad_token_id": ids.endoftext,
        "temperature": 0.6,
        "top_k": 20,
        "top_p": 0.95,
        "transformers_version": "4.51.0",
    })
}

fn tokenizer_config_json(bpe: &Bpe, cfg: &TinyQwen3Config) -> Value {
    let decoder: serde_json::Map<String, Value> = ADDED_TOKENS
        .iter()
        .enumerate()
        .map(|(k, t)| {
            let entry = json!({"content": t.content, "lstrip": false, "normalized": false, "rstrip": false,
                               "single_word": false, "special": t.special});
            ((bpe.len() + k).to_string(), entry)
        })
        .collect();
    json!({
        "add_bos_token": false,
        "add_prefix_space": false,
        "added_tokens_decoder": decoder,
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
        "bos_token": null,
        "chat_template": agent_llm::QWEN3_TEMPLATE,
        "clean_up_tokenization_spaces": false,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": cfg.max_position_embeddings,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": false,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": null,
    })
}

/// The weights as a safetensors file (f32, little-endian).
fn weights_safetensors(cfg: &TinyQwen3Config, vocab_size: usize) -> Result<Vec<u8>, ModelError> {
    let err =
        |e: safetensors::SafeTensorError| ModelError::Serialize { what: "model.safetensors", reason: e.to_string() };
    let tensors: Vec<(String, Vec<usize>, Vec<u8>)> = tensor_shapes(cfg, vocab_size)
        .into_iter()
        .map(|(name, shape)| {
            let n: usize = shape.iter().product();
            let is_norm = name.ends_with("norm.weight");
            let mut rng = SplitMix64::for_stream(cfg.seed, &name);
            let bytes = (0..n)
                .flat_map(|_| {
                    let v = if is_norm { 1.0 } else { (rng.normal() * f64::from(cfg.init_std)) as f32 };
                    v.to_le_bytes()
                })
                .collect();
            (name, shape, bytes)
        })
        .collect();
    let views = tensors
        .iter()
        .map(|(name, shape, bytes)| {
            Ok((name.as_str(), TensorView::new(Dtype::F32, shape.clone(), bytes).map_err(err)?))
        })
        .collect::<Result<Vec<_>, ModelError>>()?;
    let metadata = HashMap::from([("format".to_string(), "pt".to_string())]);
    safetensors::serialize(views, Some(metadata)).map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use safetensors::SafeTensors;

    #[test]
    fn shapes_follow_the_hf_qwen3_layout() {
        let cfg = TinyQwen3Config::default();
        let shapes: HashMap<String, Vec<usize>> = tensor_shapes(&cfg, 704).into_iter().collect();
        assert_eq!(shapes.len(), 1 + 2 * 11 + 1);
        assert_eq!(shapes["model.embed_tokens.weight"], [704, 64]);
        assert_eq!(shapes["model.layers.1.self_attn.q_proj.weight"], [64, 64]);
        assert_eq!(shapes["model.layers.1.self_attn.k_proj.weight"], [32, 64]);
        assert_eq!(shapes["model.layers.0.self_attn.o_proj.weight"], [64, 64]);
        assert_eq!(shapes["model.layers.0.self_attn.q_norm.weight"], [16]);
        assert_eq!(shapes["model.layers.0.mlp.down_proj.weight"], [64, 128]);
        assert_eq!(shapes["model.norm.weight"], [64]);
        assert!(!shapes.contains_key("lm_head.weight"));
    }

    #[test]
    fn weights_are_seeded_and_norms_are_one() {
        let cfg = TinyQwen3Config { num_hidden_layers: 1, ..Default::default() };
        let a = weights_safetensors(&cfg, 128).unwrap();
        assert_eq!(a, weights_safetensors(&cfg, 128).unwrap());
        assert_ne!(a, weights_safetensors(&TinyQwen3Config { seed: 1, ..cfg.clone() }, 128).unwrap());
        let st = SafeTensors::deserialize(&a).unwrap();
        assert_eq!(st.names().len(), 13);
        let f32s = |name: &str| -> Vec<f32> {
            let t = st.tensor(name).unwrap();
            assert_eq!(t.dtype(), Dtype::F32);
            t.data().chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
        };
        assert!(f32s("model.layers.0.self_attn.k_norm.weight").iter().all(|&v| v == 1.0));
        let w = f32s("model.embed_tokens.weight");
        let std = (w.iter().map(|v| v * v).sum::<f32>() / w.len() as f32).sqrt();
        assert!((std - 0.02).abs() < 0.002, "std {std}");
    }

    #[test]
    fn invalid_configs_are_rejected() {
        let base = TinyQwen3Config::default();
        let cases = [
            TinyQwen3Config { num_key_value_heads: 3, ..base.clone() },
            TinyQwen3Config { hidden_size: 65, ..base.clone() },
            TinyQwen3Config { num_hidden_layers: 0, ..base.clone() },
            TinyQwen3Config { vocab_size: Some(10), ..base.clone() },
            TinyQwen3Config { head_dim: Some(7), ..base.clone() },
        ];
        for cfg in cases {
            assert!(matches!(cfg.validate(700), Err(ModelError::InvalidConfig(_))), "{cfg:?}");
        }
        assert_eq!(base.validate(700).unwrap(), 704);
        assert_eq!(TinyQwen3Config { hidden_size: 65, head_dim: Some(16), ..base }.validate(64).unwrap(), 64);
    }

    #[test]
    fn configs_name_the_added_tokens() {
        let bpe = Bpe::train(CORPUS, 20);
        let ids = SpecialIds { endoftext: bpe.len(), im_end: bpe.len() + 2 };
        let c = config_json(&TinyQwen3Config::default(), 320, &ids);
        assert_eq!(c["model_type"], "qwen3");
        assert_eq!(c["eos_token_id"], bpe.len() + 2);
        let t = tokenizer_config_json(&bpe, &TinyQwen3Config::default());
        assert_eq!(t["added_tokens_decoder"][(bpe.len() + 2).to_string()]["content"], "<|im_end|>");
        let tpl = t["chat_template"].as_str().unwrap();
        assert!(tpl.contains("add_generation_prompt") && tpl.contains("enable_thinking"));
    }
}
