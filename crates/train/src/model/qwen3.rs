//! A trainable Qwen3 in which every path has a backward: candle's basic ops, and on the
//! CPU in f32 the fused kernels of `agent-train-kernels`, which bring their own
//! (candle-transformers' model uses fused RMSNorm, RoPE and softmax kernels that cut
//! gradients).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use candle_core::{DType, Device, Tensor, Var, D};

use super::attention::{self, Attended, Tiles};
use super::config::Qwen3Config;
use super::lora::{ForwardMode, Linear, Lora, LoraSettings, Param};
use crate::error::{TensorContext, TrainError};
use crate::zero3::Zero3;

type CResult<T> = candle_core::Result<T>;

/// What is trained: LoRA adapters on a frozen base, or every weight.
#[derive(Debug, Clone, PartialEq)]
pub enum TrainMode {
    /// Low-rank adapters on the chosen projections; the base stays frozen.
    Lora(LoraSettings),
    /// All weights.
    Full,
}

/// One decoder layer's attention.
#[derive(Debug, Clone)]
pub struct Attention {
    pub q_proj: Linear,
    pub k_proj: Linear,
    pub v_proj: Linear,
    pub o_proj: Linear,
    /// Qwen3's per-head RMSNorms (Qwen2 has none).
    pub q_norm: Option<Param>,
    pub k_norm: Option<Param>,
}

/// One decoder layer's gated MLP.
#[derive(Debug, Clone)]
pub struct Mlp {
    pub gate_proj: Linear,
    pub up_proj: Linear,
    pub down_proj: Linear,
}

/// One decoder layer.
#[derive(Debug, Clone)]
pub struct Layer {
    pub attn: Attention,
    pub mlp: Mlp,
    pub input_norm: Param,
    pub post_norm: Param,
}

/// Keys and values of earlier positions, per layer, for incremental decoding.
#[derive(Debug, Clone, Default)]
pub struct KvCache {
    layers: Vec<Option<(Tensor, Tensor)>>,
}

impl KvCache {
    /// Positions already in the cache.
    pub fn len(&self) -> usize {
        self.layers.first().and_then(|l| l.as_ref()).map(|(k, _)| k.dim(2).unwrap_or(0)).unwrap_or(0)
    }

    /// Whether nothing is cached yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Keeps only the first `n` positions (for reusing a shared prefix).
    pub fn truncate(&mut self, n: usize) -> CResult<()> {
        for slot in &mut self.layers {
            if let Some((k, v)) = slot.take() {
                if n > 0 {
                    *slot = Some((k.narrow(2, 0, n)?, v.narrow(2, 0, n)?));
                }
            }
        }
        Ok(())
    }
}

/// The model.
#[derive(Debug, Clone)]
pub struct Qwen3 {
    pub cfg: Qwen3Config,
    pub embed: Param,
    pub layers: Vec<Layer>,
    pub norm: Param,
    /// `None` when the embeddings are tied.
    pub lm_head: Option<Param>,
    cos: Tensor,
    sin: Tensor,
    dtype: DType,
    device: Device,
    /// When attention is computed in tiles, and their sizes.
    pub tiles: Tiles,
    /// With parameter sharding (ZeRO-3), the shards: this model's weights are then empty
    /// placeholders, and the passes of [`crate::zero3`] gather a unit's weights into a copy
    /// of it while they are used.
    pub zero3: Option<Arc<Zero3>>,
}

impl Qwen3 {
    /// Loads `dir` (config.json + safetensors, sharded or not) in `dtype` on `device`.
    /// In LoRA mode `seed` fixes the adapters' initial A matrices.
    pub fn load(dir: &Path, mode: &TrainMode, dtype: DType, device: &Device, seed: u64) -> Result<Self, TrainError> {
        let cfg = Qwen3Config::load(dir)?;
        let tensors = load_safetensors(dir, device)?;
        Self::from_tensors(cfg, tensors, mode, dtype, device, seed, dir)
    }

