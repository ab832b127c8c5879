//! Log-probabilities of given tokens, computed a chunk of positions at a time so that
//! the full positions × vocabulary logits never exist at once, and no chunk keeps its
//! logits for the backward pass (see [`token_logprobs`]).

use candle_core::backend::{BackendDevice, BackendStorage};
use candle_core::{CpuStorage, CudaStorage, CustomOp2, DType, Device, Layout, MetalStorage, Shape, Tensor, D};

use super::qwen3::Qwen3;

type CResult<T> = candle_core::Result<T>;

/// Logits rows computed per chunk (1,024 positions × 151,936 vocabulary × 4 bytes is 0.6 GB).
pub const DEFAULT_CHUNK: usize = 1024;

/// Padded token ids of several sequences and the positions whose next token is scored.
#[derive(Debug, Clone)]
pub struct TokenBatch {
    /// B×T u32 ids, right-padded.
    pub ids: Tensor,
    /// Flat indices (b·T + t) of the hidden states that predict a scored token.
    pub rows: Tensor,
    /// The scored tokens, aligned with `rows`.
    pub targets: Tensor,
    /// For each scored token, the sequence it belongs to.
    pub seq_of_token: Vec<usize>,
}

impl TokenBatch {
    /// Builds a batch; token `t` of sequence `b` is scored when `mask[b][t]` is set and `t > 0`.
    pub fn new(seqs: &[(&[u32], &[u8])], pad: u32, device: &Device) -> CResult<TokenBatch> {
        let t_max = seqs.iter().map(|(ids, _)| ids.len()).max().unwrap_or(1).max(1);
        let mut ids = Vec::with_capacity(seqs.len() * t_max);
        let (mut rows, mut targets, mut seq_of_token) = (Vec::new(), Vec::new(), Vec::new());
        for (b, (seq, mask)) in seqs.iter().enumerate() {
            ids.extend_from_slice(seq);
            ids.extend(std::iter::repeat_n(pad, t_max - seq.len()));
            for t in 1..seq.len() {
                if mask.get(t).copied().unwrap_or(0) != 0 {
                    rows.push((b * t_max + t - 1) as u32);
                    targets.push(seq[t]);
                    seq_of_token.push(b);
                }
            }
        }
        let n = rows.len();
        Ok(TokenBatch {
            ids: Tensor::from_vec(ids, (seqs.len().max(1), t_max), device)?,
            rows: Tensor::from_vec(rows, n, device)?,
            targets: Tensor::from_vec(targets, n, device)?,
            seq_of_token,
        })
    }

    /// Number of scored tokens.
    pub fn len(&self) -> usize {
        self.seq_of_token.len()
    }

    /// Whether no token is scored.
    pub fn is_empty(&self) -> bool {
        self.seq_of_token.is_empty()
    }
}

/// Log-probabilities (f32, differentiable) and entropies (plain numbers) of the scored
/// tokens, given final hidden states (B×T×H, after the final norm).
///
/// Every chunk's values are computed without a graph and its logits freed at once, so
/// that memory does not grow with the number of chunks. A frozen head (LoRA): a token's
/// log-prob depends on its hidden row alone, with gradient `W[target] − softmax·W`
/// whatever the loss, formed here with the values ([`frozen_head_chunk`]); two rows per
/// scored token wait for the backward pass. A trainable head: the backward pass
/// recomputes the chunk's logits from its rows ([`HeadChunk`]).
pub fn token_logprobs(model: &Qwen3, hidden: &Tensor, batch: &TokenBatch, chunk: usize) -> CResult<(Tensor, Vec<f32>)> {
    let (b, t, h) = hidden.dims3()?;
    let flat = hidden.reshape((b * t, h))?;
    let head = model.head_weight();
    let frozen = model.head_is_frozen() && super::frozen::supported(head.dtype());
    let n = batch.len();
    let chunk = chunk.max(1);
    let mut logps = Vec::new();
    let mut entropy = Vec::with_capacity(n);
    let mut start = 0;
    while start < n {
        let len = chunk.min(n - start);
        let rows = flat.index_select(&batch.rows.narrow(0, start, len)?, 0)?;
        let targets = batch.targets.narrow(0, start, len)?;
        let (logp, ent) = if frozen {
            frozen_head_chunk(&rows, head, &targets)?
        } else {
            trainable_head_chunk(&rows, head, &targets)?
        };
        logps.push(logp);
        entropy.extend(ent);
        start += len;
    }
    let logp = if logps.is_empty() { Tensor::zeros(0, DType::F32, hidden.device())? } else { Tensor::cat(&logps, 0)? };
    Ok((logp, entropy))
}

/// Half precision widened to f32 for the softmax (the narrow copy is dropped here).
fn widen(logits: Tensor) -> CResult<Tensor> {
    if matches!(logits.dtype(), DType::BF16 | DType::F16) {
        logits.to_dtype(DType::F32)
    } else {
        Ok(logits)
    }
}

