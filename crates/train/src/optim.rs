//! AdamW with decoupled weight decay (as PyTorch's `AdamW`), global-norm gradient
//! clipping, and optimiser state that checkpoints can save and restore exactly.
//!
//! One type, [`AdamW`], either replicated (every rank holds the whole state) or sharded
//! over the ranks (ZeRO-1/2, [`crate::dist::zero`]); the update code calls
//! [`AdamW::reduce_clip_apply`] once per optimiser step whichever it is.
//!
//! The update runs in place, [`UPDATE_SLICE`] elements at a time: the moments and the f32
//! master weights are written back with `slice_set`, so that the temporaries of one update
//! are a few slices, not a few copies of the largest variable (the 8B embedding is 2.3 GiB
//! in f32). A consequence: [`AdamW::state_tensors`] returns views of the live state.

use std::collections::HashMap;

use candle_core::{DType, Tensor, Var};

use super::dist::zero::{self, Shards, ZeroStage};
use super::dist::{all_reduce_grads, Collective};
use super::error::{TensorContext, TrainError};
use super::zero3::Zero3;
use std::sync::Arc;

/// Elements of a variable updated at once (64 MiB of f32 per temporary).
pub const UPDATE_SLICE: usize = 1 << 24;

/// Name of the replicated optimiser's checkpoint file.
pub const REPLICATED_STATE_FILE: &str = "optimizer.safetensors";

/// AdamW hyper-parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamWSettings {
    /// Learning rate.
    pub lr: f64,
    /// Decay of the first moment.
    pub beta1: f64,
    /// Decay of the second moment.
    pub beta2: f64,
    /// Added to the denominator.
    pub eps: f64,
    /// Decoupled weight decay (multiplies the weights by 1 − lr·weight_decay).
    pub weight_decay: f64,
}

/// AdamW over a fixed, ordered list of variables (moments kept in f32, and an f32 master
/// copy of bf16/f16 weights: an update of ~lr·1e-3 of a weight vanishes in bf16's 8-bit mantissa).
pub struct AdamW {
    vars: Vec<(String, Var)>,
    state: State,
    /// Updates applied so far (bias correction uses it).
    pub step: u64,
    /// Settings; `lr` may be changed between steps.
    pub settings: AdamWSettings,
    /// Elements per in-place update slice (tests make it small).
    pub(crate) slice: usize,
}

enum State {
    /// Flat f32 moments and master weights of every variable, on every rank.
    Replicated { m: Vec<Tensor>, v: Vec<Tensor>, master: Vec<Option<Tensor>> },
    /// This rank's chunks only.
    Sharded(Box<Shards>),
    /// ZeRO-3: the state lives with the parameter shards.
    Zero3(Arc<Zero3>),
}

/// Whether weights of this dtype get an f32 master copy.
pub(crate) fn needs_master(dtype: DType) -> bool {
    matches!(dtype, DType::BF16 | DType::F16)
}

/// One optimiser step's constants.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AdamStep {
    s: AdamWSettings,
    bc1: f64,
    bc2: f64,
    /// Gradient scale (clipping; 1 = none).
    scale: f64,
}

impl AdamStep {
    pub(crate) fn new(s: AdamWSettings, step: u64, scale: f64) -> Self {
        AdamStep { s, bc1: 1.0 - s.beta1.powi(step as i32), bc2: 1.0 - s.beta2.powi(step as i32), scale }
    }
}

