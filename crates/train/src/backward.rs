//! The backward pass: plain, or with activation recomputation layer by layer, optionally
//! after a [`SharedPrefix`] whose keys and values the sequences attend to. Recomputed
//! layers whose attention scores would be large run attention in tiles, forward and
//! backward ([`crate::model::attention`]), so no layer ever holds all its scores.

use std::collections::HashMap;

use candle_core::backprop::GradStore;
use candle_core::{DType, Tensor, TensorId, Var};

use super::error::{TensorContext, TrainError};
use super::model::layer_backward::{tiled_layer_backward, Upstream};
use super::model::{ForwardMode, Qwen3, SharedPrefix};

/// Adds gradient stores into one gradient slot per trainable variable.
pub struct GradSink<'a> {
    vars: Vec<(String, Var)>,
    index: HashMap<TensorId, usize>,
    grads: &'a mut [Option<Tensor>],
}

impl<'a> GradSink<'a> {
    /// A sink for `model`'s trainable variables; `grads` is aligned with `model.trainable()`.
    pub fn new(model: &Qwen3, grads: &'a mut [Option<Tensor>]) -> Result<Self, TrainError> {
        let vars = model.trainable();
        if grads.len() != vars.len() {
            return Err(TrainError::Other(format!("{} gradient slots for {} variables", grads.len(), vars.len())));
        }
        let index = vars.iter().enumerate().map(|(i, (_, v))| (v.as_tensor().id(), i)).collect();
        Ok(GradSink { vars, index, grads })
    }

    /// Adds what `store` holds for the variables.
    pub fn add(&mut self, store: &GradStore) -> candle_core::Result<()> {
        for (_, v) in &self.vars {
            if let Some(g) = store.get(v.as_tensor()) {
                let i = self.index[&v.as_tensor().id()];
                self.grads[i] = Some(match self.grads[i].take() {
                    Some(prev) => (prev + g)?,
                    None => g.clone(),
                });
            }
        }
        Ok(())
    }
}

/// Computes the gradients of `head(final hidden states)` for every trainable variable,
/// aligned with `model.trainable()`. With `recompute`, only each layer's input is kept
/// in the forward pass; the backward pass recomputes one layer at a time and chains the
/// gradient through it (gradient checkpointing, written out because candle has none).
pub fn backward(
    model: &Qwen3,
    ids: &Tensor,
    mode: ForwardMode,
    recompute: bool,
    head: &dyn Fn(&Qwen3, &Tensor) -> candle_core::Result<Tensor>,
) -> Result<(f64, Vec<Option<Tensor>>), TrainError> {
    let mut grads: Vec<Option<Tensor>> = vec![None; model.trainable().len()];
    let value = backward_into(model, ids, mode, recompute, head, &mut grads, None)?;
    Ok((value, grads))
}

