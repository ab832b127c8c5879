//! `x·Wᵀ` for a frozen weight W whose backward pass computes only the input's
//! gradient. candle's matmul backward always computes both operands' gradients; for a
//! LoRA run that is a third of all matrix work spent on weights nobody trains (and the
//! tied LM head's gradient alone is vocabulary × hidden per token chunk).

use candle_core::{CpuStorage, CustomOp1, DType, Layout, Result, Shape, Storage, Tensor};

/// The custom op: its argument is x (N×in), the weight (out×in) is captured.
struct FrozenMatmul {
    weight: Tensor,
}

/// `x·Wᵀ` with no gradient for `weight` (CPU; other devices use the plain product).
pub fn frozen_matmul(x: &Tensor, weight: &Tensor) -> Result<Tensor> {
    if !x.device().is_cpu() {
        return x.matmul(&weight.t()?);
    }
    x.contiguous()?.apply_op1(FrozenMatmul { weight: weight.detach() })
}

macro_rules! as_tensor {
    ($v:expr, $l:expr) => {{
        let (start, end) = $l
            .contiguous_offsets()
            .ok_or_else(|| candle_core::Error::Msg("frozen matmul needs a contiguous input".into()))?;
        Tensor::from_slice(&$v[start..end], $l.shape(), &candle_core::Device::Cpu)?
    }};
}

impl CustomOp1 for FrozenMatmul {
    fn name(&self) -> &'static str {
        "frozen-matmul"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        let x = match storage {
            CpuStorage::F32(v) => as_tensor!(v, layout),
            CpuStorage::F64(v) => as_tensor!(v, layout),
            CpuStorage::BF16(v) => as_tensor!(v, layout),
            CpuStorage::F16(v) => as_tensor!(v, layout),
            _ => return Err(candle_core::Error::Msg("frozen matmul supports float tensors only".into())),
        };
        let y = x.matmul(&self.weight.t()?)?;
        let shape = y.shape().clone();
        let (st, _) = y.storage_and_layout();
        match &*st {
            Storage::Cpu(c) => Ok((c.clone(), shape)),
            _ => Err(candle_core::Error::Msg("frozen matmul: the product left the CPU".into())),
        }
    }

    fn bwd(&self, _arg: &Tensor, _res: &Tensor, grad_res: &Tensor) -> Result<Option<Tensor>> {
        Ok(Some(grad_res.matmul(&self.weight)?))
    }
}

/// Whether a dtype is one the op handles.
pub fn supported(dtype: DType) -> bool {
    matches!(dtype, DType::F32 | DType::F64 | DType::BF16 | DType::F16)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};

    #[test]
    fn matches_matmul_and_gives_only_the_input_gradient() {
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
}
