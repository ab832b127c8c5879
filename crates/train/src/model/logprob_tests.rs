//! The memory-saving log-prob chunks and the frozen product against plain autograd: the
//! same values and gradients in f32, and no gradient for a frozen weight.

use agent_train_kernels::frozen::frozen_matmul;
use candle_core::{DType, Device, Tensor, Var, D};

use super::tests::{lora, write_random_qwen3};
use super::{token_logprobs, Qwen3, TokenBatch, TrainMode};

fn random(dims: &[usize], seed: u64) -> Tensor {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let n: usize = dims.iter().product();
    let v: Vec<f32> = (0..n).map(|_| rng.gen_range(-1.0f32..1.0)).collect();
    Tensor::from_vec(v, dims, &Device::Cpu).unwrap()
}

fn close(a: &Tensor, b: &Tensor, tol: f32, what: &str) {
    let a = a.to_dtype(DType::F32).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
    let b = b.to_dtype(DType::F32).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
    assert_eq!(a.len(), b.len(), "{what}");
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        assert!((x - y).abs() <= tol * (1.0 + y.abs()), "{what}[{i}]: {x} vs {y}");
    }
}

/// The generic product (a 3-D input is not the CPU gemm's case; f64 never is) against
/// `x·Wᵀ`: the same values and input gradient, and none for W even when W is a variable.
#[test]
fn frozen_matmul_generic_path_gives_the_input_gradient_only() {
    let w = Var::from_tensor(&random(&[5, 7], 2)).unwrap();
    for dtype in [DType::F32, DType::F64] {
        let x = Var::from_tensor(&random(&[2, 3, 7], 1).to_dtype(dtype).unwrap()).unwrap();
        let wd = w.as_tensor().to_dtype(dtype).unwrap();
        let w_var = Var::from_tensor(&wd).unwrap();
        let probe = random(&[2, 3, 5], 3).to_dtype(dtype).unwrap();
        let a = frozen_matmul(x.as_tensor(), w_var.as_tensor()).unwrap();
        let b = x.as_tensor().broadcast_matmul(&wd.t().unwrap()).unwrap();
        close(&a, &b, 1e-6, "values");
        let ga = (&a * &probe).unwrap().sum_all().unwrap().backward().unwrap();
        let gb = (&b * &probe).unwrap().sum_all().unwrap().backward().unwrap();
        close(ga.get(x.as_tensor()).unwrap(), gb.get(x.as_tensor()).unwrap(), 1e-6, "dx");
        assert!(ga.get(w_var.as_tensor()).is_none(), "a frozen weight got a gradient");
    }
}

/// Σ wᵢ·log p(targetᵢ) the plain way: every logit in the graph.
fn reference(hidden: &Tensor, head: &Tensor, batch: &TokenBatch, weights: &Tensor) -> (Tensor, Tensor, Tensor) {
    let (b, t, h) = hidden.dims3().unwrap();
    let rows = hidden.reshape((b * t, h)).unwrap().index_select(&batch.rows, 0).unwrap();
    let logits = rows.matmul(&head.t().unwrap()).unwrap();
    let m = logits.max_keepdim(D::Minus1).unwrap().detach();
    let lse =
        (logits.broadcast_sub(&m).unwrap().exp().unwrap().sum_keepdim(D::Minus1).unwrap().log().unwrap() + &m).unwrap();
    let logp_all = logits.broadcast_sub(&lse).unwrap();
    let logp = logp_all.gather(&batch.targets.unsqueeze(1).unwrap(), 1).unwrap().squeeze(1).unwrap();
    let entropy = (logp_all.exp().unwrap() * &logp_all).unwrap().sum(D::Minus1).unwrap().neg().unwrap();
    let loss = (&logp * weights).unwrap().sum_all().unwrap();
    (loss, logp.detach(), entropy.detach())
}

