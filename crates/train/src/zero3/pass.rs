//! The passes of a sharded model: each unit gathered when the pass reaches it and dropped
//! after, and (backward) its gradient reduce-scattered as soon as it is complete.
//!
//! A rank with nothing to compute in a round (fewer micro-batches than another rank) runs
//! the same pass as a phantom (`None` for its input): it takes part in every gather and
//! reduce-scatter (contributing zeros) and computes nothing, so the collectives of all
//! ranks pair up. The backward pass always recomputes: whole layers are never kept for a
//! graph, which is the point of sharding them.

use std::collections::HashMap;

use candle_core::backprop::GradStore;
use candle_core::{Tensor, Var};

use super::Zero3;
use crate::backward::GradSink;
use crate::dist::Collective;
use crate::error::{TensorContext, TrainError};
use crate::model::layer_backward::{tiled_layer_backward, Upstream};
use crate::model::{token_logprobs, ForwardMode, Qwen3, TokenBatch};

/// The loss of a pass from the final hidden states, with the model whose head weights are in place.
pub type Head<'a> = dyn Fn(&Qwen3, &Tensor) -> candle_core::Result<Tensor> + 'a;

fn zero3_of(model: &Qwen3) -> Result<&Zero3, TrainError> {
    model.zero3.as_deref().ok_or_else(|| TrainError::Other("a ZeRO-3 pass on a model that is not sharded".into()))
}

/// Each layer's input (kept for the backward pass when `keep`) and the last layer's output,
/// for `ids` (`None`: a phantom pass). No gradient graph.
fn forward_layers(
    model: &Qwen3,
    ids: Option<&Tensor>,
    mode: ForwardMode,
    keep: bool,
    world: &dyn Collective,
) -> Result<(Vec<Tensor>, Option<Tensor>), TrainError> {
    let z = zero3_of(model)?;
    let embed = z.gather(model, &[super::EMBED], false, world)?;
    let mut x = match ids {
        Some(ids) => Some(embed.model.embed(ids).ctx("embedding")?),
        None => None,
    };
    drop(embed);
    let mut inputs = Vec::new();
    for l in 0..model.layers.len() {
        let layer = z.gather(model, &[Zero3::layer_unit(l)], false, world)?;
        if let Some(input) = x.take() {
            if keep {
                inputs.push(input.clone());
            }
            x = Some(layer.model.layer_forward(l, &input, 0, mode, None).ctx("the forward pass")?.detach());
        }
    }
    Ok((inputs, x))
}

/// Log-probabilities of `batch`'s scored tokens (and their entropies) under a sharded
/// model, no gradient kept; `None` for a phantom pass (and then `None` back).
pub fn token_logprobs_sharded(
    model: &Qwen3,
    batch: Option<&TokenBatch>,
    mode: ForwardMode,
    chunk: usize,
    world: &dyn Collective,
) -> Result<Option<Tensor>, TrainError> {
    let z = zero3_of(model)?;
    let (_, x) = forward_layers(model, batch.map(|b| &b.ids), mode, false, world)?;
    let head = z.gather(model, &z.head_units(), false, world)?;
    match (x, batch) {
        (Some(x), Some(batch)) => {
            let hidden = head.model.final_norm(&x).ctx("the final norm")?;
            let (logp, _) = token_logprobs(&head.model, &hidden, batch, chunk).ctx("scoring tokens")?;
            Ok(Some(logp.detach()))
        }
        _ => Ok(None),
    }
}

/// The gradients `store` holds for the trainable weights of `gathered`, by name.
fn named_grads(gathered: &Qwen3, grads: Vec<Option<Tensor>>) -> HashMap<String, Tensor> {
    gathered.trainable().into_iter().zip(grads).filter_map(|((name, _), g)| g.map(|g| (name, g))).collect()
}

/// Adds what `store` holds for `gathered`'s trainable weights into `slots`.
fn sink_add(gathered: &Qwen3, slots: &mut [Option<Tensor>], store: &GradStore) -> Result<(), TrainError> {
    GradSink::new(gathered, slots)?.add(store).ctx("accumulating gradients")
}

