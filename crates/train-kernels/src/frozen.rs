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

impl FrozenMatmul {
    /// The f32 product straight from the input's and the weight's storage into the
    /// result's, with no copy on either side; `None` when the shapes or storage do not
    /// suit (the general path then handles it).
    fn gemm_f32(&self, v: &[f32], layout: &Layout) -> Result<Option<(CpuStorage, Shape)>> {
        let (Some((xs, xe)), [n, k]) = (layout.contiguous_offsets(), layout.dims()) else { return Ok(None) };
        let (n, k) = (*n, *k);
        let (w_storage, w_layout) = self.weight.storage_and_layout();
        let Storage::Cpu(CpuStorage::F32(wv)) = &*w_storage else { return Ok(None) };
        let (Some((ws, we)), [out, kin]) = (w_layout.contiguous_offsets(), w_layout.dims()) else { return Ok(None) };
        let out = *out;
        if *kin != k || xe - xs != n * k || we - ws != out * k || n == 0 || out == 0 || k == 0 {
            return Ok(None);
        }
        let (x, w) = (&v[xs..xe], &wv[ws..we]);
        let mut dst = vec![0f32; n * out];
        let threads = candle_core::utils::get_num_threads();
        let parallelism = if threads > 1 { gemm::Parallelism::Rayon(threads) } else { gemm::Parallelism::None };
        // SAFETY: dst is n×out row-major (column stride 1, row stride out) and owns
        // n·out elements; x is n×k row-major over exactly n·k elements; Wᵀ (k×out) is
        // read from W (out×k, row-major, exactly out·k elements) with row stride 1 and
        // column stride k, so every index gemm forms stays inside its slice. dst does
        // not alias the inputs, and read_dst = false means its old values are unused.
        unsafe {
            gemm::gemm(
                n,
                out,
                k,
                dst.as_mut_ptr(),
                1,
                out as isize,
                false,
                x.as_ptr(),
                1,
                k as isize,
                w.as_ptr(),
                k as isize,
                1,
                0.0,
                1.0,
                false,
                false,
                false,
                parallelism,
            );
        }
        Ok(Some((CpuStorage::F32(dst), Shape::from((n, out)))))
    }
}

impl CustomOp1 for FrozenMatmul {
    fn name(&self) -> &'static str {
        "frozen-matmul"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        if let CpuStorage::F32(v) = storage {
            if let Some(done) = self.gemm_f32(v, layout)? {
                return Ok(done);
            }
        }
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
