//! `MatMul` through cuBLAS: row-major `C = A·B` is column-major `Cᵀ = Bᵀ·Aᵀ`, so B and A are
//! passed in that order with no transposes. Batches that repeat one operand or step through
//! both evenly are one strided-batched call; any other broadcast is one call per batch item.
//! f32 and f64 accumulate in their own precision (no TF32), f16 and bf16 in f32 — through
//! cuBLASLt and its heuristic's algorithm ([`crate::lt`]) where the batch is one strided call.
//! f16 / bf16 products of up to [`GEMV_ROWS`] rows (decode) run the GEMV kernel of
//! [`crate::source::matmul`] instead, split along K over enough blocks to fill the device.
//! `FusedMatMulBiasAct` adds its bias (and ReLU or tanh-GELU) in cuBLASLt's epilogue, or in
//! one kernel after the GEMV or for the other activations ([`bias_act`]).

use crate::engine::{numel, CudaEngine};
use crate::gpu::{driver, Gpu, BLAS_WORKSPACE};
use crate::launch::{self, broadcast, Param};
use crate::lt::{Epilogue, Problem};
use crate::memory::DevMem;
use crate::rows::ptr;
use crate::source::matmul::{self as src, TILE};
use cudarc::cublas::{result as blas, sys};
use cudarc::driver::result as cu;
use cudarc::driver::sys::CUdevice_attribute;
use rlx_ir::ops::elementwise::ActivationKind;
use rlx_ir::{DType, Op};
use rlx_runtime::Arg;
use std::ffi::c_void;

/// The most rows of `x` the GEMV kernel takes; more go to cuBLASLt.
pub const GEMV_ROWS: usize = 4;
/// f32 partial sums the split-K scratch holds (`M·N` of a split product).
const PARTIAL: usize = 1 << 20;
/// Tile counters of the split-K scratch (`M·⌈N/256⌉` of a split product).
const COUNTS: usize = 1 << 14;

/// The GEMV kernel's split-K scratch, zero between launches (each product's last blocks
/// zero what they used), and the device's multiprocessor count that sizes the splits.
pub struct Split {
    partial: DevMem,
    count: DevMem,
    sms: usize,
}

impl Split {
    /// The device's multiprocessor count.
    pub(crate) fn sms(&self) -> usize {
        self.sms
    }

    pub fn new(gpu: &std::sync::Arc<Gpu>) -> rlx_runtime::Result<Split> {
        let sms = gpu.ctx.attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT).map_err(driver("reading the multiprocessor count"))?;
        Ok(Split { partial: DevMem::zeroed(gpu, PARTIAL * 4)?, count: DevMem::zeroed(gpu, COUNTS * 4)?, sms: sms.max(1) as usize })
    }
}

/// `out [m, n] = a [m, k] · b [k, n]` through the GEMV kernel, or `None` where it does not
/// apply (not f16/bf16, more than [`GEMV_ROWS`] rows, a batch, `n` not a multiple of 8 or
/// a weight not 16-byte aligned). Splits K so that about four blocks per multiprocessor run.
fn gemv(e: &CudaEngine, a: Arg<'_, DevMem>, b: Arg<'_, DevMem>, out: Arg<'_, DevMem>, (m, n, k): (usize, usize, usize)) -> Option<Result<(), String>> {
    let single = numel(out.dims) == m * n && numel(b.dims) == k * n;
    let pb = b.buf.at(b.offset);
    if !single || m > GEMV_ROWS || n % 8 != 0 || pb % 16 != 0 {
        return None;
    }
    let source = src::gemv(out.dtype)?;
    Some((|| {
        let f = e.gpu.kernels.function(&e.gpu, &source).map_err(|err| err.to_string())?;
        let tiles = n.div_ceil(TILE);
        let s = &e.split;
        let mut splits = (4 * s.sms).div_ceil(tiles * m).clamp(1, k.div_ceil(32).max(1));
        if m * n > PARTIAL || m * tiles > COUNTS {
            splits = 1;
        }
        let rows = k.div_ceil(splits).next_multiple_of(8);
        let splits = k.div_ceil(rows).max(1);
        let mut params = vec![
            Param::Ptr(out.buf.at(out.offset)),
            Param::Ptr(a.buf.at(a.offset)),
            Param::Ptr(pb),
            Param::I64(k as i64),
            Param::I64(n as i64),
            Param::I64(rows as i64),
            Param::Ptr(s.partial.ptr),
            Param::Ptr(s.count.ptr),
        ];
        launch::grid(&e.gpu, f, (crate::rows::extent(tiles)?, splits as u32, m as u32), (256, 1, 1), 0, &mut params)
    })())
}

