//! The prompt every sequence of a batch starts with, computed once. Rollouts of one step
//! share the system prompt and the tool definitions (and a group shares its task too):
//! on the 0.5B with `tools: [bash]` that is ~800 of a ~1,000-token demonstration. The
//! prefix runs through the model once; each sequence's remainder attends to its keys and
//! values. Training goes back through it exactly: the gradients that reach the prefix's
//! keys and values from every sequence are summed, and then sent back through the prefix
//! once (the gradient of a sum is the sum of the gradients; nothing is dropped).

use candle_core::backprop::GradStore;
use candle_core::{Tensor, Var};

use super::layer_backward::{tiled_layer_backward, Upstream};
use super::lora::ForwardMode;
use super::qwen3::Qwen3;

type CResult<T> = candle_core::Result<T>;

/// Shorter shared prompts are not worth a separate pass.
pub const MIN_SHARED_PREFIX: usize = 16;

/// How many leading tokens `seqs` can share through one [`SharedPrefix`]: their longest
/// common prefix, cut so that every sequence keeps at least one token and no token the
/// loss scores is predicted from inside the prefix (token `p`, the first of each
/// remainder, is predicted from position `p − 1`, so it must be unscored as well). 0 when
/// fewer than two sequences share at least [`MIN_SHARED_PREFIX`] tokens.
pub fn shared_len(seqs: &[(&[u32], &[u8])]) -> usize {
    let Some(((first, _), rest)) = seqs.split_first() else { return 0 };
    if rest.is_empty() {
        return 0;
    }
    let mut p = first.len();
    for (ids, _) in rest {
        p = p.min(first.iter().zip(ids.iter()).take_while(|(a, b)| a == b).count());
    }
    for (ids, mask) in seqs {
        let first_scored = (1..ids.len()).find(|&t| mask.get(t).copied().unwrap_or(0) != 0).unwrap_or(ids.len());
        p = p.min(first_scored.saturating_sub(1)).min(ids.len().saturating_sub(1));
    }
    if p < MIN_SHARED_PREFIX {
        0
    } else {
        p
    }
}

/// A prefix's per-layer inputs and keys/values, and the gradients its keys and values
/// have received from the sequences that attended to them.
pub struct SharedPrefix {
    ids: Tensor,
    mode: ForwardMode,
    /// Each layer's input (1×P×H), kept for recomputing the layer in the backward pass.
    inputs: Vec<Tensor>,
    /// Each layer's keys and values after RoPE (1×kv_heads×P×D), detached.
    kv: Vec<(Tensor, Tensor)>,
    /// Summed gradients of `kv`.
    grad_kv: Vec<Option<(Tensor, Tensor)>>,
}

impl SharedPrefix {
    /// Runs `ids` (the shared tokens) through `model` once, keeping what the remainders
    /// and the backward pass need. No graph is kept.
    pub fn compute(model: &Qwen3, ids: &[u32], mode: ForwardMode) -> CResult<Self> {
        let ids = Tensor::new(ids, model.device())?.unsqueeze(0)?;
        let layers = model.layers.len();
        let mut inputs = Vec::with_capacity(layers);
        let mut kv = Vec::with_capacity(layers);
        // A frozen view builds no graph (and lets attention run in tiles).
        let view = model.shared()?;
        let mut x = view.embed(&ids)?.detach();
        for l in 0..layers {
            inputs.push(x.clone());
            let mut slot = None;
            x = view.layer_forward(l, &x, 0, mode, Some(&mut slot))?.detach();
            let (k, v) = slot.ok_or_else(|| candle_core::Error::Msg("a layer kept no keys".into()))?;
            kv.push((k.detach(), v.detach()));
        }
        Ok(SharedPrefix { ids, mode, inputs, kv, grad_kv: vec![None; layers] })
    }

    /// Positions in the prefix (the remainders start at this position).
    pub fn len(&self) -> usize {
        self.inputs.first().and_then(|x| x.dim(1).ok()).unwrap_or(0)
    }

    /// Whether the prefix is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Layer `l`'s keys and values (detached).
    pub fn kv(&self, l: usize) -> (&Tensor, &Tensor) {
        let (k, v) = &self.kv[l];
        (k, v)
    }

    /// Layer `l`'s keys and values as fresh leaves: the remainders' backward pass gives
    /// their gradients, which go to [`SharedPrefix::add_grad`].
    pub fn leaves(&self, l: usize) -> CResult<(Var, Var)> {
        let (k, v) = &self.kv[l];
        Ok((Var::from_tensor(k)?, Var::from_tensor(v)?))
    }

