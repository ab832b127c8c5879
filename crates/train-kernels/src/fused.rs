//! Fused CPU kernels (f32) for the training hot path, each with its backward pass:
//! causal softmax of attention scores, RMSNorm, and the log-probability of target
//! tokens with the entropy. Written out, each is five to ten passes of single-threaded
//! elementwise ops over tensors as large as B×heads×T×T or tokens×vocabulary; fused, it
//! is one or two passes spread over rayon's threads. Other dtypes and devices keep the
//! composed ops (see `applies`), and the tests check both give the same values and
//! gradients.

use candle_core::{CpuStorage, CustomOp1, CustomOp2, DType, Layout, Result, Shape, Storage, Tensor};
use rayon::prelude::*;

/// Whether the fused kernels handle `t`: f32 on the CPU, unless [`crate::generic_only`].
pub fn applies(t: &Tensor) -> bool {
    t.dtype() == DType::F32 && t.device().is_cpu() && !crate::generic_only()
}

fn err(msg: impl Into<String>) -> candle_core::Error {
    candle_core::Error::Msg(msg.into())
}

/// The f32 elements of a contiguous CPU storage.
fn slice<'a>(storage: &'a CpuStorage, layout: &Layout, op: &str) -> Result<&'a [f32]> {
    let CpuStorage::F32(v) = storage else { return Err(err(format!("{op}: expects f32"))) };
    let (a, b) = layout.contiguous_offsets().ok_or_else(|| err(format!("{op}: expects a contiguous tensor")))?;
    Ok(&v[a..b])
}

/// Runs `f` on the f32 elements of `t` (made contiguous first) without copying them out.
fn with_data<R>(t: &Tensor, op: &str, f: impl FnOnce(&[f32]) -> Result<R>) -> Result<R> {
    let t = t.contiguous()?;
    let (storage, layout) = t.storage_and_layout();
    let Storage::Cpu(cpu) = &*storage else { return Err(err(format!("{op}: expects a CPU tensor"))) };
    f(slice(cpu, layout, op)?)
}

/// `softmax(scale·x)` over the last dimension of scores whose rows are queries over S
/// keys, where the queries are the last `queries` positions, repeated in blocks (one
/// block per head of a key/value group): row r is query i = r mod `queries`, at
/// position S − `queries` + i, and sees keys 0..=that position. Masked entries are 0.
pub fn causal_softmax(scores: &Tensor, scale: f64, queries: usize) -> Result<Tensor> {
    scores.contiguous()?.apply_op1(CausalSoftmax { scale: scale as f32, queries })
}

struct CausalSoftmax {
    scale: f32,
    queries: usize,
}

/// Visible keys of row `r` when the rows cycle through the last `t` of `s` positions.
fn visible(r: usize, t: usize, s: usize) -> usize {
    s - t + (r % t) + 1
}

impl CustomOp1 for CausalSoftmax {
    fn name(&self) -> &'static str {
        "causal-softmax"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        let x = slice(storage, layout, self.name())?;
        let dims = layout.dims();
        let t = self.queries;
        let s = match dims {
            [.., rows, s] if t > 0 && t <= *s && rows % t == 0 => *s,
            _ => return Err(err(format!("causal-softmax: scores {dims:?} for {t} queries"))),
        };
        let scale = self.scale;
        let mut out = vec![0f32; x.len()];
        out.par_chunks_mut(s).zip(x.par_chunks(s)).enumerate().for_each(|(r, (o, xr))| {
            let vis = visible(r, t, s);
            let m = xr[..vis].iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b)) * scale;
            let mut sum = 0f32;
            for (oj, &xj) in o[..vis].iter_mut().zip(&xr[..vis]) {
                *oj = (xj * scale - m).exp();
                sum += *oj;
            }
            let inv = 1.0 / sum;
            o[..vis].iter_mut().for_each(|v| *v *= inv);
        });
        Ok((CpuStorage::F32(out), layout.shape().clone()))
    }

    fn bwd(&self, _arg: &Tensor, res: &Tensor, grad_res: &Tensor) -> Result<Option<Tensor>> {
        let s = res.dim(candle_core::D::Minus1)?;
        let scale = self.scale;
        let dx = with_data(res, self.name(), |y| {
            with_data(grad_res, self.name(), |g| {
                let mut dx = vec![0f32; y.len()];
                dx.par_chunks_mut(s).zip(y.par_chunks(s).zip(g.par_chunks(s))).for_each(|(d, (yr, gr))| {
                    let dot: f32 = yr.iter().zip(gr).map(|(a, b)| a * b).sum();
                    for ((dj, &yj), &gj) in d.iter_mut().zip(yr).zip(gr) {
                        *dj = scale * yj * (gj - dot);
                    }
                });
                Ok(dx)
            })
        })?;
        Ok(Some(Tensor::from_vec(dx, res.shape(), res.device())?))
    }
}