/// The dtypes the products take.
pub fn supported(d: DType) -> bool {
    matches!(d, DType::F32 | DType::F64 | DType::F16 | DType::BF16)
}

/// `out = a · b` for `a [.., M, K]`, `b [.., K, N]`, `out [batch.., M, N]`.
pub fn matmul(e: &CudaEngine, a: Arg<'_, DevMem>, b: Arg<'_, DevMem>, out: Arg<'_, DevMem>) -> Result<(), String> {
    let gpu = &*e.gpu;
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
    if let Some(ran) = gemv(e, a, b, out, (m, n, k)) {
        return ran;
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
            let problem = Problem { half: out.dtype == DType::F16, m, n, k, batch: items.max(1), stride_a, stride_b, epilogue: Epilogue::None };
            return gpu.lt.matmul(gpu, problem, (pa, pb, pc, 0), gpu.workspace, BLAS_WORKSPACE).map_err(|e| e.to_string());
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

/// `FusedMatMulBiasAct`: `out = act(x·w + bias)` for `x [.., M, K]`, `w [K, N]`, `bias [N]`
/// of one f16/bf16 dtype, as one `[rows, K]·[K, N]` product. Few rows run the GEMV, then the
/// bias and activation in one kernel; more run cuBLASLt with the bias (and ReLU or tanh-GELU)
/// in its epilogue, any other activation in a kernel after it.
pub fn bias_act(e: &CudaEngine, op: &Op, act: Option<ActivationKind>, ins: &[Arg<'_, DevMem>], out: Arg<'_, DevMem>) -> Result<(), String> {
    let (x, w, bias) = (ins[0], ins[1], ins[2]);
    let (k, n) = match (x.dims.last(), w.dims) {
        (Some(&k), &[kw, n]) if kw == k && bias.dims == [n] => (k, n),
        _ => return Err(format!("x {:?} · w {:?} + bias {:?}: wants x [.., K], w [K, N], bias [N]", x.dims, w.dims, bias.dims)),
    };
    let total = numel(out.dims);
    if total == 0 {
        return Ok(());
    }
    let rows = total / n;
    let epilogue = |with_bias: bool, act: Option<ActivationKind>| -> Result<(), String> {
        let f = e.kernel(src::bias_act(out.dtype, act, with_bias), op, &[x.dtype, w.dtype, bias.dtype])?;
        let mut params = vec![ptr(out), ptr(bias), Param::I64(total as i64), Param::I64(n as i64)];
        launch::tiled(&e.gpu, f, total, &mut params)
    };
    if k == 0 {
        // SAFETY: the output range lies in its buffer; ordered on the stream.
        unsafe { cu::memset_d8_async(out.buf.at(out.offset), 0, out.len, e.gpu.stream) }.map_err(|e| format!("zeroing an empty product: {e:?}"))?;
        return epilogue(true, act);
    }
    if let Some(ran) = gemv(e, x, w, out, (rows, n, k)) {
        ran?;
        return epilogue(true, act);
    }
    let (lt_epilogue, after) = match act {
        None => (Epilogue::Bias, None),
        Some(ActivationKind::Relu) => (Epilogue::ReluBias, None),
        Some(ActivationKind::GeluApprox) => (Epilogue::GeluBias, None),
        Some(other) => (Epilogue::Bias, Some(other)),
    };
    let problem = Problem { half: out.dtype == DType::F16, m: rows, n, k, batch: 1, stride_a: 0, stride_b: 0, epilogue: lt_epilogue };
    let gpu = &*e.gpu;
    let pointers = (x.buf.at(x.offset), w.buf.at(w.offset), out.buf.at(out.offset), bias.buf.at(bias.offset));
    gpu.lt.matmul(gpu, problem, pointers, gpu.workspace, BLAS_WORKSPACE).map_err(|e| e.to_string())?;
    match after {
        Some(a) => epilogue(false, Some(a)),
        None => Ok(()),
    }
}
