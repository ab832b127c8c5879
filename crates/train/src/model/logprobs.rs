//! Log-probabilities of given tokens, computed a chunk of positions at a time so that
//! the full positions × vocabulary logits never exist at once.

use candle_core::{DType, Device, Tensor, D};

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
        let logits = if frozen { super::frozen::frozen_matmul(&rows, head)? } else { rows.matmul(&head.t()?)? };
        if super::fused::applies(&logits) {
            let targets = batch.targets.narrow(0, start, len)?.to_vec1::<u32>()?;
            let out = super::fused::target_logprobs(&logits, targets)?;
            logps.push(out.narrow(1, 0, 1)?.squeeze(1)?);
            entropy.extend(out.narrow(1, 1, 1)?.squeeze(1)?.detach().to_vec1::<f32>()?);
            start += len;
            continue;
        }
        // Half precision is widened for the softmax; f32 and f64 stay as they are.
        let logits =
            if matches!(logits.dtype(), DType::BF16 | DType::F16) { logits.to_dtype(DType::F32)? } else { logits };
        let m = logits.max_keepdim(D::Minus1)?.detach();
        let lse = (logits.broadcast_sub(&m)?.exp()?.sum_keepdim(D::Minus1)?.log()? + &m)?;
        let idx = batch.targets.narrow(0, start, len)?.unsqueeze(1)?;
        let target = logits.gather(&idx, 1)?;
        logps.push((target - &lse)?.squeeze(1)?);
        let logp_all = logits.detach().broadcast_sub(&lse.detach())?;
        let ent = (logp_all.exp()? * &logp_all)?.sum(D::Minus1)?.neg()?;
        entropy.extend(ent.to_dtype(DType::F32)?.to_vec1::<f32>()?);
        start += len;
    }
    let logp = if logps.is_empty() { Tensor::zeros(0, DType::F32, hidden.device())? } else { Tensor::cat(&logps, 0)? };
    Ok((logp, entropy))
}