    /// Builds the model from named tensors (Hugging Face names); `origin` names them in errors.
    pub fn from_tensors(
        cfg: Qwen3Config,
        mut tensors: HashMap<String, Tensor>,
        mode: &TrainMode,
        dtype: DType,
        device: &Device,
        seed: u64,
        origin: &Path,
    ) -> Result<Self, TrainError> {
        let dir = origin;
        let mut take = |name: &str| -> Result<Tensor, TrainError> {
            let t = tensors.remove(name).ok_or_else(|| {
                TrainError::bad_file(dir, format!("the weights have no tensor `{name}`; is this a Qwen3 model?"))
            })?;
            t.to_dtype(dtype).ctx("converting weights")
        };
        let full = matches!(mode, TrainMode::Full);
        let param = |t: Tensor| -> Result<Param, TrainError> {
            Ok(if full { Param::Trainable(Var::from_tensor(&t).ctx("creating a variable")?) } else { Param::Frozen(t) })
        };
        let mut site = 0u64;
        let mut linear = |t: Tensor, bias: Option<Tensor>, module: &str, layer: usize| -> Result<Linear, TrainError> {
            site += 1;
            let lora = match mode {
                TrainMode::Lora(s) if s.targets.iter().any(|x| x == module) => {
                    let (out_dim, in_dim) = t.dims2().ctx("reading a projection's shape")?;
                    let seed = seed ^ (layer as u64) << 32 ^ site;
                    Some(Lora::new(out_dim, in_dim, s, seed, dtype, device).ctx("initialising LoRA")?)
                }
                _ => None,
            };
            let bias = bias.map(param).transpose()?;
            Ok(Linear { weight: param(t)?, lora, bias, site })
        };
        let embed = param(take("model.embed_tokens.weight")?)?;
        let mut layers = Vec::with_capacity(cfg.num_hidden_layers);
        for l in 0..cfg.num_hidden_layers {
            let p = format!("model.layers.{l}");
            let bias = cfg.qkv_bias();
            let mut proj = |name: &str, with_bias: bool| -> Result<(Tensor, Option<Tensor>), TrainError> {
                let w = take(&format!("{p}.{name}.weight"))?;
                let b = if with_bias { Some(take(&format!("{p}.{name}.bias"))?) } else { None };
                Ok((w, b))
            };
            let (qw, qb) = proj("self_attn.q_proj", bias)?;
            let (kw, kb) = proj("self_attn.k_proj", bias)?;
            let (vw, vb) = proj("self_attn.v_proj", bias)?;
            let (ow, _) = proj("self_attn.o_proj", false)?;
            let (q_norm, k_norm) = if cfg.qk_norm() {
                (
                    Some(param(take(&format!("{p}.self_attn.q_norm.weight"))?)?),
                    Some(param(take(&format!("{p}.self_attn.k_norm.weight"))?)?),
                )
            } else {
                (None, None)
            };
            let attn = Attention {
                q_proj: linear(qw, qb, "q_proj", l)?,
                k_proj: linear(kw, kb, "k_proj", l)?,
                v_proj: linear(vw, vb, "v_proj", l)?,
                o_proj: linear(ow, None, "o_proj", l)?,
                q_norm,
                k_norm,
            };
            let mlp = Mlp {
                gate_proj: linear(take(&format!("{p}.mlp.gate_proj.weight"))?, None, "gate_proj", l)?,
                up_proj: linear(take(&format!("{p}.mlp.up_proj.weight"))?, None, "up_proj", l)?,
                down_proj: linear(take(&format!("{p}.mlp.down_proj.weight"))?, None, "down_proj", l)?,
            };
            layers.push(Layer {
                attn,
                mlp,
                input_norm: param(take(&format!("{p}.input_layernorm.weight"))?)?,
                post_norm: param(take(&format!("{p}.post_attention_layernorm.weight"))?)?,
            });
        }
        let norm = param(take("model.norm.weight")?)?;
        let lm_head = if cfg.tie_word_embeddings { None } else { Some(param(take("lm_head.weight")?)?) };
        let (cos, sin) = rope_tables(&cfg, dtype, device).ctx("building RoPE tables")?;
        Ok(Qwen3 {
            cfg,
            embed,
            layers,
            norm,
            lm_head,
            cos,
            sin,
            dtype,
            device: device.clone(),
            tiles: Tiles::default(),
            zero3: None,
        })
    }

    /// This model with its RoPE tables on `device` (the weights stay where they are: for a
    /// sharded model's skeleton, whose weights are placeholders).
    pub fn tables_on(mut self, device: &Device) -> CResult<Qwen3> {
        self.cos = self.cos.to_device(device)?;
        self.sin = self.sin.to_device(device)?;
        self.device = device.clone();
        Ok(self)
    }

