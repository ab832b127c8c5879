//! Tests of the sharded optimiser: stages 1 and 2 against the replicated one, over thread ranks.

use super::*;
use crate::dist::{LocalWorld, SingleRank};
use crate::optim::AdamW;

/// Sizes that are not multiples of 2 or 3, one smaller than the world.
const SHAPES: [&[usize]; 5] = [&[7], &[1], &[2, 5], &[13], &[3, 3]];
const ADAM: AdamWSettings = AdamWSettings { lr: 0.05, beta1: 0.9, beta2: 0.99, eps: 1e-8, weight_decay: 0.1 };
const CLIP: f64 = 0.5;

fn tensor(v: Vec<f32>, i: usize, dtype: DType) -> Tensor {
    Tensor::from_vec(v, SHAPES[i], &Device::Cpu).unwrap().to_dtype(dtype).unwrap()
}

fn vars(dtype: DType) -> Vec<(String, Var)> {
    let init = |i: usize, n: usize| (0..n).map(|j| ((i * 31 + j) as f32 * 0.7).sin()).collect();
    let n = |i: usize| SHAPES[i].iter().product::<usize>();
    (0..SHAPES.len()).map(|i| (format!("w{i}"), Var::from_tensor(&tensor(init(i, n(i)), i, dtype)).unwrap())).collect()
}

/// Rank `rank`'s gradient of variable `var` at `step`: variable 1 only on rank 1,
/// variable 4 on no rank at step 2.
fn grad(rank: usize, var: usize, step: usize) -> Option<Vec<f32>> {
    let n: usize = SHAPES[var].iter().product();
    let absent = (var == 1 && rank != 1) || (var == 4 && step == 2);
    (!absent).then(|| (0..n).map(|j| ((rank * 13 + var * 7 + j * 3 + step * 5) as f32 * 0.37).cos()).collect())
}

fn grads(rank: usize, step: usize, dtype: DType) -> Vec<Option<Tensor>> {
    (0..SHAPES.len()).map(|i| grad(rank, i, step).map(|g| tensor(g, i, dtype))).collect()
}

fn values(vars: &[(String, Var)]) -> Vec<f32> {
    let f32s = |v: &Var| v.as_tensor().to_dtype(DType::F32).unwrap().flatten_all().unwrap().to_vec1::<f32>();
    vars.iter().flat_map(|(_, v)| f32s(v).unwrap()).collect()
}

