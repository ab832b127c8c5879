//! The CPU kernels (crate `agent-train-kernels`) against candle's composed ops: the
//! same values and the same gradients.

use agent_train_kernels::frozen::frozen_matmul;
use agent_train_kernels::fused::{causal_softmax, rms_norm, rope_heads, target_logprobs};
use candle_core::{Device, Tensor, Var, D};

fn random(dims: &[usize], seed: u64) -> Tensor {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let n: usize = dims.iter().product();
    let v: Vec<f32> = (0..n).map(|_| rng.gen_range(-2.0f32..2.0)).collect();
    Tensor::from_vec(v, dims, &Device::Cpu).unwrap()
}

fn close(a: &Tensor, b: &Tensor, tol: f32) {
    let a = a.flatten_all().unwrap().to_vec1::<f32>().unwrap();
    let b = b.flatten_all().unwrap().to_vec1::<f32>().unwrap();
    assert_eq!(a.len(), b.len());
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        assert!((x - y).abs() <= tol * (1.0 + y.abs()), "element {i}: {x} vs {y}");
    }
}

/// Forward values and the gradient of a random projection of the output.
fn value_and_grads(f: &dyn Fn(&[&Tensor]) -> Tensor, inputs: &[Var], probe_seed: u64) -> (Tensor, Vec<Tensor>) {
    let ts: Vec<&Tensor> = inputs.iter().map(|v| v.as_tensor()).collect();
    let y = f(&ts);
    let probe = random(y.dims(), probe_seed);
    let grads = (&y * probe).unwrap().sum_all().unwrap().backward().unwrap();
    (y.detach(), inputs.iter().map(|v| grads.get(v.as_tensor()).unwrap().clone()).collect())
}

#[test]
fn causal_softmax_matches_the_composed_ops() {
    // T = 3 new queries over S = 5 keys (two cached): query i sees keys 0..=2+i. Each
    // block of rows stacks the queries of two heads (a key/value group): 6 rows.
    let x = Var::from_tensor(&random(&[2, 2, 6, 5], 1)).unwrap();
    let scale = 0.37;
    let fused = |t: &[&Tensor]| causal_softmax(t[0], scale, 3).unwrap();
    let composed = |t: &[&Tensor]| {
        let mask: Vec<f32> =
            (0..6).flat_map(|r| (0..5).map(move |j| if j > 2 + r % 3 { f32::NEG_INFINITY } else { 0.0 })).collect();
        let mask = Tensor::from_vec(mask, (6, 5), &Device::Cpu).unwrap();
        let s = (t[0] * scale).unwrap().broadcast_add(&mask).unwrap();
        candle_core::Tensor::exp(&s.broadcast_sub(&s.max_keepdim(D::Minus1).unwrap().detach()).unwrap())
            .and_then(|e| e.broadcast_div(&e.sum_keepdim(D::Minus1)?))
            .unwrap()
    };
    let (a, ga) = value_and_grads(&fused, std::slice::from_ref(&x), 2);
    let (b, gb) = value_and_grads(&composed, std::slice::from_ref(&x), 2);
    close(&a, &b, 1e-6);
    close(&ga[0], &gb[0], 1e-5);
    // Masked entries are exact zeros, in both heads of the block.
    let block = a.get(0).unwrap().get(0).unwrap();
    assert_eq!(block.get(0).unwrap().to_vec1::<f32>().unwrap()[3..], [0.0, 0.0]);
    assert_eq!(block.get(3).unwrap().to_vec1::<f32>().unwrap()[3..], [0.0, 0.0]);
}

#[test]
fn rope_heads_matches_rotate_half_after_the_transpose() {
    // B 2, T 3, heads 2, D 4; tables T×D.
    let x = Var::from_tensor(&random(&[2, 3, 2, 4], 8)).unwrap();
    let cos = random(&[3, 4], 9);
    let sin = random(&[3, 4], 10);
    let fused = |t: &[&Tensor]| rope_heads(t[0], &cos, &sin).unwrap();
    let composed = |t: &[&Tensor]| {
        let x = t[0].transpose(1, 2).unwrap();
        let (x1, x2) = (x.narrow(D::Minus1, 0, 2).unwrap(), x.narrow(D::Minus1, 2, 2).unwrap());
        let rotated = Tensor::cat(&[&x2.neg().unwrap(), &x1], D::Minus1).unwrap();
        (x.broadcast_mul(&cos).unwrap() + rotated.broadcast_mul(&sin).unwrap()).unwrap()
    };
    let (a, ga) = value_and_grads(&fused, std::slice::from_ref(&x), 11);
    let (b, gb) = value_and_grads(&composed, std::slice::from_ref(&x), 11);
    assert_eq!(a.dims(), [2, 2, 3, 4]);
    close(&a, &b, 1e-6);
    close(&ga[0], &gb[0], 1e-5);
}

