//! AdamW with decoupled weight decay (as PyTorch's `AdamW`), global-norm gradient
//! clipping, and optimiser state that checkpoints can save and restore exactly.

use std::collections::HashMap;

use candle_core::{DType, Tensor, Var};

use super::error::{TensorContext, TrainError};

/// AdamW hyper-parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamWSettings {
    pub lr: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
}

/// AdamW over a fixed, ordered list of variables (moments kept in f32).
pub struct AdamW {
    vars: Vec<(String, Var)>,
    m: Vec<Tensor>,
    v: Vec<Tensor>,
    /// Updates applied so far (bias correction uses it).
    pub step: u64,
    /// Settings; `lr` may be changed between steps.
    pub settings: AdamWSettings,
}

impl AdamW {
    /// An optimiser with zero moments.
    pub fn new(vars: Vec<(String, Var)>, settings: AdamWSettings) -> Result<Self, TrainError> {
        let zeros = |v: &Var| Tensor::zeros(v.as_tensor().shape(), DType::F32, v.as_tensor().device());
        let m = vars.iter().map(|(_, v)| zeros(v)).collect::<Result<Vec<_>, _>>().ctx("allocating AdamW state")?;
        let v2 = vars.iter().map(|(_, v)| zeros(v)).collect::<Result<Vec<_>, _>>().ctx("allocating AdamW state")?;
        Ok(AdamW { vars, m, v: v2, step: 0, settings })
    }

    /// The variables, in order.
    pub fn vars(&self) -> &[(String, Var)] {
        &self.vars
    }

    /// Applies one update with `grads` (aligned with the variables; `None` = no gradient).
    pub fn apply(&mut self, grads: &[Option<Tensor>]) -> Result<(), TrainError> {
        self.step += 1;
        let s = self.settings;
        let bc1 = 1.0 - s.beta1.powi(self.step as i32);
        let bc2 = 1.0 - s.beta2.powi(self.step as i32);
        for (i, (_, var)) in self.vars.iter().enumerate() {
            let Some(g) = grads.get(i).and_then(|g| g.as_ref()) else { continue };
            let g = g.to_dtype(DType::F32).ctx("AdamW")?;
            let m = ((&self.m[i] * s.beta1).ctx("AdamW")? + (&g * (1.0 - s.beta1)).ctx("AdamW")?).ctx("AdamW")?;
            let v = ((&self.v[i] * s.beta2).ctx("AdamW")? + (g.sqr().ctx("AdamW")? * (1.0 - s.beta2)).ctx("AdamW")?)
                .ctx("AdamW")?;
            let denom = ((&v / bc2).ctx("AdamW")?.sqrt().ctx("AdamW")? + s.eps).ctx("AdamW")?;
            let update = ((&m / bc1).ctx("AdamW")? / denom).ctx("AdamW")?;
            let p = var.as_tensor().to_dtype(DType::F32).ctx("AdamW")?;
            let p = (p * (1.0 - s.lr * s.weight_decay)).ctx("AdamW")?;
            let p = (p - (update * s.lr).ctx("AdamW")?).ctx("AdamW")?;
            var.set(&p.to_dtype(var.dtype()).ctx("AdamW")?).ctx("AdamW")?;
            self.m[i] = m;
            self.v[i] = v;
        }
        Ok(())
    }

    /// The moments under `m.NAME` / `v.NAME`, for checkpoints.
    pub fn state_tensors(&self) -> HashMap<String, Tensor> {
        let mut out = HashMap::new();
        for (i, (name, _)) in self.vars.iter().enumerate() {
            out.insert(format!("m.{name}"), self.m[i].clone());
            out.insert(format!("v.{name}"), self.v[i].clone());
        }
        out
    }

    /// Restores moments saved by [`AdamW::state_tensors`].
    pub fn load_state(&mut self, tensors: &HashMap<String, Tensor>, step: u64) -> Result<(), String> {
        for (i, (name, var)) in self.vars.iter().enumerate() {
            for (prefix, slot) in [("m", &mut self.m[i]), ("v", &mut self.v[i])] {
                let key = format!("{prefix}.{name}");
                let t = tensors.get(&key).ok_or_else(|| format!("no optimiser tensor `{key}`"))?;
                if t.dims() != var.as_tensor().dims() {
                    return Err(format!("optimiser tensor `{key}` has shape {:?}", t.dims()));
                }
                *slot = t.to_dtype(DType::F32).map_err(|e| e.to_string())?;
            }
        }
        self.step = step;
        Ok(())
    }
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
    if max_norm > 0.0 && norm > max_norm {
        let scale = max_norm / (norm + 1e-6);
        for g in grads.iter_mut().flatten() {
            *g = (&*g * scale).ctx("clipping gradients")?;
        }
    }
    Ok(norm)
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
}