/// [`backward`], adding the gradients into `grads` (gradient accumulation over
/// micro-batches without a second set of whole gradients: with `recompute` only one
/// layer's gradients exist besides the sums). With `prefix`, `ids` are the tokens after
/// it: they attend to its keys and values, whose gradients are added into the prefix
/// (its own backward pass comes once, after every sequence that shares it). Returns the loss.
pub fn backward_into(
    model: &Qwen3,
    ids: &Tensor,
    mode: ForwardMode,
    recompute: bool,
    head: &dyn Fn(&Qwen3, &Tensor) -> candle_core::Result<Tensor>,
    grads: &mut [Option<Tensor>],
    mut prefix: Option<&mut SharedPrefix>,
) -> Result<f64, TrainError> {
    let mut sink = GradSink::new(model, grads)?;
    let rows = ids.dim(0).ctx("reading a batch")?;
    let offset = prefix.as_ref().map_or(0, |p| p.len());
    let layers = model.layers.len();
    let scalar =
        |loss: &Tensor| -> Result<f64, TrainError> { Ok(f64::from(loss.to_dtype(DType::F32)?.to_scalar::<f32>()?)) };
    if !recompute {
        let leaves = match prefix.as_deref() {
            Some(p) => (0..layers).map(|l| p.leaves(l)).collect::<candle_core::Result<Vec<_>>>().ctx("the prefix")?,
            None => Vec::new(),
        };
        let mut x = model.embed(ids).ctx("embedding")?;
        for l in 0..layers {
            let mut slot = match leaves.get(l) {
                Some((k, v)) => SharedPrefix::slot(k.as_tensor(), v.as_tensor(), rows).ctx("the prefix")?,
                None => None,
            };
            let cache = if leaves.is_empty() { None } else { Some(&mut slot) };
            x = model.layer_forward(l, &x, offset, mode, cache).ctx("the forward pass")?;
        }
        let hidden = model.final_norm(&x).ctx("the final norm")?;
        let loss = head(model, &hidden).ctx("the loss")?;
        let value = scalar(&loss)?;
        let store = loss.backward().ctx("the backward pass")?;
        sink.add(&store).ctx("accumulating gradients")?;
        if let Some(p) = prefix.as_deref_mut() {
            for (l, (k, v)) in leaves.iter().enumerate() {
                p.add_grad(l, (k, v), &store).ctx("the prefix")?;
            }
        }
        return Ok(value);
    }
    let mut inputs = Vec::with_capacity(layers);
    // The forward pass takes no gradient: a frozen view of the weights builds no graph
    // (and lets attention run in tiles).
    let view = model.shared().ctx("viewing the weights")?;
    let t = ids.dim(1).ctx("reading a batch")?;
    let tiled = model.tiles.tiled(rows, model.cfg.num_attention_heads, t, offset + t);
    let mut x = view.embed(ids).ctx("embedding")?.detach();
    for l in 0..layers {
        inputs.push(x.clone());
        // No gradient is taken in this pass: the prefix's own tensors serve.
        let mut slot = match prefix.as_deref() {
            Some(p) => {
                let (k, v) = p.kv(l);
                SharedPrefix::slot(k, v, rows).ctx("the prefix")?
            }
            None => None,
        };
        let cache = if prefix.is_some() { Some(&mut slot) } else { None };
        x = view.layer_forward(l, &x, offset, mode, cache).ctx("the forward pass")?.detach();
    }
    drop(view);
    let top = Var::from_tensor(&x).ctx("recomputation")?;
    let hidden = model.final_norm(top.as_tensor()).ctx("the final norm")?;
    let loss = head(model, &hidden).ctx("the loss")?;
    let value = scalar(&loss)?;
    let store = loss.backward().ctx("the backward pass")?;
    sink.add(&store).ctx("accumulating gradients")?;
    let mut upstream = store.get(top.as_tensor()).cloned();
    // The output head's gradient is in the sums now; its store need not live on.
    drop(store);
    for l in (0..layers).rev() {
        let Some(g) = upstream.take() else { break };
        let input = Var::from_tensor(&inputs[l]).ctx("recomputation")?;
        let leaves = match prefix.as_deref() {
            Some(p) => Some(p.leaves(l).ctx("the prefix")?),
            None => None,
        };
        let mut slot = match &leaves {
            Some((k, v)) => SharedPrefix::slot(k.as_tensor(), v.as_tensor(), rows).ctx("the prefix")?,
            None => None,
        };
        let cache = if leaves.is_some() { Some(&mut slot) } else { None };
        if tiled {
            let from_above = Upstream { output: Some(&g), kv: None };
            let mut collect = |store: &GradStore| sink.add(store);
            let (store, grad) =
                tiled_layer_backward(model, l, &input, (offset, t), mode, cache, from_above, &mut collect)
                    .ctx("recomputing a layer in tiles")?;
            if let (Some(p), Some((k, v)), Some(store)) = (prefix.as_deref_mut(), &leaves, &store) {
                p.add_grad(l, (k, v), store).ctx("the prefix")?;
            }
            upstream = grad;
            continue;
        }
        let y = model.layer_forward(l, input.as_tensor(), offset, mode, cache).ctx("recomputing a layer")?;
        let surrogate = (y * g.detach()).ctx("recomputation")?.sum_all().ctx("recomputation")?;
        let store = surrogate.backward().ctx("the backward pass")?;
        sink.add(&store).ctx("accumulating gradients")?;
        if let (Some(p), Some((k, v))) = (prefix.as_deref_mut(), &leaves) {
            p.add_grad(l, (k, v), &store).ctx("the prefix")?;
        }
        upstream = store.get(input.as_tensor()).cloned();
    }
    if let Some(g) = upstream {
        let e = model.embed(ids).ctx("embedding")?;
        let surrogate = (e * g.detach()).ctx("recomputation")?.sum_all().ctx("recomputation")?;
        sink.add(&surrogate.backward().ctx("the backward pass")?).ctx("accumulating gradients")?;
    }
    Ok(value)
}

/// Sends what `prefix` gathered back through it, adding the gradients into `grads`.
pub fn prefix_backward(
    model: &Qwen3,
    prefix: &mut SharedPrefix,
    grads: &mut [Option<Tensor>],
) -> Result<(), TrainError> {
    let mut sink = GradSink::new(model, grads)?;
    prefix.backward(model, &mut |store| sink.add(store)).ctx("the shared prefix's backward pass")
}

