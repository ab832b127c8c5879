//! Causal attention computed tile by tile (FlashAttention-2's algorithm, Dao 2023, in
//! candle's ops): the forward pass keeps a running maximum and sum per query row (the
//! online softmax) and the backward pass recomputes each tile's probabilities from the
//! saved log-sum-exp, so neither ever holds more than one tile of scores — where the
//! plain path holds heads × T × S of them, per layer it runs.
//!
//! Layout (the model's grouped-query layout): queries `(b, kv_heads, group·t, d)`, rows
//! group-major (row `g·t + i` is query `i` of head `g` of the group), and keys and values
//! `(b, kv_heads, s, d)` with `s ≥ t`; query `i` sits at position `s − t + i` and sees
//! keys `0..=s − t + i`. The arithmetic runs in f32 whatever the inputs' dtype.

use candle_core::{DType, Device, Result, Tensor, D};

/// Tile sizes, and the size under which the plain path (all scores at once) is used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tiles {
    /// Query positions per tile.
    pub queries: usize,
    /// Key positions per tile.
    pub keys: usize,
    /// Score tensors up to this many bytes (f32) are materialised whole: on short
    /// sequences the tiles' many small ops cost more than they save.
    pub materialise_up_to: usize,
}

impl Default for Tiles {
    fn default() -> Self {
        Tiles { queries: 128, keys: 512, materialise_up_to: 64 << 20 }
    }
}

impl Tiles {
    /// Bytes of one f32 tile of scores for `rows` sequences and `heads` query heads.
    pub fn tile_bytes(&self, rows: usize, heads: usize) -> usize {
        rows * heads * self.queries * self.keys * 4
    }

    /// Whether attention of `t` queries over `s` keys (b rows, `heads` query heads) is
    /// computed in tiles rather than whole.
    pub fn tiled(&self, b: usize, heads: usize, t: usize, s: usize) -> bool {
        t > 1 && b * heads * t * s * 4 > self.materialise_up_to
    }
}

/// The saved state of a tiled forward pass: the output and each row's log-sum-exp.
pub struct Attended {
    /// `(b, kv_heads, group·t, d)` in the queries' dtype.
    pub out: Tensor,
    /// `(b, kv_heads, group·t, 1)`, f32.
    pub lse: Tensor,
}

/// The rows of query tile `[i0, i1)` of every head of the group: `(b, kv, group·(i1−i0), d)`.
fn query_rows(x: &Tensor, group: usize, t: usize, i0: usize, i1: usize) -> Result<Tensor> {
    let (b, kv, _, d) = x.dims4()?;
    x.reshape((b, kv, group, t, d))?.narrow(3, i0, i1 - i0)?.reshape((b, kv, group * (i1 - i0), d))
}

/// Puts tiles of rows (in query-tile order) back in the group-major layout.
fn join_rows(tiles: &[Tensor], group: usize) -> Result<Tensor> {
    let parts: Vec<Tensor> = tiles
        .iter()
        .map(|p| {
            let (b, kv, rows, d) = p.dims4()?;
            p.reshape((b, kv, group, rows / group, d))
        })
        .collect::<Result<_>>()?;
    let joined = Tensor::cat(&parts, 3)?;
    let (b, kv, g, t, d) = joined.dims5()?;
    joined.reshape((b, kv, g * t, d))
}

/// The additive mask of the tile of queries `[i0, i1)` over keys `[j0, j1)`, for every
/// head of the group (`(group·(i1−i0), j1−j0)`), or None when every key is visible.
fn tile_mask(
    group: usize,
    (first_pos, i0, i1): (usize, usize, usize),
    (j0, j1): (usize, usize),
    device: &Device,
) -> Result<Option<Tensor>> {
    if j1 - 1 <= first_pos + i0 {
        return Ok(None);
    }
    let rows: Vec<f32> =
        (i0..i1).flat_map(|i| (j0..j1).map(move |j| if j > first_pos + i { f32::NEG_INFINITY } else { 0.0 })).collect();
    let one = Tensor::from_vec(rows, (i1 - i0, j1 - j0), device)?;
    Ok(Some(Tensor::cat(&vec![&one; group], 0)?))
}

