use std::collections::HashMap;

use candle_core::{DType, Device, Tensor};

use super::Zero3;
use crate::dist::{Collective, LocalWorld, SingleRank};
use crate::model::tests::write_random_qwen3_layers;
use crate::model::{Qwen3, TrainMode};
use crate::optim::{AdamW, AdamWSettings};
use crate::update::{grpo_update, sample_logprobs, sft_step, Reference, Sample, UpdateSettings, UpdateStats};

const ADAM: AdamWSettings = AdamWSettings { lr: 0.01, beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.01 };
const LAYERS: usize = 12;

/// Five samples: over 2 and 4 ranks some rank has fewer micro-batches (phantom passes).
fn samples() -> Vec<Sample> {
    let mk = |tokens: Vec<u32>, mask: Vec<u8>, advantage: f32| Sample { tokens, mask, advantage, sampler_logp: None };
    vec![
        mk(vec![3, 5, 7, 2, 9], vec![0, 0, 1, 1, 1], 1.0),
        mk(vec![3, 5, 8, 8], vec![0, 0, 1, 1], -1.0),
        mk(vec![4, 6, 2, 2, 1, 7], vec![0, 1, 1, 0, 1, 1], 0.5),
        mk(vec![4, 6, 9], vec![0, 0, 1], -0.5),
        mk(vec![5, 2, 11, 12, 3, 3, 4], vec![0, 0, 1, 1, 1, 0, 1], 0.25),
    ]
}

fn settings() -> UpdateSettings {
    // A sharded model's backward pass always recomputes.
    UpdateSettings { recompute: true, ..crate::update::tests::settings() }
}

fn weights(model: &Qwen3) -> HashMap<String, Vec<f32>> {
    model
        .named_weights()
        .into_iter()
        .map(|(n, p)| (n, p.tensor().to_dtype(DType::F32).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap()))
        .collect()
}

fn bytes_of(model: &Qwen3) -> u64 {
    model
        .named_weights()
        .iter()
        .map(|(_, p)| (p.tensor().elem_count() * p.tensor().dtype().size_in_bytes()) as u64)
        .sum()
}

/// What one rank measured: its whole weights after the update, the stats, its resident
/// bytes, the most whole weights it gathered at once.
struct RankRun {
    weights: HashMap<String, Vec<f32>>,
    stats: UpdateStats,
    resident_weight_bytes: u64,
    peak_gathered: u64,
    full_bytes: u64,
}

fn sharded_run(dir: &std::path::Path, world: &dyn Collective, reference: bool) -> RankRun {
    let full = Qwen3::load(dir, &TrainMode::Full, DType::F32, &Device::Cpu, 5).unwrap();
    let full_bytes = bytes_of(&full);
    let policy = Zero3::shard(&full, world, &Device::Cpu, true).unwrap();
    drop(full);
    let z = policy.zero3.clone().unwrap();
    let frozen = if reference {
        let r = Qwen3::load(dir, &TrainMode::Full, DType::F32, &Device::Cpu, 5).unwrap();
        Some(Zero3::shard(&r, world, &Device::Cpu, false).unwrap())
    } else {
        None
    };
    // The skeleton holds no weights: only the shards do.
    assert_eq!(bytes_of(&policy), 0);
    // Weights, m and v: three f32 chunks per unit.
    let resident_weight_bytes = z.resident_bytes() / 3;
    let mut opt = AdamW::zero3(z.clone(), ADAM);
    let r = frozen.as_ref().map_or(Reference::None, Reference::Model);
    let stats = grpo_update(&policy, r, &mut opt, &samples(), world, &settings(), 9).unwrap();
    let peak_gathered = z.peak_gathered_bytes();
    let whole = z.gather_all(&policy, world, &Device::Cpu).unwrap();
    RankRun { weights: weights(&whole), stats, resident_weight_bytes, peak_gathered, full_bytes }
}

fn assert_same(got: &RankRun, want: &HashMap<String, Vec<f32>>, want_stats: &UpdateStats, what: &str) {
    assert_eq!(got.weights.len(), want.len(), "{what}: weights");
    let mut worst = 0.0f32;
    for (name, w) in want {
        let g = &got.weights[name];
        worst = g.iter().zip(w).map(|(a, b)| (a - b).abs()).fold(worst, f32::max);
    }
    assert!(worst < 2e-5, "{what}: weights differ from one process's update by {worst}");
    let s = &got.stats;
    assert!((s.loss - want_stats.loss).abs() < 1e-5, "{what}: loss {} vs {}", s.loss, want_stats.loss);
    let kl_tol = 1e-6 * want_stats.kl.abs().max(1.0);
    assert!((s.kl - want_stats.kl).abs() < kl_tol, "{what}: kl {} vs {}", s.kl, want_stats.kl);
    assert!((s.grad_norm - want_stats.grad_norm).abs() < 1e-4 * want_stats.grad_norm, "{what}: grad norm");
    assert_eq!(s.model_tokens, want_stats.model_tokens, "{what}: tokens");
}