/// `f` on each rank of a world of `n` threads, the results in rank order.
fn on_ranks<T: Send + 'static>(n: usize, f: impl Fn(LocalWorld) -> T + Send + Clone + 'static) -> Vec<T> {
    let handles: Vec<_> = LocalWorld::new(n)
        .into_iter()
        .map(|w| {
            std::thread::spawn({
                let f = f.clone();
                move || f(w)
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

/// A sharded optimiser with tiny buckets and slices, so that variables span several
/// segments and buckets and updates several slices.
fn sharded(vars: &[(String, Var)], world: &dyn Collective, stage: ZeroStage) -> AdamW {
    let shards = Shards::new(vars, world, stage, 4 * world.world_size()).unwrap();
    let mut opt = AdamW::with_shards(vars.to_vec(), ADAM, shards);
    opt.slice = 3;
    opt
}

/// The replicated optimiser on one rank, fed the gradients summed in rank order.
fn replicated(world: usize, steps: usize) -> (Vec<f32>, Vec<f64>) {
    let vars = vars(DType::F32);
    let mut opt = AdamW::new(vars.clone(), ADAM).unwrap();
    let mut norms = Vec::new();
    for step in 0..steps {
        let mut summed: Vec<Option<Tensor>> = (0..SHAPES.len())
            .map(|i| {
                let parts: Vec<Vec<f32>> = (0..world).filter_map(|r| grad(r, i, step)).collect();
                let sum = |j: usize| parts.iter().fold(0.0f32, |a, p| a + p[j]);
                (!parts.is_empty()).then(|| tensor((0..parts[0].len()).map(sum).collect(), i, DType::F32))
            })
            .collect();
        norms.push(opt.reduce_clip_apply(&SingleRank, &mut summed, CLIP).unwrap());
    }
    (values(&vars), norms)
}

#[test]
fn sharded_steps_equal_the_replicated_ones() {
    const STEPS: usize = 4;
    for world in [2, 3] {
        let (want, want_norms) = replicated(world, STEPS);
        assert!(want_norms.iter().all(|n| *n > CLIP), "clipping is active: {want_norms:?}");
        for stage in [ZeroStage::One, ZeroStage::Two] {
            let ranks = on_ranks(world, move |w| {
                let vars = vars(DType::F32);
                let mut opt = sharded(&vars, &w, stage);
                let mut norms = Vec::new();
                for step in 0..STEPS {
                    let mut g = grads(w.rank(), step, DType::F32);
                    norms.push(opt.reduce_clip_apply(&w, &mut g, CLIP).unwrap());
                    assert!(g.iter().all(Option::is_none), "the gradients are consumed");
                }
                (values(&vars), norms, opt.step)
            });
            for (got, norms, steps) in ranks {
                assert_eq!(steps, STEPS as u64);
                let diff = want.iter().zip(&got).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
                assert!(diff < 1e-6, "world {world}, {stage:?}: weights differ by {diff}");
                for (a, b) in want_norms.iter().zip(&norms) {
                    assert!((a - b).abs() < 1e-5 * a, "norm {b} vs {a}");
                }
            }
        }
    }
}

/// bf16 weights with f32 master shards: saving after two steps and resuming gives the
/// uninterrupted run's next two steps bit for bit.
#[test]
fn a_saved_shard_resumes_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_path_buf();
    let files = on_ranks(2, move |w| {
        let step = |opt: &mut AdamW, k: usize| {
            opt.reduce_clip_apply(&w, &mut grads(w.rank(), k, DType::BF16), CLIP).unwrap();
        };
        let vars_a = vars(DType::BF16);
        let mut a = sharded(&vars_a, &w, ZeroStage::Two);
        (0..2).for_each(|k| step(&mut a, k));
        let file = path.join(a.state_file_name());
        assert!(a.state_tensors().contains_key("master.w0"));
        candle_core::safetensors::save(&a.state_tensors(), &file).unwrap();
        let vars_b = vars(DType::BF16);
        for ((_, b), (_, a)) in vars_b.iter().zip(&vars_a) {
            b.set(&a.as_tensor().copy().unwrap()).unwrap();
        }
        (2..4).for_each(|k| step(&mut a, k));
        let mut b = sharded(&vars_b, &w, ZeroStage::Two);
        b.load_state(&candle_core::safetensors::load(&file, &Device::Cpu).unwrap(), 2).unwrap();
        (2..4).for_each(|k| step(&mut b, k));
        assert_eq!(values(&vars_a), values(&vars_b), "rank {}", w.rank());
        assert_eq!(b.step, 4);
        file
    });
    assert!(files[0].ends_with("optimizer-rank0-of-2.safetensors"), "{files:?}");
    assert!(files[1].ends_with("optimizer-rank1-of-2.safetensors"), "{files:?}");
}

#[test]
fn a_shard_of_another_world_or_layout_is_refused() {
    let vars = vars(DType::F32);
    let mut one = sharded(&vars, &SingleRank, ZeroStage::Two);
    let mut state = one.state_tensors();
    state.insert(LAYOUT_KEY.into(), Tensor::new(&[0u32, 2], &Device::Cpu).unwrap());
    let err = one.load_state(&state, 1).unwrap_err();
    assert!(err.contains("world of 2 ranks") && err.contains("this run has 1"), "{err}");

    let mut replicated = AdamW::new(vars.clone(), ADAM).unwrap();
    let err = one.load_state(&replicated.state_tensors(), 1).unwrap_err();
    assert!(err.contains("replicated") && err.contains("optim.zero 0"), "{err}");
    let err = replicated.load_state(&state, 1).unwrap_err();
    assert!(err.contains("ZeRO") && err.contains("2 GPUs"), "{err}");
    assert_eq!(replicated.state_file_name(), "optimizer.safetensors");
    assert!(AdamW::with_zero(vars, ADAM, &SingleRank, 3).is_err());
}