    /// The cache slot `layer_forward` reads for a batch of `rows` remainders: the
    /// prefix's keys and values copied to every row (the gradient of the copy sums over
    /// the rows). A copy, not a zero-stride view: attention concatenates the slot with the
    /// rows' own keys, and candle's matmul wants that product's operand laid out plainly.
    pub fn slot(k: &Tensor, v: &Tensor, rows: usize) -> CResult<Option<(Tensor, Tensor)>> {
        let widen = |t: &Tensor| -> CResult<Tensor> {
            let (_, h, p, d) = t.dims4()?;
            t.broadcast_as((rows, h, p, d))?.contiguous()
        };
        Ok(Some((widen(k)?, widen(v)?)))
    }

    /// Adds the gradients layer `l`'s keys and values received in `store`.
    pub fn add_grad(&mut self, l: usize, (k, v): (&Var, &Var), store: &GradStore) -> CResult<()> {
        let (Some(gk), Some(gv)) = (store.get(k.as_tensor()), store.get(v.as_tensor())) else { return Ok(()) };
        self.grad_kv[l] = Some(match self.grad_kv[l].take() {
            Some((sk, sv)) => ((sk + gk)?, (sv + gv)?),
            None => (gk.clone(), gv.clone()),
        });
        Ok(())
    }

    /// Sends the summed gradients back through the prefix, one recomputed layer at a
    /// time from the top, handing each layer's gradient store to `collect`. The prefix's
    /// own output feeds nothing (no scored token is predicted from it), so a layer's
    /// gradient is what its keys and values received plus what its output passes down.
    pub fn backward(&mut self, model: &Qwen3, collect: &mut dyn FnMut(&GradStore) -> CResult<()>) -> CResult<()> {
        let mut upstream: Option<Tensor> = None;
        for l in (0..self.inputs.len()).rev() {
            let grad_kv = self.grad_kv[l].take();
            if grad_kv.is_none() && upstream.is_none() {
                continue;
            }
            let input = Var::from_tensor(&self.inputs[l])?;
            let p = self.inputs[l].dim(1)?;
            if model.tiles.tiled(1, model.cfg.num_attention_heads, p, p) {
                let from_above = Upstream { output: upstream.as_ref(), kv: grad_kv.as_ref() };
                let (_, grad) =
                    tiled_layer_backward(model, l, &input, (0, p), self.mode, None, from_above, &mut *collect)?;
                upstream = grad;
                continue;
            }
            let mut slot = None;
            let y = model.layer_forward(l, input.as_tensor(), 0, self.mode, Some(&mut slot))?;
            let mut terms = Vec::new();
            if let (Some((gk, gv)), Some((k, v))) = (&grad_kv, &slot) {
                terms.push((k * gk.detach())?.sum_all()?);
                terms.push((v * gv.detach())?.sum_all()?);
            }
            if let Some(g) = upstream.take() {
                terms.push((y * g.detach())?.sum_all()?);
            }
            let mut terms = terms.into_iter();
            let Some(mut surrogate) = terms.next() else { continue };
            for t in terms {
                surrogate = (surrogate + t)?;
            }
            let store = surrogate.backward()?;
            collect(&store)?;
            upstream = store.get(input.as_tensor()).cloned();
        }
        if let Some(g) = upstream {
            let e = model.embed(&self.ids)?;
            let surrogate = (e * g.detach())?.sum_all()?;
            collect(&surrogate.backward()?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shared_length_stops_before_the_first_scored_token_and_needs_two_sequences() {
        let long: Vec<u32> = (0..40).collect();
        let mut other = long.clone();
        other[30] = 99;
        let mask_late = [vec![0u8; 35], vec![1u8; 5]].concat();
        let mask_early = [vec![0u8; 25], vec![1u8; 15]].concat();
        // Common up to 30, scored from 35: the 30 common tokens.
        assert_eq!(shared_len(&[(&long, &mask_late), (&other, &mask_late)]), 30);
        // Scored from 25: token 25 is predicted from 24, so 24 are shared.
        assert_eq!(shared_len(&[(&long, &mask_early), (&other, &mask_late)]), 24);
        // One sequence alone shares nothing; a short common prompt is not worth a pass.
        assert_eq!(shared_len(&[(&long, &mask_late)]), 0);
        let mut early = long.clone();
        early[10] = 99;
        assert_eq!(shared_len(&[(&long, &mask_late), (&early, &mask_late)]), 0);
        // Identical unscored sequences keep one token each.
        let none = vec![0u8; 40];
        assert_eq!(shared_len(&[(&long, &none), (&long, &none)]), 39);
    }
}