/// Acceptance: ZeRO-3 over 2 and 4 ranks gives the update of one unsharded process (KL
/// against a sharded frozen reference included), with ~1/W of the weights resident per
/// rank and at most about one unit's whole weights gathered at a time.
#[test]
fn sharded_updates_over_2_and_4_ranks_equal_the_one_process_update() {
    for tied in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        write_random_qwen3_layers(dir.path(), 13, tied, 31, LAYERS);
        let one = Qwen3::load(dir.path(), &TrainMode::Full, DType::F32, &Device::Cpu, 5).unwrap();
        let reference =
            Qwen3::load(dir.path(), &TrainMode::Full, DType::F32, &Device::Cpu, 5).unwrap().merged().unwrap();
        let mut opt = AdamW::new(one.trainable(), ADAM).unwrap();
        let want_stats =
            grpo_update(&one, Reference::Model(&reference), &mut opt, &samples(), &SingleRank, &settings(), 9).unwrap();
        let want = weights(&one);
        assert!(want_stats.kl > 0.0 && want_stats.grad_norm > 0.0);

        let alone = sharded_run(dir.path(), &SingleRank, true);
        assert_same(&alone, &want, &want_stats, "ZeRO-3 on one rank");
        for w in [2usize, 4] {
            let path = dir.path().to_path_buf();
            let handles: Vec<_> = LocalWorld::new(w)
                .into_iter()
                .map(|world| {
                    let path = path.clone();
                    std::thread::spawn(move || sharded_run(&path, &world, true))
                })
                .collect();
            for (rank, h) in handles.into_iter().enumerate() {
                let got = h.join().unwrap();
                let what = format!("rank {rank} of {w} (tied {tied})");
                assert_same(&got, &want, &want_stats, &what);
                let share = got.resident_weight_bytes as f64 / got.full_bytes as f64;
                assert!(share <= 1.0 / w as f64 + 0.01, "{what}: {share:.3} of the weights resident");
                let gathered = got.peak_gathered as f64 / got.full_bytes as f64;
                println!("W={w} rank {rank} tied {tied}: resident weights {share:.4}, peak gathered {gathered:.4} of the model");
                // A layer is 1/12 of this model; the tied head gathers the embedding with the norm.
                assert!(gathered < 0.12, "{what}: {gathered:.3} of the weights gathered at once");
            }
        }
    }
}

/// Scoring (no gradient) over a sharded model gives the unsharded log-probs, exactly
/// the same on every rank; and supervised steps agree too.
#[test]
fn sharded_scoring_and_sft_match_the_whole_model() {
    let dir = tempfile::tempdir().unwrap();
    write_random_qwen3_layers(dir.path(), 13, false, 32, 3);
    let data = samples();
    let refs: Vec<&Sample> = data.iter().collect();
    let one = Qwen3::load(dir.path(), &TrainMode::Full, DType::F32, &Device::Cpu, 5).unwrap();
    let want = sample_logprobs(&one, &refs, Default::default(), (2, 0, 4), &SingleRank).unwrap();
    let mut opt = AdamW::new(one.trainable(), ADAM).unwrap();
    let want_loss = sft_step(&one, &mut opt, &refs, &settings(), &SingleRank, 3).unwrap();
    let want_weights = weights(&one);
    let path = dir.path().to_path_buf();
    let handles: Vec<_> = LocalWorld::new(3)
        .into_iter()
        .map(|world| {
            let path = path.clone();
            std::thread::spawn(move || {
                let data = samples();
                let refs: Vec<&Sample> = data.iter().collect();
                let full = Qwen3::load(&path, &TrainMode::Full, DType::F32, &Device::Cpu, 5).unwrap();
                let policy = Zero3::shard(&full, &world, &Device::Cpu, true).unwrap();
                let scores = sample_logprobs(&policy, &refs, Default::default(), (2, 0, 4), &world).unwrap();
                let z = policy.zero3.clone().unwrap();
                let mut opt = AdamW::zero3(z.clone(), ADAM);
                let loss = sft_step(&policy, &mut opt, &refs, &settings(), &world, 3).unwrap();
                (scores, loss, weights(&z.gather_all(&policy, &world, &Device::Cpu).unwrap()))
            })
        })
        .collect();
    for h in handles {
        let (scores, loss, w) = h.join().unwrap();
        for (a, b) in scores.iter().zip(&want) {
            assert_eq!(a.len(), b.len());
            let d = a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0f32, f32::max);
            assert!(d < 1e-5, "log-probs differ by {d}");
        }
        assert!((loss - want_loss).abs() < 1e-5, "sft loss {loss} vs {want_loss}");
        let d = want_weights
            .iter()
            .map(|(n, v)| w[n].iter().zip(v).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max))
            .fold(0.0f32, f32::max);
        assert!(d < 2e-5, "sft weights differ by {d}");
    }
}