/// Updates `m`, `v` (flat f32, elements `at..at+len`) in place from the gradient `g` (flat,
/// `len` elements, any dtype) and the weights `p` (flat f32, elements `p_at..p_at+len`),
/// handing each updated slice of weights (f32) and its offset within `0..len` to `write`.
/// PyTorch's AdamW: p ← p·(1 − lr·wd) − lr·m̂/(√v̂ + ε).
#[allow(clippy::too_many_arguments)]
pub(crate) fn adam_update(
    m: &Tensor,
    v: &Tensor,
    at: usize,
    p: &Tensor,
    p_at: usize,
    g: &Tensor,
    k: &AdamStep,
    slice: usize,
    write: &mut dyn FnMut(usize, &Tensor) -> Result<(), TrainError>,
) -> Result<(), TrainError> {
    let s = k.s;
    let len = g.elem_count();
    let mut o = 0;
    while o < len {
        let n = slice.max(1).min(len - o);
        let c = "AdamW";
        let mut gs = g.narrow(0, o, n).and_then(|g| g.to_dtype(DType::F32)).ctx(c)?;
        if k.scale != 1.0 {
            gs = (gs * k.scale).ctx(c)?;
        }
        let ms = m.narrow(0, at + o, n).ctx(c)?;
        let vs = v.narrow(0, at + o, n).ctx(c)?;
        let m2 = ((ms * s.beta1).ctx(c)? + (&gs * (1.0 - s.beta1)).ctx(c)?).ctx(c)?;
        let v2 = ((vs * s.beta2).ctx(c)? + (gs.sqr().ctx(c)? * (1.0 - s.beta2)).ctx(c)?).ctx(c)?;
        drop(gs);
        let denom = ((&v2 / k.bc2).ctx(c)?.sqrt().ctx(c)? + s.eps).ctx(c)?;
        let update = ((&m2 / k.bc1).ctx(c)? / denom).ctx(c)?;
        let ps = p.narrow(0, p_at + o, n).and_then(|p| p.to_dtype(DType::F32)).ctx(c)?;
        let ps = (ps * (1.0 - s.lr * s.weight_decay)).ctx(c)?;
        let ps = (ps - (update * s.lr).ctx(c)?).ctx(c)?;
        m.slice_set(&m2, 0, at + o).ctx(c)?;
        v.slice_set(&v2, 0, at + o).ctx(c)?;
        write(o, &ps)?;
        o += n;
    }
    Ok(())
}

impl AdamW {
    /// A replicated optimiser with zero moments (every rank holds the whole state).
    pub fn new(vars: Vec<(String, Var)>, settings: AdamWSettings) -> Result<Self, TrainError> {
        let c = "allocating AdamW state";
        let (mut m, mut v, mut master) = (Vec::new(), Vec::new(), Vec::new());
        for (_, var) in &vars {
            let t = var.as_tensor();
            m.push(Tensor::zeros(t.elem_count(), DType::F32, t.device()).ctx(c)?);
            v.push(Tensor::zeros(t.elem_count(), DType::F32, t.device()).ctx(c)?);
            master.push(if needs_master(t.dtype()) {
                Some(t.flatten_all().and_then(|t| t.to_dtype(DType::F32)).ctx(c)?)
            } else {
                None
            });
        }
        Ok(AdamW { vars, state: State::Replicated { m, v, master }, step: 0, settings, slice: UPDATE_SLICE })
    }

    /// An optimiser sharded over `world` (ZeRO `stage`): this rank keeps the moments (and
    /// master weights) of its chunk of every variable only. Every rank must build it with
    /// the same variables.
    pub fn sharded(
        vars: Vec<(String, Var)>,
        settings: AdamWSettings,
        world: &dyn Collective,
        stage: ZeroStage,
    ) -> Result<Self, TrainError> {
        let shards = Shards::new(&vars, world, stage, zero::BUCKET_ELEMS)?;
        Ok(AdamW::with_shards(vars, settings, shards))
    }

    /// A sharded optimiser over a given layout (tests choose small buckets).
    pub(crate) fn with_shards(vars: Vec<(String, Var)>, settings: AdamWSettings, shards: Shards) -> Self {
        AdamW { vars, state: State::Sharded(Box::new(shards)), step: 0, settings, slice: UPDATE_SLICE }
    }

    /// [`AdamW::new`] for `zero` 0, [`AdamW::sharded`] for 1 and 2 (a preset's `optim.zero`).
    pub fn with_zero(
        vars: Vec<(String, Var)>,
        settings: AdamWSettings,
        world: &dyn Collective,
        zero: u8,
    ) -> Result<Self, TrainError> {
        match ZeroStage::from_level(zero)? {
            None => AdamW::new(vars, settings),
            Some(stage) => AdamW::sharded(vars, settings, world, stage),
        }
    }

    /// The optimiser of a sharded model (ZeRO-3): its state is the shards' own. It has no
    /// variables of its own (the passes reduce the gradients into the shards).
    pub fn zero3(shards: Arc<Zero3>, settings: AdamWSettings) -> Self {
        AdamW { vars: Vec::new(), state: State::Zero3(shards), step: 0, settings, slice: UPDATE_SLICE }
    }

    /// Moves a ZeRO-3 optimiser's state to host memory (true) or back (false); nothing for
    /// the others (their state is not idle long enough to pay for the copies).
    pub fn park(&self, on_host: bool) -> Result<(), TrainError> {
        match &self.state {
            State::Zero3(z) => z.park(on_host),
            _ => Ok(()),
        }
    }

    /// The variables, in order.
    pub fn vars(&self) -> &[(String, Var)] {
        &self.vars
    }