/// From a chunk's logits (N×V, no graph): the targets' log-probs, the entropies and the
/// softmax (f32, or f64 for f64 logits). At most three N×V f32 tensors exist at once.
fn log_softmax_parts(logits: Tensor, targets: &Tensor) -> CResult<(Tensor, Vec<f32>, Tensor)> {
    if super::fused::applies(&logits) {
        let out = super::fused::target_logprobs(&logits, targets.to_vec1::<u32>()?)?;
        let logp = out.narrow(1, 0, 1)?.squeeze(1)?;
        let entropy = out.narrow(1, 1, 1)?.squeeze(1)?.to_vec1::<f32>()?;
        let p = logits.broadcast_sub(&out.narrow(1, 2, 1)?)?.exp()?;
        return Ok((logp, entropy, p));
    }
    let logits = widen(logits)?;
    let m = logits.max_keepdim(D::Minus1)?;
    let lse = (logits.broadcast_sub(&m)?.exp()?.sum_keepdim(D::Minus1)?.log()? + &m)?;
    let logp_all = logits.broadcast_sub(&lse)?;
    drop(logits);
    let logp = logp_all.gather(&targets.unsqueeze(1)?, 1)?.squeeze(1)?;
    let p = logp_all.exp()?;
    let entropy = (&p * &logp_all)?.sum(D::Minus1)?.neg()?.to_dtype(DType::F32)?.to_vec1::<f32>()?;
    Ok((logp, entropy, p))
}

/// One chunk under a frozen head W: the values without a graph, then `logp + (s − s)`
/// with `s = Σ rows ⊙ g` per row, where `g = W[target] − p·W` is the log-prob's gradient
/// with respect to its row. The sum is the value exactly (`s − s` is 0) and passes `g`
/// back to each row; the graph keeps N×H tensors (rows, g, their product), no logits.
fn frozen_head_chunk(rows: &Tensor, head: &Tensor, targets: &Tensor) -> CResult<(Tensor, Vec<f32>)> {
    let head = head.detach();
    let (logp, entropy, p) = log_softmax_parts(super::frozen::frozen_matmul(&rows.detach(), &head)?, targets)?;
    // Scoring without a gradient (old and reference log-probs) stops here.
    if !rows.track_op() {
        return Ok((logp, entropy));
    }
    let pw = p.to_dtype(head.dtype())?.matmul(&head)?;
    drop(p);
    let grad = (head.index_select(targets, 0)? - pw)?.to_dtype(rows.dtype())?;
    let s = (rows * grad)?.sum(D::Minus1)?.to_dtype(logp.dtype())?;
    let zero = (&s - s.detach())?;
    Ok(((logp + zero)?, entropy))
}

/// One chunk under a trainable head: the values without a graph, plus the zeros of a
/// [`HeadChunk`] that carry both gradients; the graph keeps the rows only.
fn trainable_head_chunk(rows: &Tensor, head: &Tensor, targets: &Tensor) -> CResult<(Tensor, Vec<f32>)> {
    let logits = super::frozen::frozen_matmul(&rows.detach(), &head.detach())?;
    let (logp, entropy, _) = log_softmax_parts(logits, targets)?;
    if !rows.track_op() && !head.track_op() {
        return Ok((logp, entropy));
    }
    let carrier = rows.apply_op2(head, HeadChunk { targets: targets.clone() })?.to_dtype(logp.dtype())?;
    Ok(((logp + carrier)?, entropy))
}

/// N zeros whose backward pass recomputes the chunk's logits from its rows (N×H) and the
/// head (V×H) and returns the gradients of the targets' log-probs, `g·(onehot − p)·W`
/// for the rows and its transpose product for the head: the chunk's logits exist only
/// while its own gradient is formed (recomputation, as `recompute` does for layers).
struct HeadChunk {
    targets: Tensor,
}

impl HeadChunk {
    /// The zeros, on whichever backend holds the rows.
    fn zeros<S>(rows: &S, layout: &Layout) -> CResult<(S, Shape)>
    where
        S: BackendStorage,
        S::Device: BackendDevice<Storage = S>,
    {
        let shape = Shape::from(layout.dims().first().copied().unwrap_or(0));
        Ok((rows.device().zeros_impl(&shape, rows.dtype())?, shape))
    }
}

impl CustomOp2 for HeadChunk {
    fn name(&self) -> &'static str {
        "head-chunk"
    }

    fn cpu_fwd(&self, s1: &CpuStorage, l1: &Layout, _: &CpuStorage, _: &Layout) -> CResult<(CpuStorage, Shape)> {
        Self::zeros(s1, l1)
    }

    fn cuda_fwd(&self, s1: &CudaStorage, l1: &Layout, _: &CudaStorage, _: &Layout) -> CResult<(CudaStorage, Shape)> {
        Self::zeros(s1, l1)
    }

    fn metal_fwd(
        &self,
        s1: &MetalStorage,
        l1: &Layout,
        _: &MetalStorage,
        _: &Layout,
    ) -> CResult<(MetalStorage, Shape)> {
        Self::zeros(s1, l1)
    }

    fn bwd(
        &self,
        rows: &Tensor,
        head: &Tensor,
        _res: &Tensor,
        g: &Tensor,
    ) -> CResult<(Option<Tensor>, Option<Tensor>)> {
        let (rows, head) = (rows.detach(), head.detach());
        let (_, _, p) = log_softmax_parts(super::frozen::frozen_matmul(&rows, &head)?, &self.targets)?;
        let g = g.to_dtype(p.dtype())?.unsqueeze(1)?;
        let minus = p.broadcast_mul(&g.neg()?)?;
        drop(p);
        // d logits = g·(onehot(target) − p): −g·p, plus g at each row's target.
        let d = minus.scatter_add(&self.targets.unsqueeze(1)?, &g, 1)?;
        drop(minus);
        let d = d.to_dtype(head.dtype())?;
        let d_head = d.t()?.matmul(&rows.to_dtype(head.dtype())?)?;
        Ok((Some(d.matmul(&head)?.to_dtype(rows.dtype())?), Some(d_head)))
    }
}
