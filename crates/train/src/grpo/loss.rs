//! The clipped policy-gradient loss (PPO-clip with an asymmetric range, as in DAPO),
//! the k3 KL estimate to a reference policy, and truncated importance weights for
//! rollouts sampled by another engine.

use candle_core::{Result, Tensor};

/// Loss settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PpoSettings {
    /// The ratio may fall to 1 − clip_low before clipping stops the gradient.
    pub clip_low: f64,
    /// The ratio may rise to 1 + clip_high ("clip-higher" keeps exploration alive).
    pub clip_high: f64,
    /// Dual clip (Ye et al. 2020): with a negative advantage the term is capped at
    /// `clip_dual·|A|`, so a token whose ratio has run far up cannot dominate the
    /// batch; 0 turns it off. Must exceed 1 to mean anything.
    pub clip_dual: f64,
    /// Weight of the k3 KL term; 0 disables it.
    pub kl_coef: f64,
}

/// Per-token inputs of the loss; all are 1-D tensors of the same length.
pub struct LossInputs<'a> {
    /// Current log-probabilities (differentiable).
    pub logp: &'a Tensor,
    /// Log-probabilities under the policy that the PPO epoch started from.
    pub old_logp: &'a Tensor,
    /// Advantage of the token's rollout.
    pub advantages: &'a Tensor,
    /// Reference-policy log-probabilities, when the KL term is on.
    pub ref_logp: Option<&'a Tensor>,
    /// Importance weights sampler→trainer (already truncated), when they differ.
    pub weights: Option<&'a Tensor>,
}

/// Sums over the tokens of one micro-batch, for the step's metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LossSums {
    /// Σ policy-gradient term.
    pub pg: f64,
    /// Σ k3 KL (computed even when its coefficient is 0).
    pub kl: f64,
    /// Tokens whose clipped term was the active one.
    pub clipped: u64,
    /// Tokens.
    pub tokens: u64,
}

/// `Σ_t w_t·max(−A_t·ρ_t, −A_t·clip(ρ_t)) / norm + kl_coef·Σ_t k3_t / norm`, where ρ is
/// the ratio to the old policy. `norm` is the number of model tokens in the whole
/// update batch (all micro-batches and ranks), so that the sum of micro-batch losses is
/// the token-mean and gradient accumulation or data parallelism changes nothing.
pub fn ppo_loss(inputs: &LossInputs<'_>, settings: &PpoSettings, norm: f64) -> Result<(Tensor, LossSums)> {
    let n = inputs.logp.dim(0)?;
    let ratio = (inputs.logp - inputs.old_logp)?.exp()?;
    let neg_adv = inputs.advantages.neg()?;
    let unclipped = (&neg_adv * &ratio)?;
    let clipped_ratio = ratio.clamp(1.0 - settings.clip_low, 1.0 + settings.clip_high)?;
    let clipped = (&neg_adv * &clipped_ratio)?;
    let mut pg = unclipped.maximum(&clipped)?;
    if settings.clip_dual > 0.0 {
        let cap = (&neg_adv * settings.clip_dual)?;
        let negative = inputs.advantages.lt(0.0)?;
        pg = negative.where_cond(&pg.minimum(&cap)?, &pg)?;
    }
    if let Some(w) = inputs.weights {
        pg = (pg * w)?;
    }
    let clip_count = clipped.gt(&unclipped)?.to_dtype(candle_core::DType::F32)?.sum_all()?.to_scalar::<f32>()?;
    let mut loss = (pg.sum_all()? / norm)?;
    let mut kl_sum = 0.0;
    if let Some(reference) = inputs.ref_logp {
        // k3 = exp(ref − logp) − (ref − logp) − 1: unbiased, never negative (Schulman).
        let d = (reference - inputs.logp)?;
        let k3 = ((d.exp()? - &d)? - 1.0)?;
        kl_sum = f64::from(k3.sum_all()?.to_scalar::<f32>()?);
        if settings.kl_coef != 0.0 {
            loss = (loss + (k3.sum_all()? * (settings.kl_coef / norm))?)?;
        }
    }
    let sums = LossSums {
        pg: f64::from(pg.sum_all()?.to_scalar::<f32>()?),
        kl: kl_sum,
        clipped: clip_count as u64,
        tokens: n as u64,
    };
    Ok((loss, sums))
}

