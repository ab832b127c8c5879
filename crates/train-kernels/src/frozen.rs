//! `x·Wᵀ` for a frozen weight W whose backward pass computes only the input's
//! gradient. candle's matmul backward always computes both operands' gradients; for a
//! LoRA run that is a third of all matrix work spent on weights nobody trains (and the
//! tied LM head's gradient alone is vocabulary × hidden per token chunk).
//!
//! One custom op serves every device: its forward pass calls the backend's own matrix
//! product on the input's and the weight's storage (generic over [`BackendStorage`], so
//! the CPU runs exactly the code CUDA runs), its backward pass is `grad·W`. On the CPU,
//! f32 goes through a copy-free gemm call instead unless [`crate::generic_only`] is set.

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, CudaStorage, CustomOp1, DType, Layout, MetalStorage, Result, Shape, Storage, Tensor};

/// The custom op: its argument is x (…×in), the weight (out×in) is captured.
struct FrozenMatmul {
    weight: Tensor,
}

/// `x·Wᵀ` with no gradient for `weight`, on any device (x is …×in, W out×in).
pub fn frozen_matmul(x: &Tensor, weight: &Tensor) -> Result<Tensor> {
    x.contiguous()?.apply_op1(FrozenMatmul { weight: weight.detach().contiguous()? })
}

fn msg(m: impl Into<String>) -> candle_core::Error {
    candle_core::Error::Msg(m.into())
}

impl FrozenMatmul {
    /// The product on one backend: x (contiguous, …×k) seen as M×k times Wᵀ, where Wᵀ is
    /// W's layout transposed (no copy), by the backend's own matmul.
    fn product<S: BackendStorage>(&self, x: &S, x_layout: &Layout, w: &S, w_layout: &Layout) -> Result<(S, Shape)> {
        let dims = x_layout.dims();
        let (&k, lead) = dims.split_last().ok_or_else(|| msg("frozen matmul: a scalar input"))?;
        let (out, kw) = w_layout.shape().dims2()?;
        if kw != k {
            return Err(msg(format!("frozen matmul: input {dims:?} against weight {out}×{kw}")));
        }
        if !x_layout.is_contiguous() {
            return Err(msg("frozen matmul needs a contiguous input"));
        }
        let m: usize = lead.iter().product();
        let mut shape = lead.to_vec();
        shape.push(out);
        let x2 = Layout::contiguous_with_offset((m, k), x_layout.start_offset());
        let wt = w_layout.transpose(0, 1)?;
        let y = x.matmul(w, (1, m, out, k), &x2, &wt)?;
        Ok((y, Shape::from(shape)))
    }

    /// The f32 product straight from the input's and the weight's storage into the
    /// result's, with no copy on either side; `None` when the shapes or storage do not
    /// suit (the generic path then handles it).
    fn gemm_f32(&self, v: &[f32], layout: &Layout) -> Result<Option<(CpuStorage, Shape)>> {
        if crate::generic_only() {
            return Ok(None);
        }
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
        let (w, w_layout) = self.weight.storage_and_layout();
        let Storage::Cpu(w) = &*w else { return Err(msg("frozen matmul: the weight is not on the CPU")) };
        self.product(storage, layout, w, w_layout)
    }

    fn cuda_fwd(&self, storage: &CudaStorage, layout: &Layout) -> Result<(CudaStorage, Shape)> {
        let (w, w_layout) = self.weight.storage_and_layout();
        let Storage::Cuda(w) = &*w else { return Err(msg("frozen matmul: the weight is not on the GPU")) };
        self.product(storage, layout, w, w_layout)
    }

    fn metal_fwd(&self, storage: &MetalStorage, layout: &Layout) -> Result<(MetalStorage, Shape)> {
        let (w, w_layout) = self.weight.storage_and_layout();
        let Storage::Metal(w) = &*w else { return Err(msg("frozen matmul: the weight is not on the GPU")) };
        self.product(storage, layout, w, w_layout)
    }

    fn bwd(&self, _arg: &Tensor, _res: &Tensor, grad_res: &Tensor) -> Result<Option<Tensor>> {
        // grad is …×out; only the input's gradient, (…×out)·(out×in), is formed.
        let dims = grad_res.dims();
        let (&out, lead) = dims.split_last().ok_or_else(|| msg("frozen matmul: a scalar gradient"))?;
        let m: usize = lead.iter().product();
        let g = grad_res.contiguous()?.reshape((m, out))?.matmul(&self.weight)?;
        let mut shape = lead.to_vec();
        shape.push(self.weight.dim(1)?);
        Ok(Some(g.reshape(shape)?))
    }
}

/// Whether a dtype is one the op handles.
pub fn supported(dtype: DType) -> bool {
    matches!(dtype, DType::F32 | DType::F64 | DType::BF16 | DType::F16)
}