/// The key tiles query tile `[i0, i1)` sees: those that start at or before its last
/// query's position. Tiles keep fixed bounds over all `s` keys (so that each key tile's
/// gradient has one shape); keys past a query's position are masked.
fn key_tiles(tiles: &Tiles, first_pos: usize, i1: usize, s: usize) -> Vec<(usize, usize)> {
    let step = tiles.keys.max(1);
    (0..first_pos + i1).step_by(step).map(|j0| (j0, (j0 + step).min(s))).collect()
}

/// Scaled scores of one tile, masked: `(b, kv, group·tq, tk)`, f32.
fn tile_scores(q: &Tensor, k: &Tensor, scale: f64, mask: Option<&Tensor>) -> Result<Tensor> {
    let s = (q.matmul(&k.t()?)? * scale)?;
    match mask {
        Some(m) => s.broadcast_add(m),
        None => Ok(s),
    }
}

/// Causal attention of `q` over `k`, `v` (see the module docs for the layout), tile by
/// tile with an online softmax; also returns what the backward pass needs.
pub fn forward(q: &Tensor, k: &Tensor, v: &Tensor, t: usize, scale: f64, tiles: &Tiles) -> Result<Attended> {
    let (_, kv, rows, _) = q.dims4()?;
    let s = k.dim(2)?;
    let group = rows / t.max(1);
    if kv == 0 || group * t != rows || s < t {
        return Err(candle_core::Error::Msg(format!("tiled attention: {rows} query rows, {t} queries, {s} keys")));
    }
    let first_pos = s - t;
    let (q32, k32, v32) = (q.to_dtype(DType::F32)?, k.to_dtype(DType::F32)?, v.to_dtype(DType::F32)?);
    let (mut outs, mut lses) = (Vec::new(), Vec::new());
    for i0 in (0..t).step_by(tiles.queries.max(1)) {
        let i1 = (i0 + tiles.queries.max(1)).min(t);
        let qi = query_rows(&q32, group, t, i0, i1)?.contiguous()?;
        let mut state: Option<(Tensor, Tensor, Tensor)> = None;
        for (j0, j1) in key_tiles(tiles, first_pos, i1, s) {
            let mask = tile_mask(group, (first_pos, i0, i1), (j0, j1), q.device())?;
            let kj = k32.narrow(2, j0, j1 - j0)?;
            let vj = v32.narrow(2, j0, j1 - j0)?;
            let sc = tile_scores(&qi, &kj, scale, mask.as_ref())?;
            let tile_max = sc.max_keepdim(D::Minus1)?;
            state = Some(match state {
                // Key 0 is in the first tile and visible to every query: its maxima are finite.
                None => {
                    let p = sc.broadcast_sub(&tile_max)?.exp()?;
                    (tile_max, p.sum_keepdim(D::Minus1)?, p.matmul(&vj)?)
                }
                Some((m, l, acc)) => {
                    let m_new = m.maximum(&tile_max)?;
                    let p = sc.broadcast_sub(&m_new)?.exp()?;
                    let carry = (m - &m_new)?.exp()?;
                    let l = (l * &carry)?.add(&p.sum_keepdim(D::Minus1)?)?;
                    let acc = acc.broadcast_mul(&carry)?.add(&p.matmul(&vj)?)?;
                    (m_new, l, acc)
                }
            });
        }
        let Some((m, l, acc)) = state else {
            return Err(candle_core::Error::Msg("tiled attention: a query tile saw no keys".into()));
        };
        outs.push(acc.broadcast_div(&l)?);
        lses.push((m + l.log()?)?);
    }
    Ok(Attended { out: join_rows(&outs, group)?.to_dtype(q.dtype())?, lse: join_rows(&lses, group)? })
}