/// Final hidden states of `ids` (no graph kept), after `prefix` when there is one.
pub fn hidden_after(
    model: &Qwen3,
    ids: &Tensor,
    mode: ForwardMode,
    prefix: Option<&SharedPrefix>,
) -> candle_core::Result<Tensor> {
    // No gradient is taken: a frozen view of the weights builds no graph.
    let view = model.shared()?;
    let model = &view;
    let Some(p) = prefix else { return model.hidden(ids, mode) };
    let rows = ids.dim(0)?;
    let mut x = model.embed(ids)?;
    for l in 0..model.layers.len() {
        let (k, v) = p.kv(l);
        let mut slot = SharedPrefix::slot(k, v, rows)?;
        x = model.layer_forward(l, &x, p.len(), mode, Some(&mut slot))?;
    }
    model.final_norm(&x)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::tests::write_random_qwen3;
    use crate::model::{shared_len, token_logprobs, TokenBatch, TrainMode};
    use candle_core::Device;
    use rand::{Rng, SeedableRng};

    /// Three sequences sharing a 20-token prompt, then their own replies (scored) and
    /// tool output (not scored).
    fn sequences() -> Vec<(Vec<u32>, Vec<u8>)> {
        let prompt: Vec<u32> = (0..20).map(|i| (i * 7 + 3) % 13).collect();
        let tails: [&[(u32, u8)]; 3] = [
            &[(4, 0), (5, 1), (6, 1), (2, 1), (9, 0), (9, 0), (1, 1), (3, 1)],
            &[(7, 0), (8, 1), (8, 1)],
            &[(4, 0), (1, 1), (2, 1), (3, 1), (4, 1), (5, 0)],
        ];
        tails
            .iter()
            .map(|tail| {
                let mut ids = prompt.clone();
                let mut mask = vec![0u8; prompt.len()];
                ids.extend(tail.iter().map(|(t, _)| *t));
                mask.extend(tail.iter().map(|(_, m)| *m));
                (ids, mask)
            })
            .collect()
    }

    fn model(mode: &TrainMode, dir: &std::path::Path) -> Qwen3 {
        let m = Qwen3::load(dir, mode, DType::F32, &Device::Cpu, 3).unwrap();
        // B starts at zero, which leaves A without a gradient: give both values.
        let mut rng = rand::rngs::StdRng::seed_from_u64(17);
        for (_, v) in m.trainable() {
            let n = v.as_tensor().elem_count();
            let vals: Vec<f32> = (0..n).map(|_| rng.gen_range(-0.3f32..0.3)).collect();
            v.set(&Tensor::from_vec(vals, v.as_tensor().shape(), &Device::Cpu).unwrap()).unwrap();
        }
        m
    }

    fn flat(grads: &[Option<Tensor>]) -> Vec<f32> {
        grads.iter().flat_map(|g| g.as_ref().unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap()).collect()
    }

    /// The gradient of the summed log-probs of every sequence, computed whole in one batch.
    fn whole(m: &Qwen3, seqs: &[(Vec<u32>, Vec<u8>)], recompute: bool) -> (f64, Vec<f32>) {
        let refs: Vec<(&[u32], &[u8])> = seqs.iter().map(|(i, m)| (i.as_slice(), m.as_slice())).collect();
        let batch = TokenBatch::new(&refs, 0, &Device::Cpu).unwrap();
        let head = |m: &Qwen3, h: &Tensor| token_logprobs(m, h, &batch, 5)?.0.sum_all()?.neg();
        let (loss, grads) = backward(m, &batch.ids, ForwardMode::default(), recompute, &head).unwrap();
        (loss, flat(&grads))
    }

    /// The same, `micro` sequences at a time after a shared prefix, then the prefix's backward.
    fn shared(m: &Qwen3, seqs: &[(Vec<u32>, Vec<u8>)], recompute: bool, micro: usize) -> (f64, Vec<f32>) {
        let refs: Vec<(&[u32], &[u8])> = seqs.iter().map(|(i, m)| (i.as_slice(), m.as_slice())).collect();
        let p = shared_len(&refs);
        assert_eq!(p, 20, "the prompt and the unscored token after it");
        let mut prefix = SharedPrefix::compute(m, &refs[0].0[..p], ForwardMode::default()).unwrap();
        let mut grads = vec![None; m.trainable().len()];
        let mut loss = 0.0;
        for group in refs.chunks(micro) {
            let rest: Vec<(&[u32], &[u8])> = group.iter().map(|(ids, mask)| (&ids[p..], &mask[p..])).collect();
            let batch = TokenBatch::new(&rest, 0, &Device::Cpu).unwrap();
            let head = |m: &Qwen3, h: &Tensor| token_logprobs(m, h, &batch, 5)?.0.sum_all()?.neg();
            loss +=
                backward_into(m, &batch.ids, ForwardMode::default(), recompute, &head, &mut grads, Some(&mut prefix))
                    .unwrap();
        }
        prefix_backward(m, &mut prefix, &mut grads).unwrap();
        (loss, flat(&grads))
    }

    fn assert_close(a: &[f32], b: &[f32], what: &str) {
        assert_eq!(a.len(), b.len());
        let norm = b.iter().map(|x| x * x).sum::<f32>().sqrt();
        let diff = a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum::<f32>().sqrt();
        assert!(norm > 1e-3, "{what}: the gradient is zero");
        assert!(diff <= 1e-5 * norm.max(1.0), "{what}: ‖Δ‖ = {diff} of ‖g‖ = {norm}");
    }

    /// The shared prefix's gradient is the sum over the sequences: the same as computing
    /// every sequence whole, for LoRA and full updates, with and without recomputation.
    #[test]
    fn a_shared_prefix_gives_the_gradient_of_the_whole_sequences() {
        let dir = tempfile::tempdir().unwrap();
        write_random_qwen3(dir.path(), 13, false, 21);
        let lora = crate::model::tests::lora(2);
        let seqs = sequences();
        for mode in [lora, TrainMode::Full] {
            let m = model(&mode, dir.path());
            for (recompute, micro) in [(false, 1), (true, 1), (false, 2), (true, 3)] {
                let (want_loss, want) = whole(&m, &seqs, recompute);
                let (got_loss, got) = shared(&m, &seqs, recompute, micro);
                let what = format!("{mode:?}, recompute {recompute}, {micro} sequence(s) at a time");
                assert!(
                    (want_loss - got_loss).abs() < 1e-4 * want_loss.abs().max(1.0),
                    "{what}: loss {want_loss} vs {got_loss}"
                );
                assert_close(&got, &want, &what);
            }
        }
    }

    /// Recomputed layers with attention in tiles (forward and backward) give the gradient
    /// that autograd takes through every score at once, alone and after a shared prefix.
    #[test]
    fn attention_in_tiles_gives_the_gradient_of_the_whole_score_matrix() {
        use crate::model::attention::Tiles;
        let dir = tempfile::tempdir().unwrap();
        write_random_qwen3(dir.path(), 13, false, 23);
        let lora = crate::model::tests::lora(2);
        let seqs = sequences();
        for mode in [lora, TrainMode::Full] {
            let (want_loss, want) = whole(&model(&mode, dir.path()), &seqs, false);
            let mut tiled = model(&mode, dir.path());
            // Tiles smaller than the sequences, crossing the diagonal: every path of the tiling runs.
            tiled.tiles = Tiles { queries: 3, keys: 4, materialise_up_to: 0 };
            let (got_loss, got) = whole(&tiled, &seqs, true);
            assert!((want_loss - got_loss).abs() < 1e-4 * want_loss.abs().max(1.0), "{want_loss} vs {got_loss}");
            assert_close(&got, &want, &format!("{mode:?} in tiles"));
            let (_, after_prefix) = shared(&tiled, &seqs, true, 2);
            assert_close(&after_prefix, &want, &format!("{mode:?} in tiles after a shared prefix"));
        }
    }

    #[test]
    fn hidden_states_after_a_prefix_match_the_whole_sequence() {
        let dir = tempfile::tempdir().unwrap();
        write_random_qwen3(dir.path(), 13, true, 22);
        let m = Qwen3::load(dir.path(), &TrainMode::Full, DType::F32, &Device::Cpu, 0).unwrap();
        let (ids, _) = &sequences()[0];
        let whole = m
            .hidden(&Tensor::new(ids.as_slice(), &Device::Cpu).unwrap().unsqueeze(0).unwrap(), ForwardMode::default())
            .unwrap();
        let prefix = SharedPrefix::compute(&m, &ids[..20], ForwardMode::default()).unwrap();
        let rest = Tensor::new(&ids[20..], &Device::Cpu).unwrap().unsqueeze(0).unwrap();
        let after = hidden_after(&m, &rest, ForwardMode::default(), Some(&prefix)).unwrap();
        let want = whole.narrow(1, 20, ids.len() - 20).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
        let got = after.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        let diff = want.iter().zip(&got).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
        assert!(diff < 1e-5, "hidden states differ by {diff}");
    }
}