/// A shard's optimiser state and weights saved and restored continue the run exactly;
/// another world size's state is refused with what to do.
#[test]
fn a_saved_shard_restores_and_another_world_size_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    write_random_qwen3_layers(dir.path(), 13, true, 33, 2);
    let full = Qwen3::load(dir.path(), &TrainMode::Full, DType::F32, &Device::Cpu, 5).unwrap();
    let policy = Zero3::shard(&full, &SingleRank, &Device::Cpu, true).unwrap();
    let z = policy.zero3.clone().unwrap();
    let mut opt = AdamW::zero3(z.clone(), ADAM);
    grpo_update(&policy, Reference::None, &mut opt, &samples(), &SingleRank, &settings(), 1).unwrap();
    let saved_weights: HashMap<String, Tensor> = z
        .gather_all(&policy, &SingleRank, &Device::Cpu)
        .unwrap()
        .named_weights()
        .into_iter()
        .map(|(n, p)| (n, p.tensor().clone()))
        .collect();
    let state: HashMap<String, Tensor> = opt.state_tensors().into_iter().map(|(k, t)| (k, t.copy().unwrap())).collect();
    let saved_step = opt.step;
    grpo_update(&policy, Reference::None, &mut opt, &samples(), &SingleRank, &settings(), 2).unwrap();
    let want = weights(&z.gather_all(&policy, &SingleRank, &Device::Cpu).unwrap());

    let fresh = Zero3::shard(&full, &SingleRank, &Device::Cpu, true).unwrap();
    let fz = fresh.zero3.clone().unwrap();
    fz.load_weights(&saved_weights).unwrap();
    let mut opt2 = AdamW::zero3(fz.clone(), ADAM);
    opt2.load_state(&state, saved_step).unwrap();
    grpo_update(&fresh, Reference::None, &mut opt2, &samples(), &SingleRank, &settings(), 2).unwrap();
    assert_eq!(weights(&fz.gather_all(&fresh, &SingleRank, &Device::Cpu).unwrap()), want);

    let mut other = state.clone();
    other.insert(super::LAYOUT_KEY.into(), Tensor::new(&[0u32, 2, z.units() as u32], &Device::Cpu).unwrap());
    let err = AdamW::zero3(fz, ADAM).load_state(&other, 1).unwrap_err();
    assert!(err.contains("2 ranks") && err.contains("resume on 2 GPUs"), "{err}");
}

/// The skeleton keeps the model's names in order, and every weight falls in one unit.
#[test]
fn the_skeleton_keeps_every_name_and_each_weight_has_a_unit() {
    let dir = tempfile::tempdir().unwrap();
    write_random_qwen3_layers(dir.path(), 13, false, 34, 3);
    let full = Qwen3::load(dir.path(), &TrainMode::Full, DType::F32, &Device::Cpu, 5).unwrap();
    let mut seen = Vec::new();
    let copy = full.with_weights(&mut |name, _| {
        seen.push(name.to_string());
        None
    });
    let names: Vec<String> = full.named_weights().into_iter().map(|(n, _)| n).collect();
    assert_eq!(seen, names);
    assert_eq!(weights(&copy), weights(&full));
    for n in &names {
        assert!(super::unit_of(n, 3).is_some(), "{n}");
    }
    assert_eq!(super::unit_of("model.layers.3.mlp.up_proj.weight", 3), None);
    let skeleton = Zero3::shard(&full, &SingleRank, &Device::Cpu, true).unwrap();
    assert_eq!(skeleton.named_weights().len(), names.len());
    assert!(Zero3::shard(&skeleton, &SingleRank, &Device::Cpu, true).is_err(), "sharded twice");
}

/// Read a unit at a time from the mapped files, the shards are those of the loaded model.
#[test]
fn shards_read_from_the_files_equal_shards_of_the_loaded_model() {
    let dir = tempfile::tempdir().unwrap();
    write_random_qwen3_layers(dir.path(), 13, false, 35, 3);
    let full = Qwen3::load(dir.path(), &TrainMode::Full, DType::F32, &Device::Cpu, 5).unwrap();
    let path = dir.path().to_path_buf();
    let handles: Vec<_> = LocalWorld::new(2)
        .into_iter()
        .map(|world| {
            let path = path.clone();
            std::thread::spawn(move || {
                let read = super::load_sharded(&path, DType::F32, &world, &Device::Cpu, true).unwrap();
                let z = read.zero3.clone().unwrap();
                (weights(&z.gather_all(&read, &world, &Device::Cpu).unwrap()), z.resident_bytes())
            })
        })
        .collect();
    for h in handles {
        let (got, resident) = h.join().unwrap();
        assert_eq!(got, weights(&full));
        // Weights, m and v: three f32 chunks of half the model.
        assert!(resident as f64 <= 3.0 * bytes_of(&full) as f64 / 2.0 + 3.0 * 4.0 * 5.0 * 2.0, "{resident}");
    }
}
