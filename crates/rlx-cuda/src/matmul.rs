//! `MatMul` through cuBLAS: row-major `C = A·B` is column-major `Cᵀ = Bᵀ·Aᵀ`, so B and A are
//! passed in that order with no transposes. Batches that repeat one operand or step through
//! both evenly are one strided-batched call; any other broadcast is one call per batch item.
//! f32 and f64 accumulate in their own precision (no TF32), f16 and bf16 in f32 — through
//! cuBLASLt and its heuristic's algorithm ([`crate::lt`]) where the batch is one strided call.

use crate::engine::numel;
use crate::gpu::{Gpu, BLAS_WORKSPACE};
use crate::lt::Problem;
use crate::launch::broadcast;
use crate::memory::DevMem;
use cudarc::cublas::{result as blas, sys};
use cudarc::driver::result as cu;
use rlx_ir::DType;
use rlx_runtime::Arg;
use std::ffi::c_void;

/// The dtypes the products take.
pub fn supported(d: DType) -> bool {
    matches!(d, DType::F32 | DType::F64 | DType::F16 | DType::BF16)
}

/// `out = a · b` for `a [.., M, K]`, `b [.., K, N]`, `out [batch.., M, N]`.
pub fn matmul(gpu: &Gpu, a: Arg<'_, DevMem>, b: Arg<'_, DevMem>, out: Arg<'_, DevMem>) -> Result<(), String> {
    let r = out.dims.len();
    let (m, n) = (out.dims[r - 2], out.dims[r - 1]);
    let k = a.dims[a.dims.len() - 1];
    let batch = &out.dims[..r - 2];
    let size = out.dtype.size();
    if numel(out.dims) == 0 {
        return Ok(());
    }
    if k == 0 {
        // SAFETY: the output range lies in its buffer; ordered on the stream.
        return unsafe { cu::memset_d8_async(out.buf.at(out.offset), 0, out.len, gpu.stream) }.map_err(|e| format!("zeroing an empty product: {e:?}"));
    }
    let (dtype, compute) = match out.dtype {
        DType::F32 => (sys::cudaDataType_t::CUDA_R_32F, sys::cublasComputeType_t::CUBLAS_COMPUTE_32F_PEDANTIC),
        DType::F64 => (sys::cudaDataType_t::CUDA_R_64F, sys::cublasComputeType_t::CUBLAS_COMPUTE_64F),
        DType::F16 => (sys::cudaDataType_t::CUDA_R_16F, sys::cublasComputeType_t::CUBLAS_COMPUTE_32F),
        DType::BF16 => (sys::cudaDataType_t::CUDA_R_16BF, sys::cublasComputeType_t::CUBLAS_COMPUTE_32F),
        d => return Err(format!("no CUDA product over {d}")),
    };
    let (one32, zero32, one64, zero64) = (1f32, 0f32, 1f64, 0f64);
    let (alpha, beta): (*const c_void, *const c_void) = match out.dtype {
        DType::F64 => (&one64 as *const f64 as _, &zero64 as *const f64 as _),
        _ => (&one32 as *const f32 as _, &zero32 as *const f32 as _),
    };
    let items = numel(batch);
    // Per operand, the batch items' matrix strides in elements (0 where it broadcasts).
    let steps = |dims: &[usize], mat: usize| -> Vec<i64> { broadcast(&dims[..dims.len() - 2], batch).into_iter().map(|s| s * mat as i64).collect() };
    let (sa, sb) = (steps(a.dims, m * k), steps(b.dims, k * n));
    let even = |s: &[i64], mat: usize| -> Option<i64> {
        if s.iter().all(|&x| x == 0) {
            Some(0)
        } else {
            (s == broadcast(batch, batch).iter().map(|x| x * mat as i64).collect::<Vec<_>>()).then_some(mat as i64)
        }
    };
    let gemm = |pa: u64, pb: u64, pc: u64, stride_a: i64, stride_b: i64, count: usize| -> Result<(), String> {
        // SAFETY: the pointers address `count` matrices of these sizes inside the operands'
        // ranges (the executor's slots); the handle is bound to the device's stream.
        unsafe {
            blas::gemm_strided_batched_ex(
                gpu.blas,
                sys::cublasOperation_t::CUBLAS_OP_N,
                sys::cublasOperation_t::CUBLAS_OP_N,
                n as i32,
                m as i32,
                k as i32,
                alpha,
                pb as *const c_void,
                dtype,
                n as i32,
                stride_b,
                pa as *const c_void,
                dtype,
                k as i32,
                stride_a,
                beta,
                pc as *mut c_void,
                dtype,
                n as i32,
                (m * n) as i64,
                count as i32,
                compute,
                sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
        .map_err(|e| format!("cuBLAS product: {e:?}"))
    };
    let (pa, pb, pc) = (a.buf.at(a.offset), b.buf.at(b.offset), out.buf.at(out.offset));
    if let (Some(stride_a), Some(stride_b)) = (even(&sa, m * k), even(&sb, k * n)) {
        if matches!(out.dtype, DType::F16 | DType::BF16) {
            let problem = Problem { half: out.dtype == DType::F16, m, n, k, batch: items.max(1), stride_a, stride_b };
            return gpu.lt.matmul(gpu, problem, (pa, pb, pc), gpu.workspace, BLAS_WORKSPACE).map_err(|e| e.to_string());
        }
        return gemm(pa, pb, pc, stride_a, stride_b, items.max(1));
    }
    let own = crate::launch::contiguous(batch);
    for item in 0..items {
        let (mut oa, mut ob) = (0i64, 0i64);
        for d in 0..batch.len() {
            let at = (item as i64 / own[d]) % batch[d] as i64;
            oa += at * sa[d];
            ob += at * sb[d];
        }
        let at = |p: u64, elems: i64| p + (elems as u64) * size as u64;
        gemm(at(pa, oa), at(pb, ob), at(pc, (item * m * n) as i64), 0, 0, 1)?;
    }
    Ok(())
}