/// The gradients of [`forward`]'s output with respect to `q`, `k` and `v`, given the
/// output's gradient `d_out` and the forward pass's saved state (in the inputs' dtypes).
#[allow(clippy::too_many_arguments)]
pub fn backward(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    saved: &Attended,
    d_out: &Tensor,
    t: usize,
    scale: f64,
    tiles: &Tiles,
) -> Result<(Tensor, Tensor, Tensor)> {
    let (_, _, rows, _) = q.dims4()?;
    let s = k.dim(2)?;
    let group = rows / t.max(1);
    let first_pos = s - t;
    let f32s = |x: &Tensor| x.to_dtype(DType::F32);
    let (q32, k32, v32) = (f32s(q)?, f32s(k)?, f32s(v)?);
    let (o32, do32) = (f32s(&saved.out)?, f32s(d_out)?);
    // D_i = Σ_d dO·O: the softmax's backward term that does not depend on the key.
    let delta = (&do32 * &o32)?.sum_keepdim(D::Minus1)?;
    let n_key_tiles = s.div_ceil(tiles.keys.max(1));
    let mut dk: Vec<Option<Tensor>> = vec![None; n_key_tiles];
    let mut dv: Vec<Option<Tensor>> = vec![None; n_key_tiles];
    let mut dqs = Vec::new();
    for i0 in (0..t).step_by(tiles.queries.max(1)) {
        let i1 = (i0 + tiles.queries.max(1)).min(t);
        let rows_of = |x: &Tensor| -> Result<Tensor> { query_rows(x, group, t, i0, i1)?.contiguous() };
        let (qi, doi, lsei, deltai) = (rows_of(&q32)?, rows_of(&do32)?, rows_of(&saved.lse)?, rows_of(&delta)?);
        let mut dqi: Option<Tensor> = None;
        for (n, (j0, j1)) in key_tiles(tiles, first_pos, i1, s).into_iter().enumerate() {
            let mask = tile_mask(group, (first_pos, i0, i1), (j0, j1), q.device())?;
            let kj = k32.narrow(2, j0, j1 - j0)?;
            let vj = v32.narrow(2, j0, j1 - j0)?;
            let p = tile_scores(&qi, &kj, scale, mask.as_ref())?.broadcast_sub(&lsei)?.exp()?;
            let add = |slot: &mut Option<Tensor>, x: Tensor| -> Result<()> {
                *slot = Some(match slot.take() {
                    Some(prev) => (prev + x)?,
                    None => x,
                });
                Ok(())
            };
            add(&mut dv[n], p.t()?.matmul(&doi)?)?;
            let dp = doi.matmul(&vj.t()?)?;
            let ds = (p * dp.broadcast_sub(&deltai)?)?;
            add(&mut dqi, (ds.matmul(&kj)? * scale)?)?;
            add(&mut dk[n], (ds.t()?.matmul(&qi)? * scale)?)?;
        }
        dqs.push(dqi.ok_or_else(|| candle_core::Error::Msg("tiled attention: a query tile saw no keys".into()))?);
    }
    let (b, kv, _, d) = k.dims4()?;
    // Key tiles past the last query's position (none in causal self-attention) get zeros.
    let whole = |tiles_of: Vec<Option<Tensor>>| -> Result<Tensor> {
        let parts: Vec<Tensor> = tiles_of
            .into_iter()
            .enumerate()
            .map(|(n, g)| match g {
                Some(g) => Ok(g),
                None => {
                    let len = (s - n * tiles.keys.max(1)).min(tiles.keys.max(1));
                    Tensor::zeros((b, kv, len, d), DType::F32, q.device())
                }
            })
            .collect::<Result<_>>()?;
        Tensor::cat(&parts, 2)
    };
    Ok((join_rows(&dqs, group)?.to_dtype(q.dtype())?, whole(dk)?.to_dtype(k.dtype())?, whole(dv)?.to_dtype(v.dtype())?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Var;
    use rand::{Rng, SeedableRng};

    fn random(shape: (usize, usize, usize, usize), seed: u64) -> Tensor {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let n = shape.0 * shape.1 * shape.2 * shape.3;
        let v: Vec<f32> = (0..n).map(|_| rng.gen_range(-1.0f32..1.0)).collect();
        Tensor::from_vec(v, shape, &Device::Cpu).unwrap()
    }

    /// The plain path: every score at once, softmax, autograd.
    fn plain(q: &Tensor, k: &Tensor, v: &Tensor, t: usize, scale: f64) -> Tensor {
        let (_, _, rows, _) = q.dims4().unwrap();
        let s = k.dim(2).unwrap();
        let group = rows / t;
        let mask: Vec<f32> =
            (0..t).flat_map(|i| (0..s).map(move |j| if j > s - t + i { f32::NEG_INFINITY } else { 0.0 })).collect();
        let mask = Tensor::from_vec(mask, (t, s), &Device::Cpu).unwrap();
        let mask = Tensor::cat(&vec![&mask; group], 0).unwrap();
        let sc = (q.matmul(&k.t().unwrap()).unwrap() * scale).unwrap().broadcast_add(&mask).unwrap();
        let m = sc.max_keepdim(D::Minus1).unwrap().detach();
        let e = sc.broadcast_sub(&m).unwrap().exp().unwrap();
        let p = e.broadcast_div(&e.sum_keepdim(D::Minus1).unwrap()).unwrap();
        p.matmul(v).unwrap()
    }

    fn max_diff(a: &Tensor, b: &Tensor) -> f32 {
        (a - b).unwrap().abs().unwrap().flatten_all().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap()
    }

    #[test]
    fn tiles_give_the_plain_values_and_gradients() {
        // Two rows, 2 key/value heads of 3 query heads each, 11 queries after 6 cached
        // positions; tiles of 4 queries × 5 keys cross the diagonal at every offset.
        let (b, kv, group, t, s, d) = (2, 2, 3, 11, 17, 8);
        let tiles = Tiles { queries: 4, keys: 5, materialise_up_to: 0 };
        let q = Var::from_tensor(&random((b, kv, group * t, d), 1)).unwrap();
        let k = Var::from_tensor(&random((b, kv, s, d), 2)).unwrap();
        let v = Var::from_tensor(&random((b, kv, s, d), 3)).unwrap();
        let scale = 1.0 / (d as f64).sqrt();
        let want = plain(q.as_tensor(), k.as_tensor(), v.as_tensor(), t, scale);
        let got = forward(q.as_tensor(), k.as_tensor(), v.as_tensor(), t, scale, &tiles).unwrap();
        assert!(max_diff(&want, &got.out) < 1e-5, "{}", max_diff(&want, &got.out));
        let d_out = random((b, kv, group * t, d), 4);
        let store = (&want * &d_out).unwrap().sum_all().unwrap().backward().unwrap();
        let (dq, dk, dv) =
            backward(q.as_tensor(), k.as_tensor(), v.as_tensor(), &got, &d_out, t, scale, &tiles).unwrap();
        for (name, ours, theirs) in [("q", &dq, &q), ("k", &dk, &k), ("v", &dv, &v)] {
            let reference = store.get(theirs.as_tensor()).unwrap();
            let diff = max_diff(ours, reference);
            assert!(diff < 1e-4, "d{name} differs by {diff}");
        }
        // One tile covering everything, and self-attention without a cache, agree too.
        let one = Tiles { queries: 64, keys: 64, materialise_up_to: 0 };
        let whole = forward(q.as_tensor(), k.as_tensor(), v.as_tensor(), t, scale, &one).unwrap();
        assert!(max_diff(&whole.out, &got.out) < 1e-5);
        let ks = k.as_tensor().narrow(2, s - t, t).unwrap();
        let vs = v.as_tensor().narrow(2, s - t, t).unwrap();
        let own = forward(q.as_tensor(), &ks, &vs, t, scale, &tiles).unwrap();
        assert!(max_diff(&own.out, &plain(q.as_tensor(), &ks, &vs, t, scale)) < 1e-5);
    }

    #[test]
    fn the_choice_between_tiles_and_the_whole_matrix_follows_its_size() {
        let tiles = Tiles::default();
        assert!(!tiles.tiled(1, 16, 1, 4096), "one query (decoding) never tiles");
        assert!(!tiles.tiled(1, 16, 256, 256));
        assert!(tiles.tiled(1, 64, 4096, 4096));
        assert_eq!(tiles.tile_bytes(1, 64), 64 * 128 * 512 * 4);
    }
}