    /// The compute dtype.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The device the weights live on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The output projection (the embeddings when tied).
    pub fn head_weight(&self) -> &Tensor {
        self.lm_head.as_ref().unwrap_or(&self.embed).tensor()
    }

    /// Whether the output projection is frozen (LoRA runs).
    pub fn head_is_frozen(&self) -> bool {
        matches!(self.lm_head.as_ref().unwrap_or(&self.embed), Param::Frozen(_))
    }

    /// Token embeddings of `ids` (B×T) as B×T×H.
    pub fn embed(&self, ids: &Tensor) -> CResult<Tensor> {
        let (b, t) = ids.dims2()?;
        let flat = ids.flatten_all()?;
        self.embed.tensor().index_select(&flat, 0)?.reshape((b, t, self.cfg.hidden_size))
    }

    /// Runs layer `l` on B×T×H input whose first position is `offset`; `cache`
    /// (inference only) receives the new keys and values.
    pub fn layer_forward(
        &self,
        l: usize,
        x: &Tensor,
        offset: usize,
        mode: ForwardMode,
        cache: Option<&mut Option<(Tensor, Tensor)>>,
    ) -> CResult<Tensor> {
        let (q, k, v) = self.attention_inputs(l, x, offset, mode, cache)?;
        let t = x.dim(1)?;
        let o = self.mix(&q, &k, &v, t)?;
        self.attention_output(l, x, &o, mode)
    }

    /// The first part of layer `l`: queries `(b, kv_heads, group·t, d)` and keys and values
    /// `(b, kv_heads, s, d)` (after what `cache` holds; see [`super::attention`] for the layout).
    pub fn attention_inputs(
        &self,
        l: usize,
        x: &Tensor,
        offset: usize,
        mode: ForwardMode,
        cache: Option<&mut Option<(Tensor, Tensor)>>,
    ) -> CResult<(Tensor, Tensor, Tensor)> {
        let layer = &self.layers[l];
        let (b, t, hid) = x.dims3()?;
        let h = rms_norm(x, layer.input_norm.tensor(), self.cfg.rms_norm_eps)?;
        let rows = h.reshape((b * t, hid))?;
        let attn = &layer.attn;
        let q = attn.q_proj.forward(&rows, mode)?;
        let k = attn.k_proj.forward(&rows, mode)?;
        let v = attn.v_proj.forward(&rows, mode)?;
        self.heads(attn, (&q, &k, &v), (b, t), offset, cache)
    }

    /// The rest of layer `l` from the attention's output `o` (the queries' layout): the
    /// output projection, the residual and the MLP.
    pub fn attention_output(&self, l: usize, x: &Tensor, o: &Tensor, mode: ForwardMode) -> CResult<Tensor> {
        let layer = &self.layers[l];
        let (b, t, hid) = x.dims3()?;
        let a = layer.attn.o_proj.forward(&self.head_rows(o, b, t)?, mode)?.reshape((b, t, hid))?;
        self.feed_forward(layer, &(x + a)?, mode)
    }

    /// The attention's scale, 1/√d.
    pub fn attention_scale(&self) -> f64 {
        1.0 / (self.cfg.head_dim() as f64).sqrt()
    }

    /// Tiled attention with the state its backward pass needs (no gradient graph).
    pub fn attend_tiled(&self, q: &Tensor, k: &Tensor, v: &Tensor, t: usize) -> CResult<Attended> {
        attention::forward(&q.detach(), &k.detach(), &v.detach(), t, self.attention_scale(), &self.tiles)
    }

    /// Attention's output in the queries' layout: in tiles when nothing asks for a gradient
    /// and the scores would be large, else every score at once (differentiable).
    fn mix(&self, q: &Tensor, k: &Tensor, v: &Tensor, t: usize) -> CResult<Tensor> {
        let (b, _, _, _) = q.dims4()?;
        let s = k.dim(2)?;
        let graph = q.track_op() || k.track_op() || v.track_op();
        if !graph && self.tiles.tiled(b, self.cfg.num_attention_heads, t, s) {
            return Ok(self.attend_tiled(q, k, v, t)?.out);
        }
        let (nh, nkv) = (self.cfg.num_attention_heads, self.cfg.num_key_value_heads);
        let group = nh / nkv;
        let scores = q.matmul(&k.t()?)?;
        let probs = if super::fused::applies(&scores) {
            super::fused::causal_softmax(&scores, self.attention_scale(), t)?
        } else {
            let scores = (scores * self.attention_scale())?;
            let scores = if t > 1 {
                let mask = causal_mask(t, s, self.dtype, &self.device)?;
                scores.broadcast_add(&Tensor::cat(&vec![&mask; group], 0)?)?
            } else {
                scores
            };
            softmax_last(&scores)?
        };
        probs.matmul(v)
    }

