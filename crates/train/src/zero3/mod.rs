//! ZeRO-3 (Rajbhandari et al. 2020; PyTorch's FSDP): parameter sharding for full updates.
//!
//! The model's weights are cut into *units* (the embedding, each decoder layer, the final
//! norm with the output head); each unit's parameters are flattened into one buffer padded
//! to a multiple of the world size `w`, and rank `r` keeps chunk `r` of it, with the chunk's
//! summed gradient, AdamW's moments and (bf16) an f32 master copy. Nothing else of the
//! weights lives on a rank between uses: the model is a skeleton of empty placeholders.
//!
//! - A pass ([`pass`]) all-gathers a unit's chunks when it reaches the unit and drops the
//!   whole weights after it ([`Zero3::gather`], [`Gathered`]): one layer is whole at a time
//!   (two while the backward pass recomputes one from its kept input).
//! - The backward pass reduce-scatters each unit's gradient as soon as that unit is done, so
//!   a rank holds one unit's whole gradient at a time and only its chunk of the sum.
//! - The optimiser step ([`Zero3::step`]) is AdamW on the chunks, with the global norm taken
//!   over the chunks: no gather follows, the chunks are the weights.
//! - Rollouts need the whole policy: [`Zero3::gather_all`] builds it for the sampler between
//!   updates, while [`Zero3::park`] keeps AdamW's state in host memory (phase-exclusive
//!   memory: the plan counts the larger phase).
//!
//! Every collective runs on every rank in the same order: ranks with fewer micro-batches
//! than others run phantom passes (the gathers and the reduce-scatters of zeros, no compute).

mod load;
pub mod pass;

pub use load::load_sharded;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use candle_core::{DType, Device, Shape, Tensor, Var};

use crate::dist::zero::{compact, own_piece, sum_over_ranks};
use crate::dist::Collective;
use crate::error::{TensorContext, TrainError};
use crate::model::{Param, Qwen3};
use crate::optim::{adam_update, clip_scale, flat_f32, needs_master, AdamStep, AdamWSettings};

/// Checkpoint key of a ZeRO-3 shard's [rank, world size, units].
pub(crate) const LAYOUT_KEY: &str = "zero3.layout";

/// One unit's parameters: names, shapes and offsets in its flat buffer.
#[derive(Debug, Clone)]
struct Unit {
    name: String,
    params: Vec<(String, Shape, usize)>,
    numel: usize,
    chunk: usize,
}

/// A unit's state on this rank.
struct UnitState {
    /// This rank's chunk of the weights, in the model's dtype.
    shard: Tensor,
    /// The chunk of the summed gradient since the last step (model dtype).
    grad: Option<Tensor>,
    /// AdamW's moments (f32); absent for a frozen model (the KL reference).
    m: Option<Tensor>,
    v: Option<Tensor>,
    /// f32 master copy of a bf16/f16 chunk.
    master: Option<Tensor>,
}

/// This rank's shards of a model's weights (and of their gradient and optimiser state).
pub struct Zero3 {
    rank: usize,
    world: usize,
    units: Vec<Unit>,
    state: Mutex<Vec<UnitState>>,
    dtype: DType,
    device: Device,
    tied: bool,
    layers: usize,
    /// AdamW's state lives in host memory; each unit's share visits the device for its update.
    offload: std::sync::atomic::AtomicBool,
    /// Bytes of whole weights gathered now, and the most at once.
    gathered: AtomicU64,
    peak_gathered: AtomicU64,
}

impl std::fmt::Debug for Zero3 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Zero3(rank {} of {}, {} units)", self.rank, self.world, self.units.len())
    }
}

/// Unit index of the embedding.
pub const EMBED: usize = 0;

impl Zero3 {
    /// Shards a full-mode `model` over `world` onto `device` (a collective: every rank calls it
    /// with the same model); returns the skeleton every pass runs on. `trainable` false keeps
    /// no optimiser state (the frozen reference of the KL term).
    pub fn shard(model: &Qwen3, world: &dyn Collective, device: &Device, trainable: bool) -> Result<Qwen3, TrainError> {
        Zero3::shard_with(model, &mut |_, p| Ok(p.tensor().clone()), world, device, trainable)
    }