/// LoRA (frozen tied head) and full training (trainable head, tied and not): the chunked
/// log-probs, entropies and gradients equal the plain product's, in f32.
#[test]
fn chunked_logprobs_match_plain_autograd_with_and_without_a_trainable_head() {
    let seqs: Vec<(Vec<u32>, Vec<u8>)> =
        vec![(vec![3, 5, 7, 2, 9, 11, 4, 8], vec![0, 1, 1, 1, 0, 1, 1, 1]), (vec![8, 1, 6, 6, 2], vec![0, 1, 1, 1, 1])];
    let refs: Vec<(&[u32], &[u8])> = seqs.iter().map(|(a, b)| (a.as_slice(), b.as_slice())).collect();
    let batch = TokenBatch::new(&refs, 0, &Device::Cpu).unwrap();
    let n = batch.len();
    let weights = Tensor::from_vec((0..n).map(|i| 0.5 - 0.13 * i as f32).collect::<Vec<_>>(), n, &Device::Cpu).unwrap();
    for (name, mode, tied) in
        [("lora", lora(2), true), ("full", TrainMode::Full, true), ("full", TrainMode::Full, false)]
    {
        let dir = tempfile::tempdir().unwrap();
        write_random_qwen3(dir.path(), 29, tied, 4);
        let model = Qwen3::load(dir.path(), &mode, DType::F32, &Device::Cpu, 1).unwrap();
        let hidden = Var::from_tensor(&random(&[2, 8, 16], 5)).unwrap();
        let head = model.head_weight();
        let trainable = !model.head_is_frozen();
        for chunk in [3, 1024] {
            let (logp, entropy) = token_logprobs(&model, hidden.as_tensor(), &batch, chunk).unwrap();
            let loss = (&logp * &weights).unwrap().sum_all().unwrap();
            let (want_loss, want_logp, want_entropy) = reference(hidden.as_tensor(), head, &batch, &weights);
            let what = format!("{name} tied {tied} chunk {chunk}");
            close(&logp, &want_logp, 1e-5, &format!("{what} logp"));
            close(&Tensor::new(entropy, &Device::Cpu).unwrap(), &want_entropy, 1e-5, &format!("{what} entropy"));
            let got = loss.backward().unwrap();
            let want = want_loss.backward().unwrap();
            let dh = got.get(hidden.as_tensor()).unwrap();
            close(dh, want.get(hidden.as_tensor()).unwrap(), 1e-5, &format!("{what} d hidden"));
            if trainable {
                close(got.get(head).unwrap(), want.get(head).unwrap(), 1e-5, &format!("{what} d head"));
            } else {
                assert!(got.get(head).is_none(), "{what}: the frozen head got a gradient");
            }
        }
    }
}

/// Scoring without a graph (old log-probs) gives the same numbers as with one.
#[test]
fn scoring_without_a_graph_gives_the_same_values() {
    let dir = tempfile::tempdir().unwrap();
    write_random_qwen3(dir.path(), 29, true, 6);
    let model = Qwen3::load(dir.path(), &lora(2), DType::F32, &Device::Cpu, 1).unwrap();
    let seqs: Vec<(Vec<u32>, Vec<u8>)> = vec![(vec![3, 5, 7, 2, 9], vec![0, 1, 1, 1, 1])];
    let refs: Vec<(&[u32], &[u8])> = seqs.iter().map(|(a, b)| (a.as_slice(), b.as_slice())).collect();
    let batch = TokenBatch::new(&refs, 0, &Device::Cpu).unwrap();
    let hidden = random(&[1, 5, 16], 7);
    let var = Var::from_tensor(&hidden).unwrap();
    let (plain, _) = token_logprobs(&model, &hidden, &batch, 2).unwrap();
    let (tracked, _) = token_logprobs(&model, var.as_tensor(), &batch, 2).unwrap();
    assert_eq!(plain.to_vec1::<f32>().unwrap(), tracked.to_vec1::<f32>().unwrap());
}