    /// The queries' layout `(b, kv_heads, group·t, d)` as the output projection's rows `(b·t, heads·d)`.
    fn head_rows(&self, o: &Tensor, b: usize, t: usize) -> CResult<Tensor> {
        let (nh, hd) = (self.cfg.num_attention_heads, self.cfg.head_dim());
        o.reshape((b, nh, t, hd))?.transpose(1, 2)?.reshape((b * t, nh * hd))
    }

    /// The second half of a layer: `x + MLP(RMSNorm(x))`, for input of any shape ending
    /// in the hidden size.
    fn feed_forward(&self, layer: &Layer, x: &Tensor, mode: ForwardMode) -> CResult<Tensor> {
        let h = rms_norm(x, layer.post_norm.tensor(), self.cfg.rms_norm_eps)?;
        let rows = h.reshape(((), self.cfg.hidden_size))?;
        let gate = layer.mlp.gate_proj.forward(&rows, mode)?.silu()?;
        let up = layer.mlp.up_proj.forward(&rows, mode)?;
        let down = layer.mlp.down_proj.forward(&(gate * up)?, mode)?;
        x + down.reshape(x.shape())?
    }

    /// The final RMSNorm.
    pub fn final_norm(&self, x: &Tensor) -> CResult<Tensor> {
        rms_norm(x, self.norm.tensor(), self.cfg.rms_norm_eps)
    }

    /// Hidden states after the final norm for B×T token ids starting at position 0.
    pub fn hidden(&self, ids: &Tensor, mode: ForwardMode) -> CResult<Tensor> {
        let mut x = self.embed(ids)?;
        for l in 0..self.layers.len() {
            x = self.layer_forward(l, &x, 0, mode, None)?;
        }
        self.final_norm(&x)
    }

    /// Feeds `ids` after what `cache` holds and returns the logits (f32, vocab-long) of the last position.
    pub fn forward_cached(&self, ids: &[u32], cache: &mut KvCache) -> CResult<Tensor> {
        let offset = cache.len();
        if cache.layers.len() != self.layers.len() {
            cache.layers = vec![None; self.layers.len()];
        }
        let input = Tensor::new(ids, &self.device)?.unsqueeze(0)?;
        let mut x = self.embed(&input)?;
        for l in 0..self.layers.len() {
            x = self.layer_forward(l, &x, offset, ForwardMode::default(), Some(&mut cache.layers[l]))?;
        }
        let last = x.narrow(1, ids.len() - 1, 1)?.reshape((1, self.cfg.hidden_size))?;
        let last = self.final_norm(&last)?;
        last.matmul(&self.head_weight().t()?)?.to_dtype(DType::F32)?.reshape(self.cfg.vocab_size)
    }

