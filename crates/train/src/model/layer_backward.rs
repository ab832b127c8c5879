//! One recomputed layer's backward pass with attention in tiles, shared by the backward
//! pass of the sequences and that of a shared prefix.
//!
//! The layer is cut at the attention. The part after it (output projection, residual,
//! MLP) runs under autograd from the attention's output as a leaf; the tiled backward
//! ([`super::attention::backward`]) turns that leaf's gradient into the gradients of the
//! queries, keys and values; the part before it (norm, projections, RoPE, the cached keys
//! and values) runs under autograd again with those gradients. No layer holds more than a
//! few tiles of scores.

use candle_core::backprop::GradStore;
use candle_core::{Result, Tensor, Var};

use super::{attention, ForwardMode, Qwen3};

/// What flows into a layer from above: the gradient of its output, and of its own new
/// keys and values (a shared prefix's, from the sequences that attend to them).
pub struct Upstream<'a> {
    /// Gradient of the layer's output.
    pub output: Option<&'a Tensor>,
    /// Gradients of the keys and values the layer computes (without a cache before them).
    pub kv: Option<&'a (Tensor, Tensor)>,
}

/// Layer `l`'s backward pass for `input` (t positions after `offset`, after what `cache`
/// holds). Every gradient store goes to `collect` (the parameters', and the cache's
/// leaves' in the second store); returns the second store and the input's gradient.
#[allow(clippy::too_many_arguments)]
pub fn tiled_layer_backward(
    model: &Qwen3,
    l: usize,
    input: &Var,
    (offset, t): (usize, usize),
    mode: ForwardMode,
    cache: Option<&mut Option<(Tensor, Tensor)>>,
    upstream: Upstream<'_>,
    collect: &mut dyn FnMut(&GradStore) -> Result<()>,
) -> Result<(Option<GradStore>, Option<Tensor>)> {
    let (q, k, v) = model.attention_inputs(l, input.as_tensor(), offset, mode, cache)?;
    let mut residual = None;
    let mut dqkv = None;
    if let Some(g) = upstream.output {
        let attended = model.attend_tiled(&q, &k, &v, t)?;
        let out = Var::from_tensor(&attended.out)?;
        let y = model.attention_output(l, input.as_tensor(), out.as_tensor(), mode)?;
        let after = (y * g.detach())?.sum_all()?.backward()?;
        collect(&after)?;
        residual = after.get(input.as_tensor()).cloned();
        let d_out = after
            .get(out.as_tensor())
            .cloned()
            .ok_or_else(|| candle_core::Error::Msg("the attention's output got no gradient".into()))?;
        drop(after);
        let scale = model.attention_scale();
        dqkv = Some(attention::backward(
            &q.detach(),
            &k.detach(),
            &v.detach(),
            &attended,
            &d_out,
            t,
            scale,
            &model.tiles,
        )?);
    }
    let (dq, mut dk, mut dv) = match dqkv {
        Some((dq, dk, dv)) => (Some(dq), Some(dk), Some(dv)),
        None => (None, None, None),
    };
    if let Some((gk, gv)) = upstream.kv {
        dk = Some(match dk {
            Some(d) => (d + gk)?,
            None => gk.clone(),
        });
        dv = Some(match dv {
            Some(d) => (d + gv)?,
            None => gv.clone(),
        });
    }
    let mut terms = Vec::new();
    for (x, d) in [(&q, dq), (&k, dk), (&v, dv)] {
        if let Some(d) = d {
            terms.push((x * d.detach())?.sum_all()?);
        }
    }
    let mut terms = terms.into_iter();
    let Some(mut surrogate) = terms.next() else { return Ok((None, residual)) };
    for term in terms {
        surrogate = (surrogate + term)?;
    }
    let before = surrogate.backward()?;
    collect(&before)?;
    let through = before.get(input.as_tensor()).cloned();
    let grad = match (residual, through) {
        (Some(a), Some(b)) => Some((a + b)?),
        (a, b) => a.or(b),
    };
    Ok((Some(before), grad))
}
