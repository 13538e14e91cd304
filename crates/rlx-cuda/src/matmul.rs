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
use crate::stage::Staging;
use crate::memory::DevMem;
use crate::rows::ptr;
use crate::source::matmul::{self as src, TILE};
use cudarc::driver::sys::{self, CUdevice_attribute};
use cudarc::cublas::{result as blas, sys as blas_sys};
use cudarc::driver::result as cu;
use rlx_ir::ops::elementwise::ActivationKind;
use rlx_ir::ops::matmul::DotGeneral;
use rlx_ir::{DType, Op};
use rlx_runtime::Arg;
use std::ffi::c_void;
use std::sync::atomic::Ordering;

/// The most rows of `x` the GEMV kernel takes; more go to cuBLASLt.
pub const GEMV_ROWS: usize = 4;
/// f32 partial sums the split-K scratch holds (`M·N` of a split product).
const PARTIAL: usize = 1 << 20;
/// Tile counters of the split-K scratch (`M·⌈N/256⌉` of a split product).
const COUNTS: usize = 1 << 14;

/// The GEMV kernel's split-K scratch, zero between launches (each product's last blocks
/// zero what they used), the device's multiprocessor count, and the blocks per
/// multiprocessor the splits aim at (`RLX_CUDA_GEMV_BLOCKS`, default [`BLOCKS_PER_SM`]).
pub struct Split {
    partial: DevMem,
    count: DevMem,
    sms: usize,
    per_sm: usize,
}

/// The few-row products' blocks per multiprocessor, unless `RLX_CUDA_GEMV_BLOCKS` says.
const BLOCKS_PER_SM: usize = 4;

impl Split {
    /// The device's multiprocessor count.
    pub(crate) fn sms(&self) -> usize {
        self.sms
    }

    pub fn new(gpu: &std::sync::Arc<Gpu>) -> rlx_runtime::Result<Split> {
        let sms = gpu.ctx.attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT).map_err(driver("reading the multiprocessor count"))?;
        let per_sm = std::env::var("RLX_CUDA_GEMV_BLOCKS").ok().and_then(|v| v.parse().ok()).filter(|&n: &usize| n > 0).unwrap_or(BLOCKS_PER_SM);
        Ok(Split { partial: DevMem::zeroed(gpu, PARTIAL * 4)?, count: DevMem::zeroed(gpu, COUNTS * 4)?, sms: sms.max(1) as usize, per_sm })
    }
}

/// One product of a few-row launch: its weight `[K, n]`, output `[M, n]`, the residual `[M,
/// n]` added to it (unless 0), and whether the launch's [`Rotary`] rotates it.
#[derive(Clone, Copy, Default)]
pub(crate) struct Product {
    pub w: u64,
    pub out: u64,
    pub residual: u64,
    pub n: usize,
    pub rotated: bool,
}

/// The rotary embedding of a few-row launch's rotated products: f32 tables `[M, stride]`
/// (a row per position), the heads' width, the channels rotated, and GPT-J pairing.
#[derive(Clone, Copy, Default)]
pub(crate) struct Rotary {
    pub cos: u64,
    pub sin: u64,
    pub head_dim: usize,
    pub n_rot: usize,
    pub stride: usize,
    pub gptj: bool,
}

/// The products' total width and their tiles of [`TILE`] columns.
fn extent(products: &[Product]) -> (usize, usize) {
    products.iter().fold((0, 0), |(w, t), p| (w + p.n, t + p.n.div_ceil(TILE)))
}

/// Whether the split-K scratch holds the f32 sums and tile counters of `m` rows of products
/// `width` wide in `tiles` tiles.
fn scratch_holds(m: usize, width: usize, tiles: usize) -> bool {
    m * width <= PARTIAL && m * tiles <= COUNTS
}

/// Whether a product `n` wide, rotated over heads of `head_dim` with `n_rot` channels each,
/// holds whole heads that tile the few-row kernel's columns, so each block rotates its own.
pub(crate) fn whole_heads(n: usize, head_dim: usize, n_rot: usize) -> bool {
    head_dim > 0 && TILE % head_dim == 0 && n % head_dim == 0 && n_rot % 2 == 0 && n_rot <= head_dim
}

/// Whether the few-row kernel takes products of these widths over `m` rows `k` deep: at most
/// [`GEMV_ROWS`] rows and [`src::GROUP`] products, widths multiples of 8, weights 16-byte
/// aligned, either the split-K scratch holds the sums or one block's rows fit its stage, and
/// rotated products of [`whole_heads`].
pub(crate) fn few_rows_take(m: usize, k: usize, products: &[Product], rotary: &Rotary) -> bool {
    let (width, tiles) = extent(products);
    let heads = |p: &Product| !p.rotated || whole_heads(p.n, rotary.head_dim, rotary.n_rot);
    (1..=GEMV_ROWS).contains(&m)
        && (1..=src::GROUP).contains(&products.len())
        && products.iter().all(|p| p.n % 8 == 0 && p.n > 0 && p.w % 16 == 0 && heads(p))
        && (scratch_holds(m, width, tiles) || k <= src::STAGE)
}

