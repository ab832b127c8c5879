//! Data parallelism across ranks: the [`Collective`] operations the trainer needs, and
//! their backends.
//!
//! - [`SingleRank`]: one process, every operation is the identity.
//! - [`LocalWorld`]: ranks as threads of one process (unit tests).
//! - [`TcpWorld`]: ranks as processes (or hosts) joined by a rendezvous on the master
//!   address; the CPU backend, and the control plane of every multi-process run (rollout
//!   exchange, identity checks, the death of a rank).
//! - `NcclWorld` (feature `nccl-collective`, part of `nccl`): tensors on GPUs reduced by NCCL, the control plane
//!   over a [`TcpWorld`].
//!
//! Every reduction is the same on every rank, so every rank takes the same update.

mod auth;
mod env;
mod local;
#[cfg(feature = "nccl-collective")]
mod nccl;
mod rendezvous;
mod tcp;
mod wire;
pub mod zero;

use candle_core::{DType, Tensor};

pub use auth::{DistToken, TOKEN_ENV};
pub use env::{seconds_from_env, WorldEnv, DEFAULT_MASTER_PORT};
pub use local::LocalWorld;
#[cfg(feature = "nccl-collective")]
pub use nccl::NcclWorld;
pub use rendezvous::{rendezvous, rendezvous_with, Identity};
pub use tcp::{Abort, TcpWorld};

use super::error::{TensorContext, TrainError};

/// The collective operations of data parallelism. Backends implement the byte exchange;
/// the tensor operations default to it (through host memory) and GPU backends override them.
pub trait Collective: Send + Sync {
    /// This rank's index.
    fn rank(&self) -> usize;
    /// Number of ranks.
    fn world_size(&self) -> usize;
    /// Every rank's bytes, in rank order (on every rank).
    fn all_gather_bytes(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>, TrainError>;

    /// Ends a run that finished on every rank (waits for all of them first).
    fn finish(&self) -> Result<(), TrainError> {
        barrier(self)
    }

    /// Ends the run on every rank because this one failed with `why`.
    fn fail(&self, why: &str) {
        let _ = why;
    }

    /// Cancelled when the run ends early on some rank; `None` for a world that cannot.
    fn aborted(&self) -> Option<tokio_util::sync::CancellationToken> {
        None
    }

    /// Why the run ended early, once it has.
    fn abort_reason(&self) -> Option<String> {
        None
    }

    /// The element-wise sum over ranks of a tensor (summed in rank order, so the result
    /// is the same on every rank and every run).
    fn all_reduce_sum(&self, t: &Tensor) -> Result<Tensor, TrainError> {
        if self.world_size() == 1 {
            return Ok(t.clone());
        }
        let parts = self.all_gather_bytes(&tensor_bytes(t)?)?;
        let sum = sum_in_rank_order(&parts, t.elem_count())?;
        from_host(sum, t)
    }

    /// Rank r's chunk of the sum over ranks of a 1-D tensor whose length is a multiple of
    /// the world size (chunk r is elements `r·n/w .. (r+1)·n/w`).
    fn reduce_scatter_sum(&self, t: &Tensor) -> Result<Tensor, TrainError> {
        let (n, w) = (t.elem_count(), self.world_size());
        if scatter_is_identity(t, w)? {
            return Ok(t.clone());
        }
        let parts = self.all_gather_bytes(&tensor_bytes(t)?)?;
        let sum = sum_in_rank_order(&parts, n)?;
        let chunk = n / w;
        let mine = sum[self.rank() * chunk..(self.rank() + 1) * chunk].to_vec();
        Tensor::from_vec(mine, chunk, t.device()).and_then(|x| x.to_dtype(t.dtype())).ctx("reduce-scatter")
    }

    /// Every rank's 1-D tensor (all of the same length), concatenated in rank order.
    fn all_gather(&self, t: &Tensor) -> Result<Tensor, TrainError> {
        if self.world_size() == 1 {
            return Ok(t.clone());
        }
        let parts = self.all_gather_bytes(&tensor_bytes(t)?)?;
        let mut all = Vec::with_capacity(t.elem_count() * parts.len());
        for p in &parts {
            let v = bytes_f32(p);
            if v.len() != t.elem_count() {
                return Err(TrainError::Other("ranks passed tensors of different sizes to all-gather".into()));
            }
            all.extend(v);
        }
        let n = all.len();
        Tensor::from_vec(all, n, t.device()).and_then(|x| x.to_dtype(t.dtype())).ctx("all-gather")
    }

    /// Rank `root`'s tensor, on every rank.
    fn broadcast(&self, t: &Tensor, root: usize) -> Result<Tensor, TrainError> {
        if self.world_size() == 1 {
            return Ok(t.clone());
        }
        let mine = if self.rank() == root { tensor_bytes(t)? } else { Vec::new() };
        let parts = self.all_gather_bytes(&mine)?;
        let v = bytes_f32(parts.get(root).map(Vec::as_slice).unwrap_or_default());
        if v.len() != t.elem_count() {
            return Err(TrainError::Other(format!("broadcast from rank {root}: it sent a tensor of another size")));
        }
        from_host(v, t)
    }
}

/// Checks a reduce-scatter's input; true when there is nothing to exchange (one rank).
fn scatter_is_identity(t: &Tensor, world: usize) -> Result<bool, TrainError> {
    let n = t.elem_count();
    if !n.is_multiple_of(world) {
        return Err(TrainError::Other(format!("reduce-scatter of {n} elements over {world} ranks: not a multiple")));
    }
    Ok(world == 1)
}

/// The world of one process.
#[derive(Debug, Clone, Copy, Default)]
pub struct SingleRank;

impl Collective for SingleRank {
    fn rank(&self) -> usize {
        0
    }
    fn world_size(&self) -> usize {
        1
    }
    fn all_gather_bytes(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>, TrainError> {
        Ok(vec![mine.to_vec()])
    }
}

/// Sums host statistics over the ranks in f64, in rank order.
pub fn all_reduce_host_f64(world: &dyn Collective, data: &mut [f64]) -> Result<(), TrainError> {
    if world.world_size() == 1 {
        return Ok(());
    }
    let bytes: Vec<u8> = data.iter().flat_map(|v| v.to_le_bytes()).collect();
    let parts = world.all_gather_bytes(&bytes)?;
    let mut sum = vec![0.0f64; data.len()];
    for p in &parts {
        if p.len() != data.len() * 8 {
            return Err(TrainError::Other("ranks passed statistics of different sizes to a reduction".into()));
        }
        for (s, c) in sum.iter_mut().zip(p.chunks_exact(8)) {
            let mut b = [0u8; 8];
            b.copy_from_slice(c);
            *s += f64::from_le_bytes(b);
        }
    }
    data.copy_from_slice(&sum);
    Ok(())
}

/// Runs a blocking collective from async code without stalling the runtime's other tasks.
pub fn blocking<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => tokio::task::block_in_place(f),
        _ => f(),
    }
}

