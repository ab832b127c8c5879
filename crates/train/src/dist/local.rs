//! Ranks as threads of one process, for tests of the data-parallel update.

use std::sync::{Arc, Condvar, Mutex};

use super::Collective;
use crate::error::TrainError;

struct Round {
    slots: Vec<Option<Vec<u8>>>,
    result: Option<Arc<Vec<Vec<u8>>>>,
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

    fn all_gather_bytes(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>, TrainError> {
        let poisoned = || TrainError::Other("a data-parallel rank panicked during an exchange".into());
        let mut st = self.shared.state.lock().map_err(|_| poisoned())?;
        // Wait until the previous round has been read by everyone.
        while st.result.is_some() {
            st = self.shared.ready.wait(st).map_err(|_| poisoned())?;
        }
        let generation = st.generation;
        st.slots[self.rank] = Some(mine.to_vec());
        if st.slots.iter().all(Option::is_some) {
            let all: Vec<Vec<u8>> = st.slots.iter_mut().map(|s| s.take().unwrap_or_default()).collect();
            st.result = Some(Arc::new(all));
            st.taken = 0;
            self.shared.ready.notify_all();
        } else {
            while st.generation == generation && st.result.is_none() {
                st = self.shared.ready.wait(st).map_err(|_| poisoned())?;
            }
        }
        let result = st.result.clone().ok_or_else(poisoned)?;
        st.taken += 1;
        if st.taken == self.shared.size {
            st.result = None;
            st.generation += 1;
            self.shared.ready.notify_all();
        }
        Ok(result.as_ref().clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dist::all_reduce_host_f64;
    use candle_core::{Device, Tensor};

    #[test]
    fn local_world_sums_in_rank_order_over_many_rounds() {
        let worlds = LocalWorld::new(3);
        let handles: Vec<_> = worlds
            .into_iter()
            .map(|w| {
                std::thread::spawn(move || {
                    let mut out = Vec::new();
                    for round in 0..50 {
                        let mut data = vec![w.rank() as f64 + round as f64, 1.0];
                        all_reduce_host_f64(&w, &mut data).unwrap();
                        out.push(data);
                    }
                    out
                })
            })
            .collect();
        for h in handles {
            let out = h.join().unwrap();
            for (round, d) in out.iter().enumerate() {
                assert_eq!(d, &vec![3.0 + 3.0 * round as f64, 3.0]);
            }
        }
    }

    #[test]
    fn reduce_scatter_then_all_gather_is_an_all_reduce() {
        let handles: Vec<_> = LocalWorld::new(2)
            .into_iter()
            .map(|w| {
                std::thread::spawn(move || {
                    let r = w.rank() as f32;
                    let t = Tensor::new(&[1.0 + r, 2.0, 3.0 * r, 4.0], &Device::Cpu).unwrap();
                    let shard = w.reduce_scatter_sum(&t).unwrap().to_vec1::<f32>().unwrap();
                    let gathered = w.all_gather(&Tensor::new(shard.as_slice(), &Device::Cpu).unwrap()).unwrap();
                    let reduced = w.all_reduce_sum(&t).unwrap();
                    let from0 = w.broadcast(&t, 0).unwrap().to_vec1::<f32>().unwrap();
                    (w.rank(), shard, gathered.to_vec1::<f32>().unwrap(), reduced.to_vec1::<f32>().unwrap(), from0)
                })
            })
            .collect();
        for h in handles {
            let (rank, shard, gathered, reduced, from0) = h.join().unwrap();
            assert_eq!(shard, if rank == 0 { vec![3.0, 4.0] } else { vec![3.0, 8.0] });
            assert_eq!(gathered, vec![3.0, 4.0, 3.0, 8.0]);
            assert_eq!(reduced, gathered);
            assert_eq!(from0, vec![1.0, 2.0, 0.0, 4.0]);
        }
    }
}