/// RMSNorm over the last dimension: `x / sqrt(mean(x²) + eps) · w`.
pub fn rms_norm(x: &Tensor, weight: &Tensor, eps: f64) -> Result<Tensor> {
    x.contiguous()?.apply_op2(&weight.contiguous()?, RmsNorm { eps: eps as f32 })
}

/// Rows per partial sum of the weight's gradient.
const ROWS_PER_BLOCK: usize = 64;

struct RmsNorm {
    eps: f32,
}

impl RmsNorm {
    fn inv(&self, row: &[f32]) -> f32 {
        let ms = row.iter().map(|v| v * v).sum::<f32>() / row.len() as f32;
        1.0 / (ms + self.eps).sqrt()
    }
}

impl CustomOp2 for RmsNorm {
    fn name(&self) -> &'static str {
        "rms-norm"
    }

    fn cpu_fwd(&self, s1: &CpuStorage, l1: &Layout, s2: &CpuStorage, l2: &Layout) -> Result<(CpuStorage, Shape)> {
        let x = slice(s1, l1, self.name())?;
        let w = slice(s2, l2, self.name())?;
        let h = w.len();
        if h == 0 || l1.dims().last() != Some(&h) {
            return Err(err(format!("rms-norm: weight of {h} for input {:?}", l1.dims())));
        }
        let mut out = vec![0f32; x.len()];
        out.par_chunks_mut(h).zip(x.par_chunks(h)).for_each(|(o, xr)| {
            let inv = self.inv(xr);
            for ((oj, &xj), &wj) in o.iter_mut().zip(xr).zip(w) {
                *oj = xj * inv * wj;
            }
        });
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }

    fn bwd(&self, x: &Tensor, w: &Tensor, _res: &Tensor, g: &Tensor) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let h = w.elem_count();
        let want_dw = w.track_op();
        let (dx, dw) = with_data(x, self.name(), |x| {
            with_data(w, self.name(), |w| {
                with_data(g, self.name(), |g| {
                    let mut dx = vec![0f32; x.len()];
                    dx.par_chunks_mut(h).zip(x.par_chunks(h).zip(g.par_chunks(h))).for_each(|(d, (xr, gr))| {
                        let inv = self.inv(xr);
                        let dot: f32 = xr.iter().zip(gr).zip(w).map(|((a, b), c)| a * b * c).sum();
                        let k = inv * inv * inv * dot / h as f32;
                        for (((dj, &xj), &gj), &wj) in d.iter_mut().zip(xr).zip(gr).zip(w) {
                            *dj = inv * gj * wj - xj * k;
                        }
                    });
                    // Partial sums over fixed blocks of rows, added in order: the same
                    // result whatever the thread timing (resume must repeat a run exactly).
                    let dw = want_dw.then(|| {
                        let partials: Vec<Vec<f32>> = x
                            .par_chunks(h * ROWS_PER_BLOCK)
                            .zip(g.par_chunks(h * ROWS_PER_BLOCK))
                            .map(|(xb, gb)| {
                                let mut acc = vec![0f32; h];
                                for (xr, gr) in xb.chunks(h).zip(gb.chunks(h)) {
                                    let inv = self.inv(xr);
                                    for ((a, &xj), &gj) in acc.iter_mut().zip(xr).zip(gr) {
                                        *a += gj * xj * inv;
                                    }
                                }
                                acc
                            })
                            .collect();
                        let mut dw = vec![0f32; h];
                        for p in &partials {
                            dw.iter_mut().zip(p).for_each(|(a, b)| *a += b);
                        }
                        dw
                    });
                    Ok((dx, dw))
                })
            })
        })?;
        let dx = Tensor::from_vec(dx, x.shape(), x.device())?;
        let dw = match dw {
            Some(v) => Some(Tensor::from_vec(v, w.shape(), w.device())?),
            None => None,
        };
        Ok((Some(dx), dw))
    }
}

/// For N×V logits and N target ids: an N×3 tensor of [log p(target), entropy,
/// log-sum-exp] per row. Only the first column carries a gradient.
pub fn target_logprobs(logits: &Tensor, targets: Vec<u32>) -> Result<Tensor> {
    logits.contiguous()?.apply_op1(TargetLogprobs { targets })
}

struct TargetLogprobs {
    targets: Vec<u32>,
}

