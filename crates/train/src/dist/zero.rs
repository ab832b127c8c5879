//! ZeRO-1/2 (Rajbhandari et al. 2020): AdamW's state sharded over the ranks.
//!
//! Every variable is flattened and padded to a multiple of the world size `w`; rank `r`
//! owns chunk `r` (elements `r·c .. (r+1)·c`, `c = ⌈n/w⌉`) and keeps the f32 moments, and
//! for bf16 weights the f32 master copy, of that chunk only. One optimiser step:
//!
//! 1. the summed gradient of this rank's chunks: stage 1 all-reduces the gradients and
//!    keeps its chunk, stage 2 reduce-scatters them (each rank receives only its chunk);
//! 2. the global norm from the shards (each rank's sum of squares, summed over the ranks)
//!    and the clipping scale, exactly as [`crate::optim::clip_grad_norm`];
//! 3. AdamW on the owned chunks ([`crate::optim::adam_update`], PyTorch's formula);
//! 4. the updated chunks all-gathered and written into every rank's full weights.
//!
//! The collectives run over buckets of about [`BUCKET_ELEMS`] elements: a bucket is a run
//! of *segments* (a variable's chunk, or a column range of it for large variables), laid
//! out rank-major so that one reduce-scatter gives each rank exactly its segments. The
//! full local gradient of a variable is dropped once its last segment is reduced.
//!
//! What this does not shard: the weights (every rank holds them all, in their dtype) and
//! the local gradient that backward accumulates over the micro-batches of a step (candle's
//! backward hands back whole gradients; they are reduced at the optimiser step, not as
//! backward produces them). Parameter sharding (ZeRO-3) is [`crate::zero3`].

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::ops::Range;

use candle_core::{DType, Device, Tensor, Var};

use super::Collective;
use crate::error::{TensorContext, TrainError};
use crate::optim::{adam_update, clip_scale, flat_f32, needs_master, AdamStep, AdamWSettings};

/// Elements (over all ranks' rows) of one communication bucket: 128 MiB of f32.
pub const BUCKET_ELEMS: usize = 1 << 25;

/// Checkpoint key of a shard's [rank, world size].
pub(crate) const LAYOUT_KEY: &str = "zero.layout";

/// What is sharded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ZeroStage {
    /// AdamW state (moments, master weights); gradients all-reduced in full.
    One = 1,
    /// AdamW state and the summed gradients (reduce-scatter).
    Two = 2,
}

impl ZeroStage {
    /// The stage of a preset's `optim.zero`: None for 0 (replicated).
    pub fn from_level(level: u8) -> Result<Option<ZeroStage>, TrainError> {
        match level {
            0 => Ok(None),
            1 => Ok(Some(ZeroStage::One)),
            2 => Ok(Some(ZeroStage::Two)),
            n => Err(TrainError::Config(format!(
                "ZeRO stage {n} is not implemented: use 0 (replicated), 1 (optimiser state sharded) or 2 \
                 (optimiser state and gradients sharded)"
            ))),
        }
    }

    /// 1 or 2.
    pub fn level(self) -> u8 {
        self as u8
    }
}

/// Columns `start..start+len` of variable `var`'s chunk.
#[derive(Debug, Clone, Copy)]
struct Segment {
    var: usize,
    start: usize,
    len: usize,
}

/// This rank's share of a sharded AdamW, and the layout every rank agrees on.
pub(crate) struct Shards {
    rank: usize,
    world: usize,
    stage: ZeroStage,
    numel: Vec<usize>,
    chunk: Vec<usize>,
    segments: Vec<Segment>,
    buckets: Vec<Range<usize>>,
    /// Each variable's last segment (usize::MAX for an empty variable).
    last_segment: Vec<usize>,
    m: Vec<Tensor>,
    v: Vec<Tensor>,
    master: Vec<Option<Tensor>>,
    device: Device,
}