    /// One decoding step for several sequences at once: row i feeds `ids[i]` after what
    /// `caches[i]` holds and gets the logits (f32, vocab-long) of that position. The
    /// projections, the MLP and the head run on all rows together, padded to `rows`;
    /// attention runs per sequence on its own cache. Every op is row-independent at a
    /// fixed row count, so a sequence's logits do not depend on which others share its
    /// batch (the sampler's tokens then do not depend on scheduling).
    pub fn decode_batch(&self, ids: &[u32], caches: &mut [&mut KvCache], rows: usize) -> CResult<Vec<Tensor>> {
        let n = ids.len();
        if n == 0 || n > rows || caches.len() != n {
            return Err(candle_core::Error::Msg(format!(
                "decode_batch: {n} tokens for {} caches in {rows} rows",
                caches.len()
            )));
        }
        let offsets: Vec<usize> = caches.iter().map(|c| c.len()).collect();
        for cache in caches.iter_mut() {
            if cache.layers.len() != self.layers.len() {
                cache.layers = vec![None; self.layers.len()];
            }
        }
        let mut padded = ids.to_vec();
        padded.resize(rows, 0);
        let hid = self.cfg.hidden_size;
        let mode = ForwardMode::default();
        let mut x = self.embed(&Tensor::new(padded.as_slice(), &self.device)?.unsqueeze(1)?)?.reshape((rows, hid))?;
        let width = self.cfg.num_attention_heads * self.cfg.head_dim();
        let pad = Tensor::zeros((rows - n, width), self.dtype, &self.device)?;
        for (l, layer) in self.layers.iter().enumerate() {
            let h = rms_norm(&x, layer.input_norm.tensor(), self.cfg.rms_norm_eps)?;
            let attn = &layer.attn;
            let (q, k, v) =
                (attn.q_proj.forward(&h, mode)?, attn.k_proj.forward(&h, mode)?, attn.v_proj.forward(&h, mode)?);
            let mut outs = Vec::with_capacity(rows);
            for (i, cache) in caches.iter_mut().enumerate() {
                let row = |t: &Tensor| t.narrow(0, i, 1);
                let qkv = (&row(&q)?, &row(&k)?, &row(&v)?);
                let (q, k, v) = self.heads(attn, qkv, (1, 1), offsets[i], Some(&mut cache.layers[l]))?;
                outs.push(self.head_rows(&self.mix(&q, &k, &v, 1)?, 1, 1)?);
            }
            if rows > n {
                outs.push(pad.clone());
            }
            let a = attn.o_proj.forward(&Tensor::cat(&outs, 0)?, mode)?;
            x = self.feed_forward(layer, &(x + a)?, mode)?;
        }
        let logits = self.final_norm(&x)?.matmul(&self.head_weight().t()?)?.to_dtype(DType::F32)?;
        (0..n).map(|i| logits.get(i)).collect()
    }

    /// A frozen copy with every adapter merged into its base weight (a new copy of each
    /// adapted projection): for export and the frozen reference of a full update.
    pub fn merged(&self) -> CResult<Qwen3> {
        self.frozen_with(&|l: &Linear| l.merged())
    }

    /// The policy as the sampler sees it: a frozen view of the same storage (no copy of any
    /// weight, no gradient graph), adapters applied unmerged, live: an in-place update of the
    /// trainable weights is seen by the next forward.
    pub fn shared(&self) -> CResult<Qwen3> {
        self.frozen_with(&|l: &Linear| Ok(l.shared()))
    }

    fn frozen_with(&self, project: &dyn Fn(&Linear) -> CResult<Linear>) -> CResult<Qwen3> {
        let frozen = |p: &Param| Param::Frozen(p.tensor().detach());
        let layers = self
            .layers
            .iter()
            .map(|l| -> CResult<Layer> {
                Ok(Layer {
                    attn: Attention {
                        q_proj: project(&l.attn.q_proj)?,
                        k_proj: project(&l.attn.k_proj)?,
                        v_proj: project(&l.attn.v_proj)?,
                        o_proj: project(&l.attn.o_proj)?,
                        q_norm: l.attn.q_norm.as_ref().map(frozen),
                        k_norm: l.attn.k_norm.as_ref().map(frozen),
                    },
                    mlp: Mlp {
                        gate_proj: project(&l.mlp.gate_proj)?,
                        up_proj: project(&l.mlp.up_proj)?,
                        down_proj: project(&l.mlp.down_proj)?,
                    },
                    input_norm: frozen(&l.input_norm),
                    post_norm: frozen(&l.post_norm),
                })
            })
            .collect::<CResult<Vec<_>>>()?;
        Ok(Qwen3 {
            cfg: self.cfg.clone(),
            embed: frozen(&self.embed),
            layers,
            norm: frozen(&self.norm),
            lm_head: self.lm_head.as_ref().map(frozen),
            cos: self.cos.clone(),
            sin: self.sin.clone(),
            dtype: self.dtype,
            device: self.device.clone(),
            tiles: self.tiles,
            zero3: self.zero3.clone(),
        })
    }

    /// Every projection with its layer index and module name, in a fixed order.
    pub fn projections(&self) -> Vec<(usize, &'static str, &Linear)> {
        let mut out = Vec::new();
        for (i, l) in self.layers.iter().enumerate() {
            out.extend([
                (i, "self_attn.q_proj", &l.attn.q_proj),
                (i, "self_attn.k_proj", &l.attn.k_proj),
                (i, "self_attn.v_proj", &l.attn.v_proj),
                (i, "self_attn.o_proj", &l.attn.o_proj),
                (i, "mlp.gate_proj", &l.mlp.gate_proj),
                (i, "mlp.up_proj", &l.mlp.up_proj),
                (i, "mlp.down_proj", &l.mlp.down_proj),
            ]);
        }
        out
    }