impl CustomOp1 for TargetLogprobs {
    fn name(&self) -> &'static str {
        "target-logprobs"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        let x = slice(storage, layout, self.name())?;
        let (n, v) = match layout.dims() {
            [n, v] if *n == self.targets.len() && *v > 0 => (*n, *v),
            d => return Err(err(format!("target-logprobs: logits {d:?} for {} targets", self.targets.len()))),
        };
        if let Some(&bad) = self.targets.iter().find(|&&t| t as usize >= v) {
            return Err(err(format!("target-logprobs: target {bad} outside a vocabulary of {v}")));
        }
        let mut out = vec![0f32; n * 3];
        out.par_chunks_mut(3).zip(x.par_chunks(v)).zip(self.targets.par_iter()).for_each(|((o, xr), &t)| {
            let m = xr.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
            let (mut sum, mut weighted) = (0f32, 0f32);
            for &xj in xr {
                let e = (xj - m).exp();
                sum += e;
                weighted += e * xj;
            }
            let lse = m + sum.ln();
            o[0] = xr[t as usize] - lse;
            o[1] = lse - weighted / sum;
            o[2] = lse;
        });
        Ok((CpuStorage::F32(out), Shape::from((n, 3))))
    }

    fn bwd(&self, arg: &Tensor, res: &Tensor, grad_res: &Tensor) -> Result<Option<Tensor>> {
        let v = arg.dim(1)?;
        let dx = with_data(arg, self.name(), |x| {
            with_data(res, self.name(), |r| {
                with_data(grad_res, self.name(), |g| {
                    let mut dx = vec![0f32; x.len()];
                    dx.par_chunks_mut(v).zip(x.par_chunks(v)).enumerate().for_each(|(i, (d, xr))| {
                        let (gi, lse) = (g[3 * i], r[3 * i + 2]);
                        for (dj, &xj) in d.iter_mut().zip(xr) {
                            *dj = -gi * (xj - lse).exp();
                        }
                        d[self.targets[i] as usize] += gi;
                    });
                    Ok(dx)
                })
            })
        })?;
        Ok(Some(Tensor::from_vec(dx, arg.shape(), arg.device())?))
    }
}

/// Rotary embedding of B×T×heads×D input (Qwen3's non-interleaved halves) with T×D
/// `cos`/`sin` tables, returned as B×heads×T×D: the rotation and the move of the heads
/// in front of the positions are one pass.
pub fn rope_heads(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
    let (cos, sin) = (cos.contiguous()?, sin.contiguous()?);
    x.contiguous()?.apply_op1(RopeHeads { cos, sin })
}

struct RopeHeads {
    cos: Tensor,
    sin: Tensor,
}

impl RopeHeads {
    /// Runs `f(input row, output row, cos row, sin row)` for every (b, t, h), reading
    /// B×T×H×D rows and writing B×H×T×D rows (or the reverse with `to_heads` false).
    fn map(
        &self,
        src: &[f32],
        dims: (usize, usize, usize, usize),
        to_heads: bool,
        f: impl Fn(&[f32], &mut [f32], &[f32], &[f32]) + Sync,
    ) -> Result<Vec<f32>> {
        let (_, t, h, d) = dims;
        with_data(&self.cos, "rope", |cos| {
            with_data(&self.sin, "rope", |sin| {
                if cos.len() != t * d || sin.len() != t * d {
                    return Err(err(format!("rope: tables of {} for {t}×{d}", cos.len())));
                }
                let mut out = vec![0f32; src.len()];
                // Output rows in order; each finds its input row.
                out.par_chunks_mut(d).enumerate().for_each(|(row, o)| {
                    let (bi, hi, ti) = if to_heads {
                        (row / (h * t), (row / t) % h, row % t)
                    } else {
                        (row / (t * h), row % h, (row / h) % t)
                    };
                    let input = if to_heads { ((bi * t + ti) * h + hi) * d } else { ((bi * h + hi) * t + ti) * d };
                    f(&src[input..input + d], o, &cos[ti * d..(ti + 1) * d], &sin[ti * d..(ti + 1) * d]);
                });
                Ok(out)
            })
        })
    }
}

impl CustomOp1 for RopeHeads {
    fn name(&self) -> &'static str {
        "rope-heads"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        let x = slice(storage, layout, self.name())?;
        let (b, t, h, d) = match layout.dims() {
            [b, t, h, d] if d % 2 == 0 => (*b, *t, *h, *d),
            dims => return Err(err(format!("rope-heads: input {dims:?} is not B×T×heads×(even D)"))),
        };
        let half = d / 2;
        let out = self.map(x, (b, t, h, d), true, |xr, o, c, s| {
            for j in 0..half {
                o[j] = xr[j] * c[j] - xr[j + half] * s[j];
                o[j + half] = xr[j + half] * c[j + half] + xr[j] * s[j + half];
            }
        })?;
        Ok((CpuStorage::F32(out), Shape::from((b, h, t, d))))
    }

    fn bwd(&self, arg: &Tensor, _res: &Tensor, grad_res: &Tensor) -> Result<Option<Tensor>> {
        let (b, t, h, d) = arg.dims4()?;
        let half = d / 2;
        let dx = with_data(grad_res, self.name(), |g| {
            self.map(g, (b, t, h, d), false, |gr, o, c, s| {
                for j in 0..half {
                    o[j] = gr[j] * c[j] + gr[j + half] * s[j + half];
                    o[j + half] = gr[j + half] * c[j + half] - gr[j] * s[j];
                }
            })
        })?;
        Ok(Some(Tensor::from_vec(dx, (b, t, h, d), arg.device())?))
    }
}