/// Truncated importance weights `min(exp(trainer − sampler), cap)`: the correction
/// when the sampler's numerics differ from the trainer's (TIS).
pub fn truncated_importance(trainer_logp: &[f32], sampler_logp: &[f32], cap: f64) -> Vec<f32> {
    trainer_logp.iter().zip(sampler_logp).map(|(t, s)| (f64::from(t - s).exp().min(cap)) as f32).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};

    fn t(v: &[f32]) -> Tensor {
        Tensor::new(v, &Device::Cpu).unwrap()
    }

    #[test]
    fn loss_matches_hand_computed_values() {
        let logp = Var::new(&[-1.0f32, -0.5, -2.0, -0.1], &Device::Cpu).unwrap();
        let old = t(&[-1.3, -0.5, -1.5, -0.4]);
        let adv = t(&[1.0, -1.0, -2.0, -0.5]);
        let s = PpoSettings { clip_low: 0.2, clip_high: 0.28, clip_dual: 0.0, kl_coef: 0.0 };
        let inputs =
            LossInputs { logp: logp.as_tensor(), old_logp: &old, advantages: &adv, ref_logp: None, weights: None };
        let (loss, sums) = ppo_loss(&inputs, &s, 8.0).unwrap();
        // By hand. Ratios e^0.3, 1, e^-0.5, e^0.3.
        // token 0: A = 1, ρ = 1.3499 > 1.28: the clipped term −1.28 is the larger: clipped, no gradient.
        // token 1: A = −1, ρ = 1: 1.0, gradient −A·ρ/8 = 0.125.
        // token 2: A = −2, ρ = 0.6065 < 0.8: clipped term 1.6 beats 1.2131: clipped, no gradient.
        // token 3: A = −0.5, ρ = 1.3499: unclipped 0.67493 beats 0.64; gradient 0.5·1.3499/8.
        let want = (-1.28 + 1.0 + 1.6 + 0.5 * 0.3f64.exp()) / 8.0;
        let got = f64::from(loss.to_scalar::<f32>().unwrap());
        assert!((got - want).abs() < 1e-6, "{got} vs {want}");
        assert_eq!(sums.clipped, 2);
        assert_eq!(sums.tokens, 4);
        let g = loss.backward().unwrap();
        let g = g.get(logp.as_tensor()).unwrap().to_vec1::<f32>().unwrap();
        let want_g = [0.0, 0.125, 0.0, 0.5 * 0.3f64.exp() / 8.0];
        for i in 0..4 {
            assert!((f64::from(g[i]) - want_g[i]).abs() < 1e-6, "grad {i}: {} vs {}", g[i], want_g[i]);
        }
    }

    #[test]
    fn dual_clip_caps_negative_advantage_terms() {
        let logp = Var::new(&[0.0f32, 0.0, 0.0], &Device::Cpu).unwrap();
        // Ratios e^2, e^0.1, e^2; advantages −1, −1, +1.
        let old = t(&[-2.0, -0.1, -2.0]);
        let adv = t(&[-1.0, -1.0, 1.0]);
        let s = PpoSettings { clip_low: 0.2, clip_high: 0.28, clip_dual: 3.0, kl_coef: 0.0 };
        let inputs =
            LossInputs { logp: logp.as_tensor(), old_logp: &old, advantages: &adv, ref_logp: None, weights: None };
        let (loss, _) = ppo_loss(&inputs, &s, 3.0).unwrap();
        // token 0: unclipped e^2 = 7.389 is capped at 3; token 1: e^0.1 stays; token 2: A > 0, −1.28.
        let want = (3.0 + 0.1f64.exp() - 1.28) / 3.0;
        let got = f64::from(loss.to_scalar::<f32>().unwrap());
        assert!((got - want).abs() < 1e-5, "{got} vs {want}");
        let g = loss.backward().unwrap();
        let g = g.get(logp.as_tensor()).unwrap().to_vec1::<f32>().unwrap();
        // The capped token has no gradient; the middle one keeps −A·ρ/3.
        assert_eq!(g[0], 0.0);
        assert!((f64::from(g[1]) - 0.1f64.exp() / 3.0).abs() < 1e-6);
        assert_eq!(g[2], 0.0);
    }

    #[test]
    fn kl_is_zero_when_policy_equals_reference_and_matches_k3_otherwise() {
        let logp = t(&[-1.0, -0.3, -2.5]);
        let adv = t(&[0.0, 0.0, 0.0]);
        let s = PpoSettings { clip_low: 0.2, clip_high: 0.28, clip_dual: 0.0, kl_coef: 0.1 };
        let inputs =
            LossInputs { logp: &logp, old_logp: &logp, advantages: &adv, ref_logp: Some(&logp), weights: None };
        let (loss, sums) = ppo_loss(&inputs, &s, 3.0).unwrap();
        assert_eq!(sums.kl, 0.0);
        assert_eq!(loss.to_scalar::<f32>().unwrap(), 0.0);
        let reference = t(&[-1.5, -0.3, -2.0]);
        let inputs =
            LossInputs { logp: &logp, old_logp: &logp, advantages: &adv, ref_logp: Some(&reference), weights: None };
        let (loss, sums) = ppo_loss(&inputs, &s, 3.0).unwrap();
        let k3 = |d: f64| d.exp() - d - 1.0;
        let want = k3(-0.5) + k3(0.5);
        assert!((sums.kl - want).abs() < 1e-6);
        assert!((f64::from(loss.to_scalar::<f32>().unwrap()) - 0.1 * want / 3.0).abs() < 1e-6);
    }

    #[test]
    fn importance_weights_are_truncated() {
        let w = truncated_importance(&[-1.0, -1.0], &[-1.0, -3.0], 2.0);
        assert_eq!(w[0], 1.0);
        assert_eq!(w[1], 2.0);
    }
}