/// Launches the few-row kernel `f` ([`src::products`]) over `products` (which
/// [`few_rows_take`] takes) of `m` rows `k` deep, its prologue reading `ins`. Splits K so that
/// the blocks per multiprocessor [`Split`] aims at run, each staging at most [`src::STAGE`] rows.
pub(crate) fn few_rows(e: &CudaEngine, f: sys::CUfunction, ins: [u64; 4], eps: f32, products: &[Product], rotary: &Rotary, (m, k): (usize, usize)) -> Result<(), String> {
    let (width, tiles) = extent(products);
    let s = &e.split;
    let mut splits = (s.per_sm * s.sms).div_ceil(tiles * m).clamp(k.div_ceil(src::STAGE), k.div_ceil(32).max(1));
    if !scratch_holds(m, width, tiles) {
        splits = 1;
    }
    let rows = k.div_ceil(splits).next_multiple_of(8).min(k.max(1));
    let splits = k.div_ceil(rows).max(1);
    let mut params: Vec<Param> = ins.iter().map(|&p| Param::Ptr(p)).collect();
    params.push(Param::F32(eps));
    let mut end = 0;
    for j in 0..src::GROUP {
        let p = products.get(j).copied().unwrap_or_default();
        end += p.n.div_ceil(TILE);
        params.extend([Param::Ptr(p.out), Param::Ptr(p.w), Param::Ptr(p.residual), Param::I64(p.n as i64), Param::I64(end as i64)]);
    }
    params.extend([Param::I64(k as i64), Param::I64(rows as i64), Param::Ptr(s.partial.ptr), Param::Ptr(s.count.ptr)]);
    let roped = products.iter().enumerate().filter(|(_, p)| p.rotated).fold(0, |bits, (j, _)| bits | 1 << j);
    let r = rotary;
    params.extend([Param::Ptr(r.cos), Param::Ptr(r.sin), Param::I64(r.head_dim as i64), Param::I64(r.n_rot as i64), Param::I64(r.stride as i64), Param::I32(r.gptj as i32), Param::I32(roped)]);
    launch::grid(&e.gpu, f, (crate::rows::extent(tiles)?, splits as u32, m as u32), (256, 1, 1), (rows * 4) as u32, &mut params)
}

/// `out [m, n] = a [m, k] · b [k, n]` through the few-row kernel, or `None` where it does not
/// apply (not f16/bf16, a batch, or a product [`few_rows_take`] refuses).
fn gemv(e: &CudaEngine, a: Arg<'_, DevMem>, b: Arg<'_, DevMem>, out: Arg<'_, DevMem>, (m, n, k): (usize, usize, usize)) -> Option<Result<(), String>> {
    let single = numel(out.dims) == m * n && numel(b.dims) == k * n;
    let product = Product { w: b.buf.at(b.offset), out: out.buf.at(out.offset), n, ..Product::default() };
    if !single || !few_rows_take(m, k, &[product], &Rotary::default()) {
        return None;
    }
    let source = src::products(out.dtype, src::Prologue::Plain)?;
    Some(e.gpu.kernels.function(&e.gpu, &source).map_err(|err| err.to_string()).and_then(|f| few_rows(e, f, [a.buf.at(a.offset), 0, 0, 0], 0.0, &[product], &Rotary::default(), (m, k))))
}

/// The dtypes the products take.
pub fn supported(d: DType) -> bool {
    matches!(d, DType::F32 | DType::F64 | DType::F16 | DType::BF16)
}

/// One operand of a product as cuBLAS reads it: its address, whether it is stored transposed
/// (row-major A `[K, M]`, B `[N, K]`) and the elements between its batch items (0: shared).
#[derive(Clone, Copy)]
struct Operand {
    ptr: u64,
    trans: bool,
    stride: i64,
}

