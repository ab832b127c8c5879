//! What one micro-batch's passes hold: activations and the log-prob pass.

use super::LOGPROB_CHUNK_TOKENS;
use crate::model::attention::Tiles;
use crate::preset::{Dtype, ModelShape};

/// Activations (total, of which attention scores) of one micro-batch, in bytes.
///
/// With recomputation and [`Tiles::tiled`] attention (the backward pass's choice), the scores term is what the
/// tiles keep instead: four f32 tiles of scores (scores, probabilities, their gradient and a temporary) and the
/// f32 copies the tiled passes make of queries, output and their gradients, keys and values (eight per-token
/// head-sized rows, counted at the query heads).
///
/// Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models" (the Megatron
/// formula): one layer keeps `s·b·h·(34 + 5·a·s/h)` bytes with 16-bit activations, i.e. per token
/// `34·h + 5·a·s`. Of the 34·h, 11·h is the attention block, 4·h the two norms and 19·h a GeLU MLP of width 4h;
/// Qwen3's SwiGLU MLP of width I keeps its input (2·h) and four I-wide tensors (gate, up, silu, product: 8·I),
/// so we count `17·h + 8·I + 5·a·s`. The `5·a·s` term is the materialised softmax of the attention scores, which
/// our candle model keeps (no fused attention backward). The figures are for 2-byte activations; f32 doubles
/// them. With recomputation only each layer's input (2·h per token per layer) is kept, plus one layer's full
/// set while it is recomputed.
pub fn activation_bytes(
    shape: &ModelShape,
    dtype: Dtype,
    micro_batch: u64,
    seq_len: u64,
    recompute: bool,
) -> (u64, u64) {
    let tokens = micro_batch * seq_len;
    let h = shape.hidden_size as u64;
    let i = shape.intermediate_size as u64;
    let a = shape.num_attention_heads as u64;
    let layers = shape.num_hidden_layers as u64;
    let attention_per_token = 5 * a * seq_len;
    let tiles = Tiles::default();
    if recompute && tiles.tiled(micro_batch as usize, a as usize, seq_len as usize, seq_len as usize) {
        let hd = shape.head_dim as u64;
        let attention = 4 * tiles.tile_bytes(micro_batch as usize, a as usize) as u64 + 8 * tokens * a * hd * 4;
        let rest = (tokens * layers * 2 * h + tokens * (17 * h + 8 * i)) * dtype.size() / 2;
        return (rest + attention, attention);
    }
    let per_token_layer = 17 * h + 8 * i + attention_per_token;
    let (units, attention_units) = if recompute {
        (tokens * layers * 2 * h + tokens * per_token_layer, tokens * attention_per_token)
    } else {
        (tokens * layers * per_token_layer, tokens * layers * attention_per_token)
    };
    (units * dtype.size() / 2, attention_units * dtype.size() / 2)
}

/// The log-prob pass of a micro-batch of `tokens` (every one scored at most), in bytes.
///
/// One chunk of [`LOGPROB_CHUNK_TOKENS`] at a time: three chunk × vocabulary f32 tensors at once (the logits, a
/// temporary and the softmax; a half-precision copy of the logits is gone before the third appears), in the
/// forward pass, and again in the backward pass's recomputation for a trainable head. What waits for the
/// backward pass is per scored token: with a frozen head (LoRA) its hidden row, the row's gradient and their
/// product (`model::logprobs`: the gradient is formed with the values); with a trainable head the row.
pub fn logprob_bytes(shape: &ModelShape, dtype: Dtype, tokens: u64, frozen_head: bool) -> u64 {
    let chunk = LOGPROB_CHUNK_TOKENS.min(tokens.max(1));
    let rows = if frozen_head { 3 } else { 1 };
    3 * chunk * shape.vocab_size as u64 * 4 + tokens * rows * shape.hidden_size as u64 * dtype.size()
}