impl Shards {
    /// Zero moments for this rank's chunks; `bucket` elements per collective. Checks that
    /// every rank passes variables of the same sizes (a collective: all ranks call it).
    pub(crate) fn new(
        vars: &[(String, Var)],
        world: &dyn Collective,
        stage: ZeroStage,
        bucket: usize,
    ) -> Result<Self, TrainError> {
        let (rank, w) = (world.rank(), world.world_size());
        let numel: Vec<usize> = vars.iter().map(|(_, v)| v.as_tensor().elem_count()).collect();
        if w > 1 {
            let mine: Vec<u8> = numel.iter().flat_map(|n| (*n as u64).to_le_bytes()).collect();
            for (r, theirs) in world.all_gather_bytes(&mine)?.iter().enumerate() {
                if *theirs != mine {
                    return Err(TrainError::Distributed(format!(
                        "rank {r} built its sharded optimiser over other variables than rank {rank}"
                    )));
                }
            }
        }
        let device = vars.first().map(|(_, v)| v.device().clone()).unwrap_or(Device::Cpu);
        let chunk: Vec<usize> = numel.iter().map(|n| n.div_ceil(w)).collect();
        let seg_max = (bucket / w).max(1);
        let (mut segments, mut last_segment) = (Vec::new(), vec![usize::MAX; vars.len()]);
        for (var, &c) in chunk.iter().enumerate() {
            for start in (0..c).step_by(seg_max) {
                last_segment[var] = segments.len();
                segments.push(Segment { var, start, len: seg_max.min(c - start) });
            }
        }
        let mut buckets = Vec::new();
        let (mut first, mut width) = (0, 0);
        for (s, seg) in segments.iter().enumerate() {
            if s > first && (width + seg.len) * w > bucket {
                buckets.push(first..s);
                (first, width) = (s, 0);
            }
            width += seg.len;
        }
        if first < segments.len() {
            buckets.push(first..segments.len());
        }
        let c = "allocating the sharded AdamW state";
        let (mut m, mut v, mut master) = (Vec::new(), Vec::new(), Vec::new());
        for (i, (_, var)) in vars.iter().enumerate() {
            m.push(Tensor::zeros(chunk[i], DType::F32, &device).ctx(c)?);
            v.push(Tensor::zeros(chunk[i], DType::F32, &device).ctx(c)?);
            master.push(if needs_master(var.dtype()) { Some(own_master(var, rank, chunk[i])?) } else { None });
        }
        Ok(Shards { rank, world: w, stage, numel, chunk, segments, buckets, last_segment, m, v, master, device })
    }

    /// The stage.
    pub(crate) fn stage(&self) -> ZeroStage {
        self.stage
    }

    /// `optimizer-rank{r}-of-{w}.safetensors`.
    pub(crate) fn file_name(&self) -> String {
        format!("optimizer-rank{}-of-{}.safetensors", self.rank, self.world)
    }