/// `count` products `c [m, n] = op(a) · op(b)`, `k` deep, of `dtype` (row-major, batch items
/// `m·n` apart in `c`): cuBLASLt for f16 / bf16, cuBLAS's strided-batched call (no TF32) for
/// f32 / f64.
fn product(e: &CudaEngine, op: &Op, dtype: DType, [m, n, k, count]: [usize; 4], a: Operand, b: Operand, c: u64) -> Result<(), String> {
    let gpu = &*e.gpu;
    if matches!(dtype, DType::F16 | DType::BF16) {
        let problem = Problem {
            half: dtype == DType::F16,
            m,
            n,
            k,
            batch: count,
            stride_a: a.stride,
            stride_b: b.stride,
            trans_a: a.trans,
            trans_b: b.trans,
            ld: Problem::packed(m, n, k, a.trans, b.trans),
            c_f32: false,
            epilogue: Epilogue::None,
        };
        if count == 1 {
            if let Some(staging) = Staging::new(&problem, [a.ptr, b.ptr, c], gpu.stage_budget.load(Ordering::Relaxed)) {
                return staging.run(e, op, problem);
            }
        }
        return gpu.lt.matmul(gpu, problem, (a.ptr, b.ptr, c, 0), gpu.workspace, BLAS_WORKSPACE, false).map_err(|e| e.to_string());
    }
    let (data, compute) = match dtype {
        DType::F32 => (blas_sys::cudaDataType_t::CUDA_R_32F, blas_sys::cublasComputeType_t::CUBLAS_COMPUTE_32F_PEDANTIC),
        DType::F64 => (blas_sys::cudaDataType_t::CUDA_R_64F, blas_sys::cublasComputeType_t::CUBLAS_COMPUTE_64F),
        d => return Err(format!("no CUDA product over {d}")),
    };
    let (one32, zero32, one64, zero64) = (1f32, 0f32, 1f64, 0f64);
    let (alpha, beta): (*const c_void, *const c_void) = match dtype {
        DType::F64 => (&one64 as *const f64 as _, &zero64 as *const f64 as _),
        _ => (&one32 as *const f32 as _, &zero32 as *const f32 as _),
    };
    let op = |trans: bool| if trans { blas_sys::cublasOperation_t::CUBLAS_OP_T } else { blas_sys::cublasOperation_t::CUBLAS_OP_N };
    // Column-major `cᵀ = op(b)ᵀ · op(a)ᵀ`; each operand's leading dimension is its stored row.
    let (lda, ldb) = (if a.trans { m } else { k }, if b.trans { k } else { n });
    // SAFETY: the pointers address `count` matrices of these sizes inside the operands'
    // ranges (the executor's slots); the handle is bound to the device's stream.
    unsafe {
        blas::gemm_strided_batched_ex(
            gpu.blas,
            op(b.trans),
            op(a.trans),
            n as i32,
            m as i32,
            k as i32,
            alpha,
            b.ptr as *const c_void,
            data,
            ldb as i32,
            b.stride,
            a.ptr as *const c_void,
            data,
            lda as i32,
            a.stride,
            beta,
            c as *mut c_void,
            data,
            n as i32,
            (m * n) as i64,
            count as i32,
            compute,
            blas_sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
        )
    }
    .map_err(|e| format!("cuBLAS product: {e:?}"))
}

/// Zeroes `out`, the product of an empty contraction.
fn zero(gpu: &Gpu, out: Arg<'_, DevMem>) -> Result<(), String> {
    // SAFETY: the output range lies in its buffer; ordered on the stream.
    unsafe { cu::memset_d8_async(out.buf.at(out.offset), 0, out.len, gpu.stream) }.map_err(|e| format!("zeroing an empty product: {e:?}"))
}

/// `out = a · b` for `a [.., M, K]`, `b [.., K, N]`, `out [batch.., M, N]`.
pub fn matmul(e: &CudaEngine, op: &Op, a: Arg<'_, DevMem>, b: Arg<'_, DevMem>, out: Arg<'_, DevMem>) -> Result<(), String> {
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
        return zero(gpu, out);
    }
    if let Some(ran) = gemv(e, a, b, out, (m, n, k)) {
        return ran;
    }
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
    let (pa, pb, pc) = (a.buf.at(a.offset), b.buf.at(b.offset), out.buf.at(out.offset));
    let plain = |ptr: u64, stride: i64| Operand { ptr, trans: false, stride };
    if let (Some(stride_a), Some(stride_b)) = (even(&sa, m * k), even(&sb, k * n)) {
        if stride_b == 0 && stride_a != 0 {
            // Items of A stacked, one B: a single product of all their rows.
            return product(e, op, out.dtype, [items * m, n, k, 1], plain(pa, 0), plain(pb, 0), pc);
        }
        return product(e, op, out.dtype, [m, n, k, items.max(1)], plain(pa, stride_a), plain(pb, stride_b), pc);
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
        product(e, op, out.dtype, [m, n, k, 1], plain(at(pa, oa), 0), plain(at(pb, ob), 0), at(pc, (item * m * n) as i64))?;
    }
    Ok(())
}