    /// Every weight under its Hugging Face name (the base weights, adapters not merged).
    pub fn named_weights(&self) -> Vec<(String, &Param)> {
        let mut out = vec![("model.embed_tokens.weight".to_string(), &self.embed)];
        for (i, l) in self.layers.iter().enumerate() {
            let p = format!("model.layers.{i}");
            out.extend([
                (format!("{p}.input_layernorm.weight"), &l.input_norm),
                (format!("{p}.self_attn.q_proj.weight"), &l.attn.q_proj.weight),
                (format!("{p}.self_attn.k_proj.weight"), &l.attn.k_proj.weight),
                (format!("{p}.self_attn.v_proj.weight"), &l.attn.v_proj.weight),
                (format!("{p}.self_attn.o_proj.weight"), &l.attn.o_proj.weight),
            ]);
            // Qwen3's order is kept as it was (optimiser state of older checkpoints relies
            // on it); what only Qwen2 has comes at the end of its layer.
            for (name, norm) in [("q_norm", &l.attn.q_norm), ("k_norm", &l.attn.k_norm)] {
                if let Some(n) = norm {
                    out.push((format!("{p}.self_attn.{name}.weight"), n));
                }
            }
            out.extend([
                (format!("{p}.post_attention_layernorm.weight"), &l.post_norm),
                (format!("{p}.mlp.gate_proj.weight"), &l.mlp.gate_proj.weight),
                (format!("{p}.mlp.up_proj.weight"), &l.mlp.up_proj.weight),
                (format!("{p}.mlp.down_proj.weight"), &l.mlp.down_proj.weight),
            ]);
            for (name, lin) in [("q_proj", &l.attn.q_proj), ("k_proj", &l.attn.k_proj), ("v_proj", &l.attn.v_proj)] {
                if let Some(b) = &lin.bias {
                    out.push((format!("{p}.self_attn.{name}.bias"), b));
                }
            }
        }
        out.push(("model.norm.weight".to_string(), &self.norm));
        if let Some(h) = &self.lm_head {
            out.push(("lm_head.weight".to_string(), h));
        }
        out
    }

    /// [`Qwen3::named_weights`], mutable (the same names in the same order).
    fn named_weights_mut(&mut self) -> Vec<(String, &mut Param)> {
        let mut out = vec![("model.embed_tokens.weight".to_string(), &mut self.embed)];
        for (i, l) in self.layers.iter_mut().enumerate() {
            let p = format!("model.layers.{i}");
            let (attn, mlp) = (&mut l.attn, &mut l.mlp);
            out.extend([
                (format!("{p}.input_layernorm.weight"), &mut l.input_norm),
                (format!("{p}.self_attn.q_proj.weight"), &mut attn.q_proj.weight),
                (format!("{p}.self_attn.k_proj.weight"), &mut attn.k_proj.weight),
                (format!("{p}.self_attn.v_proj.weight"), &mut attn.v_proj.weight),
                (format!("{p}.self_attn.o_proj.weight"), &mut attn.o_proj.weight),
            ]);
            for (name, norm) in [("q_norm", &mut attn.q_norm), ("k_norm", &mut attn.k_norm)] {
                if let Some(n) = norm {
                    out.push((format!("{p}.self_attn.{name}.weight"), n));
                }
            }
            out.extend([
                (format!("{p}.post_attention_layernorm.weight"), &mut l.post_norm),
                (format!("{p}.mlp.gate_proj.weight"), &mut mlp.gate_proj.weight),
                (format!("{p}.mlp.up_proj.weight"), &mut mlp.up_proj.weight),
                (format!("{p}.mlp.down_proj.weight"), &mut mlp.down_proj.weight),
            ]);
            let biases = [
                ("q_proj", &mut attn.q_proj.bias),
                ("k_proj", &mut attn.k_proj.bias),
                ("v_proj", &mut attn.v_proj.bias),
            ];
            for (name, bias) in biases {
                if let Some(b) = bias {
                    out.push((format!("{p}.self_attn.{name}.bias"), b));
                }
            }
        }
        out.push(("model.norm.weight".to_string(), &mut self.norm));
        if let Some(h) = &mut self.lm_head {
            out.push(("lm_head.weight".to_string(), h));
        }
        out
    }