    /// [`Zero3::shard`] of a model whose weights `fetch` gives, one unit at a time (by
    /// name, with the model's own parameter, which may be a placeholder): a rank then holds
    /// one unit's whole weights besides its shards.
    pub(crate) fn shard_with(
        model: &Qwen3,
        fetch: &mut dyn FnMut(&str, &Param) -> Result<Tensor, TrainError>,
        world: &dyn Collective,
        device: &Device,
        trainable: bool,
    ) -> Result<Qwen3, TrainError> {
        if model.zero3.is_some() {
            return Err(TrainError::Other("this model is already sharded".into()));
        }
        if !model.projections().iter().all(|(_, _, l)| l.lora.is_none()) {
            return Err(TrainError::Config(
                "ZeRO-3 (optim.zero 3) shards full updates; a LoRA run's base is frozen and its adapters are small: \
                 use optim.zero 0"
                    .into(),
            ));
        }
        let (rank, w) = (world.rank(), world.world_size());
        let layers = model.layers.len();
        let mut units: Vec<Unit> = Vec::with_capacity(layers + 2);
        units.push(Unit { name: "embed".into(), params: Vec::new(), numel: 0, chunk: 0 });
        for l in 0..layers {
            units.push(Unit { name: format!("layer.{l}"), params: Vec::new(), numel: 0, chunk: 0 });
        }
        units.push(Unit { name: "head".into(), params: Vec::new(), numel: 0, chunk: 0 });
        let weights = model.named_weights();
        let mut members: Vec<Vec<usize>> = vec![Vec::new(); units.len()];
        for (i, (name, _)) in weights.iter().enumerate() {
            let u = unit_of(name, layers)
                .ok_or_else(|| TrainError::Other(format!("`{name}` belongs to no ZeRO-3 unit")))?;
            members[u].push(i);
        }
        let c = "sharding the weights";
        let mut state = Vec::with_capacity(units.len());
        for (unit, members) in units.iter_mut().zip(members) {
            let mut flat = Vec::with_capacity(members.len());
            for i in members {
                let (name, p) = &weights[i];
                let t = fetch(name, p)?.to_dtype(model.dtype()).ctx(c)?;
                unit.params.push((name.clone(), t.shape().clone(), unit.numel));
                unit.numel += t.elem_count();
                flat.push(t.flatten_all().ctx(c)?);
            }
            unit.chunk = unit.numel.div_ceil(w);
            let all = Tensor::cat(&flat, 0).ctx(c)?;
            drop(flat);
            let shard =
                own_piece(&all, rank * unit.chunk, unit.chunk, unit.numel).and_then(|p| p.to_device(device)).ctx(c)?;
            let shard = compact(&shard)?;
            drop(all);
            let zeros = || Tensor::zeros(unit.chunk, DType::F32, device).ctx(c);
            let (m, v, master) = if trainable {
                let master = if needs_master(shard.dtype()) { Some(shard.to_dtype(DType::F32).ctx(c)?) } else { None };
                (Some(zeros()?), Some(zeros()?), master)
            } else {
                (None, None, None)
            };
            state.push(UnitState { shard, grad: None, m, v, master });
        }
        if w > 1 {
            // Every rank must cut the same units, or the collectives would pair up wrong pieces.
            let mine: Vec<u8> = units.iter().flat_map(|u| (u.numel as u64).to_le_bytes()).collect();
            for (r, theirs) in world.all_gather_bytes(&mine)?.iter().enumerate() {
                if *theirs != mine {
                    return Err(TrainError::Distributed(format!(
                        "rank {r} sharded another model than rank {rank} (its units have other sizes)"
                    )));
                }
            }
        }
        let placeholder = Tensor::zeros(0, model.dtype(), device).ctx(c)?;
        let mut skeleton = model.with_weights(&mut |_, _| Some(Param::Frozen(placeholder.clone())));
        let zero3 = Zero3 {
            rank,
            world: w,
            units,
            state: Mutex::new(state),
            dtype: model.dtype(),
            device: device.clone(),
            tied: model.lm_head.is_none(),
            layers,
            offload: std::sync::atomic::AtomicBool::new(false),
            gathered: AtomicU64::new(0),
            peak_gathered: AtomicU64::new(0),
        };
        skeleton.zero3 = Some(Arc::new(zero3));
        skeleton.tables_on(device).ctx(c)
    }

