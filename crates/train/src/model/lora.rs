//! Linear projections with an optional LoRA adapter (`y = x·Wᵀ + s·dropout(x)·Aᵀ·Bᵀ`,
//! `s = alpha / r`), and the frozen-or-trainable parameter they are built on.

use candle_core::{DType, Device, Result, Tensor, Var};
use rand::{Rng, SeedableRng};

/// The projections LoRA may target, in Qwen3's naming.
pub const LORA_TARGETS: [&str; 7] = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"];

/// LoRA hyper-parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct LoraSettings {
    /// Rank r of A (r×in) and B (out×r).
    pub rank: usize,
    /// Scale numerator: the update is multiplied by `alpha / rank`.
    pub alpha: f64,
    /// Dropout on the adapter's input while training.
    pub dropout: f64,
    /// Which projections get an adapter (names from [`LORA_TARGETS`]).
    pub targets: Vec<String>,
}

impl LoraSettings {
    /// The multiplier of the low-rank update.
    pub fn scale(&self) -> f64 {
        self.alpha / self.rank as f64
    }
}

/// A weight that is either frozen (a plain tensor) or trained (a variable).
#[derive(Debug, Clone)]
pub enum Param {
    /// Not trained: gradients never reach it.
    Frozen(Tensor),
    /// Trained: the optimiser updates it in place.
    Trainable(Var),
}

impl Param {
    /// The current value.
    pub fn tensor(&self) -> &Tensor {
        match self {
            Param::Frozen(t) => t,
            Param::Trainable(v) => v.as_tensor(),
        }
    }
}

/// The low-rank pair of one projection: trainable in the trainer's model, a frozen view of
/// the same storage in the sampler's (see [`Lora::shared`]).
#[derive(Debug, Clone)]
pub struct Lora {
    /// r×in, initialised like PEFT (Kaiming-uniform, bound 1/√in).
    pub a: Param,
    /// out×r, initialised to zero so that the adapter starts as the identity update.
    pub b: Param,
    /// alpha / r.
    pub scale: f64,
    /// Input dropout probability while training.
    pub dropout: f64,
}

impl Lora {
    /// A fresh adapter for a `out×in` projection; `seed` fixes A. Adapters are kept in
    /// f32 for half-precision models (mixed precision) and in f64 for f64 models.
    pub fn new(
        out_dim: usize,
        in_dim: usize,
        settings: &LoraSettings,
        seed: u64,
        model_dtype: DType,
        device: &Device,
    ) -> Result<Self> {
        let dtype = if model_dtype == DType::F64 { DType::F64 } else { DType::F32 };
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let bound = 1.0 / (in_dim as f64).sqrt();
        let a: Vec<f32> = (0..settings.rank * in_dim).map(|_| rng.gen_range(-bound..bound) as f32).collect();
        let a = Tensor::from_vec(a, (settings.rank, in_dim), device)?.to_dtype(dtype)?;
        let b = Tensor::zeros((out_dim, settings.rank), dtype, device)?;
        Ok(Lora {
            a: Param::Trainable(Var::from_tensor(&a)?),
            b: Param::Trainable(Var::from_tensor(&b)?),
            scale: settings.scale(),
            dropout: settings.dropout,
        })
    }

    /// `scale·B·A` in `dtype`: what merging adds to the base weight.
    pub fn delta(&self, dtype: DType) -> Result<Tensor> {
        let ba = self.b.tensor().to_dtype(DType::F32)?.matmul(&self.a.tensor().to_dtype(DType::F32)?)?;
        (ba * self.scale)?.to_dtype(dtype)
    }

    /// A frozen view of the same matrices: no copy, no gradient graph, and it sees every
    /// in-place update the optimiser makes to the trainable ones.
    pub fn shared(&self) -> Lora {
        let view = |p: &Param| Param::Frozen(p.tensor().detach());
        Lora { a: view(&self.a), b: view(&self.b), scale: self.scale, dropout: self.dropout }
    }
}

/// How a forward pass runs: training (dropout on, with a reproducible mask) or not.
#[derive(Debug, Clone, Copy, Default)]
pub struct ForwardMode {
    /// Dropout applies only when this is set.
    pub train: bool,
    /// Seeds the dropout masks; the same seed gives the same masks (recomputation relies on it).
    pub dropout_seed: u64,
    /// Runs the base model alone: with LoRA, the reference policy for the KL term.
    pub adapters_off: bool,
}

/// A bias-free linear layer, optionally with a LoRA adapter.
#[derive(Debug, Clone)]
pub struct Linear {
    /// out×in.
    pub weight: Param,
    /// The adapter, when this projection is targeted.
    pub lora: Option<Lora>,
    /// Added to every output row (Qwen2's q/k/v); trained only in full mode.
    pub bias: Option<Param>,
    /// Distinguishes the dropout masks of different projections.
    pub site: u64,
}

impl Linear {
    /// Applies the projection to rows `x` (N×in).
    pub fn forward(&self, x: &Tensor, mode: ForwardMode) -> Result<Tensor> {
        let y = match &self.weight {
            Param::Frozen(w) if super::frozen::supported(w.dtype()) => super::frozen::frozen_matmul(x, w)?,
            p => x.matmul(&p.tensor().t()?)?,
        };
        let y = match &self.bias {
            Some(b) => y.broadcast_add(b.tensor())?,
            None => y,
        };
        let Some(lora) = self.lora.as_ref().filter(|_| !mode.adapters_off) else { return Ok(y) };
        let dtype = x.dtype();
        let mut xin = x.clone();
        if mode.train && lora.dropout > 0.0 {
            xin = dropout(&xin, lora.dropout, mode.dropout_seed ^ self.site.wrapping_mul(0x9E37_79B9_7F4A_7C15))?;
        }
        let a = lora.a.tensor().to_dtype(dtype)?;
        // The scale goes on B (out×r), not on the N×out product: the same value, a far smaller multiply.
        let b = (lora.b.tensor().to_dtype(dtype)? * lora.scale)?;
        let update = xin.matmul(&a.t()?)?.matmul(&b.t()?)?;
        y + update
    }

    /// A frozen view sharing this projection's storage, its adapter applied unmerged: what the
    /// sampler runs, with no copy of the weight.
    pub fn shared(&self) -> Linear {
        let view = |p: &Param| Param::Frozen(p.tensor().detach());
        Linear {
            weight: view(&self.weight),
            lora: self.lora.as_ref().map(Lora::shared),
            bias: self.bias.as_ref().map(view),
            site: self.site,
        }
    }

    /// The weight with the adapter folded in, frozen: for export and the reference copy.
    pub fn merged(&self) -> Result<Linear> {
        let w = self.weight.tensor().detach();
        let w = match &self.lora {
            Some(l) => (w.clone() + l.delta(w.dtype())?)?,
            None => w,
        };
        let bias = self.bias.as_ref().map(|b| Param::Frozen(b.tensor().detach()));
        Ok(Linear { weight: Param::Frozen(w), lora: None, bias, site: self.site })
    }
}

/// Inverted dropout with a mask drawn from `seed` (so that a recomputed forward sees the same mask).
fn dropout(x: &Tensor, p: f64, seed: u64) -> Result<Tensor> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let keep = 1.0 - p;
    let mask: Vec<f32> =
        (0..x.elem_count()).map(|_| if rng.gen::<f64>() < keep { (1.0 / keep) as f32 } else { 0.0 }).collect();
    let mask = Tensor::from_vec(mask, x.shape(), x.device())?.to_dtype(x.dtype())?;
    x * mask
}