    /// The ZeRO stage: 0 when replicated.
    pub fn zero_stage(&self) -> u8 {
        match &self.state {
            State::Replicated { .. } => 0,
            State::Sharded(s) => s.stage().level(),
            State::Zero3(_) => 3,
        }
    }

    /// One optimiser step on this rank's accumulated gradients (aligned with the
    /// variables; `None` = none on this rank): sums them over the ranks, clips the global
    /// norm to `max_norm` (0 = no clipping) and updates every variable some rank has a
    /// gradient for (on every rank). Consumes the gradients. Returns the norm before clipping.
    pub fn reduce_clip_apply(
        &mut self,
        world: &dyn Collective,
        grads: &mut [Option<Tensor>],
        max_norm: f64,
    ) -> Result<f64, TrainError> {
        if grads.len() != self.vars.len() {
            return Err(TrainError::Other(format!(
                "{} gradients for {} optimiser variables",
                grads.len(),
                self.vars.len()
            )));
        }
        if let State::Zero3(z) = &self.state {
            self.step += 1;
            return z.step(world, max_norm, self.settings, self.step, self.slice);
        }
        if let State::Sharded(shards) = &mut self.state {
            self.step += 1;
            let step = self.step;
            return shards.step(&self.vars, world, grads, max_norm, self.settings, step, self.slice);
        }
        if world.world_size() > 1 {
            let present = zero::present_anywhere(world, grads)?;
            let shapes: Vec<Tensor> = self.vars.iter().map(|(_, v)| v.as_tensor().clone()).collect();
            all_reduce_grads(world, grads, &shapes)?;
            // all_reduce_grads fills zeros for a variable no rank has a gradient for; one rank
            // alone would skip it (as PyTorch skips a parameter whose .grad is None).
            for (g, p) in grads.iter_mut().zip(present) {
                if !p {
                    *g = None;
                }
            }
        }
        let norm = clip_grad_norm(grads, max_norm)?;
        self.apply(grads)?;
        grads.iter_mut().for_each(|g| *g = None);
        Ok(norm)
    }

    /// Applies one update with full gradients `grads` (aligned with the variables; `None` =
    /// no gradient), already summed and clipped. Replicated optimisers only: a sharded one
    /// steps through [`AdamW::reduce_clip_apply`].
    pub fn apply(&mut self, grads: &[Option<Tensor>]) -> Result<(), TrainError> {
        let State::Replicated { m, v, master } = &mut self.state else {
            return Err(TrainError::Other(
                "a sharded (ZeRO) optimiser takes this rank's gradients through reduce_clip_apply, not apply".into(),
            ));
        };
        self.step += 1;
        let k = AdamStep::new(self.settings, self.step, 1.0);
        for (i, (_, var)) in self.vars.iter().enumerate() {
            let Some(g) = grads.get(i).and_then(|g| g.as_ref()) else { continue };
            let g = g.flatten_all().ctx("AdamW")?;
            let flat = var.as_tensor().flatten_all().ctx("AdamW")?;
            let dtype = var.dtype();
            match &master[i] {
                Some(w) => adam_update(&m[i], &v[i], 0, w, 0, &g, &k, self.slice, &mut |o, new| {
                    w.slice_set(new, 0, o).ctx("AdamW")?;
                    flat.slice_set(&new.to_dtype(dtype).ctx("AdamW")?, 0, o).ctx("AdamW")
                })?,
                // f32 weights are their own master: updated in place.
                None if dtype == DType::F32 => {
                    adam_update(&m[i], &v[i], 0, &flat, 0, &g, &k, self.slice, &mut |o, new| {
                        flat.slice_set(new, 0, o).ctx("AdamW")
                    })?
                }
                // f64 (the parity checks' reference model): updated through f32 as before.
                None => {
                    let p = flat.to_dtype(DType::F32).ctx("AdamW")?;
                    adam_update(&m[i], &v[i], 0, &p, 0, &g, &k, self.slice, &mut |o, new| {
                        flat.slice_set(&new.to_dtype(dtype).ctx("AdamW")?, 0, o).ctx("AdamW")
                    })?
                }
            }
        }
        Ok(())
    }

