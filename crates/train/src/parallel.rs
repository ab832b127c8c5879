//! Data parallelism behind a small trait: every rank computes gradients on its shard of
//! the batch, the gradients are summed across ranks, and every rank applies the same
//! update. [`LocalWorld`] runs N ranks as threads of one process (for CPU tests);
//! NCCL implements the same trait for GPUs.

use std::sync::{Arc, Condvar, Mutex};

use candle_core::{DType, Tensor};

use super::error::{TensorContext, TrainError};

/// The collective operations the trainer needs.
pub trait Collective: Send + Sync {
    /// This rank's index.
    fn rank(&self) -> usize;
    /// Number of ranks.
    fn world_size(&self) -> usize;
    /// Replaces `data` on every rank by the element-wise sum over ranks (summed in rank
    /// order, so the result is the same on every rank and every run).
    fn all_reduce_sum(&self, data: &mut [f32]) -> Result<(), TrainError>;
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
    fn all_reduce_sum(&self, _data: &mut [f32]) -> Result<(), TrainError> {
        Ok(())
    }
}

struct Round {
    slots: Vec<Option<Vec<f32>>>,
    result: Option<Arc<Vec<f32>>>,
    taken: usize,
    generation: u64,
}

struct Shared {
    size: usize,
    state: Mutex<Round>,
    ready: Condvar,
}

/// One rank of an in-process world whose ranks are threads.
#[derive(Clone)]
pub struct LocalWorld {
    rank: usize,
    shared: Arc<Shared>,
}

impl LocalWorld {
    /// The `n` ranks of a new world; hand one to each thread.
    pub fn new(n: usize) -> Vec<LocalWorld> {
        let shared = Arc::new(Shared {
            size: n,
            state: Mutex::new(Round { slots: vec![None; n], result: None, taken: 0, generation: 0 }),
            ready: Condvar::new(),
        });
        (0..n).map(|rank| LocalWorld { rank, shared: shared.clone() }).collect()
    }
}

impl Collective for LocalWorld {
    fn rank(&self) -> usize {
        self.rank
    }

    fn world_size(&self) -> usize {
        self.shared.size
    }

    fn all_reduce_sum(&self, data: &mut [f32]) -> Result<(), TrainError> {
        let poisoned = || TrainError::Other("a data-parallel rank panicked during all-reduce".into());
        let mut st = self.shared.state.lock().map_err(|_| poisoned())?;
        // Wait until the previous round has been read by everyone.
        while st.result.is_some() {
            st = self.shared.ready.wait(st).map_err(|_| poisoned())?;
        }
        let generation = st.generation;
        st.slots[self.rank] = Some(data.to_vec());
        if st.slots.iter().all(Option::is_some) {
            let mut sum = vec![0.0f32; data.len()];
            for slot in st.slots.iter_mut() {
                let part = slot.take().unwrap_or_default();
                if part.len() != sum.len() {
                    return Err(TrainError::Other("ranks passed buffers of different sizes to all-reduce".into()));
                }
                for (s, p) in sum.iter_mut().zip(part) {
                    *s += p;
                }
            }
            st.result = Some(Arc::new(sum));
            st.taken = 0;
            self.shared.ready.notify_all();
        } else {
            while st.generation == generation && st.result.is_none() {
                st = self.shared.ready.wait(st).map_err(|_| poisoned())?;
            }
        }
        let result = st.result.clone().ok_or_else(poisoned)?;
        data.copy_from_slice(&result);
        st.taken += 1;
        if st.taken == self.shared.size {
            st.result = None;
            st.generation += 1;
            self.shared.ready.notify_all();
        }
        Ok(())
    }
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
    let mut flat = Vec::new();
    for (g, like) in grads.iter().zip(shapes) {
        match g {
            Some(g) => {
                flat.extend(g.to_dtype(DType::F32).and_then(|g| g.flatten_all()?.to_vec1::<f32>()).ctx("all-reduce")?)
            }
            None => flat.extend(std::iter::repeat_n(0.0, like.elem_count())),
        }
    }
    world.all_reduce_sum(&mut flat)?;
    let mut at = 0;
    for (g, like) in grads.iter_mut().zip(shapes) {
        let n = like.elem_count();
        let t = Tensor::from_slice(&flat[at..at + n], like.shape(), like.device()).ctx("all-reduce")?;
        *g = Some(t.to_dtype(like.dtype()).ctx("all-reduce")?);
        at += n;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_world_sums_in_rank_order_over_many_rounds() {
        let worlds = LocalWorld::new(3);
        let handles: Vec<_> = worlds
            .into_iter()
            .map(|w| {
                std::thread::spawn(move || {
                    let mut out = Vec::new();
                    for round in 0..50 {
                        let mut data = vec![w.rank() as f32 + round as f32, 1.0];
                        w.all_reduce_sum(&mut data).unwrap();
                        out.push(data);
                    }
                    out
                })
            })
            .collect();
        for h in handles {
            let out = h.join().unwrap();
            for (round, d) in out.iter().enumerate() {
                assert_eq!(d, &vec![3.0 + 3.0 * round as f32, 3.0]);
            }
        }
    }
}