    /// A copy (sharing storage) whose base weights are replaced by `f(name, weight)` where
    /// it returns one; adapters are kept.
    pub fn with_weights(&self, f: &mut dyn FnMut(&str, &Param) -> Option<Param>) -> Qwen3 {
        let mut out = self.clone();
        for (name, p) in out.named_weights_mut() {
            if let Some(new) = f(&name, p) {
                *p = new;
            }
        }
        out
    }

    /// The trained variables under stable names: PEFT keys for adapters, Hugging Face
    /// names in full mode. The order is fixed (optimiser state and all-reduce rely on it).
    pub fn trainable(&self) -> Vec<(String, Var)> {
        let mut out = Vec::new();
        for (name, p) in self.named_weights() {
            if let Param::Trainable(v) = p {
                out.push((name, v.clone()));
            }
        }
        for (i, module, lin) in self.projections() {
            if let Some(lora) = &lin.lora {
                let key = format!("base_model.model.model.layers.{i}.{module}");
                for (suffix, p) in [("lora_A", &lora.a), ("lora_B", &lora.b)] {
                    if let Param::Trainable(v) = p {
                        out.push((format!("{key}.{suffix}.weight"), v.clone()));
                    }
                }
            }
        }
        out
    }

    /// Queries, keys and values in the attention layout from projected rows (B·T × heads·D
    /// each): per-head norms, RoPE, and the keys and values of `cache` before the new ones
    /// (which `cache` then holds too).
    fn heads(
        &self,
        attn: &Attention,
        (q, k, v): (&Tensor, &Tensor, &Tensor),
        (b, t): (usize, usize),
        offset: usize,
        cache: Option<&mut Option<(Tensor, Tensor)>>,
    ) -> CResult<(Tensor, Tensor, Tensor)> {
        let (nh, nkv, hd) = (self.cfg.num_attention_heads, self.cfg.num_key_value_heads, self.cfg.head_dim());
        let q = q.reshape((b, t, nh, hd))?;
        let k = k.reshape((b, t, nkv, hd))?;
        let v = v.reshape((b, t, nkv, hd))?;
        let q = match &attn.q_norm {
            Some(n) => rms_norm(&q, n.tensor(), self.cfg.rms_norm_eps)?,
            None => q,
        };
        let k = match &attn.k_norm {
            Some(n) => rms_norm(&k, n.tensor(), self.cfg.rms_norm_eps)?,
            None => k,
        };
        let v = v.transpose(1, 2)?.contiguous()?;
        let cos = self.cos.narrow(0, offset, t)?;
        let sin = self.sin.narrow(0, offset, t)?;
        let (q, mut k) = if super::fused::applies(&q) {
            (super::fused::rope_heads(&q, &cos, &sin)?, super::fused::rope_heads(&k, &cos, &sin)?)
        } else {
            let q = rope(&q.transpose(1, 2)?.contiguous()?, &cos, &sin)?;
            (q, rope(&k.transpose(1, 2)?.contiguous()?, &cos, &sin)?)
        };
        let mut v = v;
        if let Some(slot) = cache {
            if let Some((pk, pv)) = slot.as_ref() {
                k = Tensor::cat(&[pk, &k], 2)?;
                v = Tensor::cat(&[pv, &v], 2)?;
            }
            *slot = Some((k.clone(), v.clone()));
        }
        // Grouped-query attention without copying keys and values per head: the query
        // heads that share a key/value head (adjacent in Qwen3's layout) are stacked
        // into one block of rows, so each group is one product against its keys.
        let q = q.reshape((b, nkv, (nh / nkv) * t, hd))?;
        Ok((q, k, v))
    }
}

/// Reads every safetensors file of `dir` (one file, or the shards an index names).
fn load_safetensors(dir: &Path, device: &Device) -> Result<HashMap<String, Tensor>, TrainError> {
    let mut out = HashMap::new();
    for file in safetensors_files(dir)? {
        let tensors = candle_core::safetensors::load(&file, device)
            .map_err(|e| TrainError::bad_file(&file, format!("cannot read safetensors: {e}")))?;
        out.extend(tensors);
    }
    Ok(out)
}