    /// This rank's optimiser state for checkpoints: `m.NAME`, `v.NAME` and, for bf16
    /// weights, `master.NAME` (the whole variable's shape when replicated; this rank's 1-D
    /// chunk when sharded, with `zero.layout` = [rank, world size]). The tensors are views
    /// of the live state, which the next step updates in place: save them before it.
    pub fn state_tensors(&self) -> HashMap<String, Tensor> {
        match &self.state {
            State::Replicated { m, v, master } => {
                let mut out = HashMap::new();
                for (i, (name, var)) in self.vars.iter().enumerate() {
                    let shape = var.as_tensor().shape();
                    let mut put = |prefix: &str, t: &Tensor| {
                        out.insert(format!("{prefix}.{name}"), t.reshape(shape).unwrap_or_else(|_| t.clone()));
                    };
                    put("m", &m[i]);
                    put("v", &v[i]);
                    if let Some(w) = &master[i] {
                        put("master", w);
                    }
                }
                out
            }
            State::Sharded(s) => s.state_tensors(&self.vars),
            State::Zero3(z) => z.state_tensors(),
        }
    }

    /// Restores state saved by [`AdamW::state_tensors`] on the same rank of a world of the
    /// same size (a shard saved for another world size is refused). Load the weights first:
    /// a replicated bf16 state saved without master weights takes them from the variables.
    /// The tensors' storage becomes the optimiser's (it is updated in place afterwards).
    pub fn load_state(&mut self, tensors: &HashMap<String, Tensor>, step: u64) -> Result<(), String> {
        if tensors.contains_key(crate::zero3::LAYOUT_KEY) && !matches!(self.state, State::Zero3(_)) {
            return Err("this optimiser state was saved with optim.zero 3 (parameter sharding): resume with \
                        optim.zero 3 and the same number of processes"
                .into());
        }
        match &mut self.state {
            State::Sharded(s) => s.load_state(&self.vars, tensors)?,
            State::Zero3(z) => z.load_state(tensors)?,
            State::Replicated { m, v, master } => {
                if let Some(layout) = tensors.get(zero::LAYOUT_KEY) {
                    let (rank, world) = zero::read_layout(layout)?;
                    return Err(format!(
                        "this optimiser state is rank {rank}'s shard of a ZeRO-sharded optimiser over {world} ranks; \
                         resume with optim.zero 1 or 2 on {world} GPUs"
                    ));
                }
                for (i, (name, var)) in self.vars.iter().enumerate() {
                    let dims = var.as_tensor().dims();
                    let get = |prefix: &str| -> Result<Option<Tensor>, String> {
                        let key = format!("{prefix}.{name}");
                        let Some(t) = tensors.get(&key) else { return Ok(None) };
                        if t.dims() != dims {
                            return Err(format!("optimiser tensor `{key}` has shape {:?}, not {dims:?}", t.dims()));
                        }
                        flat_f32(t, var.as_tensor().device()).map(Some).map_err(|e| e.to_string())
                    };
                    m[i] = get("m")?.ok_or_else(|| format!("no optimiser tensor `m.{name}`"))?;
                    v[i] = get("v")?.ok_or_else(|| format!("no optimiser tensor `v.{name}`"))?;
                    if master[i].is_some() {
                        master[i] = Some(match get("master")? {
                            Some(t) => t,
                            None => flat_f32(var.as_tensor(), var.as_tensor().device()).map_err(|e| e.to_string())?,
                        });
                    }
                }
            }
        }
        self.step = step;
        Ok(())
    }

    /// The file this rank's [`AdamW::state_tensors`] go to in a checkpoint folder:
    /// `optimizer.safetensors` when replicated, `optimizer-rank{r}-of-{w}.safetensors` when sharded.
    pub fn state_file_name(&self) -> String {
        match &self.state {
            State::Replicated { .. } => REPLICATED_STATE_FILE.to_string(),
            State::Sharded(s) => s.file_name(),
            State::Zero3(z) => z.file_name(),
        }
    }
}

/// A flat f32 tensor on `device` (the same storage when `t` already is a contiguous f32
/// tensor there: loading a checkpoint must not hold the optimiser state twice).
pub(crate) fn flat_f32(t: &Tensor, device: &candle_core::Device) -> candle_core::Result<Tensor> {
    t.to_device(device)?.to_dtype(DType::F32)?.flatten_all()?.contiguous()
}

/// The global L2 norm of the gradients.
pub fn grad_norm(grads: &[Option<Tensor>]) -> Result<f64, TrainError> {
    let mut sum = 0.0f64;
    for g in grads.iter().flatten() {
        let s =
            g.to_dtype(DType::F32).and_then(|g| g.sqr()).and_then(|g| g.sum_all()).and_then(|s| s.to_scalar::<f32>());
        sum += f64::from(s.ctx("measuring the gradient norm")?);
    }
    Ok(sum.sqrt())
}