    /// One optimiser step (the module doc's four phases); returns the norm before clipping.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn step(
        &self,
        vars: &[(String, Var)],
        world: &dyn Collective,
        grads: &mut [Option<Tensor>],
        max_norm: f64,
        settings: AdamWSettings,
        step: u64,
        slice: usize,
    ) -> Result<f64, TrainError> {
        if (world.rank(), world.world_size()) != (self.rank, self.world) {
            return Err(TrainError::Distributed(format!(
                "the sharded optimiser was built for rank {} of {}, but is stepped as rank {} of {}",
                self.rank,
                self.world,
                world.rank(),
                world.world_size()
            )));
        }
        let present = present_anywhere(world, grads)?;
        for g in grads.iter_mut() {
            if let Some(t) = g.take() {
                *g = Some(t.flatten_all().ctx("flattening a gradient")?);
            }
        }
        let shard = self.reduce(vars, world, grads, &present)?;
        let mut local = 0.0f64;
        for g in shard.iter().flatten() {
            let s = g.to_dtype(DType::F32).and_then(|g| g.sqr()?.sum_all()?.to_scalar::<f32>());
            local += f64::from(s.ctx("measuring the gradient norm")?);
        }
        let norm = sum_over_ranks(world, local)?.sqrt();
        let k = AdamStep::new(settings, step, clip_scale(norm, max_norm));
        self.update_and_gather(vars, world, shard, &present, &k, slice)?;
        Ok(norm)
    }

    /// The segments of bucket `b` whose variable some rank has a gradient for.
    fn live(&self, b: usize, present: &[bool]) -> Vec<usize> {
        self.buckets[b].clone().filter(|&s| present[self.segments[s].var]).collect()
    }

    /// Phase 1: this rank's segments of the summed gradient, in the variables' dtypes.
    fn reduce(
        &self,
        vars: &[(String, Var)],
        world: &dyn Collective,
        grads: &mut [Option<Tensor>],
        present: &[bool],
    ) -> Result<Vec<Option<Tensor>>, TrainError> {
        let c = "reducing the gradients";
        let mut shard = vec![None; self.segments.len()];
        for b in 0..self.buckets.len() {
            let segs = self.live(b, present);
            let width: usize = segs.iter().map(|&s| self.segments[s].len).sum();
            if width == 0 {
                continue;
            }
            // Rank-major: row r holds every segment's columns of rank r's chunk.
            let mut pieces = Vec::with_capacity(self.world * segs.len());
            for r in 0..self.world {
                for &s in &segs {
                    let seg = self.segments[s];
                    let start = r * self.chunk[seg.var] + seg.start;
                    pieces.push(match &grads[seg.var] {
                        Some(g) => own_piece(g, start, seg.len, self.numel[seg.var])
                            .and_then(|p| p.to_dtype(DType::F32))
                            .ctx(c)?,
                        None => Tensor::zeros(seg.len, DType::F32, &self.device).ctx(c)?,
                    });
                }
            }
            let buf = Tensor::cat(&pieces, 0).ctx(c)?;
            drop(pieces);
            let mine = match self.stage {
                ZeroStage::Two => world.reduce_scatter_sum(&buf)?,
                ZeroStage::One => {
                    let all = world.all_reduce_sum(&buf)?;
                    compact(&all.narrow(0, self.rank * width, width).ctx(c)?)?
                }
            };
            drop(buf);
            if mine.elem_count() != width {
                return Err(TrainError::Distributed(format!(
                    "the gradient reduction gave {} elements for a shard of {width}",
                    mine.elem_count()
                )));
            }
            let mut at = 0;
            for &s in &segs {
                let seg = self.segments[s];
                shard[s] = Some(mine.narrow(0, at, seg.len).and_then(|g| g.to_dtype(vars[seg.var].1.dtype())).ctx(c)?);
                at += seg.len;
                if self.last_segment[seg.var] == s {
                    grads[seg.var] = None;
                }
            }
        }
        grads.iter_mut().for_each(|g| *g = None);
        Ok(shard)
    }

    /// Phases 3 and 4: AdamW on this rank's segments, then every rank's updated segments
    /// written into the full weights.
    fn update_and_gather(
        &self,
        vars: &[(String, Var)],
        world: &dyn Collective,
        mut shard: Vec<Option<Tensor>>,
        present: &[bool],
        k: &AdamStep,
        slice: usize,
    ) -> Result<(), TrainError> {
        let c = "the sharded AdamW update";
        for b in 0..self.buckets.len() {
            let segs = self.live(b, present);
            let width: usize = segs.iter().map(|&s| self.segments[s].len).sum();
            if width == 0 {
                continue;
            }
            let mut row: Vec<Tensor> = Vec::new();
            for &s in &segs {
                let seg = self.segments[s];
                let (i, var) = (seg.var, &vars[seg.var].1);
                let g = shard[s].take().ok_or_else(|| TrainError::Other("a gradient shard went missing".into()))?;
                // bf16 weights travel in bf16 (they are rounded to it anyway); others in f32.
                let wire = if needs_master(var.dtype()) { var.dtype() } else { DType::F32 };
                let mut push = |new: &Tensor| -> Result<(), TrainError> {
                    row.push(new.to_dtype(wire).ctx(c)?);
                    Ok(())
                };
                match &self.master[i] {
                    Some(w) => {
                        adam_update(&self.m[i], &self.v[i], seg.start, w, seg.start, &g, k, slice, &mut |o, new| {
                            w.slice_set(new, 0, seg.start + o).ctx(c)?;
                            push(new)
                        })?
                    }
                    None => {
                        let flat = var.as_tensor().flatten_all().ctx(c)?;
                        let start = self.rank * self.chunk[i] + seg.start;
                        let p = own_piece(&flat, start, seg.len, self.numel[i]).ctx(c)?;
                        adam_update(&self.m[i], &self.v[i], seg.start, &p, 0, &g, k, slice, &mut |_, new| push(new))?
                    }
                }
            }
            let row = Tensor::cat(&row, 0).ctx(c)?;
            let all = world.all_gather(&row)?;
            if all.elem_count() != width * self.world {
                return Err(TrainError::Distributed(format!(
                    "the weight all-gather gave {} elements for {} ranks × {width}",
                    all.elem_count(),
                    self.world
                )));
            }
            let mut flats: HashMap<usize, Tensor> = HashMap::new();
            for r in 0..self.world {
                let mut at = r * width;
                for &s in &segs {
                    let seg = self.segments[s];
                    let (i, var) = (seg.var, &vars[seg.var].1);
                    let start = r * self.chunk[i] + seg.start;
                    // Columns past the variable's end are padding.
                    let valid = self.numel[i].saturating_sub(start).min(seg.len);
                    if valid > 0 {
                        let flat = match flats.entry(i) {
                            Entry::Occupied(e) => e.into_mut(),
                            Entry::Vacant(e) => e.insert(var.as_tensor().flatten_all().ctx(c)?),
                        };
                        let piece = all.narrow(0, at, valid).and_then(|p| p.to_dtype(var.dtype())).ctx(c)?;
                        flat.slice_set(&piece, 0, start).ctx(c)?;
                    }
                    at += seg.len;
                }
            }
        }
        Ok(())
    }

    /// `m.NAME`, `v.NAME`, `master.NAME` (this rank's chunks) and the layout.
    pub(crate) fn state_tensors(&self, vars: &[(String, Var)]) -> HashMap<String, Tensor> {
        let mut out = HashMap::new();
        for (i, (name, _)) in vars.iter().enumerate() {
            out.insert(format!("m.{name}"), self.m[i].clone());
            out.insert(format!("v.{name}"), self.v[i].clone());
            if let Some(w) = &self.master[i] {
                out.insert(format!("master.{name}"), w.clone());
            }
        }
        if let Ok(layout) = Tensor::new(&[self.rank as u32, self.world as u32], &self.device) {
            out.insert(LAYOUT_KEY.to_string(), layout);
        }
        out
    }

    /// Restores this rank's shard; refuses one saved by a replicated optimiser, for another
    /// world size or for another rank.
    pub(crate) fn load_state(
        &mut self,
        vars: &[(String, Var)],
        tensors: &HashMap<String, Tensor>,
    ) -> Result<(), String> {
        let layout = tensors.get(LAYOUT_KEY).ok_or_else(|| {
            "this optimiser state was saved by a replicated optimiser (optim.zero 0), not by a ZeRO shard; \
             resume with optim.zero 0"
                .to_string()
        })?;
        let (rank, world) = read_layout(layout)?;
        if world != self.world {
            return Err(format!(
                "this optimiser state is a ZeRO shard for a world of {world} ranks, but this run has {} \
                 (shards are not re-split across world sizes): resume on {world} GPUs",
                self.world
            ));
        }
        if rank != self.rank {
            return Err(format!("this optimiser state is rank {rank}'s shard, not rank {}'s", self.rank));
        }
        for (i, (name, var)) in vars.iter().enumerate() {
            let get = |prefix: &str| -> Result<Option<Tensor>, String> {
                let key = format!("{prefix}.{name}");
                let Some(t) = tensors.get(&key) else { return Ok(None) };
                if t.dims() != [self.chunk[i]] {
                    return Err(format!("optimiser shard `{key}` has shape {:?}, not [{}]", t.dims(), self.chunk[i]));
                }
                flat_f32(t, &self.device).map(Some).map_err(|e| e.to_string())
            };
            self.m[i] = get("m")?.ok_or_else(|| format!("no optimiser tensor `m.{name}`"))?;
            self.v[i] = get("v")?.ok_or_else(|| format!("no optimiser tensor `v.{name}`"))?;
            if self.master[i].is_some() {
                self.master[i] = Some(match get("master")? {
                    Some(t) => t,
                    None => own_master(var, self.rank, self.chunk[i]).map_err(|e| e.to_string())?,
                });
            }
        }
        Ok(())
    }
}