    /// Units: the embedding, the layers, the head.
    pub fn units(&self) -> usize {
        self.units.len()
    }

    /// Unit index of layer `l`.
    pub fn layer_unit(l: usize) -> usize {
        l + 1
    }

    /// Unit index of the final norm and output head.
    pub fn head_unit(&self) -> usize {
        self.layers + 1
    }

    /// The units the output head reads: the norm and head, and the embedding when tied.
    pub fn head_units(&self) -> Vec<usize> {
        if self.tied {
            vec![EMBED, self.head_unit()]
        } else {
            vec![self.head_unit()]
        }
    }

    /// Bytes this rank keeps between passes: its chunks of the weights, of the gradient sum
    /// (when one is pending) and of the optimiser state (wherever it is parked).
    pub fn resident_bytes(&self) -> u64 {
        let Ok(state) = self.lock() else { return 0 };
        let bytes = |t: &Option<Tensor>| t.as_ref().map_or(0, |t| (t.elem_count() * t.dtype().size_in_bytes()) as u64);
        state
            .iter()
            .map(|s| {
                (s.shard.elem_count() * s.shard.dtype().size_in_bytes()) as u64
                    + bytes(&s.grad)
                    + bytes(&s.m)
                    + bytes(&s.v)
                    + bytes(&s.master)
            })
            .sum()
    }

    /// The most bytes of whole weights that were gathered at once.
    pub fn peak_gathered_bytes(&self) -> u64 {
        self.peak_gathered.load(Ordering::Relaxed)
    }

    /// Bytes of one unit's whole weights (padded).
    pub fn unit_bytes(&self, u: usize) -> u64 {
        (self.units[u].chunk * self.world * self.dtype.size_in_bytes()) as u64
    }

