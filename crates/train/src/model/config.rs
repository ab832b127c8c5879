//! The parts of a Hugging Face Qwen3 or Qwen2 `config.json` the trainer needs (the two
//! differ in two places: Qwen2 has biases on q/k/v and no per-head q/k RMSNorm).

use std::path::Path;

use serde::Deserialize;

use crate::error::TrainError;

/// Architecture of a Qwen3 causal LM, as `config.json` states it.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct Qwen3Config {
    /// Embedding rows.
    pub vocab_size: usize,
    /// Model width.
    pub hidden_size: usize,
    /// MLP width.
    pub intermediate_size: usize,
    /// Decoder layers.
    pub num_hidden_layers: usize,
    /// Query heads.
    pub num_attention_heads: usize,
    /// Key/value heads.
    pub num_key_value_heads: usize,
    /// Per-head width (Qwen3 states it; older configs imply hidden / heads).
    #[serde(default)]
    pub head_dim: Option<usize>,
    /// RMSNorm epsilon.
    pub rms_norm_eps: f64,
    /// RoPE base.
    pub rope_theta: f64,
    /// Whether the LM head reuses the embedding matrix.
    #[serde(default)]
    pub tie_word_embeddings: bool,
    /// Longest position the RoPE tables cover.
    #[serde(default = "default_max_positions")]
    pub max_position_embeddings: usize,
    /// End-of-sequence token id(s).
    #[serde(default)]
    pub eos_token_id: Option<serde_json::Value>,
    /// `qwen3` or `qwen2` (absent: Qwen3).
    #[serde(default)]
    pub model_type: Option<String>,
    /// Biases on the q/k/v projections (Qwen3 states it, Qwen2 always has them).
    #[serde(default)]
    pub attention_bias: Option<bool>,
}

fn default_max_positions() -> usize {
    32_768
}

impl Qwen3Config {
    /// Reads `dir/config.json` and checks that the shapes fit together.
    pub fn load(dir: &Path) -> Result<Self, TrainError> {
        let path = dir.join("config.json");
        let text = std::fs::read_to_string(&path).map_err(|e| TrainError::io("read", &path, e))?;
        let cfg: Qwen3Config = serde_json::from_str(&text)
            .map_err(|e| TrainError::bad_file(&path, format!("not a Qwen3 or Qwen2 config: {e}")))?;
        if let Some(t) = cfg.model_type.as_deref().filter(|t| !matches!(*t, "qwen3" | "qwen2")) {
            return Err(TrainError::bad_file(&path, format!("model_type `{t}`: the trainer knows qwen3 and qwen2")));
        }
        cfg.validate().map_err(|reason| TrainError::bad_file(&path, reason))?;
        Ok(cfg)
    }

    /// Whether the architecture is Qwen2's.
    pub fn is_qwen2(&self) -> bool {
        self.model_type.as_deref() == Some("qwen2")
    }

    /// Whether queries and keys get a per-head RMSNorm (Qwen3) or not (Qwen2).
    pub fn qk_norm(&self) -> bool {
        !self.is_qwen2()
    }

    /// Whether the q/k/v projections carry biases.
    pub fn qkv_bias(&self) -> bool {
        self.attention_bias.unwrap_or(self.is_qwen2())
    }

    /// The per-head width in effect.
    pub fn head_dim(&self) -> usize {
        self.head_dim.unwrap_or(self.hidden_size / self.num_attention_heads.max(1))
    }

    /// The end-of-sequence ids (one or a list in the config).
    pub fn eos_ids(&self) -> Vec<u32> {
        match &self.eos_token_id {
            Some(serde_json::Value::Number(n)) => n.as_u64().map(|v| vec![v as u32]).unwrap_or_default(),
            Some(serde_json::Value::Array(a)) => a.iter().filter_map(|v| v.as_u64()).map(|v| v as u32).collect(),
            _ => Vec::new(),
        }
    }

    fn validate(&self) -> Result<(), String> {
        if self.num_attention_heads == 0 || self.num_key_value_heads == 0 || self.num_hidden_layers == 0 {
            return Err("heads, key/value heads and layers must be positive".into());
        }
        if !self.num_attention_heads.is_multiple_of(self.num_key_value_heads) {
            return Err(format!(
                "num_key_value_heads ({}) must divide num_attention_heads ({})",
                self.num_key_value_heads, self.num_attention_heads
            ));
        }
        if !self.head_dim().is_multiple_of(2) {
            return Err(format!("head_dim ({}) must be even for RoPE", self.head_dim()));
        }
        Ok(())
    }
}