/// The safetensors files of `dir` (one file, or the shards an index names), each checked to exist.
pub(crate) fn safetensors_files(dir: &Path) -> Result<Vec<PathBuf>, TrainError> {
    let index = dir.join("model.safetensors.index.json");
    let files: Vec<PathBuf> = if index.exists() {
        let text = std::fs::read_to_string(&index).map_err(|e| TrainError::io("read", &index, e))?;
        let value: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| TrainError::bad_file(&index, format!("not JSON: {e}")))?;
        let map = value
            .get("weight_map")
            .and_then(|m| m.as_object())
            .ok_or_else(|| TrainError::bad_file(&index, "no `weight_map` object"))?;
        let mut names: Vec<String> = map.values().filter_map(|v| v.as_str().map(str::to_string)).collect();
        names.sort();
        names.dedup();
        names.into_iter().map(|n| dir.join(n)).collect()
    } else {
        vec![dir.join("model.safetensors")]
    };
    for file in &files {
        if !file.exists() {
            return Err(TrainError::bad_file(file, "missing: the model folder needs its safetensors weights"));
        }
    }
    Ok(files)
}

/// cos/sin tables (positions × head_dim) in the non-interleaved layout Qwen3 uses.
fn rope_tables(cfg: &Qwen3Config, dtype: DType, device: &Device) -> CResult<(Tensor, Tensor)> {
    let hd = cfg.head_dim();
    let inv: Vec<f32> = (0..hd / 2).map(|i| 1.0 / (cfg.rope_theta.powf(2.0 * i as f64 / hd as f64)) as f32).collect();
    let n = cfg.max_position_embeddings;
    let inv = Tensor::from_vec(inv, (1, hd / 2), device)?;
    let pos = Tensor::arange(0u32, n as u32, device)?.to_dtype(DType::F32)?.reshape((n, 1))?;
    let freqs = pos.matmul(&inv)?;
    let freqs = Tensor::cat(&[&freqs, &freqs], 1)?;
    Ok((freqs.cos()?.to_dtype(dtype)?, freqs.sin()?.to_dtype(dtype)?))
}

/// `x·cos + rotate_half(x)·sin` for x of shape B×heads×T×D.
fn rope(x: &Tensor, cos: &Tensor, sin: &Tensor) -> CResult<Tensor> {
    let d = x.dim(D::Minus1)?;
    let x1 = x.narrow(D::Minus1, 0, d / 2)?;
    let x2 = x.narrow(D::Minus1, d / 2, d / 2)?;
    let rotated = Tensor::cat(&[&x2.neg()?, &x1], D::Minus1)?;
    x.broadcast_mul(cos)? + rotated.broadcast_mul(sin)?
}

/// RMSNorm over the last dimension, in f32 for half-precision inputs.
pub fn rms_norm(x: &Tensor, weight: &Tensor, eps: f64) -> CResult<Tensor> {
    if super::fused::applies(x) && super::fused::applies(weight) {
        return super::fused::rms_norm(x, weight, eps);
    }
    let dtype = x.dtype();
    let xf = if matches!(dtype, DType::BF16 | DType::F16) { x.to_dtype(DType::F32)? } else { x.clone() };
    let ms = xf.sqr()?.mean_keepdim(D::Minus1)?;
    let inv = (ms + eps)?.sqrt()?.recip()?;
    xf.broadcast_mul(&inv)?.to_dtype(dtype)?.broadcast_mul(weight)
}

/// Softmax over the last dimension from differentiable ops (the max is a constant shift).
fn softmax_last(x: &Tensor) -> CResult<Tensor> {
    let m = x.max_keepdim(D::Minus1)?.detach();
    let e = x.broadcast_sub(&m)?.exp()?;
    let s = e.sum_keepdim(D::Minus1)?;
    e.broadcast_div(&s)
}

/// Additive mask (T×total): query i (at position total−T+i) sees keys up to its own position.
fn causal_mask(t: usize, total: usize, dtype: DType, device: &Device) -> CResult<Tensor> {
    let start = total - t;
    let mask: Vec<f32> =
        (0..t).flat_map(|i| (0..total).map(move |j| if j > start + i { f32::NEG_INFINITY } else { 0.0 })).collect();
    Tensor::from_vec(mask, (t, total), device)?.to_dtype(dtype)
}