    fn lock(&self) -> Result<MutexGuard<'_, Vec<UnitState>>, TrainError> {
        self.state.lock().map_err(|_| TrainError::Other("the ZeRO-3 shards were poisoned by a panic".into()))
    }

    /// `units`' whole weights in a copy of `skeleton` (a collective): trainable variables
    /// when `trainable` (their gradients are for [`Zero3::reduce_grads`]), frozen tensors
    /// otherwise. They are dropped with the returned [`Gathered`].
    pub fn gather(
        &self,
        skeleton: &Qwen3,
        units: &[usize],
        trainable: bool,
        world: &dyn Collective,
    ) -> Result<Gathered<'_>, TrainError> {
        let c = "gathering a unit's weights";
        let mut whole: HashMap<String, Param> = HashMap::new();
        let mut bytes = 0;
        for &u in units {
            let shard = self.lock()?[u].shard.clone();
            let all = world.all_gather(&shard)?;
            bytes += self.unit_bytes(u);
            for (name, shape, offset) in &self.units[u].params {
                let t = all.narrow(0, *offset, shape.elem_count()).and_then(|t| t.reshape(shape)).ctx(c)?;
                let p = if trainable { Param::Trainable(Var::from_tensor(&t).ctx(c)?) } else { Param::Frozen(t) };
                whole.insert(name.clone(), p);
            }
        }
        let now = self.gathered.fetch_add(bytes, Ordering::Relaxed) + bytes;
        self.peak_gathered.fetch_max(now, Ordering::Relaxed);
        let model = skeleton.with_weights(&mut |name, _| whole.remove(name));
        Ok(Gathered { model, bytes, owner: self })
    }

    /// Adds unit `u`'s summed gradient chunk (a collective): `grads` maps its parameters'
    /// names to this rank's whole gradients; absent ones count as zeros.
    pub fn reduce_grads(
        &self,
        u: usize,
        grads: &HashMap<String, Tensor>,
        world: &dyn Collective,
    ) -> Result<(), TrainError> {
        let c = "reducing a unit's gradient";
        let unit = &self.units[u];
        let mut parts = Vec::with_capacity(unit.params.len() + 1);
        for (name, shape, _) in &unit.params {
            parts.push(match grads.get(name) {
                Some(g) => g.flatten_all().and_then(|g| g.to_dtype(DType::F32)).ctx(c)?,
                None => Tensor::zeros(shape.elem_count(), DType::F32, &self.device).ctx(c)?,
            });
        }
        let pad = unit.chunk * self.world - unit.numel;
        if pad > 0 {
            parts.push(Tensor::zeros(pad, DType::F32, &self.device).ctx(c)?);
        }
        let flat = Tensor::cat(&parts, 0).ctx(c)?;
        drop(parts);
        let mine = world.reduce_scatter_sum(&flat)?;
        drop(flat);
        if mine.elem_count() != unit.chunk {
            return Err(TrainError::Distributed(format!(
                "the reduce-scatter of {} gave {} elements for a chunk of {}",
                unit.name,
                mine.elem_count(),
                unit.chunk
            )));
        }
        let mut state = self.lock()?;
        let s = &mut state[u];
        let mine = mine.to_dtype(self.dtype).ctx(c)?;
        s.grad = Some(match s.grad.take() {
            Some(prev) => (prev + mine).ctx(c)?,
            None => compact(&mine)?,
        });
        Ok(())
    }

    /// One AdamW step on this rank's chunks from the summed gradients (a collective: the
    /// global norm is summed over the ranks); clips to `max_norm` (0 = none). Returns the
    /// norm before clipping. Units without a gradient are left as they are.
    pub fn step(
        &self,
        world: &dyn Collective,
        max_norm: f64,
        settings: AdamWSettings,
        step: u64,
        slice: usize,
    ) -> Result<f64, TrainError> {
        let c = "the ZeRO-3 AdamW update";
        let mut state = self.lock()?;
        let mut local = 0.0f64;
        for s in state.iter() {
            if let Some(g) = &s.grad {
                let sq = g.to_dtype(DType::F32).and_then(|g| g.sqr()?.sum_all()?.to_scalar::<f32>()).ctx(c)?;
                local += f64::from(sq);
            }
        }
        let norm = sum_over_ranks(world, local)?.sqrt();
        let k = AdamStep::new(settings, step, clip_scale(norm, max_norm));
        let dtype = self.dtype;
        let visit = self.offloaded();
        for s in state.iter_mut() {
            let Some(g) = s.grad.take() else { continue };
            if visit {
                for t in [&mut s.m, &mut s.v, &mut s.master].into_iter().flatten() {
                    *t = t.to_device(&self.device).ctx(c)?;
                }
            }
            let (Some(m), Some(v)) = (&s.m, &s.v) else {
                return Err(TrainError::Other("a frozen (reference) model has no optimiser".into()));
            };
            let shard = s.shard.clone();
            match &s.master {
                Some(w) => adam_update(m, v, 0, w, 0, &g, &k, slice, &mut |o, new| {
                    w.slice_set(new, 0, o).ctx(c)?;
                    shard.slice_set(&new.to_dtype(dtype).ctx(c)?, 0, o).ctx(c)
                })?,
                None if dtype == DType::F32 => {
                    adam_update(m, v, 0, &shard, 0, &g, &k, slice, &mut |o, new| shard.slice_set(new, 0, o).ctx(c))?
                }
                None => {
                    let p = shard.to_dtype(DType::F32).ctx(c)?;
                    adam_update(m, v, 0, &p, 0, &g, &k, slice, &mut |o, new| {
                        shard.slice_set(&new.to_dtype(dtype).ctx(c)?, 0, o).ctx(c)
                    })?
                }
            }
            if visit {
                for t in [&mut s.m, &mut s.v, &mut s.master].into_iter().flatten() {
                    *t = t.to_device(&Device::Cpu).ctx(c)?;
                }
            }
        }
        Ok(norm)
    }

    /// Keeps AdamW's state in host memory for good (`optim.offload`): [`Zero3::step`] brings
    /// one unit's share at a time to the device.
    pub fn offload(&self) -> Result<(), TrainError> {
        self.park(true)?;
        self.offload.store(true, Ordering::Relaxed);
        Ok(())
    }

    fn offloaded(&self) -> bool {
        self.offload.load(Ordering::Relaxed) && !self.device.is_cpu()
    }

    /// Moves AdamW's state to host memory (`true`, while rollouts need the memory) or back
    /// to the device. Nothing moves on a CPU run, nor back when the state is offloaded.
    pub fn park(&self, on_host: bool) -> Result<(), TrainError> {
        if self.device.is_cpu() || (!on_host && self.offloaded()) {
            return Ok(());
        }
        let to = if on_host { Device::Cpu } else { self.device.clone() };
        let c = "moving the optimiser state";
        let mut state = self.lock()?;
        for s in state.iter_mut() {
            for t in [&mut s.m, &mut s.v, &mut s.master].into_iter().flatten() {
                *t = t.to_device(&to).ctx(c)?;
            }
        }
        Ok(())
    }

    /// The whole model, frozen, on `device` (a collective): for the sampler, checkpoints and
    /// exports. It holds every weight: use it between updates only.
    pub fn gather_all(&self, skeleton: &Qwen3, world: &dyn Collective, device: &Device) -> Result<Qwen3, TrainError> {
        self.gather_to(skeleton, world, device, true)?
            .ok_or_else(|| TrainError::Other("the gathered model went missing".into()))
    }

    /// [`Zero3::gather_all`] on every rank (a collective), kept only where `keep`: the others
    /// hold one unit at a time (a checkpoint's writer alone needs the whole model).
    pub fn gather_to(
        &self,
        skeleton: &Qwen3,
        world: &dyn Collective,
        device: &Device,
        keep: bool,
    ) -> Result<Option<Qwen3>, TrainError> {
        let c = "gathering the whole model";
        let mut whole: HashMap<String, Param> = HashMap::new();
        for u in 0..self.units.len() {
            let shard = self.lock()?[u].shard.clone();
            let all = world.all_gather(&shard)?;
            if !keep {
                continue;
            }
            let all = all.to_device(device).ctx(c)?;
            for (name, shape, offset) in &self.units[u].params {
                let t = all.narrow(0, *offset, shape.elem_count()).and_then(|t| t.reshape(shape)).ctx(c)?;
                whole.insert(name.clone(), Param::Frozen(compact(&t)?));
            }
        }
        if !keep {
            return Ok(None);
        }
        let mut model = skeleton.with_weights(&mut |name, _| whole.remove(name));
        model.zero3 = None;
        model.tables_on(device).ctx(c).map(Some)
    }

    /// Replaces this rank's weight chunks with its chunks of `tensors` (whole weights under
    /// their Hugging Face names, as a checkpoint's model holds them).
    pub fn load_weights(&self, tensors: &HashMap<String, Tensor>) -> Result<(), String> {
        let mut state = self.state.lock().map_err(|_| "the ZeRO-3 shards were poisoned".to_string())?;
        for (unit, s) in self.units.iter().zip(state.iter_mut()) {
            let mut flat = Vec::with_capacity(unit.params.len());
            for (name, shape, _) in &unit.params {
                let t = tensors.get(name).ok_or_else(|| format!("no tensor `{name}`"))?;
                if t.shape() != shape {
                    return Err(format!("`{name}` has shape {:?}, the model expects {:?}", t.dims(), shape.dims()));
                }
                flat.push(t.flatten_all().map_err(|e| e.to_string())?);
            }
            let all = Tensor::cat(&flat, 0).map_err(|e| e.to_string())?;
            let piece = own_piece(&all, self.rank * unit.chunk, unit.chunk, unit.numel)
                .and_then(|p| p.to_device(&self.device)?.to_dtype(self.dtype))
                .map_err(|e| e.to_string())?;
            s.shard.slice_set(&piece, 0, 0).map_err(|e| e.to_string())?;
            if let Some(w) = &s.master {
                w.slice_set(&piece.to_dtype(DType::F32).map_err(|e| e.to_string())?, 0, 0)
                    .map_err(|e| e.to_string())?;
            }
        }
        Ok(())
    }

    /// `optimizer-rank{r}-of-{w}.safetensors`.
    pub fn file_name(&self) -> String {
        format!("optimizer-rank{}-of-{}.safetensors", self.rank, self.world)
    }

    /// `m.UNIT`, `v.UNIT`, `master.UNIT` (this rank's chunks) and the layout.
    pub fn state_tensors(&self) -> HashMap<String, Tensor> {
        let mut out = HashMap::new();
        let Ok(state) = self.lock() else { return out };
        for (unit, s) in self.units.iter().zip(state.iter()) {
            for (prefix, t) in [("m", &s.m), ("v", &s.v), ("master", &s.master)] {
                if let Some(t) = t {
                    out.insert(format!("{prefix}.{}", unit.name), t.clone());
                }
            }
        }
        let layout = [self.rank as u32, self.world as u32, self.units.len() as u32];
        if let Ok(t) = Tensor::new(&layout, &Device::Cpu) {
            out.insert(LAYOUT_KEY.to_string(), t);
        }
        out
    }

    /// Restores this rank's optimiser state; refuses one saved by another stage, world size or rank.
    pub fn load_state(&self, tensors: &HashMap<String, Tensor>) -> Result<(), String> {
        let layout = tensors.get(LAYOUT_KEY).ok_or_else(|| {
            "this optimiser state was not saved with optim.zero 3 (parameter sharding); resume with the stage that \
             wrote it"
                .to_string()
        })?;
        let v = layout.to_dtype(DType::U32).and_then(|t| t.to_vec1::<u32>()).map_err(|e| e.to_string())?;
        let [rank, world, units] = v[..] else { return Err(format!("`{LAYOUT_KEY}` holds {v:?}")) };
        if world as usize != self.world || units as usize != self.units.len() {
            return Err(format!(
                "this optimiser state is a ZeRO-3 shard for {world} ranks and {units} units; this run has {} ranks \
                 and {} units (shards are not re-split): resume on {world} GPUs with the same model",
                self.world,
                self.units.len()
            ));
        }
        if rank as usize != self.rank {
            return Err(format!("this optimiser state is rank {rank}'s shard, not rank {}'s", self.rank));
        }
        let mut state = self.state.lock().map_err(|_| "the ZeRO-3 shards were poisoned".to_string())?;
        for (unit, s) in self.units.iter().zip(state.iter_mut()) {
            for (prefix, slot) in [("m", &mut s.m), ("v", &mut s.v), ("master", &mut s.master)] {
                if slot.is_none() {
                    continue;
                }
                let key = format!("{prefix}.{}", unit.name);
                let t = tensors.get(&key).ok_or_else(|| format!("no optimiser tensor `{key}`"))?;
                if t.dims() != [unit.chunk] {
                    return Err(format!("optimiser shard `{key}` has shape {:?}, not [{}]", t.dims(), unit.chunk));
                }
                *slot = Some(flat_f32(t, &self.device).map_err(|e| e.to_string())?);
            }
        }
        Ok(())
    }
}

/// Whole weights of some units, in a copy of the skeleton; released when dropped.
pub struct Gathered<'a> {
    /// The skeleton with these units' weights in place.
    pub model: Qwen3,
    bytes: u64,
    owner: &'a Zero3,
}

impl Drop for Gathered<'_> {
    fn drop(&mut self) {
        self.owner.gathered.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

/// The unit a weight belongs to: the embedding, a layer, or the head (final norm, lm_head).
fn unit_of(name: &str, layers: usize) -> Option<usize> {
    if name == "model.embed_tokens.weight" {
        return Some(EMBED);
    }
    if name == "model.norm.weight" || name == "lm_head.weight" {
        return Some(layers + 1);
    }
    let rest = name.strip_prefix("model.layers.")?;
    let l: usize = rest.split('.').next()?.parse().ok()?;
    (l < layers).then_some(l + 1)
}