#[test]
fn rms_norm_matches_the_composed_ops_with_both_gradients() {
    let x = Var::from_tensor(&random(&[3, 4, 8], 3)).unwrap();
    let w = Var::from_tensor(&random(&[8], 4)).unwrap();
    let fused = |t: &[&Tensor]| rms_norm(t[0], t[1], 1e-6).unwrap();
    let composed = |t: &[&Tensor]| {
        let inv =
            ((t[0].sqr().unwrap().mean_keepdim(D::Minus1).unwrap() + 1e-6).unwrap().sqrt().unwrap()).recip().unwrap();
        t[0].broadcast_mul(&inv).unwrap().broadcast_mul(t[1]).unwrap()
    };
    let vars = [x, w];
    let (a, ga) = value_and_grads(&fused, &vars, 5);
    let (b, gb) = value_and_grads(&composed, &vars, 5);
    close(&a, &b, 1e-6);
    close(&ga[0], &gb[0], 1e-5);
    close(&ga[1], &gb[1], 1e-5);
}

#[test]
fn target_logprobs_match_log_softmax_with_entropy_and_gradient() {
    let x = Var::from_tensor(&random(&[4, 11], 6)).unwrap();
    let targets = vec![0u32, 10, 3, 3];
    let (n, v) = (4, 11);
    let out = target_logprobs(x.as_tensor(), targets.clone()).unwrap();
    let logp = candle_nn_free_log_softmax(x.as_tensor());
    let lp = logp.to_vec2::<f32>().unwrap();
    let got = out.to_vec2::<f32>().unwrap();
    for i in 0..n {
        assert!((got[i][0] - lp[i][targets[i] as usize]).abs() < 1e-6);
        let ent: f32 = -(0..v).map(|j| lp[i][j].exp() * lp[i][j]).sum::<f32>();
        assert!((got[i][1] - ent).abs() < 1e-5, "entropy {} vs {ent}", got[i][1]);
    }
    let g = random(&[n], 7);
    let fused = out.narrow(1, 0, 1).unwrap().squeeze(1).unwrap();
    let gf = (fused * &g).unwrap().sum_all().unwrap().backward().unwrap();
    let idx = Tensor::new(targets.as_slice(), &Device::Cpu).unwrap().unsqueeze(1).unwrap();
    let composed = logp.gather(&idx, 1).unwrap().squeeze(1).unwrap();
    let gc = (composed * &g).unwrap().sum_all().unwrap().backward().unwrap();
    close(gf.get(x.as_tensor()).unwrap(), gc.get(x.as_tensor()).unwrap(), 1e-5);
}

fn candle_nn_free_log_softmax(x: &Tensor) -> Tensor {
    let m = x.max_keepdim(D::Minus1).unwrap().detach();
    let lse =
        (x.broadcast_sub(&m).unwrap().exp().unwrap().sum_keepdim(D::Minus1).unwrap().log().unwrap() + &m).unwrap();
    x.broadcast_sub(&lse).unwrap()
}
#[test]
fn frozen_matmul_matches_matmul_and_gives_only_the_input_gradient() {
    let x = Var::new(&[[1.0f64, 2.0, -1.0], [0.5, 0.0, 3.0]], &Device::Cpu).unwrap();
    let w = Tensor::new(&[[0.2f64, -0.3, 0.1], [1.0, 0.5, -2.0]], &Device::Cpu).unwrap();
    let a = frozen_matmul(x.as_tensor(), &w).unwrap();
    let b = x.as_tensor().matmul(&w.t().unwrap()).unwrap();
    assert_eq!(a.to_vec2::<f64>().unwrap(), b.to_vec2::<f64>().unwrap());
    let ga = a.sqr().unwrap().sum_all().unwrap().backward().unwrap();
    let gb = b.sqr().unwrap().sum_all().unwrap().backward().unwrap();
    let (ga, gb) = (ga.get(x.as_tensor()).unwrap(), gb.get(x.as_tensor()).unwrap());
    assert_eq!(ga.to_vec2::<f64>().unwrap(), gb.to_vec2::<f64>().unwrap());
}

#[test]
fn frozen_matmul_f32_gemm_path_matches_matmul() {
    let x: Vec<f32> = (0..5 * 7).map(|i| (i as f32 * 0.37).sin()).collect();
    let w: Vec<f32> = (0..3 * 7).map(|i| (i as f32 * 0.11).cos()).collect();
    let x = Tensor::from_vec(x, (5, 7), &Device::Cpu).unwrap();
    let w = Tensor::from_vec(w, (3, 7), &Device::Cpu).unwrap();
    let a = frozen_matmul(&x, &w).unwrap().to_vec2::<f32>().unwrap();
    let b = x.matmul(&w.t().unwrap()).unwrap().to_vec2::<f32>().unwrap();
    for (ra, rb) in a.iter().zip(&b) {
        for (p, q) in ra.iter().zip(rb) {
            assert!((p - q).abs() < 1e-5, "{p} vs {q}");
        }
    }
}