/// Scales the gradients so that their global norm is at most `max_norm`; returns the norm before.
pub fn clip_grad_norm(grads: &mut [Option<Tensor>], max_norm: f64) -> Result<f64, TrainError> {
    let norm = grad_norm(grads)?;
    let scale = clip_scale(norm, max_norm);
    if scale != 1.0 {
        for g in grads.iter_mut().flatten() {
            *g = (&*g * scale).ctx("clipping gradients")?;
        }
    }
    Ok(norm)
}

/// The clipping scale for a gradient of global norm `norm` (1 = no clipping), as [`clip_grad_norm`].
pub(crate) fn clip_scale(norm: f64, max_norm: f64) -> f64 {
    if max_norm > 0.0 && norm > max_norm {
        max_norm / (norm + 1e-6)
    } else {
        1.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn adamw_matches_pytorch_formula() {
        let var = Var::new(&[1.0f32, -2.0], &Device::Cpu).unwrap();
        let s = AdamWSettings { lr: 0.1, beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.01 };
        let mut opt = AdamW::new(vec![("w".into(), var.clone())], s).unwrap();
        let g = Tensor::new(&[0.5f32, -1.0], &Device::Cpu).unwrap();
        opt.apply(&[Some(g)]).unwrap();
        // step 1: m̂ = g, v̂ = g², update = g/|g| = sign(g); p = p(1 − lr·wd) − lr·sign(g)
        let p = var.as_tensor().to_vec1::<f32>().unwrap();
        assert!((p[0] - (1.0 * (1.0 - 0.001) - 0.1)).abs() < 1e-6);
        assert!((p[1] - (-2.0 * (1.0 - 0.001) + 0.1)).abs() < 1e-6);
    }

    #[test]
    fn clipping_scales_to_the_max_norm() {
        let mut grads = vec![Some(Tensor::new(&[3.0f32, 4.0], &Device::Cpu).unwrap()), None];
        let before = clip_grad_norm(&mut grads, 1.0).unwrap();
        assert!((before - 5.0).abs() < 1e-6);
        assert!((grad_norm(&grads).unwrap() - 1.0).abs() < 1e-5);
    }

    /// Slicing the in-place update changes nothing; bf16 weights follow an f32 master copy
    /// (a step far below bf16's resolution still accumulates).
    #[test]
    fn sliced_updates_equal_whole_ones_and_bf16_keeps_a_master() {
        let s = AdamWSettings { lr: 1e-4, beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.0 };
        let init: Vec<f32> = (0..37).map(|i| (i as f32 * 0.37).sin()).collect();
        let run = |slice: usize, dtype: DType| {
            let var = Var::from_tensor(&Tensor::new(init.as_slice(), &Device::Cpu).unwrap().to_dtype(dtype).unwrap())
                .unwrap();
            let mut opt = AdamW::new(vec![("w".into(), var.clone())], s).unwrap();
            opt.slice = slice;
            for k in 0..20 {
                let g: Vec<f32> = (0..37).map(|i| ((i * 7 + k) as f32).cos()).collect();
                let g = Tensor::new(g.as_slice(), &Device::Cpu).unwrap().to_dtype(dtype).unwrap();
                opt.reduce_clip_apply(&crate::dist::SingleRank, &mut [Some(g)], 0.0).unwrap();
            }
            let master = opt.state_tensors().get("master.w").map(|t| t.to_vec1::<f32>().unwrap());
            (var.as_tensor().to_dtype(DType::F32).unwrap().to_vec1::<f32>().unwrap(), master)
        };
        let (whole, none) = run(UPDATE_SLICE, DType::F32);
        let (sliced, _) = run(5, DType::F32);
        assert_eq!(whole, sliced);
        assert!(none.is_none(), "f32 weights are their own master");
        let (bf16, master) = run(5, DType::BF16);
        let master = master.expect("bf16 weights have an f32 master copy");
        // 20 steps of ~1e-4 each move the master by ~2e-3, below bf16's spacing near 1 (7.8e-3).
        let moved = master.iter().zip(&init).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
        assert!(moved > 5e-4, "the master copy moved by {moved}");
        let rounded = Tensor::new(master.as_slice(), &Device::Cpu).unwrap().to_dtype(DType::BF16).unwrap();
        assert_eq!(
            bf16,
            rounded.to_dtype(DType::F32).unwrap().to_vec1::<f32>().unwrap(),
            "the weights are the rounded master"
        );
    }
}