/// The plans rank `rank` of `world` runs, with their indices: every `world`-th, starting
/// at its rank (so each group's members spread over the ranks, and each rank gets the
/// same number).
pub fn share_of<T: Copy>(plans: &[T], rank: usize, world: usize) -> Vec<(usize, T)> {
    plans.iter().copied().enumerate().filter(|(i, _)| i % world.max(1) == rank).collect()
}

/// Waits until every rank has reached this point.
pub fn barrier<W: Collective + ?Sized>(world: &W) -> Result<(), TrainError> {
    world.all_gather_bytes(&[]).map(|_| ())
}

/// Every rank's items, serialised, exchanged and put back in rank order.
pub fn all_gather_json<T: serde::Serialize + serde::de::DeserializeOwned>(
    world: &dyn Collective,
    mine: &T,
) -> Result<Vec<T>, TrainError> {
    let bytes = serde_json::to_vec(mine).map_err(|e| TrainError::Other(format!("cannot encode for the ranks: {e}")))?;
    world
        .all_gather_bytes(&bytes)?
        .iter()
        .enumerate()
        .map(|(r, b)| {
            serde_json::from_slice(b).map_err(|e| TrainError::Other(format!("rank {r} sent something unreadable: {e}")))
        })
        .collect()
}

/// Sums gradients over the ranks (flattening them into one buffer); ranks without a
/// gradient for a variable contribute zeros.
pub fn all_reduce_grads(
    world: &dyn Collective,
    grads: &mut [Option<Tensor>],
    shapes: &[Tensor],
) -> Result<(), TrainError> {
    if world.world_size() == 1 {
        return Ok(());
    }
    let device = shapes.first().map(|t| t.device().clone()).unwrap_or(candle_core::Device::Cpu);
    let mut parts = Vec::with_capacity(grads.len());
    for (g, like) in grads.iter().zip(shapes) {
        parts.push(match g {
            Some(g) => g.to_dtype(DType::F32).and_then(|g| g.flatten_all()).ctx("all-reduce")?,
            None => Tensor::zeros(like.elem_count(), DType::F32, &device).ctx("all-reduce")?,
        });
    }
    let flat = Tensor::cat(&parts, 0).ctx("all-reduce")?;
    let sum = world.all_reduce_sum(&flat)?;
    let mut at = 0;
    for (g, like) in grads.iter_mut().zip(shapes) {
        let n = like.elem_count();
        let t = sum.narrow(0, at, n).and_then(|t| t.reshape(like.shape())).ctx("all-reduce")?;
        *g = Some(t.to_dtype(like.dtype()).ctx("all-reduce")?);
        at += n;
    }
    Ok(())
}

fn tensor_bytes(t: &Tensor) -> Result<Vec<u8>, TrainError> {
    let v =
        t.to_dtype(DType::F32).and_then(|t| t.flatten_all()?.to_vec1::<f32>()).ctx("copying a tensor to the host")?;
    Ok(v.iter().flat_map(|x| x.to_le_bytes()).collect())
}

fn bytes_f32(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

fn sum_in_rank_order(parts: &[Vec<u8>], n: usize) -> Result<Vec<f32>, TrainError> {
    let mut sum = vec![0.0f32; n];
    for p in parts {
        if p.len() != n * 4 {
            return Err(TrainError::Other("ranks passed buffers of different sizes to a reduction".into()));
        }
        for (s, v) in sum.iter_mut().zip(bytes_f32(p)) {
            *s += v;
        }
    }
    Ok(sum)
}

fn from_host(v: Vec<f32>, like: &Tensor) -> Result<Tensor, TrainError> {
    Tensor::from_vec(v, like.shape(), like.device()).and_then(|x| x.to_dtype(like.dtype())).ctx("all-reduce")
}