/// Which variables some rank has a gradient for (the same answer on every rank).
pub(crate) fn present_anywhere(world: &dyn Collective, grads: &[Option<Tensor>]) -> Result<Vec<bool>, TrainError> {
    let mine: Vec<u8> = grads.iter().map(|g| u8::from(g.is_some())).collect();
    if world.world_size() == 1 {
        return Ok(mine.iter().map(|b| *b != 0).collect());
    }
    let mut any = vec![false; grads.len()];
    for theirs in world.all_gather_bytes(&mine)? {
        if theirs.len() != any.len() {
            return Err(TrainError::Distributed("ranks have different numbers of gradients".into()));
        }
        for (a, b) in any.iter_mut().zip(theirs) {
            *a |= b != 0;
        }
    }
    Ok(any)
}

/// The [rank, world size] of a saved shard.
pub(crate) fn read_layout(t: &Tensor) -> Result<(usize, usize), String> {
    let v = t.to_dtype(DType::U32).and_then(|t| t.flatten_all()?.to_vec1::<u32>()).map_err(|e| e.to_string())?;
    match v[..] {
        [rank, world] => Ok((rank as usize, world as usize)),
        _ => Err(format!("`{LAYOUT_KEY}` should hold [rank, world size], it holds {v:?}")),
    }
}