/// The backward pass of `head(final hidden states of ids)` through a sharded model, with
/// every unit's gradient reduce-scattered into this rank's chunk of the sum; `None` for a
/// phantom pass. Returns the loss (0 for a phantom).
pub fn backward_sharded(
    model: &Qwen3,
    ids: Option<&Tensor>,
    mode: ForwardMode,
    head: &Head<'_>,
    world: &dyn Collective,
) -> Result<f64, TrainError> {
    let z = zero3_of(model)?;
    let (inputs, top) = forward_layers(model, ids, mode, true, world)?;
    let (offset, t) = (0, ids.map_or(Ok(0), |ids| ids.dim(1)).ctx("reading a batch")?);
    let rows = ids.map_or(Ok(0), |ids| ids.dim(0)).ctx("reading a batch")?;

    // The head: the final norm, the output projection and the loss.
    let gathered = z.gather(model, &z.head_units(), true, world)?;
    let mut value = 0.0;
    let mut upstream = None;
    let mut grads = HashMap::new();
    if let Some(x) = top {
        let top = Var::from_tensor(&x).ctx("recomputation")?;
        let hidden = gathered.model.final_norm(top.as_tensor()).ctx("the final norm")?;
        let loss = head(&gathered.model, &hidden).ctx("the loss")?;
        value = f64::from(loss.to_dtype(candle_core::DType::F32)?.to_scalar::<f32>()?);
        let store = loss.backward().ctx("the backward pass")?;
        let mut slots = vec![None; gathered.model.trainable().len()];
        sink_add(&gathered.model, &mut slots, &store)?;
        grads = named_grads(&gathered.model, slots);
        upstream = store.get(top.as_tensor()).cloned();
    }
    for u in z.head_units() {
        z.reduce_grads(u, &grads, world)?;
    }
    drop((gathered, grads));

    // The layers, last first, each recomputed from its kept input.
    let tiled = model.tiles.tiled(rows, model.cfg.num_attention_heads, t, offset + t);
    for l in (0..model.layers.len()).rev() {
        let gathered = z.gather(model, &[Zero3::layer_unit(l)], true, world)?;
        let mut slots = vec![None; gathered.model.trainable().len()];
        if let (Some(g), Some(input)) = (upstream.take(), inputs.get(l)) {
            let input = Var::from_tensor(input).ctx("recomputation")?;
            let m = &gathered.model;
            if tiled {
                let from_above = Upstream { output: Some(&g), kv: None };
                let mut sink = GradSink::new(m, &mut slots)?;
                let mut collect = |store: &GradStore| sink.add(store);
                let (_, grad) = tiled_layer_backward(m, l, &input, (offset, t), mode, None, from_above, &mut collect)
                    .ctx("recomputing a layer in tiles")?;
                upstream = grad;
            } else {
                let y = m.layer_forward(l, input.as_tensor(), offset, mode, None).ctx("recomputing a layer")?;
                let surrogate = (y * g.detach()).ctx("recomputation")?.sum_all().ctx("recomputation")?;
                let store = surrogate.backward().ctx("the backward pass")?;
                sink_add(m, &mut slots, &store)?;
                upstream = store.get(input.as_tensor()).cloned();
            }
        }
        let grads = named_grads(&gathered.model, slots);
        z.reduce_grads(Zero3::layer_unit(l), &grads, world)?;
    }

    // The embedding.
    let gathered = z.gather(model, &[super::EMBED], true, world)?;
    let mut grads = HashMap::new();
    if let (Some(g), Some(ids)) = (upstream, ids) {
        let e = gathered.model.embed(ids).ctx("embedding")?;
        let surrogate = (e * g.detach()).ctx("recomputation")?.sum_all().ctx("recomputation")?;
        let store = surrogate.backward().ctx("the backward pass")?;
        let mut slots = vec![None; gathered.model.trainable().len()];
        sink_add(&gathered.model, &mut slots, &store)?;
        grads = named_grads(&gathered.model, slots);
    }
    z.reduce_grads(super::EMBED, &grads, world)?;
    Ok(value)
}

/// Rounds of micro-batches every rank runs when `n` micro-batches are spread over `size`
/// ranks in contiguous runs (the most any rank has); the others run phantom passes.
pub fn rounds(n: usize, size: usize) -> usize {
    n.div_ceil(size.max(1))
}