/// How one side of a `DotGeneral` reads as a stack of matrices: with its batch axes leading
/// (`0..batch`) and its contracted axes one ascending run at either end of the rest, it is
/// `[batch, free, contracted]` or `[batch, contracted, free]` in place (`contracted_first`).
/// `None` for any other layout.
fn in_place(rank: usize, batch: usize, contracting: &[usize]) -> Option<bool> {
    let run = contracting.windows(2).all(|w| w[1] == w[0] + 1);
    match contracting {
        _ if !run => None,
        [] => Some(false),
        [first, ..] if *first == batch => Some(true),
        [.., last] if *last == rank - 1 => Some(false),
        _ => None,
    }
}

/// `DotGeneral` as one strided-batched product: each operand read in place, transposed where
/// its contracted axes come first (`rhs`: last), or first copied into `[batch, free,
/// contracted]` / `[batch, contracted, free]` order where its axes allow neither.
pub fn dot_general(e: &CudaEngine, op: &Op, d: &DotGeneral, a: Arg<'_, DevMem>, b: Arg<'_, DevMem>, out: Arg<'_, DevMem>) -> Result<(), String> {
    let gpu = &*e.gpu;
    let nb = d.lhs_batch.len();
    let size = |x: &Arg<'_, DevMem>, axes: &mut dyn Iterator<Item = usize>| -> usize { axes.map(|i| x.dims[i]).product() };
    let batch = size(&a, &mut d.lhs_batch.iter().copied());
    let k = size(&a, &mut d.lhs_contracting.iter().copied());
    let m = numel(a.dims) / (batch * k).max(1);
    let n = numel(b.dims) / (batch * k).max(1);
    if numel(out.dims) == 0 {
        return Ok(());
    }
    if k == 0 {
        return zero(gpu, out);
    }
    // Batch axes that lead, in order, on both sides; contracted axes paired in ascending order.
    let leading = d.lhs_batch.iter().copied().eq(0..nb) && d.rhs_batch.iter().copied().eq(0..nb);
    let sorted = |c: &[usize]| c.windows(2).all(|w| w[0] < w[1]);
    let paired = leading && sorted(&d.lhs_contracting) && sorted(&d.rhs_contracting);
    let sides = (in_place(a.dims.len(), nb, &d.lhs_contracting), in_place(b.dims.len(), nb, &d.rhs_contracting));
    let (a_first, b_first, copies) = match sides {
        (Some(a_first), Some(b_first)) if paired => (a_first, b_first, None),
        _ => {
            // `[batch, free, contracted]` and `[batch, contracted, free]`, as the CPU does.
            let free = |rank: usize, c: &[usize], bt: &[usize]| -> Vec<usize> { (0..rank).filter(|i| !c.contains(i) && !bt.contains(i)).collect() };
            let pa: Vec<usize> = d.lhs_batch.iter().chain(&free(a.dims.len(), &d.lhs_contracting, &d.lhs_batch)).chain(&d.lhs_contracting).copied().collect();
            let pb: Vec<usize> = d.rhs_batch.iter().chain(&d.rhs_contracting).chain(&free(b.dims.len(), &d.rhs_contracting, &d.rhs_batch)).copied().collect();
            (false, true, Some((e.permuted(op, a, &pa)?, e.permuted(op, b, &pb)?)))
        }
    };
    let (pa, pb) = match &copies {
        Some((ca, cb)) => (ca.at(0), cb.at(0)),
        None => (a.buf.at(a.offset), b.buf.at(b.offset)),
    };
    let (sa, sb) = if batch > 1 { ((m * k) as i64, (k * n) as i64) } else { (0, 0) };
    // The product's scratch copies are freed on the stream, after it.
    product(e, op, out.dtype, [m, n, k, batch.max(1)], Operand { ptr: pa, trans: a_first, stride: sa }, Operand { ptr: pb, trans: !b_first, stride: sb }, out.buf.at(out.offset))
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
        zero(&e.gpu, out)?;
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
    let problem = Problem {
        half: out.dtype == DType::F16,
        m: rows,
        n,
        k,
        batch: 1,
        stride_a: 0,
        stride_b: 0,
        trans_a: false,
        trans_b: false,
        ld: Problem::packed(rows, n, k, false, false),
        c_f32: false,
        epilogue: lt_epilogue,
    };
    let gpu = &*e.gpu;
    let pointers = (x.buf.at(x.offset), w.buf.at(w.offset), out.buf.at(out.offset), bias.buf.at(bias.offset));
    gpu.lt.matmul(gpu, problem, pointers, gpu.workspace, BLAS_WORKSPACE, false).map_err(|e| e.to_string())?;
    match after {
        Some(a) => epilogue(false, Some(a)),
        None => Ok(()),
    }
}