/// The f64 sum over the ranks (in rank order, so every rank gets the same bits).
pub(crate) fn sum_over_ranks(world: &dyn Collective, x: f64) -> Result<f64, TrainError> {
    let mut sum = 0.0;
    for b in world.all_gather_bytes(&x.to_le_bytes())? {
        let bytes: [u8; 8] =
            b.try_into().map_err(|_| TrainError::Distributed("a rank sent a malformed gradient norm".into()))?;
        sum += f64::from_le_bytes(bytes);
    }
    Ok(sum)
}

/// Elements `start..start+len` of a flat tensor of `n` elements, zeros past its end.
pub(crate) fn own_piece(flat: &Tensor, start: usize, len: usize, n: usize) -> candle_core::Result<Tensor> {
    let valid = n.saturating_sub(start).min(len);
    let mut parts = Vec::with_capacity(2);
    if valid > 0 {
        parts.push(flat.narrow(0, start, valid)?);
    }
    if valid < len {
        parts.push(Tensor::zeros(len - valid, flat.dtype(), flat.device())?);
    }
    Tensor::cat(&parts, 0)
}

/// This rank's chunk of a variable in f32 (its own storage).
fn own_master(var: &Var, rank: usize, chunk: usize) -> Result<Tensor, TrainError> {
    let flat = var.as_tensor().flatten_all().ctx("copying the master weights")?;
    // to_dtype writes a tensor of its own (the weights are bf16/f16 here).
    own_piece(&flat, rank * chunk, chunk, flat.elem_count())
        .and_then(|p| p.to_dtype(DType::F32))
        .ctx("copying the master weights")
}

/// A copy of `t` in storage of its own size (a narrow view keeps its whole parent alive).
pub(crate) fn compact(t: &Tensor) -> Result<Tensor, TrainError> {
    let out = Tensor::zeros(t.shape(), t.dtype(), t.device()).ctx("copying a shard")?;
    out.slice_set(&t.contiguous().ctx("copying a shard")?, 0, 0).ctx("copying a shard")?;
    Ok(out)
}

#[cfg(test)]
#[path = "zero_tests.rs"]
mod tests;
